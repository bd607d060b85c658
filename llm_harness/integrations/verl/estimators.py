"""The toolkit's advantage estimators registered with verl's ``register_adv_est`` (``verl/trainer/ppo/core_algos.py``).

Each verl estimator here converts verl's batch to the toolkit's groups (:mod:`.batch`) and calls the
toolkit's own function — no second implementation of the maths:

* ``vsr_<name>`` for every plain-group estimator of :data:`~llm_harness.trainer.advantages.ADVANTAGE_ESTIMATORS`
  (``vsr_grpo``, ``vsr_drgrpo``, ``vsr_rloo``, ``vsr_constant``): the rows of one ``uid`` are one group.
  ``vsr_grpo`` equals verl's ``grpo`` on groups of two or more (the Bessel std, ε = 1e-6) and
  ``vsr_drgrpo`` equals verl's ``grpo`` with ``norm_adv_by_std_in_grpo=False``; the toolkit's
  departures stay (a single-sample group gets 0, verl gives ``r/(1 + ε)``; a zero-variance group
  gives exactly 0);
* ``vsr_extra_grpo`` — GRPO plus ExTra's correctness-gated novelty bonus
  (:class:`~llm_harness.methods.extra.EmbeddingNovelty`, :func:`~llm_harness.methods.extra.shaped_advantages`);
* ``vsr_gigpo`` — GiGPO (:func:`~llm_harness.trainer.gigpo.gigpo_advantages`) over the turns of
  multi-turn rows.

Parameters come from ``algorithm.vsr`` (Hydra: ``+algorithm.vsr.std_ddof=0``,
``+algorithm.vsr.extra.gamma=0.5``, ``+algorithm.vsr.gigpo.step_weight=1``); unknown keys are refused.

**Where ExTra and GiGPO see what they need.** verl 0.9.1 gives an estimator only rewards, mask
and ``uid`` (``compute_advantage``; GDPO alone gets the batch, by name). ExTra needs the response
tokens, the prompt and a memory of past correct responses; GiGPO needs each turn's end, anchor
observation and step reward. Both read them from the ``non_tensor_batch`` keyword argument (per-row
plain lists), which the ``vsr_sync`` trainer mode (:mod:`.trainer`) fills with the fields each
estimator declares in ``needs``: ``prompt_ids`` / ``response_ids`` from the batch's token tensors,
anything else from the agent loop's ``extra_fields``. The route: the advantage stage on the driver sees every sibling
of a group and lives across steps, so the novelty memory Φ(x) stays in one process (an agent loop
sees one sample, in one of many workers). Embeddings are token-level (``ngram4``, default) —
the policy's hidden states (``policy_hidden``) are not available on verl's driver.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np
import torch

from llm_harness.integrations.verl.batch import group_rows, outcome_scores, scatter
from llm_harness.trainer.advantages import ADVANTAGE_ESTIMATORS, DEFAULT_DDOF, GRPO_EPS, group_advantages
from vsr_util.config_io import from_dict

__all__ = ["ESTIMATORS", "ExtraParams", "GroupParams", "NoveltyMemory", "register_all", "verl_name", "vsr_params"]

PREFIX = "vsr_"


def verl_name(name: str) -> str:
    """The verl ``algorithm.adv_estimator`` name of toolkit estimator ``name``."""
    return PREFIX + name


@dataclass(frozen=True)
class GroupParams:
    """``algorithm.vsr.*``: the group z-score's conventions (docs/methods.md, "GRPO conventions")."""

    eps: float = GRPO_EPS
    """ε_σ of ``(r − mean)/(std + ε)``."""
    std_ddof: int = DEFAULT_DDOF
    """1: Bessel-corrected group std (verl, TRL); 0: population std (the papers' closed forms)."""
    extra: Mapping[str, Any] = field(default_factory=dict)
    """``algorithm.vsr.extra.*`` (:class:`ExtraParams`), read by ``vsr_extra_grpo`` only."""
    gigpo: Mapping[str, Any] = field(default_factory=dict)
    """``algorithm.vsr.gigpo.*`` (:class:`~llm_harness.trainer.gigpo.GiGPOParams`), read by ``vsr_gigpo`` only."""
    prefix: Mapping[str, Any] = field(default_factory=dict)
    """``algorithm.vsr.prefix.*``: the prefix buffer's plug-in, read by the ``vsr_prefix`` and ``vsr_env`` agent loops —
    ``method`` (``vsr``, the default, or ``prefix_sampling``; :data:`~llm_harness.integrations.verl.prefix_buffer.PREFIX_METHODS`)
    and the fields of its config (:class:`~llm_harness.methods.vsr.VSRConfig` /
    :class:`~llm_harness.methods.prefix_sampling.PrefixSamplingConfig`)."""
    agent: Mapping[str, Any] = field(default_factory=dict)
    """``algorithm.vsr.agent.*``: ``turn_tokens`` (reply budget per turn, default 8) and ``max_turns`` (0: the
    environment's own limit), read by the ``vsr_env`` agent loop."""
    replay: Mapping[str, Any] = field(default_factory=dict)
    """``algorithm.vsr.replay.*`` (:class:`~llm_harness.methods.replay.ReplayConfig`), read by the ``vsr_sync``
    trainer's rollout-level replay (:mod:`.rollout_replay`); empty: replay off."""
    audit_dir: str = ""
    """A folder where the ``vsr_sync`` trainer writes, per step, the rows its actor update trains on (uid,
    reward, mask, advantages, tags, the agent loop's fields) and the VSR buffer's summary
    (:func:`~llm_harness.integrations.verl.trainer.audit_rows`); empty: nothing written."""


