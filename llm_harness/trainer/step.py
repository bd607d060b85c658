"""One training step as one typed value, and the typed results plug-in stages return.

A :class:`Step` flows through the stages of :meth:`llm_harness.trainer.loop.Trainer.train_step`
in order; each stage returns a new value (``dataclasses.replace``) with its field filled::

    slots      start states and who claimed each slot (plug-in claims first, then the fresh draw)
    refills    states added by refill rounds (Reinforce-Ada-Est top-ups, DAPO redraws), with owners
    groups     generated groups (all rounds, merged); advantages after the estimator; then shaped
    kept       survivors of the zero-variance filter and the keep plug-ins (DAPO truncation)
    fresh      this step's groups that enter the loss (``kept``, or a pool composition's draw of it)
    replayed   stored groups that enter the loss with their birth advantages
    metrics    every number computed so far, merged from the stages that computed them

Roles are fields, never recovered by object identity. Plug-in stages do not mutate the value
(its sequences are tuples); they return a result (:class:`Claim`, :class:`Refill`,
:class:`Shaped`, :class:`Kept`, :class:`Composition`, :class:`Result`) carrying what they
computed *and* the metrics they computed it with.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from llm_harness.trainer.data import RolloutGroup, StartState

__all__ = ["FRESH_OWNER", "Claim", "Composition", "Kept", "Refill", "Result", "SampleCounts", "Shaped", "Slot", "Step"]

#: owner of the slots filled by the fresh prompt stream
FRESH_OWNER = "fresh"


@dataclass(frozen=True)
class Slot:
    """One start state of the step, who put it there (``"fresh"`` or a plug-in's name) and whether
    it was drawn from the fresh prompt stream (round-0 fresh slots and refills' fresh draws)."""

    state: StartState
    owner: str
    drawn: bool = False


@dataclass(frozen=True)
class Step:
    """The value one training step passes through its stages (module doc)."""

    index: int
    """0-based step number."""
    slots: tuple[Slot, ...] = ()
    """Round-0 start states, plug-in claims first (plug-in order), then the fresh draw, in the
    order they are generated."""
    refills: tuple[Slot, ...] = ()
    """States generated in refill rounds (merged into existing groups when their ``key`` matches)."""
    groups: tuple[RolloutGroup, ...] = ()
    """Every group generated this step, after the latest stage that touched them."""
    kept: tuple[RolloutGroup, ...] = ()
    """Groups of this step that survived filtering (the replay buffer's input)."""
    fresh: tuple[RolloutGroup, ...] = ()
    """Groups born this step that enter the loss."""
    replayed: tuple[RolloutGroup, ...] = ()
    """Stored groups that enter the loss (advantages frozen at birth)."""
    metrics: Mapping[str, Any] = field(default_factory=dict)
    """Metrics so far (flat name -> number)."""

    @property
    def states(self) -> tuple[StartState, ...]:
        """The round-0 start states in slot order."""
        return tuple(s.state for s in self.slots)

    @property
    def target(self) -> int:
        """Number of round-0 slots (``prompts_per_step``; DAPO's target of mixed groups)."""
        return len(self.slots)

    @property
    def trained(self) -> tuple[RolloutGroup, ...]:
        """``fresh + replayed``: the groups of the loss, in batch order."""
        return self.fresh + self.replayed


@dataclass(frozen=True)
class Result:
    """What a plug-in stage computed besides its main output: metrics and extra generated tokens."""

    metrics: Mapping[str, float] = field(default_factory=dict)
    """Flat name -> number, emitted in the step's metrics under these names."""
    new_tokens: int = 0
    """Tokens the plug-in generated outside the collector (e.g. an oracle's Monte-Carlo samples);
    added to ``plugin_new_tokens`` and ``gen_new_tokens``."""


@dataclass(frozen=True)
class Claim(Result):
    """Start states a source claims for this step (at most the open slots it was offered)."""

    states: tuple[StartState, ...] = ()


@dataclass(frozen=True)
class SampleCounts(Result):
    """Per-slot sample counts for round 0 (``None``: keep the state's own ``n`` / the group size)."""

    n: tuple[int | None, ...] = ()


@dataclass(frozen=True)
class Refill(Result):
    """More generation after a round: explicit states and/or ``fresh`` more prompts of the fresh stream."""

    states: tuple[StartState, ...] = ()
    fresh: int = 0


@dataclass(frozen=True)
class Shaped(Result):
    """The step's groups with shaped advantages (same length and order as ``step.groups``)."""

    groups: tuple[RolloutGroup, ...] = ()


@dataclass(frozen=True)
class Kept(Result):
    """Indices into ``step.kept`` of the groups that stay (increasing, no repeats)."""

    indices: tuple[int, ...] = ()


@dataclass(frozen=True)
class Composition(Result):
    """The loss's groups by role: this step's (``fresh``) and stored ones (``replayed``)."""

    fresh: tuple[RolloutGroup, ...] = ()
    replayed: tuple[RolloutGroup, ...] = ()
