"""Prefix Sampling (PS) as a trainer plug-in: rollout pass-rate control with self-generated prefixes
(PS, arXiv 2605.05112).

With binary rewards a group's signal — GRPO's advantage energy ``p(1 − p)``, the success–failure pairs
``k(N − k)`` — peaks at pass rate ``p = 0.5``; PS steers groups toward it with prefixes of the policy's own
trajectories. The plug-in is a :class:`StartStateSource` and a :class:`StepHook`:

**Triage** (``after_step``). Every *fresh* group of the step (a bare prompt: origin ``fresh``, no prefix,
no interaction history; born this step) with ``k`` successes out of ``N`` (``reward > 0``; an agent group
counts episodes) has pass rate ``p = k/N``:

* ``k = 0`` or ``k = N`` — nothing (no trajectory of the other kind to keep);
* ``low <= p <= high`` (0.3, 0.7) — nothing (trained as is, as every triaged group is);
* ``p < low`` ("hard") — one successful trajectory is kept;
* ``p > high`` ("easy") — one failed trajectory is kept (never with ``hard_only``: the "PS hard-only" arm).

The kept trajectory is picked uniformly among the qualifying samples (ours; the paper does not say which),
from a generator seeded by the run seed and the step.

**Cut.** A hard task gets a long *successful* prefix that leaves ``remaining = ratio_hard · length`` to
generate, an easy task a *failing* prefix of ``ratio_easy · length`` (PS)::

    hard:  c = ⌊(1 − ratio_hard) · L⌋        easy:  c = ⌊ratio_easy · L⌋

``L`` = the trajectory's verified completion (response tokens without the stop token). Then (ours) ``c`` is
capped at ``max_new_tokens − 1`` (the prefix counts against the response budget: at least one token is
generated) and, with ``snap_to_line``, moved back to the last line break at or before it (the largest
``j <= c`` whose token ``j − 1`` decodes to text containing ``"\\n"``; unchanged when there is none). A
trajectory with ``c < 1`` yields no prefix task. The prefix is the trajectory's sampled token ids verbatim
(never re-tokenised text) after the same prompt ids, so the prefix state is the one the policy was in.

**Prefix tasks** (``claim``). The kept trajectories of step ``t`` become prefix states of step ``t + 1`` only
(so a prefix is at most one update old; PS): origin ``replayed_prefix``, the source problem, ``meta``
``{ps_bucket, ps_ratio, ps_birth, ps_cut, ps_length, ps_source_pass_rate}``. They take at most
``⌊max_share × open slots⌋`` of the batch (ours: 0.5; the paper does not give the share), claimed before
the fresh draw; when more are pending a uniform (seeded) subset is claimed and the rest is dropped (ours).
Prefix tasks never spawn prefix tasks (depth 1; ours — only fresh groups are triaged). Prefix positions are
context: the trainer masks them from the loss; the verifier reads prefix + continuation; within-group GRPO
advantages, no importance correction (none in the paper).

**Controller** (per bucket ``hard`` / ``easy``; ours — one source reads one EMA per success count k ∈ {1, 2, 6, 7}
of 8, we keep one per bucket). After each step, a bucket whose prefix tasks were generated
this step updates ``EMA ← (1 − α) EMA + α p̄`` (α 0.05; ``p̄`` = the mean pass rate of the bucket's prefix
groups of the step, degenerate groups included — they leave the loss but feed the EMA, ours). The EMA starts
at 0.5 (ours: no move before evidence). ``controller: adaptive`` (the paper's 32B run) then moves the ratio:

* ``EMA > 0.5 + 0.03`` → ``ratio += 0.05``;  ``EMA < 0.5 − 0.03`` → ``ratio −= 0.05``; inside: no move;
* ratios are clipped to ``[0.05, 0.95]`` (ours), start at 0.45 (hard) / 0.55 (easy);
* after a move the bucket does not move for the next 5 steps (cool-down; the EMA keeps updating), and it
  moves only on a step that updated its EMA (ours).

Why one direction for both buckets: a larger ``ratio_hard`` leaves more to generate after a *shorter*
successful prefix, a larger ``ratio_easy`` is a *longer* failing prefix; both lower the prefix tasks' pass
rate, so a pass rate above 0.5 raises the ratio and one below lowers it — each move is toward 0.5.
``controller: fixed`` keeps ``ratio_hard`` / ``ratio_easy`` (0.25 / 0.25, the paper's 14B run) and still
reports the EMAs.

**Agents** (multi-turn groups of the ``multiturn`` collector). The same triage over the group's episodes
(``episode_success``); the kept episode of ``L`` turns is cut in turns (``c`` as above over ``L`` turns,
within ``[1, L − 1]``, no line snapping) and its state before turn ``c`` is restored exactly as VSR restores
interaction states: the turn's prompt ids, the turns before it as ``history`` and the environment
``snapshot`` (PS rebuilds agent prefixes by replaying actions without model calls; the snapshot is the
same state without replaying).

**Metrics**: ``ps_claimed_{hard,easy}``, ``ps_dropped`` (pending tasks not claimed), ``ps_kept_{hard,easy}``,
``ps_uncut`` (kept trajectories too short to cut), ``ps_pending`` (tasks for the next step), ``ps_pass_rate_{hard,easy}`` (this step's prefix tasks;
NaN without), ``ps_ema_{hard,easy}``, ``ps_ratio_{hard,easy}``, ``ps_moves_{hard,easy}`` (−1 / 0 / +1) and
``ps_solve_partial`` — the number of mixed-outcome groups generated this step (the paper's per-batch count;
the trainer's ``mixed_frac`` is the same as a share).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from llm_harness.methods.common import check_number, plugin_config
from llm_harness.trainer.data import (Origin, RolloutGroup, StartState, completion_ids, problem_index,
                                      start_state_from_plain, start_state_to_plain)
from llm_harness.trainer.plugins import (Plugin, PluginSmoke, StartStateSource, StepHook, TrainContext,
                                         register_plugin, unit_cost)
from llm_harness.trainer.rollout import derive_seed
from llm_harness.trainer.step import Claim, Result, Step

__all__ = ["BUCKETS", "PrefixSamplingConfig", "PrefixSamplingPlugin", "RatioController", "cut_length", "line_ends",
           "prefix_fraction", "triage"]

#: the two buckets of prefix tasks: successful prefixes of too-hard tasks, failing prefixes of too-easy ones
BUCKETS = ("hard", "easy")
CONTROLLERS = ("fixed", "adaptive")


@dataclass(frozen=True)
class PrefixSamplingConfig:
    """Parameters of the ``prefix_sampling`` plug-in (source per field: "PS" = arXiv 2605.05112; "ours")."""

    low: float = 0.3
    """Pass rates below ``low`` (with >= 1 success) are "too hard" (PS)."""
    high: float = 0.7
    """Pass rates above ``high`` (with >= 1 failure) are "too easy" (PS)."""
    max_share: float = 0.5
    """Prefix tasks take at most ``⌊max_share × open slots⌋`` of a batch; the rest are fresh prompts (ours: the
    paper does not state the share)."""
    controller: str = "fixed"
    """``fixed``: ``ratio_hard`` / ``ratio_easy`` throughout (PS, 14B run); ``adaptive``: the per-bucket EMA
    controller (PS, 32B run; module doc)."""
    ratio_hard: float = 0.25
    """Fixed controller: a too-hard task generates the last ``ratio_hard`` of a successful trajectory (PS: 0.25
    in the 14B run; one of its tables says 0.75)."""
    ratio_easy: float = 0.25
    """Fixed controller: a too-easy task continues the first ``ratio_easy`` of a failed trajectory (PS: 0.25)."""
    hard_only: bool = False
    """Keep no failed trajectories of too-easy tasks (the "PS hard-only" ablation arm; PS)."""
    start_hard: float = 0.45
    """Adaptive controller: initial ``ratio_hard`` (PS)."""
    start_easy: float = 0.55
    """Adaptive controller: initial ``ratio_easy`` (PS)."""
    ema_alpha: float = 0.05
    """Weight α of a step's pass rate in the bucket's EMA (PS)."""
    target: float = 0.5
    """Pass rate the controller steers toward (PS)."""
    dead_zone: float = 0.03
    """No move while ``|EMA − target| <= dead_zone`` (PS)."""
    ratio_step: float = 0.05
    """Size of one controller move (PS)."""
    cooldown: int = 5
    """Steps after a move during which the bucket does not move again (PS)."""
    ratio_min: float = 0.05
    """Lower clip of the adaptive ratios (ours)."""
    ratio_max: float = 0.95
    """Upper clip of the adaptive ratios (ours)."""
    ema_start: float = 0.5
    """EMA before the bucket's first observation (ours: the target, so nothing moves before evidence)."""
    snap_to_line: bool = True
    """Move a single-turn cut back to the last line break at or before it (ours)."""

    def __post_init__(self) -> None:
        check_number("low", self.low, 0, 1, lo_open=True, hi_open=True)
        check_number("high", self.high, self.low, 1, hi_open=True)
        check_number("max_share", self.max_share, 0, 1)
        if self.controller not in CONTROLLERS:
            raise ValueError(f"controller: must be one of {CONTROLLERS}, got {self.controller!r}")
        check_number("ratio_min", self.ratio_min, 0, 1, lo_open=True, hi_open=True)
        check_number("ratio_max", self.ratio_max, self.ratio_min, 1, hi_open=True)
        for name in ("ratio_hard", "ratio_easy", "start_hard", "start_easy"):
            check_number(name, getattr(self, name), 0, 1, lo_open=True, hi_open=True)
        check_number("ema_alpha", self.ema_alpha, 0, 1, lo_open=True)
        check_number("target", self.target, 0, 1, lo_open=True, hi_open=True)
        check_number("dead_zone", self.dead_zone, 0, 0.5)
        check_number("ratio_step", self.ratio_step, 0, 1, lo_open=True)
        check_number("cooldown", self.cooldown, 0, integer=True)
        check_number("ema_start", self.ema_start, 0, 1)
        for name in ("hard_only", "snap_to_line"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name}: must be a bool, got {getattr(self, name)!r}")

    def start_ratio(self, bucket: str) -> float:
        """The bucket's ratio at step 0 (the fixed ratio, or the adaptive start)."""
        if self.controller == "fixed":
            return self.ratio_hard if bucket == "hard" else self.ratio_easy
        return self.start_hard if bucket == "hard" else self.start_easy


