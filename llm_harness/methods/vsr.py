"""VSR as a trainer plug-in: a recency-windowed prefix buffer sampled ∝ σ̂ (VSR Alg. 1, App. D.2).

After every step, each fresh group with a successful sample contributes that prompt's most
recent successful trajectory τ (it replaces the prompt's previous one); its prefix states
``s_i = (x, y_<i)`` are scored with the zero-cost proxy::

    p̂_i = (1 − α_i) p0(x) + α_i R(τ),   α_i = i / |τ|,   σ̂(s_i) = p̂_i (1 − p̂_i)

(``score: sqrt`` uses ``sqrt(p̂(1 − p̂))``, the Neyman σ). ``p0(x)`` is the fresh group's success
rate. At each step VSR claims ``round(rho × open slots)`` of the batch's slots (the open slots are
all ``B`` unless an earlier plug-in claimed some) for prefix states drawn from the buffer ∝ score
(without replacement, so a batch never holds the same state twice); the trainer then draws fresh
prompts for the remaining slots, so every method sees GRPO's prompt order minus the claimed slots.
Entries older than ``window`` steps are evicted. Prefix tokens are context (masked from the
loss by the trainer). An empty buffer falls back to fresh prompts (counted in ``vsr_fallback``).

Ablations by configuration (no separate code paths in the trainer):

* ``score: uniform`` — w/o scoring (uniform over the buffer);
* ``recency: false`` — w/o recency (filled during the first ``freeze_after`` steps, then frozen);
* ``cold_start: true`` — seed the buffer with prefixes of the task's expert solutions (ordinary
  entries: scored with ``p0 = cold_start_p0``, ``R = 1``, evicted by recency; with
  ``expert_until_replaced: true`` an expert entry stays until the policy's own success on its prompt
  replaces it — the fixed-pool regime of ``vsr compare --suite vsr_regime``);
* ``cold_start: true, insert_policy: false, recency: false, score: uniform`` — static uniform
  expert-prefix resets (VSR D.5);
* ``score: calibrated`` — σ̂ with a self-calibrating interpolation: ``p̂ = p0 + (R − p0) f(α)``,
  ``f`` a monotone per-α-bin fit of the outcomes VSR already observes (each replayed group's success
  rate at its known α; no extra generation), shrunk to the paper's linear ``f(α) = α`` when evidence
  is scarce (``theory.prefix_scores.fit_interpolation``); the buffer is rescored every step;
* ``score: oracle`` — the test-bed oracle: ``oracle_candidates`` states drawn uniformly from the
  buffer are scored by the Monte-Carlo variance of ``oracle_samples`` continuations each (those
  tokens are added to the step's generated-token count), then drawn ∝ that variance.

**Agents** (multi-turn groups of the ``multiturn`` collector; VSR §3.2 agentic): the same
plug-in replays *interaction states*. From each fresh episode group with a success, the first
successful episode (``L`` turns) contributes the states before its turns ``i = 1 .. L−1`` — the
serialized history of the turns before ``i`` plus the environment snapshot — scored with the same σ̂
(``α_i = i / L``, ``p0`` = the group's success rate, ``R`` = 1 for the successful episode); a drawn
state restarts ``G`` episodes from the restored environment, their history is prompt context (masked
from the loss), and those ``G`` restarts form their own episode group (GiGPO). A checkpoint's interaction
states are checked when the buffer loads (:func:`verify_interaction_states`: a damaged snapshot raises
``CorruptCheckpointError`` naming the state), not first when drawn. ``positions`` does
not apply to episodes (every turn boundary is a state). The paper's agentic defaults: ``rho: 0.3,
window: 5`` with ``G = 8``; the paper uses no expert cold start (the buffer fills from the policy only),
but ``cold_start`` works for agents too (the expert's episodes), which gives the static-reset control
``cold_start: true, insert_policy: false, recency: false, score: uniform``.

Departure (documented): the paper does not state whether draws are with replacement; duplicates
would merge into one larger group, so we draw without replacement (Efraimidis–Spirakis keys).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from llm_harness.methods.common import check_number, plugin_config, step_end_positions
from llm_harness.trainer.data import Origin, RolloutGroup, StartState, problem_by_id, problem_index
from llm_harness.trainer.plugins import Plugin, PluginSmoke, StartStateSource, StepHook, TrainContext, register_plugin
from llm_harness.trainer.rollout import collect, derive_seed
from llm_harness.trainer.step import Claim, Result, Step
from theory.prefix_scores import (MIN_CALIBRATION_GAP, calibration_fraction, fit_interpolation, std_hat, variance_hat,
                                  variance_hat_calibrated)
from vsr_util.registry import Registry

__all__ = ["CURRICULUM_BINS", "PREFIX_SCORES", "PrefixScore", "VSRConfig", "VSRPlugin", "curriculum_metrics", "prefix_positions", "verify_interaction_states",
           "weighted_sample_without_replacement"]

POSITIONS = ("token", "steps", "stride")


@dataclass(frozen=True)
class PrefixScore:
    """How a ``score`` setting scores the buffer's states and draws from them (:data:`PREFIX_SCORES`)."""

    value: Callable[["VSRPlugin", np.ndarray, float, float], np.ndarray]
    """The stored score of a trajectory's states at ``alphas`` given ``p0`` and the reward."""
    draw: str = "score"
    """``score``: draw ∝ the stored score; ``uniform``: draw uniformly; ``oracle``: ∝ a Monte-Carlo variance."""
    keeps_evidence: bool = False
    """Keep the replayed states' outcomes (the calibration curve's evidence; checkpointed)."""
    rescores: bool = False
    """Rescore the buffer from that evidence after every step."""


