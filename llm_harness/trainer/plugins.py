"""Plug-in points of the trainer (SPEC §3.1–3.4; STYLE rule 8) and the plug-in registry.

Four interfaces, each with a no-op / identity default, so a method is a small class overriding
only what it changes (one object may implement several, e.g. VSR = source + hook):

* :class:`StartStateSource` — ``propose(step, states, ctx)`` transforms the list of start states
  of a step (the built-in fresh source fills it first; VSR swaps a fraction ρ for replayed
  prefixes; ExTra replaces the tail with guided prefixes); ``refill(step, groups, ctx)`` may ask
  for more states after a generation round (states whose ``key`` equals an existing group's are
  merged into it: Reinforce-Ada-Est's second stage).
* :class:`RolloutReplay` — ``replay(step, groups, ctx)`` returns stored rollout groups (with their
  birth advantages and behaviour log-probs) to concatenate to the fresh ones (``compose`` may be
  overridden to also subsample the fresh groups, e.g. the Replay paper's pool composition).
* :class:`AdvantageShaper` — ``shape(step, groups, ctx)`` runs after the estimator, in chain order.
* :class:`StepHook` — ``after_step(step, record, ctx)`` after the optimizer step (buffers update
  here); returns extra metrics.

Every plug-in has ``state_dict()`` / ``load_state_dict()`` (plain picklable data) so checkpoints
restore it. ``PLUGINS`` maps a config name to a factory ``factory(params: dict, ctx) -> plugin``;
the trainer builds the configured plug-ins in order and never branches on their names.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from llm_harness.trainer.data import Origin, RolloutGroup, StartState

__all__ = [
    "AdvantageShaper",
    "FreshPromptSource",
    "PLUGINS",
    "Plugin",
    "ReinforceAdaEst",
    "RolloutReplay",
    "StartStateSource",
    "StepHook",
    "StepRecord",
    "allocate_counts",
    "build_plugins",
    "register_plugin",
]


class Plugin:
    """Common base: checkpointable state (none by default)."""

    def state_dict(self) -> dict[str, Any]:
        """Picklable state saved in checkpoints."""
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output."""


class StartStateSource(Plugin):
    """Decides which states a batch starts from (default: leaves the proposal unchanged)."""

    def propose(self, step: int, states: list[StartState], ctx: Any) -> list[StartState]:
        """Return the step's start states given the states proposed so far."""
        return states

    def refill(self, step: int, groups: Sequence[RolloutGroup], ctx: Any) -> list[StartState]:
        """More states to generate after a round (default none)."""
        return []


class RolloutReplay(Plugin):
    """Stored rollouts to concatenate to the fresh ones (default none)."""

    def replay(self, step: int, groups: Sequence[RolloutGroup], ctx: Any) -> list[RolloutGroup]:
        """Groups (advantages set) to add to this step's batch."""
        return []

    def compose(self, step: int, groups: Sequence[RolloutGroup], ctx: Any) -> list[RolloutGroup]:
        """The trained list given the groups so far; default ``groups + replay(...)`` (fresh-anchored).
        Override for compositions that also subsample the fresh groups (the pool baseline)."""
        return list(groups) + self.replay(step, groups, ctx)


class AdvantageShaper(Plugin):
    """Transforms advantages after the estimator (default identity)."""

    def shape(self, step: int, groups: list[RolloutGroup], ctx: Any) -> list[RolloutGroup]:
        """Return groups with (possibly) modified advantages."""
        return groups


@dataclass
class StepRecord:
    """What a step produced, handed to :meth:`StepHook.after_step`."""

    step: int
    """The step just completed (0-based)."""
    generated: list[RolloutGroup]
    """Every group generated this step (all rounds), with advantages, before filtering."""
    trained: list[RolloutGroup]
    """Groups that entered the loss (filtered fresh + replayed)."""
    metrics: dict[str, Any] = field(default_factory=dict)
    """The step's metrics so far."""


class StepHook(Plugin):
    """Called after every step (default: nothing)."""

    def after_step(self, step: int, record: StepRecord, ctx: Any) -> dict[str, float]:
        """Update internal state; return extra metrics (flat name -> number)."""
        return {}


# ------------------------------------------------------------------------------ registry