@dataclass(frozen=True)
class ExtraParams:
    """``algorithm.vsr.extra.*``: ExTra's novelty bonus (ExTra §4.1; defaults: the paper)."""

    gamma: float = 1.0
    """Novelty weight γ ≥ 0 (ExTra eq. 2)."""
    normalization: str = "post"
    """``post`` (``Â + γ b``, eq. 2) or ``pre`` (``estimator(R + γ b)``)."""
    embedder: str = "ngram4"
    """A token-level embedder of :data:`~llm_harness.embedders.EMBEDDERS` (``ngram4``)."""
    embedder_params: Mapping[str, Any] = field(default_factory=dict)
    """Its parameters (e.g. ``{dim: 2048}``)."""
    memory_size: int = 6
    """Correct-response embeddings kept per prompt (App. B.3)."""


def vsr_params(config: Any) -> GroupParams:
    """``algorithm.vsr`` of a verl ``algorithm`` config as :class:`GroupParams` (unknown keys refused)."""
    return _params(config)


def _params(config: Any) -> GroupParams:
    raw = config.get("vsr", None) if config is not None else None
    if raw is None:
        return GroupParams()
    try:
        from omegaconf import OmegaConf

        if OmegaConf.is_config(raw):
            raw = OmegaConf.to_container(raw, resolve=True)
    except ImportError:  # pragma: no cover - verl depends on omegaconf
        pass
    return from_dict(GroupParams, dict(raw), where="algorithm.vsr")


def _group_advantages(name: str, s: np.ndarray, index: Any, p: GroupParams) -> np.ndarray:
    """Per-row advantages of estimator ``name``, rows grouped by ``index``."""
    if index is None:
        raise ValueError("index: verl passes each row's uid as `index`; none was given")
    if len(index) != s.shape[0]:
        raise ValueError(f"index: {len(index)} entries for {s.shape[0]} rows")
    rows = group_rows(index)
    a = np.zeros(s.shape[0])
    for r, v in zip(rows, group_advantages(name, [s[r] for r in rows], p.eps, p.std_ddof)):
        a[r] = v
    return a