#: ``VSRConfig.score`` -> how states are scored and drawn (the plug-in never branches on the name)
PREFIX_SCORES: Registry[PrefixScore] = Registry("VSR prefix score", {
    "p1mp": PrefixScore(lambda plug, a, p0, r: variance_hat(a, p0, r)),
    "sqrt": PrefixScore(lambda plug, a, p0, r: std_hat(a, p0, r)),
    "uniform": PrefixScore(lambda plug, a, p0, r: variance_hat(a, p0, r), draw="uniform"),
    "oracle": PrefixScore(lambda plug, a, p0, r: variance_hat(a, p0, r), draw="oracle", keeps_evidence=True),
    "calibrated": PrefixScore(lambda plug, a, p0, r: variance_hat_calibrated(a, p0, r, plug.curve()),
                              keeps_evidence=True, rescores=True),
})
#: the registered score names (kept for callers that listed them)
SCORES = tuple(PREFIX_SCORES)


@dataclass(frozen=True)
class VSRConfig:
    """Parameters of the ``vsr`` plug-in (defaults: VSR paper, math setting, unless noted)."""

    rho: float = 0.5
    """Fraction ρ of the step's fresh prompts replaced by replayed prefix states (paper: 0.5 math,
    0.3 agentic)."""
    window: int = 5
    """Recency window W: an entry is usable for W steps after insertion (paper: 5, agentic)."""
    score: str = "p1mp"
    """``p1mp`` = p̂(1−p̂) (paper), ``sqrt`` = its square root (Neyman σ), ``uniform`` (w/o scoring),
    ``oracle`` (Monte-Carlo continuation variance; test-bed study)."""
    positions: str = "token"
    """Prefix positions inserted: ``token`` (every token, paper), ``steps`` (after each reasoning
    step of the task), ``stride`` (every ``stride`` tokens)."""
    stride: int = 4
    """Token stride for ``positions: stride``."""
    recency: bool = True
    """Evict by age and keep inserting; False = the w/o-recency ablation."""
    freeze_after: int = 10
    """Without recency: steps during which policy prefixes are inserted before the buffer freezes."""
    insert_policy: bool = True
    """Insert prefixes of the policy's successful fresh trajectories (False: expert prefixes only)."""
    cold_start: bool = False
    """Seed the buffer with prefixes of the training problems' expert solutions."""
    cold_start_problems: int = 0
    """Cold start from the first this-many training problems (0: all of the split)."""
    cold_start_p0: float = 0.0
    """p0(x) used to score expert prefixes before any rollout of x (hard prompts: ≈ 0)."""
    expert_until_replaced: bool = False
    """Cold-start entries are exempt from age eviction: each stays until the policy's own success on
    its prompt replaces it (one by one, as prompts recur in a fixed pool), instead of all expiring
    together at step ``window − 1``."""
    oracle_candidates: int = 16
    """Oracle: buffer states scored by Monte Carlo per step."""
    oracle_samples: int = 8
    """Oracle: continuations per candidate (their tokens are counted)."""
    calibration_bins: int = 10
    """Calibrated score: α-bins of the fitted interpolation ``f`` (``theory.prefix_scores.fit_interpolation``)."""
    calibration_prior: float = 4.0
    """Calibrated score: pseudo-samples per bin at the linear curve (no evidence = the paper's σ̂)."""
    calibration_decay: float = 0.9
    """Calibrated score: per-step decay of the accumulated evidence (the policy, and its curve, move)."""

    def __post_init__(self) -> None:
        check_number("rho", self.rho, 0, 1)
        check_number("window", self.window, 1, integer=True)
        check_number("stride", self.stride, 1, integer=True)
        check_number("freeze_after", self.freeze_after, 0, integer=True)
        check_number("cold_start_problems", self.cold_start_problems, 0, integer=True)
        check_number("cold_start_p0", self.cold_start_p0, 0, 1)
        check_number("oracle_candidates", self.oracle_candidates, 1, integer=True)
        check_number("oracle_samples", self.oracle_samples, 2, integer=True)
        check_number("calibration_bins", self.calibration_bins, 1, integer=True)
        check_number("calibration_prior", self.calibration_prior, 0, lo_open=True)
        check_number("calibration_decay", self.calibration_decay, 0, 1)
        PREFIX_SCORES.check(self.score, "score")
        if self.positions not in POSITIONS:
            raise ValueError(f"positions: must be one of {POSITIONS}, got {self.positions!r}")
        for name in ("recency", "insert_policy", "cold_start", "expert_until_replaced"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name}: must be a bool, got {getattr(self, name)!r}")
        if not self.insert_policy and not self.cold_start:
            raise ValueError("insert_policy: false needs cold_start: true (the buffer would stay empty)")