# ------------------------------------------------------------------------------ pure pieces


def triage(k: int, n: int, low: float, high: float) -> str | None:
    """The bucket of a group with ``k`` successes of ``n`` (module doc): ``"hard"``, ``"easy"`` or None."""
    if n < 1 or not 0 <= k <= n:
        raise ValueError(f"k: need 0 <= k <= n and n >= 1, got k={k}, n={n}")
    if k == 0 or k == n:
        return None
    p = k / n
    if p < low:
        return "hard"
    if p > high:
        return "easy"
    return None


def prefix_fraction(bucket: str, ratio: float) -> float:
    """Share of the trajectory kept as prefix: ``1 − ratio`` (hard: ``ratio`` is what remains) or ``ratio`` (easy)."""
    return 1.0 - ratio if bucket == "hard" else ratio


def cut_length(length: int, fraction: float, budget: int, line_ends: Sequence[int] = ()) -> int:
    """Prefix length ``c`` of a trajectory of ``length`` tokens (module doc): ``⌊fraction · length⌋`` capped at
    ``budget − 1``, moved back to the largest ``j`` of ``line_ends`` with ``1 <= j <= c`` when there is one.
    0 means no prefix (``c < 1``)."""
    c = min(int(math.floor(fraction * length + 1e-9)), int(budget) - 1, int(length))
    if c < 1:
        return 0
    snapped = [j for j in line_ends if 1 <= j <= c]
    return max(snapped) if snapped else c


