"""The papers' evaluation protocols as named presets: sampling temperature, nucleus mass, samples.

``EVAL_PROTOCOLS`` (a :class:`vsr_util.registry.Registry`) maps a name to an :class:`EvalProtocol`;
``validation.protocol`` (:class:`llm_harness.trainer.config.ValidationConfig`) and ``vsr eval --protocol``
(``EvalConfig``) name one (:func:`resolve_sampling` fills the unset fields), and the
comparison suites set it per suite. Entries (Replay App. A; ExTra App. B.6; VSR App. D.2):

* ``replay`` — Replay's MATH-500 protocol: T 0.6, top-p 0.8, k = 8;
* ``replay_aime`` — Replay's AIME/HMMT protocol: T 0.6, top-p 0.8, k = 16;
* ``extra`` — ExTra: T 0.7, top-p 0.9, n = 16 (its headline metric is pass@16);
* ``vsr`` — VSR: T 0.7, 16 samples "over 2 seeds"; the paper states no nucleus mass, so top-p is 1.

Departures: VSR draws its 16 samples as 2 seeds x 8; here the 16 come from one seeded call. With
independent samples per problem the two are the same distribution, so only the random stream
differs. The papers evaluate with long response budgets on competition sets; the test bed keeps
the run's ``rollout.max_new_tokens`` and its own validation split.
"""

from __future__ import annotations

from dataclasses import dataclass

from vsr_util.checks import check_number
from vsr_util.registry import Registry

__all__ = ["EVAL_PROTOCOLS", "EvalProtocol", "get_protocol", "resolve_sampling"]


@dataclass(frozen=True)
class EvalProtocol:
    """One paper's sampling for evaluation."""

    temperature: float
    """Sampling temperature T > 0."""
    top_p: float
    """Nucleus mass in (0, 1]."""
    k: int
    """Samples per problem (avg@k; pass@j for j = 1..k)."""
    source: str
    """Where the numbers come from (paper and section)."""

    def __post_init__(self) -> None:
        check_number("temperature", self.temperature, 0, lo_open=True)
        check_number("top_p", self.top_p, 0, 1, lo_open=True)
        check_number("k", self.k, 1, integer=True)


#: name -> :class:`EvalProtocol` (module doc); duplicates are refused.
EVAL_PROTOCOLS: Registry[EvalProtocol] = Registry("evaluation protocol", {
    "replay": EvalProtocol(0.6, 0.8, 8, "Replay App. A, MATH-500"),
    "replay_aime": EvalProtocol(0.6, 0.8, 16, "Replay App. A, AIME / HMMT"),
    "extra": EvalProtocol(0.7, 0.9, 16, "ExTra §5 / App. B.6"),
    "vsr": EvalProtocol(0.7, 1.0, 16, "VSR App. D.2, 16 samples over 2 seeds, no top-p stated"),
})


def get_protocol(name: str, where: str = "protocol") -> EvalProtocol:
    """The protocol registered as ``name`` (ValueError naming ``where`` and the known names otherwise)."""
    return EVAL_PROTOCOLS.lookup(name, where)


def resolve_sampling(cfg: object, defaults: EvalProtocol) -> None:
    """Fill the unset (None) ``k`` / ``temperature`` / ``top_p`` of a frozen config in place from its
    ``protocol`` (a name of :data:`EVAL_PROTOCOLS`, or "" for ``defaults``).

    A set ``temperature`` or ``top_p`` that disagrees with the protocol raises ValueError naming the
    field; ``k`` may differ (the sample budget). Used by ``ValidationConfig`` and ``EvalConfig``.
    """
    name = getattr(cfg, "protocol")
    base = defaults
    if name:
        base = get_protocol(name, "protocol")
        for field in ("temperature", "top_p"):
            v, want = getattr(cfg, field), getattr(base, field)
            if v is not None and v != want:
                raise ValueError(f"{field}: {v!r} disagrees with protocol {name!r} ({field} {want}); "
                                 f"leave it unset (null) or drop the protocol")
    for field in ("k", "temperature", "top_p"):
        if getattr(cfg, field) is None:
            object.__setattr__(cfg, field, getattr(base, field))
    check_number("k", getattr(cfg, "k"), 1, integer=True)
    check_number("temperature", getattr(cfg, "temperature"), 0, lo_open=True)
    check_number("top_p", getattr(cfg, "top_p"), 0, 1, lo_open=True)
