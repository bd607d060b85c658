"""Success of a test-bed agent over the fixed evaluation seeds, from the initial state and from
intermediate states of the expert episode (the VSR paper's protocol, App. D.3).

Episodes are played by the episode runner (:func:`llm_harness.envs.episodes.run_episodes`) on the
project's HF backend (``share_prefix`` on: every prompt starts with the environment's
instruction), sampling at temperature ``plan.temperature`` (1 in the cards) with a fixed seed.

* **Continuation from α** (:func:`continuation_starts`): for each evaluation seed, the expert
  episode's actions ``E`` (``expert_actions(seed)``, ``L = len(E)``) and ``k(α) = min(L - 1,
  floor(α L + 1/2))``: the episode starts from the state after ``E[:k]``, whose turns are the
  prompt's history and count against the action budget (the state VSR would replay). ``k`` is
  capped at ``L - 1`` so that α = 0.9 on a short episode does not start in the solved state.
  α = 0 is the initial state: the cards' success.
* **Groups**: ``plan.samples_per_seed`` (G = 8) episodes per seed and α; a seed's group is
  all-fail, mixed or all-success. VSR's regime: mostly all-fail at α = 0, mixed at some α > 0.
* **Chunks and seeds**: seeds are played in fixed chunks of ``plan.chunk_seeds`` seeds (all
  their G episodes in one runner call, one ``generate`` call per turn); chunk ``c`` of α index
  ``a`` samples with ``derive_seed(plan.seed, "agent-eval", level, a, c)``. A chunk's outcomes
  therefore depend only on its seeds, so re-running the first chunk reproduces the card's
  outcomes on those seeds exactly (same torch build and thread count), as the tests check.
* **Intervals**: Wilson score intervals at the Korn–Graubard effective size of
  ``success[seed, sample]`` (``stats.clustered_wilson``: G episodes of one seed are correlated).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from llm_harness.envs.episodes import EpisodeResult, EpisodeStart, run_episodes
from llm_harness.testbed.agents import AGENT_FAMILIES, EVAL_SEEDS, family_env
from theory.metrics.binomial import clustered_wilson
from vsr_util.checks import check_number
from vsr_util.seeding import derive_seed

__all__ = [
    "AgentEvalPlan",
    "continuation_curve",
    "continuation_starts",
    "expert_prefix_length",
    "format_continuation",
    "level_label",
    "play_groups",
    "summarise_groups",
]


@dataclass(frozen=True)
class AgentEvalPlan:
    """How a test-bed agent is evaluated (module doc)."""

    samples_per_seed: int = 8
    """Episodes per seed and start state (G)."""
    chunk_seeds: int = 8
    """Seeds per runner call (their G episodes advance together)."""
    temperature: float = 1.0
    """Sampling temperature (0 = greedy)."""
    top_p: float = 1.0
    """Nucleus mass."""
    seed: int = 0
    """Seed of the sampling streams."""
    max_new_tokens: int = 8
    """Reply budget in tokens."""
    confidence: float = 0.95
    """Level of the intervals."""
    batch_sequences: int = 256
    """Sequences per backend micro-batch."""

    def __post_init__(self) -> None:
        for name, lo in (("samples_per_seed", 1), ("chunk_seeds", 1), ("seed", 0), ("max_new_tokens", 1), ("batch_sequences", 1)):
            check_number(name, getattr(self, name), lo, integer=True)
        check_number("temperature", self.temperature, 0)
        check_number("top_p", self.top_p, 0, 1, lo_open=True)
        check_number("confidence", self.confidence, 0, 1, lo_open=True, hi_open=True)


def level_label(family: str, level: str | None) -> str:
    """The name a card gives the evaluated level: the level, or the environment for one without levels
    (it also keys the evaluation's sampling streams)."""
    return level or AGENT_FAMILIES.lookup(family, where="family").env


def expert_prefix_length(n_expert: int, alpha: float) -> int:
    """``k(α) = min(L - 1, floor(α L + 1/2))`` expert actions replayed before the policy plays (module doc)."""
    check_number("n_expert", n_expert, 1, integer=True)
    check_number("alpha", alpha, 0, 1)
    return min(n_expert - 1, int(math.floor(alpha * n_expert + 0.5)))


def continuation_starts(family: str, level: str | None, seeds: Sequence[int], alpha: float) -> list[EpisodeStart]:
    """One start per seed: the state after ``k(α)`` of the seed's expert actions."""
    env = family_env(family, level)
    out = []
    for s in seeds:
        expert = env.expert_actions(s)
        out.append(EpisodeStart(int(s), tuple(expert[: expert_prefix_length(len(expert), alpha)])))
    return out


def play_groups(
    model, tokenizer: Any, family: str, level: str | None, window: int | None, starts: Sequence[EpisodeStart],
    plan: AgentEvalPlan, stream: tuple[int | str, ...], progress: bool = False,
) -> list[list[EpisodeResult]]:
    """``results[i][j]``: episode ``j`` of the G played from ``starts[i]`` (chunks of
    ``plan.chunk_seeds`` starts, chunk ``c`` seeded by ``derive_seed(plan.seed, *stream, c)``)."""
    from tqdm.auto import tqdm

    from llm_harness.backends import HFBackend, HFBackendConfig
    from llm_harness.trainer.modeling import Codec

    if not starts:
        raise ValueError("starts: must not be empty")
    training = model.training
    backend = HFBackend(model, tokenizer, config=HFBackendConfig(
        max_batch_sequences=plan.batch_sequences, pad_token_id=tokenizer.pad_token_id, share_prefix=True))
    codec = Codec(tokenizer)
    g = plan.samples_per_seed
    out: list[list[EpisodeResult]] = []
    try:
        chunks = range(0, len(starts), plan.chunk_seeds)
        for c, lo in enumerate(tqdm(chunks, desc="episodes", disable=not progress, leave=False)):
            chunk = list(starts[lo : lo + plan.chunk_seeds])
            res = run_episodes(
                lambda: family_env(family, level), [s for s in chunk for _ in range(g)], backend, codec, window=window,
                temperature=plan.temperature, top_p=plan.top_p, max_new_tokens=plan.max_new_tokens,
                seed=derive_seed(plan.seed, *stream, c),
            )
            out.extend(res[i * g : (i + 1) * g] for i in range(len(chunk)))
    finally:
        model.train(training)
    return out


def summarise_groups(groups: Sequence[Sequence[EpisodeResult]], confidence: float = 0.95) -> dict[str, Any]:
    """Success with its interval, group outcomes, episode lengths and the invalid-action rate.

    Keys: ``n_seeds``, ``samples_per_seed``, ``n_episodes``, ``successes``, ``success``,
    ``ci_low``, ``ci_high``, ``groups_all_fail`` / ``groups_mixed`` / ``groups_all_success``
    (fractions of seeds), ``mean_length`` (policy turns per episode), ``mean_length_success``
    (None without a success), ``invalid_rate`` (invalid turns / policy turns; None without turns)
    and ``success_per_seed`` (successful episodes of each seed: digits when G <= 9, else a list).
    """
    ok = np.array([[int(e.success) for e in grp] for grp in groups], dtype=np.int64)
    if ok.ndim != 2 or ok.size == 0:
        raise ValueError("groups: expected a non-empty [seed][sample] table of episodes with equal group sizes")
    rate, lo, hi = clustered_wilson(ok, confidence)
    per_seed = ok.sum(axis=1)
    g = ok.shape[1]
    episodes = [e for grp in groups for e in grp]
    turns = sum(e.length for e in episodes)
    lengths_ok = [e.length for e in episodes if e.success]
    return {
        "n_seeds": int(ok.shape[0]),
        "samples_per_seed": int(g),
        "n_episodes": int(ok.size),
        "successes": int(ok.sum()),
        "success": rate,
        "ci_low": lo,
        "ci_high": hi,
        "groups_all_fail": float(np.mean(per_seed == 0)),
        "groups_mixed": float(np.mean((per_seed > 0) & (per_seed < g))),
        "groups_all_success": float(np.mean(per_seed == g)),
        "mean_length": turns / len(episodes),
        "mean_length_success": float(np.mean(lengths_ok)) if lengths_ok else None,
        "invalid_rate": sum(e.invalid_actions for e in episodes) / turns if turns else None,
        "success_per_seed": "".join(map(str, per_seed.tolist())) if g <= 9 else per_seed.tolist(),
    }


def continuation_curve(
    model, tokenizer: Any, family: str, level: str | None, window: int | None, plan: AgentEvalPlan,
    alphas: Sequence[float], seeds: Sequence[int] = EVAL_SEEDS, progress: bool = False,
) -> list[dict[str, Any]]:
    """One :func:`summarise_groups` row per α (with ``alpha`` and ``mean_prefix`` = mean k(α)),
    G episodes per seed from the state after k(α) expert actions (module doc). The α = 0 row is
    the success from the initial state."""
    if not alphas:
        raise ValueError("alphas: must name at least one value")
    label = level_label(family, level)
    rows = []
    for a, alpha in enumerate(alphas):
        starts = continuation_starts(family, level, seeds, float(alpha))
        groups = play_groups(model, tokenizer, family, level, window, starts, plan, ("agent-eval", label, a), progress)
        rows.append({"alpha": float(alpha), "mean_prefix": float(np.mean([len(s.prefix) for s in starts])),
                     **summarise_groups(groups, plan.confidence)})
    return rows


def format_continuation(rows: Sequence[dict[str, Any]], confidence: float = 0.95) -> str:
    """A plain-text table of :func:`continuation_curve` rows."""
    pct = f"{round(confidence * 100)}% CI"
    lines = [f"{'alpha':>5} {'prefix':>6} {'episodes':>8} {'success':>7}  {pct:<16} {'all-fail':>8} {'mixed':>6} "
             f"{'all-ok':>6} {'length':>6} {'invalid':>7}"]
    for r in rows:
        inv = "-" if r["invalid_rate"] is None else f"{r['invalid_rate']:.3f}"
        lines.append(
            f"{r['alpha']:>5.2f} {r['mean_prefix']:>6.2f} {r['n_episodes']:>8} {r['success']:>7.3f}  "
            f"[{r['ci_low']:.3f}, {r['ci_high']:.3f}]   {r['groups_all_fail']:>8.3f} {r['groups_mixed']:>6.3f} "
            f"{r['groups_all_success']:>6.3f} {r['mean_length']:>6.2f} {inv:>7}"
        )
    return "\n".join(lines)