def line_ends(codec: Any, ids: Sequence[int]) -> list[int]:
    """Prefix lengths ``j`` at which a line ends: token ``j − 1`` decodes to text containing a line break."""
    return [j + 1 for j, t in enumerate(ids) if "\n" in codec.decode([int(t)])]


@dataclass
class RatioController:
    """One bucket's state (plain data): its ratio, the EMA of its prefix tasks' pass rate and the cool-down left."""

    ratio: float
    ema: float
    cooldown_left: int = 0
    observations: int = 0

    def observe(self, pass_rate: float, cfg: PrefixSamplingConfig) -> int:
        """Fold one step's pass rate into the EMA, then (adaptive) move the ratio: returns the move (−1, 0, +1).
        A pass rate above the dead zone raises the ratio (module doc: that lowers the pass rate)."""
        self.ema = (1.0 - cfg.ema_alpha) * self.ema + cfg.ema_alpha * float(pass_rate)
        self.observations += 1
        if cfg.controller != "adaptive":
            return 0
        if self.cooldown_left > 0:
            self.cooldown_left -= 1
            return 0
        gap = self.ema - cfg.target
        if abs(gap) <= cfg.dead_zone:
            return 0
        move = 1 if gap > 0 else -1
        new = min(max(self.ratio + move * cfg.ratio_step, cfg.ratio_min), cfg.ratio_max)
        if new == self.ratio:
            return 0
        self.ratio = new
        self.cooldown_left = cfg.cooldown
        return move

    def tick(self) -> None:
        """A step without an observation of this bucket: the cool-down still runs out."""
        if self.cooldown_left > 0:
            self.cooldown_left -= 1

    def to_plain(self) -> dict[str, Any]:
        return {"ratio": float(self.ratio), "ema": float(self.ema), "cooldown_left": int(self.cooldown_left),
                "observations": int(self.observations)}