def prefix_positions(n_tokens: int, cfg: VSRConfig, step_ends: Sequence[int] | None = None) -> np.ndarray:
    """Prefix lengths ``i`` inserted for a trajectory of ``n_tokens`` tokens (``1 <= i < n_tokens``)."""
    if cfg.positions == "token":
        return np.arange(1, n_tokens, dtype=np.int64)
    if cfg.positions == "stride":
        return np.arange(cfg.stride, n_tokens, cfg.stride, dtype=np.int64)
    return np.array(sorted({int(i) for i in (step_ends or ()) if 0 < int(i) < n_tokens}), dtype=np.int64)


#: α-bins of the curriculum metrics (:func:`curriculum_metrics`)
CURRICULUM_BINS = 5


def curriculum_metrics(step: int, groups: Sequence[RolloutGroup], bins: int = CURRICULUM_BINS) -> dict[str, float]:
    """Per α-bin counts of this step's replayed groups: ``vsr_alpha_b{k}_groups`` (drawn),
    ``_mixed`` (both outcomes present) and ``_success`` (summed success rates) — the reverse
    curriculum as scalars a run log keeps (where the replayed states sit and where
    their groups carry signal; ``_success / _groups`` is the success-vs-α curve of the current policy,
    measured on states VSR chose, so weighted toward its score)."""
    n = np.zeros(bins)
    mixed = np.zeros(bins)
    succ = np.zeros(bins)
    for g in groups:
        if g.start.origin is not Origin.REPLAYED_PREFIX or g.birth_step != step or "vsr_alpha" not in g.start.meta:
            continue
        ok = np.asarray(g.info["episode_success"] if g.multiturn else (g.rewards > 0), dtype=np.float64)
        k = min(int(float(g.start.meta["vsr_alpha"]) * bins), bins - 1)
        n[k] += 1
        mixed[k] += float(0.0 < ok.mean() < 1.0)
        succ[k] += float(ok.mean())
    out = {}
    for k in range(bins):
        out[f"vsr_alpha_b{k}_groups"], out[f"vsr_alpha_b{k}_mixed"], out[f"vsr_alpha_b{k}_success"] = n[k], mixed[k], succ[k]
    return out


