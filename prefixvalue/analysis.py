"""Shared analysis helpers: correlations with CIs as dicts, mean-success intervals, markdown
tables, figure saving (the shared metrics come from ``theory.metrics``; nothing re-implemented)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

__all__ = [
    "bits",
    "bits_matrix",
    "correlation_dict",
    "fmt_ci",
    "markdown_table",
    "mean_success",
    "rate_interval",
    "save_figure",
    "within_dict",
]


def bits(correct: Iterable[bool]) -> str:
    """``[True, False, True]`` -> ``"101"`` (per-continuation outcomes, CSV friendly)."""
    return "".join("1" if c else "0" for c in correct)


def bits_matrix(column: Sequence[str]) -> np.ndarray:
    """``correct[row, sample]`` (float64 0/1) from equal-length bit strings."""
    rows = [[1.0 if ch == "1" else 0.0 for ch in s] for s in column]
    if not rows:
        raise ValueError("column: no rows")
    width = {len(r) for r in rows}
    if len(width) != 1:
        raise ValueError(f"column: bit strings have different lengths {sorted(width)}")
    return np.asarray(rows, dtype=np.float64)


def correlation_dict(x, y, method: str, *, confidence: float = 0.95) -> dict[str, Any]:
    """``theory.metrics.correlation`` (Fisher-z CI) as a dict; ``{"error": ...}`` when undefined
    (fewer than 4 pairs, or constant x or y)."""
    from theory.metrics import correlation

    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    ok = np.isfinite(x) & np.isfinite(y)
    x, y = x[ok], y[ok]
    if x.size < 4:
        return {"error": f"only {x.size} pairs (need >= 4 for a Fisher CI)", "n": int(x.size)}
    try:
        r = correlation(x, y, method, ci_method="fisher", confidence=confidence)
    except ValueError as exc:
        return {"error": str(exc), "n": int(x.size)}
    return {"estimate": r.estimate, "lo": r.lo, "hi": r.hi, "p_value": r.p_value, "n": r.n}


def within_dict(x, y, groups, method: str, *, confidence: float = 0.95, ci_method: str = "fisher",
                n_resamples: int = 2000, seed: int = 0) -> dict[str, Any]:
    """``theory.metrics.within_group_correlation`` (Fisher-z average; Fisher CI, or a percentile
    bootstrap over groups with ``ci_method="bootstrap"``) as a dict, or ``{"error": ...}`` when no
    group (or, for the bootstrap, fewer than two) is usable."""
    from theory.metrics import within_group_correlation

    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    g = np.asarray(groups)
    ok = np.isfinite(x) & np.isfinite(y)
    if ok.sum() < 4:
        return {"error": f"only {int(ok.sum())} points", "n_groups_used": 0}
    try:
        w = within_group_correlation(x[ok], y[ok], g[ok], method, confidence=confidence, ci_method=ci_method,
                                     n_resamples=n_resamples, seed=seed)
    except ValueError as exc:
        return {"error": str(exc), "n_groups_used": 0}
    return {
        "estimate": w.estimate,
        "lo": w.lo,
        "hi": w.hi,
        "p_value": w.p_value,
        "n_groups_used": w.n_groups_used,
        "n_groups_skipped": w.n_groups_skipped,
        "n_points_used": w.n_points_used,
        # Cochran's Q: do the groups share one correlation? (small q_p: no, read a group-level interval)
        "q_stat": w.q_stat, "q_df": w.q_df, "q_p": w.q_p, "i_squared": w.i_squared,
    }


def cluster_dict(x, y, clusters, method: str, *, confidence: float = 0.95, n_resamples: int = 2000,
                 seed: int = 0) -> dict[str, Any]:
    """The pooled correlation with a cluster-bootstrap interval (``theory.metrics.cluster_bootstrap_correlation``:
    whole clusters resampled) as a dict, or ``{"error": ...}``."""
    from theory.metrics import cluster_bootstrap_correlation

    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    c = np.asarray(clusters)
    ok = np.isfinite(x) & np.isfinite(y)
    try:
        r, lo, hi, k = cluster_bootstrap_correlation(x[ok], y[ok], c[ok], method, confidence=confidence,
                                                     n_resamples=n_resamples, seed=seed)
    except ValueError as exc:
        return {"error": str(exc), "n_clusters": 0}
    return {"estimate": r, "lo": lo, "hi": hi, "n_clusters": k, "n": int(ok.sum())}


def mean_success(correct: np.ndarray, confidence: float = 0.95) -> dict[str, float]:
    """Mean success of ``correct[group, sample]`` with a cluster-aware interval (groups independent;
    Korn–Graubard Clopper–Pearson, ``theory.metrics.binomial.clustered_interval``)."""
    from theory.metrics.binomial import clustered_interval

    acc, lo, hi = clustered_interval(np.asarray(correct), confidence)
    return {"mean": float(acc), "lo": float(lo), "hi": float(hi), "n_groups": int(np.asarray(correct).shape[0])}


def rate_interval(k: int, n: int, confidence: float = 0.95) -> dict[str, float]:
    """A fraction ``k / n`` of independent groups with its Clopper–Pearson interval."""
    from theory.metrics.binomial import clopper_pearson

    lo, hi = clopper_pearson(int(k), int(n), confidence)
    return {"rate": k / n if n else float("nan"), "lo": float(lo), "hi": float(hi), "k": int(k), "n": int(n)}


def fmt_ci(d: dict[str, Any], key: str = "estimate", digits: int = 3) -> str:
    """``"0.441 [0.277, 0.591]"``, or the error text."""
    if "error" in d:
        return f"n/a ({d['error']})"
    return f"{d[key]:.{digits}f} [{d['lo']:.{digits}f}, {d['hi']:.{digits}f}]"


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A GitHub markdown table."""
    lines = ["| " + " | ".join(map(str, headers)) + " |", "|" + "---|" * len(headers)]
    for r in rows:
        lines.append("| " + " | ".join(map(str, r)) + " |")
    return "\n".join(lines)


def save_figure(fig, out_dir: str | Path, stem: str) -> list[Path]:
    """Save ``fig`` as ``<stem>.png`` (atomically, 130 dpi; a PDF too when ``VSR_FIGURE_FORMATS`` asks,
    :func:`vsr_util.atomic.save_figure`) and close it; the PNG's path comes first."""
    from vsr_util.atomic import save_figure as _save

    return _save(fig, out_dir, stem, dpi=130)


def pyplot():
    """``matplotlib.pyplot`` on the Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