def _successes(g: RolloutGroup) -> np.ndarray:
    """Per-trajectory success: rewards > 0, or an agent group's ``episode_success``."""
    return np.asarray(g.info["episode_success"] if g.multiturn else g.rewards > 0, dtype=bool)


# ------------------------------------------------------------------------------ the plug-in


class PrefixSamplingPlugin(StartStateSource, StepHook):
    """The ``prefix_sampling`` plug-in (module doc)."""

    def __init__(self, cfg: PrefixSamplingConfig, ctx: TrainContext):
        self.cfg = cfg
        self.seed = int(ctx.config.seed)
        self.budget = int(ctx.config.rollout.max_new_tokens)
        self.train_problems = ctx.train_problems
        self.ctrl = {b: RatioController(cfg.start_ratio(b), cfg.ema_start) for b in BUCKETS}
        self.pending: list[StartState] = []

    # ---------------------------------------------------------------- triage and cut

    def _single_turn(self, g: RolloutGroup, i: int, bucket: str, ratio: float, codec: Any) -> tuple[tuple[int, ...], int]:
        ids = completion_ids(g.response_ids[i], bool(g.finish_reasons) and g.finish_reasons[i] == "stop")
        ends = line_ends(codec, ids) if self.cfg.snap_to_line else ()
        c = cut_length(len(ids), prefix_fraction(bucket, ratio), self.budget, ends)
        return tuple(ids[:c]), len(ids)

    def _prefix_state(self, g: RolloutGroup, i: int, bucket: str, step: int, p: float, codec: Any) -> StartState | None:
        ratio = self.ctrl[bucket].ratio
        meta = {"ps_bucket": bucket, "ps_ratio": float(ratio), "ps_birth": int(step), "ps_source_pass_rate": float(p)}
        if g.multiturn:  # the state before turn c of episode i, restored exactly (module doc, agents)
            info = g.info
            rows = np.flatnonzero(info["episode"] == i)
            n_turns = int(rows.size)
            c = min(int(math.floor(prefix_fraction(bucket, ratio) * n_turns + 1e-9)), n_turns - 1)
            if c < 1:
                return None
            hist = [dict(h) for h in g.start.history]
            hist += [{"observation": info["anchor"][int(k)], "action": info["action"][int(k)]} for k in rows[:c]]
            row = int(rows[c])
            meta.update(ps_cut=c, ps_length=n_turns)
            return StartState(g.context(row), g.start.problem, (), Origin.REPLAYED_PREFIX, history=tuple(hist),
                              meta=meta, snapshot=info["snapshot"][row])
        prefix, length = self._single_turn(g, i, bucket, ratio, codec)
        if not prefix:
            return None
        meta.update(ps_cut=len(prefix), ps_length=length)
        return StartState(g.start.prompt_ids, g.start.problem, prefix, Origin.REPLAYED_PREFIX, meta=meta)

    def _triage(self, step: Step, ctx: TrainContext) -> tuple[list[StartState], dict[str, float]]:
        t = step.index
        rng = np.random.default_rng(derive_seed(self.seed, t, 0x505))
        out: list[StartState] = []
        seen: set[tuple] = set()
        kept = {b: 0 for b in BUCKETS}
        uncut = 0
        for g in step.groups:
            if g.start.origin is not Origin.FRESH or g.birth_step != t or not g.start.bare:
                continue
            ok = _successes(g)
            bucket = triage(int(ok.sum()), int(ok.size), self.cfg.low, self.cfg.high)
            if bucket is None or (bucket == "easy" and self.cfg.hard_only):
                continue
            pool = np.flatnonzero(ok if bucket == "hard" else ~ok)
            i = int(pool[rng.integers(pool.size)])
            s = self._prefix_state(g, i, bucket, t, float(ok.mean()), ctx.codec)
            kept[bucket] += 1
            if s is None:
                uncut += 1
            elif s.key not in seen:  # one task per state (a duplicate would merge into one larger group)
                seen.add(s.key)
                out.append(s)
        return out, {**{f"ps_kept_{b}": float(kept[b]) for b in BUCKETS}, "ps_uncut": float(uncut)}

    # ---------------------------------------------------------------- plug-in points

    def claim(self, step: Step, open_slots: int, ctx: TrainContext) -> Claim:
        """Last step's prefix tasks, at most ``⌊max_share × open_slots⌋`` (a uniform subset when more are pending)."""
        cap = int(math.floor(self.cfg.max_share * open_slots + 1e-9))
        pending, self.pending = self.pending, []
        if len(pending) > cap:
            rng = np.random.default_rng(derive_seed(self.seed, step.index, 0x5C1))
            keep = np.sort(rng.choice(len(pending), size=cap, replace=False)) if cap else np.zeros(0, dtype=np.int64)
            states = [pending[int(j)] for j in keep]
        else:
            states = pending
        m = {f"ps_claimed_{b}": float(sum(s.meta["ps_bucket"] == b for s in states)) for b in BUCKETS}
        m["ps_dropped"] = float(len(pending) - len(states))
        return Claim(states=tuple(states), metrics=m)

    def after_step(self, step: Step, ctx: TrainContext) -> Result:
        """Controller update from this step's prefix tasks, then triage of its fresh groups (next step's tasks)."""
        t = step.index
        m: dict[str, float] = {}
        for b in BUCKETS:
            rates = [float(_successes(g).mean()) for g in step.groups
                     if g.birth_step == t and g.start.origin is Origin.REPLAYED_PREFIX and g.start.meta.get("ps_bucket") == b]
            c = self.ctrl[b]
            if rates:
                m[f"ps_pass_rate_{b}"] = float(np.mean(rates))
                m[f"ps_moves_{b}"] = float(c.observe(m[f"ps_pass_rate_{b}"], self.cfg))
            else:
                c.tick()
                m[f"ps_pass_rate_{b}"] = float("nan")
                m[f"ps_moves_{b}"] = 0.0
            m[f"ps_ema_{b}"] = float(c.ema)
            m[f"ps_ratio_{b}"] = float(c.ratio)
        self.pending, tm = self._triage(step, ctx)
        m.update(tm)
        m["ps_pending"] = float(len(self.pending))
        m["ps_solve_partial"] = float(sum(g.mixed for g in step.groups if g.birth_step == t))
        return Result(metrics=m)

    # ---------------------------------------------------------------- checkpoints

    def state_dict(self) -> dict[str, Any]:
        """The controllers and the pending prefix tasks as plain data."""
        return {"controller": {b: self.ctrl[b].to_plain() for b in BUCKETS},
                "pending": [start_state_to_plain(s) for s in self.pending]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.ctrl = {b: RatioController(float(d["ratio"]), float(d["ema"]), int(d["cooldown_left"]), int(d["observations"]))
                     for b, d in state["controller"].items()}
        problems = problem_index(self.train_problems)
        self.pending = [start_state_from_plain(s, problems) for s in state["pending"]]


@register_plugin("prefix_sampling", config=PrefixSamplingConfig, cost=unit_cost,
                 smoke=PluginSmoke({"controller": "adaptive"}, state_key="pending"),
                 summary="Prefix Sampling: prefixes of too-hard (successful) and too-easy (failed) groups steer "
                         "the next batch's pass rates toward 0.5 (PS, arXiv 2605.05112)")
def _make_prefix_sampling(params: Mapping[str, Any], ctx: TrainContext) -> Plugin:
    """``plugins: {prefix_sampling: {controller: adaptive, max_share: 0.5, ...}}`` (fields of :class:`PrefixSamplingConfig`)."""
    return PrefixSamplingPlugin(plugin_config(PrefixSamplingConfig, params, "prefix_sampling"), ctx)
