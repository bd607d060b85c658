"""Statistics of comparison tables: a finite-number test, the seed interval of a mean, and one paper table's rows
(contrasts with the reference, Holm within the table, power). The paired tests themselves live with the other
statistics in :mod:`theory.metrics.paired`."""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

from theory.metrics.intervals import t_interval
from theory.metrics.paired import holm, paired_contrast, paired_power

__all__ = ["finite", "seed_interval", "table_rows"]


def finite(x: object) -> bool:
    """A real number that is not nan or infinite."""
    return isinstance(x, (int, float)) and math.isfinite(float(x))


def seed_interval(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """``(mean, lo, hi)``: Student-t interval of the mean over seeds (:func:`theory.metrics.intervals.t_interval`)."""
    return t_interval(values, confidence)


def table_rows(finals: Mapping[str, Mapping[int, Mapping[str, float]]], arms: Sequence[str], reference: str, key: str,
               min_effect: float = 0.02) -> list[dict[str, Any]]:
    """One table's contrasts on metric ``key``: per arm the seed mean and interval, the paired difference to
    ``reference`` over common seeds, its p-value and the Holm-adjusted p **within the table** (arms without
    runs are skipped), and the power against ``min_effect`` at Holm's first-step level."""
    ref = finals.get(reference, {})
    rows = []
    for a in arms:
        seeds = finals.get(a, {})
        if not seeds:
            continue
        common = sorted(s for s in set(seeds) & set(ref) if finite(seeds[s].get(key)) and finite(ref[s].get(key)))
        c = paired_contrast([seeds[s][key] - ref[s][key] for s in common])
        rows.append({"arm": a, "n": len(seeds), "value": seed_interval([v.get(key, math.nan) for v in seeds.values()]),
                     "diff": (c.mean, c.ci_low, c.ci_high), "sd": c.sd, "p": c.p, "n_paired": c.n})
    for r, adj in zip(rows, holm([r["p"] for r in rows])):
        r["p_holm"] = adj
        r["power"] = paired_power(min_effect, r["sd"], r["n_paired"], 0.05 / max(1, len(rows)))
    return rows
