"""The trainer's interfaces: the typed context, the plug-in points and the plug-in registry.

Every plug-in point receives the step value (:class:`~llm_harness.trainer.step.Step`, read-only)
and the :class:`TrainContext` (read-only), and returns a typed result holding what it computed
and the metrics it computed it with. One object may implement several points (VSR is a source and
a hook); points it does not override are no-ops:

* :class:`StartStateSource` — ``claim(step, open_slots, ctx) -> Claim``: up to ``open_slots`` start
  states for this step, claimed *before* the fresh draw (sources run in plug-in order, each offered
  what the previous ones left); ``plan_samples(step, ctx) -> SampleCounts``: per-slot sample counts
  of round 0; ``refill(step, requested, ctx) -> Refill``: more states or more fresh prompts after a
  generation round (``requested`` is what earlier sources asked for in this round; states whose
  ``key`` equals an existing group's are merged into it).
* :class:`AdvantageShaper` — ``shape(step, ctx) -> Shaped``: the step's groups with shaped
  advantages (chain order).
* :class:`GroupFilter` — ``keep(step, ctx) -> Kept``: which of ``step.kept`` stay (after the
  zero-variance filter; DAPO's truncation).
* :class:`RolloutReplay` — ``compose(step, ctx) -> Composition``: the loss's groups by role
  (``fresh`` from this step, ``replayed`` from storage).
* :class:`StepHook` — ``after_step(step, ctx) -> Result``: after the optimizer step, with every role
  filled (buffers update here).

Plug-ins keep their own state and expose it through ``state_dict()`` / ``load_state_dict()`` for
checkpoints. ``PLUGINS`` maps a config name to its :class:`PluginSpec` (factory ``factory(params, ctx) -> plugin``,
parameter class, cost factor, state-test run), registered once beside the plug-in; the trainer builds the configured plug-ins in order and never branches on their names.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from llm_harness.trainer.step import Claim, Composition, Kept, Refill, Result, SampleCounts, Shaped, Step
from vsr_util.registry import Registry

if TYPE_CHECKING:  # imported for annotations only (no import cycles at run time)
    from llm_harness.tasks import Problem, Task
    from llm_harness.trainer.config import TrainConfig
    from llm_harness.trainer.modeling import Codec
    from llm_harness.trainer.verifier import SafeVerifier

__all__ = [
    "AdvantageShaper",
    "GroupFilter",
    "PLUGINS",
    "PLUGIN_PACKAGES",
    "Plugin",
    "PluginSmoke",
    "PluginSpec",
    "RolloutReplay",
    "StartStateSource",
    "StepHook",
    "TrainContext",
    "POINTS",
    "CostFactor",
    "WarningLog",
    "build_plugins",
    "check_indices",
    "import_plugin_modules",
    "merge_metrics",
    "plugin_label",
    "register_plugin",
    "unit_cost",
]


class WarningLog:
    """Where the trainer's components report warnings (counted per step, printed by the trainer)."""

    def __init__(self) -> None:
        self.messages: list[str] = []

    def warn(self, msg: str) -> None:
        """Record one warning."""
        self.messages.append(str(msg))


@dataclass(frozen=True)
class TrainContext:
    """What plug-ins and collectors may use; frozen (plug-ins return results, they never write here)."""

    config: "TrainConfig"
    """The run's configuration."""
    task: "Task"
    """The task (verification, step splitting, expert solutions)."""
    codec: "Codec"
    """Tokenizer wrapper (encode/decode, pad id)."""
    backend: Any
    """Generation backend (``generate``, ``score_batch``; see :mod:`llm_harness.backends.protocol`)."""
    model: Any
    """The policy being trained (``torch.nn.Module``)."""
    verifier: "SafeVerifier"
    """Deadline-guarded verification."""
    run_dir: Path
    """The run folder."""
    train_problems: tuple["Problem", ...] = ()
    """The training split in list order (e.g. VSR's expert cold start)."""
    encode_prompt: Callable[["Problem"], tuple[int, ...]] = field(default=lambda p: ())
    """Rendered and tokenized prompt of a problem (what the fresh stream puts in a slot)."""
    log: WarningLog = field(default_factory=WarningLog)
    """Warning sink (a service: calling it is not a write into the context)."""

    def warn(self, msg: str) -> None:
        """Record a warning (counted in the step metrics)."""
        self.log.warn(msg)

    @property
    def warnings(self) -> list[str]:
        """Every warning recorded so far."""
        return self.log.messages