PluginFactory = Callable[[Mapping[str, Any], Any], Plugin]
#: config name -> factory(params, ctx)
PLUGINS: dict[str, PluginFactory] = {}


def register_plugin(name: str) -> Callable[[PluginFactory], PluginFactory]:
    """Decorator adding a plug-in factory under ``name``; duplicates are rejected."""

    def deco(fn: PluginFactory) -> PluginFactory:
        if name in PLUGINS:
            raise ValueError(f"name: plug-in {name!r} is already registered")
        PLUGINS[name] = fn
        return fn

    return deco


#: modules imported (when installed) before plug-ins are looked up, so their registrations exist
PLUGIN_MODULES: tuple[str, ...] = ("llm_harness.methods",)


def import_plugin_modules() -> None:
    """Import every installed module of :data:`PLUGIN_MODULES` (they call ``register_plugin``)."""
    import importlib
    import importlib.util

    for mod in PLUGIN_MODULES:
        try:
            found = importlib.util.find_spec(mod) is not None
        except ModuleNotFoundError:
            found = False
        if found:
            importlib.import_module(mod)


def build_plugins(spec: Mapping[str, Mapping[str, Any]], ctx: Any) -> list[Plugin]:
    """Instantiate the configured plug-ins in order (unknown names → ValueError)."""
    out = []
    for name, params in spec.items():
        if name not in PLUGINS:
            raise ValueError(f"plugins: unknown plug-in {name!r}; registered: {sorted(PLUGINS)}")
        p = PLUGINS[name](dict(params or {}), ctx)
        if not isinstance(p, Plugin):
            raise ValueError(f"plugins.{name}: factory returned {type(p).__name__}, not a Plugin")
        out.append(p)
    return out


# ------------------------------------------------------------------------------ built-ins


class FreshPromptSource(StartStateSource):
    """Fresh prompts from the training split in a seeded, epoch-wise shuffled order.

    The ``i``-th prompt ever drawn is ``perm_e[i mod N]`` with ``e = i // N`` and ``perm_e`` a
    permutation seeded by ``(seed, e)``, so the whole state is one counter (bit-identical resume).
    """

    def __init__(self, problems: Sequence[Any], encode: Callable[[Any], tuple[int, ...]], per_step: int, seed: int):
        if len(problems) == 0:
            raise ValueError("problems: the training split is empty")
        self.problems = list(problems)
        self.encode = encode
        self.per_step = int(per_step)
        self.seed = int(seed)
        self.cursor = 0
        self._perm_epoch = -1
        self._perm: np.ndarray | None = None

    def _index(self, i: int) -> int:
        n = len(self.problems)
        e = i // n
        if e != self._perm_epoch:
            self._perm = np.random.default_rng([self.seed, e, 0x5EED]).permutation(n)
            self._perm_epoch = e
        return int(self._perm[i % n])

    def draw(self, k: int) -> list[StartState]:
        """The next ``k`` fresh start states (advances the cursor)."""
        out = []
        for _ in range(k):
            p = self.problems[self._index(self.cursor)]
            self.cursor += 1
            out.append(StartState(prompt_ids=self.encode(p), problem=p, origin=Origin.FRESH))
        return out

    def give_back(self, k: int) -> None:
        """Un-draw the last ``k`` prompts drawn (a plug-in that swaps fresh prompts for other states
        returns them, so the next draw yields them again and every method sees one prompt order)."""
        if not 0 <= k <= self.cursor:
            raise ValueError(f"k: cannot give back {k} prompts after {self.cursor} draws")
        self.cursor -= int(k)

    def propose(self, step: int, states: list[StartState], ctx: Any) -> list[StartState]:
        return list(states) + self.draw(self.per_step)

    def state_dict(self) -> dict[str, Any]:
        return {"cursor": self.cursor}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.cursor = int(state["cursor"])