def weighted_sample_without_replacement(weights: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """Indices of ``min(k, #positive)`` distinct items drawn sequentially ∝ ``weights`` (Efraimidis–Spirakis)."""
    w = np.asarray(weights, dtype=np.float64)
    pos = np.flatnonzero(w > 0)
    k = min(int(k), pos.size)
    if k <= 0:
        return np.zeros(0, dtype=np.int64)
    u = rng.random(pos.size)
    keys = np.log(u) / w[pos]  # larger is better: u^(1/w)
    top = np.argsort(-keys, kind="stable")[:k]
    return pos[top]


_STATE_KEYS = frozenset({"prompt_ids", "history", "snapshot"})


def verify_interaction_states(task: Any, problem: Any, states: Any, positions: np.ndarray, where: str) -> None:
    """Check a buffered episode's interaction states as a checkpoint loads them (ValueError naming the
    state and why): each is a mapping ``{prompt_ids, history, snapshot}`` of plain data, every drawable
    ``positions`` indexes one, and each snapshot is a state of the episode of ``problem``'s seed in
    ``task``'s environment that has not ended -- exactly what restoring it when it is drawn checks
    (:func:`llm_harness.envs.episodes.verify_episode_snapshots`: checksum, environment, parameters, seed,
    world against seed and history), in one pass over the episode. The restore at draw time stays; this
    makes a damaged state fail at resume, not mid-run. ``task`` is an environment task (``make_env``, ``seed_of``)."""
    from llm_harness.envs.episodes import verify_episode_snapshots

    if not isinstance(states, list) or not states:
        raise ValueError(f"{where}.states: must be a non-empty list of interaction states")
    if positions.size and not (0 <= int(positions.min()) and int(positions.max()) < len(states)):
        raise ValueError(f"{where}.positions: index states 0..{len(states) - 1}, got {positions.tolist()}")
    for i, s in enumerate(states):
        w = f"{where}.states[{i}]"
        if not isinstance(s, Mapping) or set(s) != _STATE_KEYS:
            raise ValueError(f"{w}: not an interaction state (a mapping with keys {sorted(_STATE_KEYS)})")
        if not isinstance(s["prompt_ids"], list) or not all(type(t) is int and t >= 0 for t in s["prompt_ids"]):
            raise ValueError(f"{w}.prompt_ids: must be a list of token ids (ints >= 0)")
        hist = s["history"]
        if not isinstance(hist, list) or not all(isinstance(h, Mapping) and set(h) == {"observation", "action"}
                                                 and all(isinstance(v, str) for v in h.values()) for h in hist):
            raise ValueError(f"{w}.history: must be a list of {{observation, action}} texts")
    verify_episode_snapshots(task.make_env(), task.seed_of(problem), [s["snapshot"] for s in states], f"{where}.states")


@dataclass
class _Trajectory:
    """One prompt's most recent successful trajectory in the buffer."""

    problem: Any
    prompt_ids: tuple[int, ...]
    response_ids: tuple[int, ...]
    positions: np.ndarray
    alphas: np.ndarray
    scores: np.ndarray
    birth: int
    source: str  # "policy" | "expert"
    p0: float = float("nan")
    """The source group's success rate ``p0`` (recomputing the calibrated score needs it)."""
    reward: float = float("nan")
    """The trajectory's reward ``R``."""
    states: list[dict[str, Any]] | None = None
    """Multi-turn episodes: the interaction state before each turn (``prompt_ids``, ``history``, ``snapshot``,
    plain data); ``positions[k]`` indexes it. ``None`` for single-turn trajectories (prefixes of
    ``response_ids``)."""


class VSRPlugin(StartStateSource, StepHook):
    """The ``vsr`` plug-in (module doc)."""

    def __init__(self, cfg: VSRConfig, ctx: TrainContext):
        self.cfg = cfg
        self.seed = int(ctx.config.seed)
        self.budget = int(ctx.config.rollout.max_new_tokens)
        self.train_problems = ctx.train_problems  # a checkpoint names problems by id
        # a checkpoint's interaction states are restored into its environment to check them; the verl adapter's
        # context has no task (a buffer holding interaction states is then refused at load, naming why)
        self.task = getattr(ctx, "task", None)
        self.buffer: dict[str, _Trajectory] = {}
        self.calib_weight = np.zeros(cfg.calibration_bins)  # decayed evidence per α-bin (calibrated score)
        self.calib_sum = np.zeros(cfg.calibration_bins)
        if cfg.cold_start:
            self._seed_expert(ctx)

    # ---------------------------------------------------------------- buffer construction

    def _positions(self, ctx: TrainContext, response_ids: Sequence[int]) -> np.ndarray:
        ends = step_end_positions(ctx.codec, ctx.task, response_ids) if self.cfg.positions == "steps" else None
        return prefix_positions(len(response_ids), self.cfg, ends)

    def _make(self, ctx: TrainContext, problem: Any, prompt_ids: tuple[int, ...], response_ids: tuple[int, ...], p0: float,
              reward: float, birth: int, source: str) -> _Trajectory | None:
        pos = self._positions(ctx, response_ids)
        pos = pos[pos < self.budget]  # a prefix counts against the response budget: leave >= 1 token
        if pos.size == 0:
            return None
        alphas = pos / float(len(response_ids))
        return _Trajectory(problem, tuple(prompt_ids), tuple(response_ids), pos, alphas, self._score(alphas, p0, reward),
                           birth, source, p0=float(p0), reward=float(reward))

    def _seed_expert(self, ctx: TrainContext) -> None:
        problems = list(ctx.train_problems)
        if self.cfg.cold_start_problems:
            problems = problems[: self.cfg.cold_start_problems]
        eos = getattr(ctx.codec.tokenizer, "eos_token_id", None)
        if hasattr(ctx.task, "make_env"):  # agents: the interaction states of the expert's episodes
            from llm_harness.trainer.multiturn import expert_episode_states

            for p in problems:
                states = expert_episode_states(ctx.task, ctx.codec, ctx.task.seed_of(p))
                n_turns = len(states)
                if n_turns < 2:
                    continue
                pos = np.arange(1, n_turns, dtype=np.int64)
                alphas = pos / float(n_turns)
                p0 = self.cfg.cold_start_p0
                self.buffer[p.id] = _Trajectory(p, tuple(ctx.encode_prompt(p)), (), pos, alphas, self._score(alphas, p0, 1.0),
                                                -1, "expert", p0=p0, reward=1.0, states=states)
            return
        for p in problems:
            if p.solution is None:
                raise ValueError(
                    f"plugins.vsr.cold_start: task {getattr(ctx.task, 'name', type(ctx.task).__name__)!r} has no expert "
                    f"solution for problem {p.id!r}; cold start needs expert trajectories"
                )
            resp = tuple(ctx.codec.encode(p.solution)) + ((int(eos),) if eos is not None else ())
            prompt = tuple(ctx.encode_prompt(p))
            t = self._make(ctx, p, prompt, resp, self.cfg.cold_start_p0, 1.0, -1, "expert")
            if t is not None:
                self.buffer[p.id] = t

    # ---------------------------------------------------------------- scores

    def curve(self) -> np.ndarray:
        """The calibrated interpolation ``f`` at the bin centres (linear without evidence)."""
        k = self.cfg.calibration_bins
        seen = self.calib_weight > 0
        centres = (np.arange(k) + 0.5) / k
        return fit_interpolation(centres[seen], self.calib_sum[seen] / self.calib_weight[seen], self.calib_weight[seen],
                                 bins=k, prior=self.cfg.calibration_prior)

    @property
    def scoring(self) -> PrefixScore:
        """The registered :class:`PrefixScore` of ``score``."""
        return PREFIX_SCORES[self.cfg.score]

    def _score(self, alphas: np.ndarray, p0: float, reward: float) -> np.ndarray:
        return self.scoring.value(self, alphas, p0, reward)

    def _calibrate(self, step: int, groups: Sequence[RolloutGroup], rescore: bool = True) -> dict[str, float]:
        """Fold the outcomes of this step's replayed states into the curve's evidence (no extra
        generation: the groups were trained on anyway) and rescore the buffer (``rescore``; the
        oracle arm keeps the evidence only to compare the calibrated score with its Monte Carlo)."""
        c = self.cfg
        self.calib_weight *= c.calibration_decay
        self.calib_sum *= c.calibration_decay
        n_obs = 0
        for g in groups:
            m = g.start.meta
            if g.start.origin is not Origin.REPLAYED_PREFIX or g.birth_step != step or "vsr_p0" not in m:
                continue
            p0, r = float(m["vsr_p0"]), float(m["vsr_reward"])
            if not r - p0 > MIN_CALIBRATION_GAP:
                continue
            succ = g.info["episode_success"] if g.multiturn else (g.rewards > 0)
            y, w = float(np.mean(succ)), float(len(succ))
            k = min(int(float(m["vsr_alpha"]) * c.calibration_bins), c.calibration_bins - 1)
            self.calib_weight[k] += w
            self.calib_sum[k] += w * float(calibration_fraction(y, p0, r))
            n_obs += 1
        if rescore:
            for t in self.buffer.values():
                if np.isfinite(t.p0):
                    t.scores = self._score(t.alphas, t.p0, t.reward)
        f = self.curve()
        centres = (np.arange(c.calibration_bins) + 0.5) / c.calibration_bins
        return {"vsr_calib_groups": float(n_obs), "vsr_calib_weight": float(self.calib_weight.sum()),
                "vsr_calib_gap": float(np.mean(np.abs(f - centres)))}

    def _episode(self, g: RolloutGroup, step: int) -> _Trajectory | None:
        """The group's first successful episode as interaction states (module doc, agentic case)."""
        info = g.info
        ok = np.flatnonzero(info["episode_success"])
        if ok.size == 0:
            return None
        e = int(ok[0])  # the group's episodes are exchangeable: the first successful one
        rows = np.flatnonzero(info["episode"] == e)
        n_turns = rows.size
        if n_turns < 2:
            return None  # a one-turn success has no intermediate state
        p0 = float(np.mean(info["episode_success"]))
        hist = [dict(h) for h in g.start.history]
        states = []
        for k in rows:
            states.append({"prompt_ids": list(g.context(int(k))), "history": [dict(h) for h in hist],
                           "snapshot": info["snapshot"][int(k)]})
            hist.append({"observation": info["anchor"][int(k)], "action": info["action"][int(k)]})
        pos = np.arange(1, n_turns, dtype=np.int64)  # the state before turn i, after i turns of the episode
        alphas = pos / float(n_turns)
        return _Trajectory(g.start.problem, g.start.prompt_ids, (), pos, alphas, self._score(alphas, p0, 1.0), step, "policy",
                           p0=p0, reward=1.0, states=states)

    def _insert(self, step: int, groups: Sequence[RolloutGroup], ctx: TrainContext) -> int:
        n = 0
        for g in groups:
            if g.start.origin is not Origin.FRESH or g.birth_step != step or g.start.prefix_ids:
                continue
            if g.multiturn:
                t = self._episode(g, step)
                if t is not None:
                    self.buffer[g.start.problem.id] = t
                    n += 1
                continue
            ok = np.flatnonzero(g.rewards > 0)
            if ok.size == 0:
                continue
            i = int(ok[0])  # the group's samples are exchangeable: the first successful one
            p0 = float(np.mean(g.rewards > 0))
            t = self._make(ctx, g.start.problem, g.start.prompt_ids, g.response_ids[i], p0, float(g.rewards[i]), step, "policy")
            if t is not None:
                self.buffer[g.start.problem.id] = t  # keeps only the prompt's most recent trajectory
                n += 1
        return n

    def _evict(self, step: int) -> int:
        """Drop entries no longer usable at step ``step + 1`` (usable while ``step + 1 − birth <= W``)."""
        keep_expert = self.cfg.expert_until_replaced
        old = [k for k, t in self.buffer.items()
               if step + 1 - t.birth > self.cfg.window and not (keep_expert and t.source == "expert")]
        for k in old:
            del self.buffer[k]
        return len(old)

    def _flat(self) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
        keys, traj_idx, pos_idx, scores = list(self.buffer), [], [], []
        for j, k in enumerate(keys):
            t = self.buffer[k]
            traj_idx.append(np.full(t.positions.size, j, dtype=np.int64))
            pos_idx.append(np.arange(t.positions.size, dtype=np.int64))
            scores.append(t.scores)
        if not keys:
            z = np.zeros(0, dtype=np.int64)
            return keys, z, z, np.zeros(0)
        return keys, np.concatenate(traj_idx), np.concatenate(pos_idx), np.concatenate(scores)

    # ---------------------------------------------------------------- plug-in points

    def _state(self, key: str, k: int, score: float) -> StartState:
        t = self.buffer[key]
        i = int(t.positions[k])
        meta = {"vsr_score": float(score), "vsr_alpha": float(t.alphas[k]), "vsr_birth": t.birth, "vsr_source": t.source,
                "vsr_p0": float(t.p0), "vsr_reward": float(t.reward)}
        if t.states is not None:  # an interaction state: restored environment + the turns before it
            s = t.states[i]
            return StartState(tuple(s["prompt_ids"]), t.problem, (), Origin.REPLAYED_PREFIX,
                              history=tuple(dict(h) for h in s["history"]), meta=meta, snapshot=s["snapshot"])
        return StartState(t.prompt_ids, t.problem, t.response_ids[:i], Origin.REPLAYED_PREFIX, meta=meta)

    def _oracle_scores(self, step: int, keys, traj_idx, pos_idx, rng, ctx: TrainContext) -> tuple[np.ndarray, np.ndarray, int]:
        cand = weighted_sample_without_replacement(np.ones(traj_idx.size), self.cfg.oracle_candidates, rng)
        states = [replace(self._state(keys[traj_idx[c]], int(pos_idx[c]), 0.0), n=self.cfg.oracle_samples) for c in cand]
        groups, st = collect(states, step=step, round=0x0AC1E, ctx=ctx)
        m = self.cfg.oracle_samples
        p = np.array([float(np.mean(g.rewards > 0)) for g in groups])
        var = p * (1.0 - p) * m / (m - 1.0)  # unbiased Bernoulli variance of the continuation reward
        return cand, var, int(st.new_tokens)

    def _proxy_agreement(self, keys, traj_idx, pos_idx, cand: np.ndarray, var: np.ndarray) -> dict[str, float]:
        """Spearman correlation of the oracle's Monte-Carlo variance with the zero-cost scores of the
        same candidates: the linear σ̂ and the calibrated σ̂ (curve fitted from the replayed outcomes so
        far), i.e. against the oracle score in training. nan when either side is constant."""
        from scipy.stats import spearmanr

        lin, cal = [], []
        f = self.curve()
        for c in cand:
            t = self.buffer[keys[traj_idx[c]]]
            a = t.alphas[int(pos_idx[c]) : int(pos_idx[c]) + 1]
            lin.append(float(variance_hat(a, t.p0, t.reward)[0]))
            cal.append(float(variance_hat_calibrated(a, t.p0, t.reward, f)[0]))
        out = {}
        for name, x in (("linear", lin), ("calibrated", cal)):
            ok = np.ptp(var) > 0 and np.ptp(x) > 0
            out[f"vsr_oracle_spearman_{name}"] = float(spearmanr(x, var).statistic) if ok else float("nan")
        return out

    def claim(self, step: Step, open_slots: int, ctx: TrainContext) -> Claim:
        """``round(rho × open_slots)`` prefix states drawn ∝ score (fewer if the buffer has fewer)."""
        k = int(round(self.cfg.rho * open_slots))
        metrics = {"vsr_replayed": 0.0, "vsr_fallback": 0.0}
        if k == 0:
            return Claim(metrics=metrics)
        keys, traj_idx, pos_idx, scores = self._flat()
        rng = np.random.default_rng(derive_seed(self.seed, step.index, 0x75E))
        oracle_tokens = 0
        if self.scoring.draw == "oracle" and traj_idx.size:
            cand, var, oracle_tokens = self._oracle_scores(step.index, keys, traj_idx, pos_idx, rng, ctx)
            metrics.update(self._proxy_agreement(keys, traj_idx, pos_idx, cand, var))
            chosen = cand[weighted_sample_without_replacement(var, k, rng)]
            used = np.zeros(traj_idx.size)
            used[cand] = var
            scores = used
            metrics["vsr_oracle_tokens"] = float(oracle_tokens)
        else:
            w = np.ones(traj_idx.size) if self.scoring.draw == "uniform" else scores
            chosen = weighted_sample_without_replacement(w, k, rng)
        if chosen.size == 0:
            metrics["vsr_fallback"] = 1.0
            ctx.warn("vsr: replay buffer has no usable state; the step uses fresh prompts only")
            return Claim(metrics=metrics, new_tokens=oracle_tokens)
        replayed = [self._state(keys[traj_idx[c]], int(pos_idx[c]), float(scores[c])) for c in chosen]
        metrics["vsr_replayed"] = float(len(replayed))
        alphas = np.array([s.meta["vsr_alpha"] for s in replayed])
        metrics["vsr_replayed_alpha_mean"] = float(np.mean(alphas))
        for q in (10, 50, 90):  # the distribution of replayed α over training (does the frontier walk back?)
            metrics[f"vsr_replayed_alpha_p{q}"] = float(np.percentile(alphas, q))
        metrics["vsr_replayed_expert_frac"] = float(np.mean([s.meta["vsr_source"] == "expert" for s in replayed]))
        return Claim(states=tuple(replayed), metrics=metrics, new_tokens=oracle_tokens)

    def after_step(self, step: Step, ctx: TrainContext) -> Result:
        cfg, t = self.cfg, step.index
        inserted = 0
        if cfg.insert_policy and (cfg.recency or t < cfg.freeze_after):
            inserted = self._insert(t, step.groups, ctx)
        evicted = self._evict(t) if cfg.recency else 0
        out = {"vsr_inserted": float(inserted), "vsr_evicted": float(evicted),
               "vsr_buffer_trajectories": float(len(self.buffer))}
        sizes = [tr.positions.size for tr in self.buffer.values()]
        out["vsr_buffer_states"] = float(sum(sizes))
        if self.buffer:
            ages = np.array([t + 1 - tr.birth for tr in self.buffer.values()], dtype=np.float64)
            sc = np.concatenate([tr.scores for tr in self.buffer.values()])
            out["vsr_buffer_age_mean"] = float(np.average(ages, weights=sizes))
            out["vsr_score_mean"] = float(sc.mean())
            out["vsr_score_p50"], out["vsr_score_p90"] = (float(v) for v in np.quantile(sc, [0.5, 0.9]))
            out["vsr_buffer_expert_frac"] = float(np.mean([tr.source == "expert" for tr in self.buffer.values()]))
        out.update(curriculum_metrics(t, step.groups))
        if self.scoring.keeps_evidence:
            out.update(self._calibrate(t, step.groups, rescore=self.scoring.rescores))
        return Result(metrics=out)

    # ---------------------------------------------------------------- checkpoints

    def state_dict(self) -> dict[str, Any]:
        """The buffer as plain data (problems by id, token ids as lists); an episode's interaction
        states when it has them; the calibrated score's evidence when ``score: calibrated``."""
        out: dict[str, Any] = {"buffer": []}
        for k, t in self.buffer.items():
            e = {"key": k, "problem": t.problem.id, "prompt_ids": list(t.prompt_ids), "response_ids": list(t.response_ids),
                 "positions": t.positions.copy(), "alphas": t.alphas.copy(), "scores": t.scores.copy(),
                 "birth": t.birth, "source": t.source, "p0": t.p0, "reward": t.reward}
            if t.states is not None:
                e["states"] = t.states
            out["buffer"].append(e)
        if self.scoring.keeps_evidence:
            out.update(calib_weight=self.calib_weight.copy(), calib_sum=self.calib_sum.copy())
        return out

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Rebuild the buffer from :meth:`state_dict`. An episode's interaction states are checked here
        (:func:`verify_interaction_states`); a damaged one raises the checkpoint module's
        :class:`~llm_harness.trainer.checkpoint.CorruptCheckpointError` naming the entry and the state,
        and the buffer is left as it was."""
        from llm_harness.trainer.checkpoint import CorruptCheckpointError

        problems = problem_index(self.train_problems)
        buffer = {}
        for j, e in enumerate(state["buffer"]):
            e = dict(e)
            k = e.pop("key")
            e["problem"] = problem_by_id(e["problem"], problems)
            e["prompt_ids"], e["response_ids"] = tuple(e["prompt_ids"]), tuple(e["response_ids"])
            e.setdefault("states", None)
            if e["states"] is not None:
                if not hasattr(self.task, "make_env"):  # not damage: this run's task has no environment
                    raise ValueError(f"checkpoint: vsr.buffer[{j}] (problem {k!r}) holds interaction states, but the task "
                                     f"{getattr(self.task, 'name', type(self.task).__name__)!r} is not an environment task")
                try:
                    verify_interaction_states(self.task, e["problem"], e["states"], np.asarray(e["positions"]),
                                              f"vsr.buffer[{j}] (problem {k!r})")
                except ValueError as exc:
                    raise CorruptCheckpointError(f"checkpoint: a damaged replay-buffer state: {exc}") from None
            buffer[k] = _Trajectory(**e)
        self.buffer = buffer
        if "calib_weight" in state:
            self.calib_weight = np.asarray(state["calib_weight"], dtype=np.float64).copy()
            self.calib_sum = np.asarray(state["calib_sum"], dtype=np.float64).copy()


def vsr_cost(params: Mapping[str, Any], cost: Mapping[str, float]) -> float:
    """Update cost over GRPO's for the suites' sizing: VSR restarts part of the batch from stored states at no extra
    generation (its proxy scores are free: 0.98x GRPO's update in the VSR regime's records); the oracle score
    generates ``oracle_candidates x oracle_samples`` continuations per update to score the candidates (unset: the
    defaults of :class:`VSRConfig`), each ``cost["oracle_continuation_share"]`` of an update."""
    if params.get("score") != "oracle":
        return 1.0
    n = int(params.get("oracle_candidates", VSRConfig.oracle_candidates)) * int(params.get("oracle_samples", VSRConfig.oracle_samples))
    return 1.0 + cost["oracle_continuation_share"] * n


@register_plugin("vsr", config=VSRConfig, cost=vsr_cost,
                 smoke=PluginSmoke({"cold_start": True, "cold_start_problems": 20}, state_key="buffer"),
                 summary="VSR: part of each batch restarts from stored prefix states drawn ∝ σ̂ (VSR Alg. 1)")
def _make_vsr(params: Mapping[str, Any], ctx: TrainContext) -> Plugin:
    """``plugins: {vsr: {rho: 0.5, window: 5, score: p1mp, ...}}`` (fields of :class:`VSRConfig`)."""
    return VSRPlugin(plugin_config(VSRConfig, params, "vsr"), ctx)