class Plugin:
    """Common base: checkpointable state (none by default) and the name the plug-in was built under."""

    name: str = ""

    def state_dict(self) -> dict[str, Any]:
        """State saved in checkpoints."""
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output."""


class StartStateSource(Plugin):
    """Decides which states a batch starts from (defaults: claims nothing, refills nothing)."""

    def claim(self, step: Step, open_slots: int, ctx: TrainContext) -> Claim:
        """At most ``open_slots`` start states for this step (taken before the fresh draw)."""
        return Claim()

    def plan_samples(self, step: Step, ctx: TrainContext) -> SampleCounts | None:
        """Round-0 sample counts per slot of ``step.slots`` (``None``: unchanged)."""
        return None

    def refill(self, step: Step, requested: Refill, ctx: TrainContext) -> Refill:
        """More states / fresh prompts after a round (``step.groups``: this step's groups so far)."""
        return Refill()


class AdvantageShaper(Plugin):
    """Transforms advantages after the estimator (default identity)."""

    def shape(self, step: Step, ctx: TrainContext) -> Shaped:
        """``step.groups`` with (possibly) modified advantages."""
        return Shaped(groups=step.groups)


class GroupFilter(Plugin):
    """Drops groups of this step before the update (default keeps all)."""

    def keep(self, step: Step, ctx: TrainContext) -> Kept:
        """Indices into ``step.kept`` of the groups that stay."""
        return Kept(indices=tuple(range(len(step.kept))))


class RolloutReplay(Plugin):
    """Stored rollouts to add to the loss (default none)."""

    def compose(self, step: Step, ctx: TrainContext) -> Composition:
        """The loss's groups by role given ``step.fresh`` / ``step.replayed`` so far."""
        return Composition(fresh=step.fresh, replayed=step.replayed)


class StepHook(Plugin):
    """Called after every step (default: nothing)."""

    def after_step(self, step: Step, ctx: TrainContext) -> Result:
        """Update internal state from the finished step; return metrics."""
        return Result()


class StepRecorder(StepHook):
    """A step hook that keeps every finished :class:`~llm_harness.trainer.step.Step` (in ``records``), for
    whoever reads a run's steps afterwards (benchmarks, tests)."""

    def __init__(self) -> None:
        self.records: list[Step] = []

    def after_step(self, step: Step, ctx: TrainContext) -> Result:
        self.records.append(step)
        return Result()


#: every plug-in point, in the order the trainer calls them
POINTS: tuple[type[Plugin], ...] = (StartStateSource, AdvantageShaper, GroupFilter, RolloutReplay, StepHook)

# ------------------------------------------------------------------------------ registry

PluginFactory = Callable[[Mapping[str, Any], TrainContext], Plugin]
#: ``factor(params, cost_constants) -> float``: one update's time with the plug-in over GRPO's, for the comparison
#: suites' sizing (:mod:`llm_harness.compare.sizing`, whose ``COST`` holds the constants it may read)
CostFactor = Callable[[Mapping[str, Any], Mapping[str, float]], float]


def unit_cost(params: Mapping[str, Any], cost: Mapping[str, float]) -> float:
    """The cost factor of a plug-in that adds no generation or loss work (1: an update costs what GRPO's does)."""
    return 1.0


@dataclass(frozen=True)
class PluginSmoke:
    """The small run that checks a plug-in's checkpoint state (``tests/llm_harness/methods/test_plugin_states.py``):
    three steps of a toy task with ``params``; ``state_key`` must be non-empty in ``state_dict()`` afterwards (None:
    the plug-in keeps no state); ``hard``: the toy task passes rarely (plug-ins that act on failures)."""

    params: Mapping[str, Any] = field(default_factory=dict)
    state_key: str | None = None
    hard: bool = False


@dataclass(frozen=True)
class PluginSpec:
    """Everything the toolkit knows about one plug-in, registered once beside it (:func:`register_plugin`): the
    trainer builds it with ``factory``, ``config`` is the frozen dataclass of its parameters (the keys under
    ``plugins.<name>``), ``cost`` sizes the suites that configure it, ``smoke`` is its state test's run. Calling the
    spec calls the factory."""

    name: str
    factory: PluginFactory
    config: type | None
    cost: CostFactor
    smoke: PluginSmoke
    summary: str = ""
    """One line: what the plug-in does and its source (``vsr plugins`` prints it)."""

    def __call__(self, params: Mapping[str, Any], ctx: TrainContext) -> Plugin:
        return self.factory(params, ctx)


#: config name -> :class:`PluginSpec` (callable as its factory)
PLUGINS: Registry[PluginSpec] = Registry("plug-in")


def register_plugin(name: str, *, config: type | None, cost: CostFactor, smoke: PluginSmoke,
                    summary: str = "") -> Callable[[PluginFactory], PluginFactory]:
    """Decorator registering ``factory(params, ctx) -> Plugin`` as plug-in ``name`` with its :class:`PluginSpec`
    fields (every one required: a plug-in whose cost or state test is unknown is not registered); duplicates are
    rejected. Returns the factory unchanged."""
    if config is not None and not dataclasses.is_dataclass(config):
        raise TypeError(f"register_plugin({name!r}): config must be a dataclass type, got {config!r}")
    if not callable(cost):
        raise TypeError(f"register_plugin({name!r}): cost must be callable (params, cost_constants) -> float")
    if not isinstance(smoke, PluginSmoke):
        raise TypeError(f"register_plugin({name!r}): smoke must be a PluginSmoke, got {type(smoke).__name__}")

    def deco(factory: PluginFactory) -> PluginFactory:
        PLUGINS.add(name, PluginSpec(name, factory, config, cost, smoke, summary or _first_line(factory.__doc__)))
        return factory

    return deco


def _first_line(doc: str | None) -> str:
    return " ".join((doc or "").strip().split("\n\n")[0].split())


#: packages whose every module is imported (when installed) before plug-ins are looked up, so their registrations
#: exist: a new module in ``llm_harness/methods/`` is found without another edit
PLUGIN_PACKAGES: tuple[str, ...] = ("llm_harness.methods",)


_IMPORTED: set[str] = set()


def import_plugin_modules() -> None:
    """Import every module of every installed package of :data:`PLUGIN_PACKAGES` (they call ``register_plugin``);
    a package is scanned once per process."""
    import importlib
    import importlib.util
    import pkgutil

    for pkg in PLUGIN_PACKAGES:
        if pkg in _IMPORTED:
            continue
        try:
            found = importlib.util.find_spec(pkg) is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            continue
        mod = importlib.import_module(pkg)
        for info in pkgutil.iter_modules(getattr(mod, "__path__", ()), prefix=pkg + "."):
            importlib.import_module(info.name)
        _IMPORTED.add(pkg)  # (after every module imported: a failed import is retried, and raises again)


def build_plugins(spec: Mapping[str, Mapping[str, Any]], ctx: TrainContext) -> list[Plugin]:
    """Instantiate the configured plug-ins in order (unknown names → ValueError listing the registered ones)."""
    import_plugin_modules()
    out = []
    for name, params in spec.items():
        p = PLUGINS.lookup(name, where="plugins")(dict(params or {}), ctx)
        if not isinstance(p, Plugin):
            raise ValueError(f"plugins.{name}: factory returned {type(p).__name__}, not a Plugin")
        p.name = name
        out.append(p)
    return out


def plugin_label(p: Plugin) -> str:
    """The name metrics and errors use for plug-in ``p`` (its config name, else its class)."""
    return p.name or type(p).__name__


def merge_metrics(into: dict[str, Any], owners: dict[str, str], new: Mapping[str, Any], owner: str) -> None:
    """Add ``new`` to ``into``; a key another owner already emitted this step is refused (ValueError),
    so two plug-ins can never overwrite each other's numbers silently."""
    for k, v in new.items():
        prev = owners.get(k)
        if prev is not None and prev != owner:
            raise ValueError(f"metrics: {owner!r} emitted {k!r}, which {prev!r} already emitted this step")
        owners[k] = owner
        into[k] = v


def check_indices(idx: Sequence[int], n: int, where: str) -> tuple[int, ...]:
    """``idx`` as a tuple after checking it is strictly increasing within ``[0, n)`` (ValueError naming ``where``)."""
    out = tuple(int(i) for i in idx)
    if any(not 0 <= i < n for i in out) or any(a >= b for a, b in zip(out, out[1:])):
        raise ValueError(f"{where}: indices must be strictly increasing in [0, {n}), got {list(out)}")
    return out