def allocate_counts(scores: np.ndarray, total: int, lo: int, hi: int) -> np.ndarray:
    """Integer counts ``N[i] ∈ [lo, hi]`` with ``Σ N = total`` and ``N ∝ scores`` as far as the box allows.

    Water-filling: find λ with ``Σ clip(λ s_i, lo, hi) = total`` by bisection, then round by largest
    remainders inside the box (SPEC §3.2, Reinforce-Ada-Est reallocation). ``scores[i] >= 0``;
    all-zero scores give an even split.
    """
    s = np.asarray(scores, dtype=np.float64)
    n = s.shape[0]
    if s.ndim != 1 or n == 0:
        raise ValueError(f"scores: expected a non-empty 1-D array, got shape {s.shape}")
    if np.any(~np.isfinite(s)) or np.any(s < 0):
        raise ValueError("scores: must be finite and >= 0")
    if not (1 <= lo <= hi):
        raise ValueError(f"lo: need 1 <= lo <= hi, got lo={lo}, hi={hi}")
    if not (n * lo <= total <= n * hi):
        raise ValueError(f"total: {total} outside [{n * lo}, {n * hi}] for {n} prompts in [{lo}, {hi}]")
    if s.sum() == 0:
        s = np.ones(n)
    a, b = 0.0, hi / max(s[s > 0].min(), 1e-300)
    for _ in range(200):
        lam = 0.5 * (a + b)
        if np.clip(lam * s, lo, hi).sum() < total:
            a = lam
        else:
            b = lam
    x = np.clip(b * s, lo, hi)
    base = np.clip(np.floor(x), lo, hi).astype(np.int64)
    rem = int(total - base.sum())
    frac = x - np.floor(x)
    order = np.lexsort((np.arange(n), -frac))  # largest remainder first, ties by index
    k = 0
    while rem > 0:
        i = order[k % n]
        if base[i] < hi:
            base[i] += 1
            rem -= 1
        k += 1
    while rem < 0:
        i = order[::-1][k % n]
        if base[i] > lo:
            base[i] -= 1
            rem += 1
        k += 1
    return base


class ReinforceAdaEst(StartStateSource):
    """Prompt-level reallocation (Reinforce-Ada-Est style, SPEC §3.2 ablation).

    Stage 1 draws ``n_min`` samples from every fresh prompt; stage 2 (a refill round) tops prompt
    ``x`` up to ``N_x`` with ``N_x ∝ sqrt(p̂(1 − p̂))`` (Neyman), ``p̂ = (k + 1)/(n + 2)`` from stage 1,
    ``N_x ∈ [n_min, n_max]`` and ``Σ N_x = B·G`` fixed. Departure: the published method's exact
    estimator is not specified in our sources; this is the variance-proportional allocation
    the VSR paper's control describes (N_x ∈ [4, 32], fixed total).
    """

    def __init__(self, n_min: int = 4, n_max: int = 32, group_size: int = 8):
        if not (1 <= n_min <= group_size <= n_max):
            raise ValueError(f"n_min: need 1 <= n_min <= group_size <= n_max, got {n_min}, {group_size}, {n_max}")
        self.n_min, self.n_max, self.g = int(n_min), int(n_max), int(group_size)
        self._pending = -1

    def propose(self, step: int, states: list[StartState], ctx: Any) -> list[StartState]:
        self._pending = step
        return [StartState(s.prompt_ids, s.problem, s.prefix_ids, s.origin, self.n_min, s.history) for s in states]

    def refill(self, step: int, groups: Sequence[RolloutGroup], ctx: Any) -> list[StartState]:
        if self._pending != step:
            return []
        self._pending = -1
        groups = [g for g in groups if g.birth_step == step]
        if not groups:
            return []
        p = np.array([(g.rewards.sum() + 1.0) / (g.size + 2.0) for g in groups])
        counts = allocate_counts(np.sqrt(p * (1 - p)), self.g * len(groups), max(self.n_min, 1), self.n_max)
        out = []
        for g, c in zip(groups, counts):
            extra = int(c) - g.size
            if extra > 0:
                s = g.start
                out.append(StartState(s.prompt_ids, s.problem, s.prefix_ids, s.origin, extra, s.history))
        return out


@register_plugin("reinforce_ada_est")
def _make_reinforce_ada(params: Mapping[str, Any], ctx: Any) -> Plugin:
    """``{n_min: 4, n_max: 32}``; the total is ``prompts_per_step × group_size``."""
    unknown = set(params) - {"n_min", "n_max"}
    if unknown:
        raise ValueError(f"plugins.reinforce_ada_est: unknown key(s) {sorted(unknown)}")
    return ReinforceAdaEst(params.get("n_min", 4), params.get("n_max", 32), ctx.config.rollout.group_size)