def group_estimator(name: str) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    """verl estimator of toolkit estimator ``name`` (rows of one uid = one group)."""

    def est(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: Any = None, config: Any = None,
            **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        p = _params(config)
        a = _group_advantages(name, outcome_scores(token_level_rewards, response_mask), index, p)
        out = scatter(a, response_mask, token_level_rewards)
        return out, out

    est.__name__ = est.__qualname__ = f"{PREFIX}{name}"
    est.__doc__ = f"Toolkit estimator {name!r} on verl rows grouped by uid (GRPO groups)."
    est.needs = ()  # type: ignore[attr-defined]
    return est


# ------------------------------------------------------------------ ExTra novelty


class NoveltyMemory:
    """ExTra's per-prompt memory Φ(x) of correct-response embeddings, kept across steps in the
    driver process (prompt key -> ``[M, D]`` float32)."""

    def __init__(self) -> None:
        self.memory: dict[str, np.ndarray] = {}
        self._signal: Any = None
        self._signal_key: Any = None

    def signal(self, p: ExtraParams) -> Any:
        """The :class:`~llm_harness.methods.extra.EmbeddingNovelty` of ``p.embedder`` (built once)."""
        from llm_harness.embedders import EmbedContext, build_embedder
        from llm_harness.methods.extra import EmbeddingNovelty

        key = (p.embedder, repr(sorted(dict(p.embedder_params).items())))
        if self._signal_key != key:
            emb = build_embedder(p.embedder, p.embedder_params, EmbedContext(model=None, codec=None),
                                 "algorithm.vsr.extra.embedder_params")
            self._signal, self._signal_key = EmbeddingNovelty(emb), key
        return self._signal


#: the memory of ``vsr_extra_grpo`` in this process (the verl driver)
MEMORY = NoveltyMemory()


def _prompt_key(prompt_ids: Any) -> str:
    return hashlib.blake2b(np.asarray(list(prompt_ids), dtype=np.int64).tobytes(), digest_size=12).hexdigest()


def extra_grpo(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: Any = None, config: Any = None,
               non_tensor_batch: Mapping[str, Any] | None = None, memory: NoveltyMemory | None = None,
               **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO + γ × ExTra's gated novelty (eq. 1–2); ``non_tensor_batch`` holds each row's
    ``prompt_ids`` and ``response_ids`` (unpadded lists; a replayed prefix is part of the response,
    as in the toolkit's ExTra). The memory is keyed by a hash of the prompt ids (module doc)."""
    from llm_harness.methods.extra import shaped_advantages
    from llm_harness.tasks import Problem
    from llm_harness.trainer.data import RolloutGroup, StartState

    nt = non_tensor_batch or {}
    if "prompt_ids" not in nt or "response_ids" not in nt:
        raise ValueError("vsr_extra_grpo: non_tensor_batch needs each row's `prompt_ids` and `response_ids` "
                         "(trainer.v1.trainer_mode=vsr_sync passes them)")
    p = _params(config)
    xp = from_dict(ExtraParams, dict(p.extra), where="algorithm.vsr.extra")
    mem = MEMORY if memory is None else memory
    s = outcome_scores(token_level_rewards, response_mask)
    base = _group_advantages("grpo", s, index, p)
    groups, rows_of = [], group_rows(index)
    for rows in rows_of:
        prompt = [int(t) for t in nt["prompt_ids"][int(rows[0])]]
        start = StartState(tuple(prompt) or (0,), Problem(_prompt_key(prompt), "verl prompt", ""))
        resp = [tuple(int(t) for t in nt["response_ids"][int(b)]) for b in rows]
        groups.append(RolloutGroup(start, resp, [np.zeros(len(r)) for r in resp], s[rows], 0))
    bonuses = mem.signal(xp).bonuses(groups, mem.memory, xp.memory_size)
    a = np.zeros(s.shape[0])
    for rows, b in zip(rows_of, bonuses):
        a[rows] = shaped_advantages(base[rows], s[rows], b, xp.gamma, xp.normalization, "grpo", p.eps, p.std_ddof)
    out = scatter(a, response_mask, token_level_rewards)
    return out, out


extra_grpo.needs = ("prompt_ids", "response_ids")  # type: ignore[attr-defined]


# ------------------------------------------------------------------ GiGPO


def gigpo(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: Any = None, config: Any = None,
          non_tensor_batch: Mapping[str, Any] | None = None, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """GiGPO over the turns of multi-turn rows (Feng et al. 2025): per row, ``gigpo_turn_ends`` (token index
    one past each turn's last response token), ``gigpo_anchors`` (current observation per turn),
    ``gigpo_step_rewards`` and optional ``gigpo_penalties``; the rows of one uid are one episode group.
    Tokens of turn ``j`` (mask 1, up to its end) get that turn's advantage."""
    from llm_harness.trainer.gigpo import GiGPOParams, gigpo_advantages

    nt = non_tensor_batch or {}
    missing = [k for k in ("gigpo_turn_ends", "gigpo_anchors", "gigpo_step_rewards") if k not in nt]
    if missing:
        raise ValueError(f"vsr_gigpo: non_tensor_batch lacks {missing} (an agent loop that records turns writes them; "
                         "trainer.v1.trainer_mode=vsr_sync passes them)")
    if index is None:
        raise ValueError("index: verl passes each row's uid as `index`; none was given")
    p = _params(config)
    gp = from_dict(GiGPOParams, dict(p.gigpo), where="algorithm.vsr.gigpo")
    bs = response_mask.shape[0]
    group_id = np.zeros(bs, dtype=np.int64)
    for g, rows in enumerate(group_rows(index)):
        group_id[rows] = g
    eg, ep, tu, rw, an, pen, ends = [], [], [], [], [], [], []
    for b in range(bs):
        e = [int(x) for x in nt["gigpo_turn_ends"][b]]
        r = [float(x) for x in nt["gigpo_step_rewards"][b]]
        a = list(nt["gigpo_anchors"][b])
        pp = [float(x) for x in nt["gigpo_penalties"][b]] if "gigpo_penalties" in nt else [0.0] * len(e)
        if not (len(e) == len(r) == len(a) == len(pp)) or not e:
            raise ValueError(f"row {b}: gigpo_turn_ends/anchors/step_rewards/penalties must have one equal, non-zero "
                             f"length, got {len(e)}/{len(a)}/{len(r)}/{len(pp)}")
        if any(y <= x for x, y in zip([0] + e, e)) or e[-1] > response_mask.shape[1]:
            raise ValueError(f"row {b}: gigpo_turn_ends must increase within the response length, got {e}")
        for j in range(len(e)):
            eg.append(int(group_id[b]))
            ep.append(b)
            tu.append(j)
            rw.append(r[j])
            an.append(a[j])
            pen.append(pp[j])
        ends.append(e)
    res = gigpo_advantages(np.asarray(eg), np.asarray(ep), np.asarray(tu), np.asarray(rw), an, gp, penalty=np.asarray(pen))
    adv = torch.zeros(response_mask.shape, dtype=torch.float64)
    k = 0
    for b, e in enumerate(ends):
        lo = 0
        for hi in e:
            adv[b, lo:hi] = float(res.advantage[k])
            lo, k = hi, k + 1
    out = (adv * response_mask.to(torch.float64)).to(token_level_rewards.dtype)
    return out, out


gigpo.needs = ("gigpo_turn_ends", "gigpo_anchors", "gigpo_step_rewards", "gigpo_penalties")  # type: ignore[attr-defined]


def _estimators() -> dict[str, Callable[..., Any]]:
    out: dict[str, Callable[..., Any]] = {}
    for name in ADVANTAGE_ESTIMATORS:
        if getattr(ADVANTAGE_ESTIMATORS[name], "for_episodes", None) is None:
            out[verl_name(name)] = group_estimator(name)
    out[verl_name("extra_grpo")] = extra_grpo
    out[verl_name("gigpo")] = gigpo
    return out


#: verl name -> estimator (what :func:`register_all` hands to ``register_adv_est``)
ESTIMATORS: dict[str, Callable[..., Any]] = _estimators()


def register_all() -> tuple[str, ...]:
    """Register every entry of :data:`ESTIMATORS` with verl (idempotent: verl accepts the same function twice)."""
    from verl.trainer.ppo.core_algos import register_adv_est

    for name, fn in ESTIMATORS.items():
        register_adv_est(name)(fn)
    return tuple(ESTIMATORS)
