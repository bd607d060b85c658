"""Registry of numeric theory checks run by ``vsr theory check``.

A check draws one random instance from a ``numpy.random.Generator`` and returns one or more
:class:`Comparison` objects (an identity ``lhs == rhs`` or an inequality ``lhs <= rhs``).
The runner evaluates each comparison with ``rtol = 4*sqrt(eps)`` and an absolute floor scaled
to the magnitude of the quantities involved (``Comparison.scale``), following the NumPy/SciPy
test conventions of the project.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Callable, Iterable, Literal, Sequence

import numpy as np

from vsr_util.registry import Registry

#: Relative tolerance for identities and inequalities: 4 * sqrt(machine epsilon) ~ 6e-8.
RTOL = 4.0 * float(np.sqrt(np.finfo(np.float64).eps))

Relation = Literal["==", "<=", "<", ">=", ">"]


@dataclass(frozen=True)
class Comparison:
    """One numeric claim on one instance: ``lhs <relation> rhs``.

    ``scale`` is the magnitude of the terms that were combined to form ``lhs``/``rhs``; the
    absolute tolerance is ``RTOL * max(scale, |lhs|, |rhs|)`` so cancellation between large
    terms is not mistaken for a violation.  Strict relations (``<``, ``>``) are checked up to
    that same tolerance; instance generators are responsible for producing strict margins.
    """

    lhs: float
    rhs: float
    relation: Relation = "=="
    scale: float = 1.0

    def tolerance(self) -> float:
        return RTOL * max(abs(self.scale), abs(self.lhs), abs(self.rhs), np.finfo(np.float64).tiny)

    def evaluate(self) -> tuple[float, float, float | None, bool]:
        """Return ``(abs_error, rel_error, slack, passed)``.

        For identities ``slack`` is ``None``; for inequalities it is the signed margin by which
        the claim holds (``rhs - lhs`` for ``<=``) and the error is the violation ``max(0, -slack)``.
        """
        lhs, rhs = float(self.lhs), float(self.rhs)
        tol = self.tolerance()
        denom = max(abs(rhs), abs(lhs), abs(self.scale), np.finfo(np.float64).tiny)
        if not (np.isfinite(lhs) and np.isfinite(rhs)):
            return float("inf"), float("inf"), None, False
        if self.relation == "==":
            err = abs(lhs - rhs)
            return err, err / denom, None, err <= tol
        if self.relation in ("<=", "<"):
            slack = rhs - lhs
        elif self.relation in (">=", ">"):
            slack = lhs - rhs
        else:  # pragma: no cover - guarded by Literal
            raise ValueError(f"relation: unknown relation {self.relation!r}")
        viol = max(0.0, -slack)
        return viol, viol / denom, slack, slack >= -tol


Sampler = Callable[[np.random.Generator], "Comparison | Sequence[Comparison]"]


@dataclass(frozen=True)
class TheoryCheck:
    """A named claim from one of the papers and a sampler of random instances for it."""

    name: str
    reference: str
    sample: Sampler
    description: str = ""


@dataclass
class CheckRow:
    """Aggregated outcome of one check over ``cases`` random instances."""

    name: str
    reference: str
    cases: int
    comparisons: int
    worst_error: float
    worst_rel_error: float
    worst_slack: float | None
    passed: bool
    failures: int = 0
    description: str = ""
    first_failure: str | None = field(default=None, repr=False)

    def as_json(self) -> dict:
        return {
            "name": self.name,
            "reference": self.reference,
            "cases": self.cases,
            "worst_error": self.worst_error,
            "passed": self.passed,
            "worst_rel_error": self.worst_rel_error,
            "worst_slack": self.worst_slack,
            "comparisons": self.comparisons,
            "failures": self.failures,
            "description": self.description,
        }


#: name -> :class:`TheoryCheck`; filled by :func:`register_check` (duplicates are refused).
CHECKS: Registry[TheoryCheck] = Registry("theory check")


def register_check(name: str, reference: str, description: str = "") -> Callable[[Sampler], Sampler]:
    """Decorator registering ``fn(rng) -> Comparison | [Comparison]`` in :data:`CHECKS` under a unique ``name``."""

    def deco(fn: Sampler) -> Sampler:
        doc = description or ((fn.__doc__ or "").strip().splitlines() or [""])[0]
        CHECKS.add(name, TheoryCheck(name=name, reference=reference, sample=fn, description=doc))
        return fn

    return deco


def registered_checks() -> dict[str, TheoryCheck]:
    """A snapshot of :data:`CHECKS` (importing :mod:`theory.checks` registers the built-in ones)."""
    return dict(CHECKS)


def _check_rng(seed: int, name: str) -> np.random.Generator:
    # Independent of registration order: one stream per (seed, check name).
    return np.random.default_rng([int(seed), zlib.crc32(name.encode())])


def run_check(check: TheoryCheck, cases: int, seed: int) -> CheckRow:
    """Run one check on ``cases`` random instances and aggregate the worst errors."""
    if cases < 1:
        raise ValueError(f"cases: must be >= 1, got {cases}")
    rng = _check_rng(seed, check.name)
    worst_err = worst_rel = 0.0
    worst_slack: float | None = None
    n_cmp = n_fail = 0
    first_failure = None
    for case in range(cases):
        out = check.sample(rng)
        comps: Iterable[Comparison] = [out] if isinstance(out, Comparison) else out
        for comp in comps:
            err, rel, slack, ok = comp.evaluate()
            n_cmp += 1
            worst_err = max(worst_err, err)
            worst_rel = max(worst_rel, rel)
            if slack is not None:
                worst_slack = slack if worst_slack is None else min(worst_slack, slack)
            if not ok:
                n_fail += 1
                if first_failure is None:
                    first_failure = f"case {case}: {comp}"
    return CheckRow(
        name=check.name,
        reference=check.reference,
        cases=cases,
        comparisons=n_cmp,
        worst_error=worst_err,
        worst_rel_error=worst_rel,
        worst_slack=worst_slack,
        passed=n_fail == 0 and n_cmp > 0,
        failures=n_fail,
        description=check.description,
        first_failure=first_failure,
    )
