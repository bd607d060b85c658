"""Rendering of comparison results: number formatting for markdown tables, CSV files, forest plots, the suite's
final-accuracy and curve figures.

Formatting conventions: fractions print as percentage points with one decimal (``12.3 [10.1, 14.5]``),
differences with a sign, p-values with three decimals (scientific below 0.001), "–" for a missing number.
Labels come from the suite's :class:`~llm_harness.compare.suite.Method` entries, with ``|`` escaped for markdown.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from llm_harness.compare.stats import finite, seed_interval
from vsr.atomic import save_figure, write_text

__all__ = ["arm_label", "fmt_diff", "fmt_interval", "fmt_p", "fmt_pct", "forest", "forest_width", "moving_mean", "quiet",
           "ref_name", "suite_figures", "write_csv"]


def fmt_pct(v: tuple[float, float, float]) -> str:
    m, lo, hi = v
    if not finite(m):
        return "–"
    return f"{100 * m:.1f}" if not finite(lo) else f"{100 * m:.1f} [{100 * lo:.1f}, {100 * hi:.1f}]"


def fmt_diff(v: tuple[float, float, float]) -> str:
    m, lo, hi = v
    if not finite(m):
        return "–"
    return f"{100 * m:+.1f}" if not finite(lo) else f"{100 * m:+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}]"


def fmt_p(p: float) -> str:
    return "–" if not finite(p) else (f"{p:.3f}" if p >= 0.001 else f"{p:.0e}")


def arm_label(suite: Any, name: str) -> str:
    m = next((m for m in suite.methods if m.name == name), None)
    return (m.label if m is not None else name).replace("|", "\\|")


def ref_name(suite: Any) -> str:
    """The reference arm's short name for prose and axis labels (its label before any parenthesis)."""
    return arm_label(suite, suite.reference).split(" (")[0]


def write_csv(path: Path, header: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    def cell(x: Any) -> str:
        if isinstance(x, float):
            return "" if not math.isfinite(x) else f"{x:.6g}"
        s = str(x)
        return f'"{s}"' if ("," in s or '"' in s) else s

    write_text(path, "\n".join([",".join(header)] + [",".join(cell(x) for x in r) for r in rows]) + "\n")


def forest_width(labels: Sequence[str]) -> float:
    """Inches of one forest panel: its longest 8-pt label (~0.065 in per character) plus the plot."""
    return 3.4 + 0.065 * max(map(len, labels))


def forest(ax: Any, labels: Sequence[str], diffs: Sequence[tuple[float, float, float]], title: str, xlabel: str,
            scale: float = 100.0) -> None:
    """Paired differences (x ``scale``: fractions to points by default) with their intervals, sorted by the mean."""
    order = sorted(range(len(labels)), key=lambda i: diffs[i][0] if finite(diffs[i][0]) else -np.inf)
    y = np.arange(len(order))
    for yi, i in zip(y, order):
        m, lo, hi = (scale * x if finite(x) else np.nan for x in diffs[i])
        ax.plot([lo, hi], [yi, yi], color="C0", lw=2)
        ax.plot([m], [yi], "o", color="C0")
    ax.axvline(0, color="k", lw=1, ls="--")
    ax.set_yticks(y, [labels[i] for i in order], fontsize=8)
    ax.set_xlabel(xlabel)
    ax.set_title(title, fontsize=9)


def fmt_interval(m: float, lo: float, hi: float, pct: bool = True) -> str:
    """``m [lo, hi]`` in percentage points (``pct``) or as is, one decimal; ``m`` alone without an interval."""
    if not np.isfinite(m):
        return "–"
    s = 100.0 if pct else 1.0
    if not np.isfinite(lo):
        return f"{m * s:.1f}"
    return f"{m * s:.1f} [{lo * s:.1f}, {hi * s:.1f}]"


def moving_mean(y: np.ndarray, w: int) -> np.ndarray:
    """Centred moving mean of width ``w`` over finite entries (nan where a window has none)."""
    y = np.asarray(y, dtype=np.float64)
    out = np.full_like(y, np.nan)
    for i in range(len(y)):
        seg = y[max(0, i - w // 2): i + w // 2 + 1]
        seg = seg[np.isfinite(seg)]
        if seg.size:
            out[i] = seg.mean()
    return out


class quiet:
    """Silence numpy's 'mean of empty slice' warnings inside a block (all-nan columns are expected)."""

    def __enter__(self):
        import warnings

        self._w = warnings.catch_warnings()
        self._w.__enter__()
        warnings.simplefilter("ignore", category=RuntimeWarning)
        return self

    def __exit__(self, *exc):
        return self._w.__exit__(*exc)


def suite_figures(out: Path, summary: dict, suite: Any) -> list[str]:
    """``compare_final.png`` (final avg@1 and pass@k per arm, 95 % CI over seeds) and ``compare_curves.png`` (held-out
    avg@1 over updates) of a suite's summary (:func:`llm_harness.compare.runs.summarise`); returns their file names."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = []
    regimes = list(summary)
    fig, axes = plt.subplots(len(regimes), 2, figsize=(13, 4.2 * len(regimes)), squeeze=False)
    for i, r in enumerate(regimes):
        ms = [m for m in suite.methods if m.name in summary[r]["methods"]]
        for jcol, key in enumerate(("avg", "pass")):
            ax = axes[i, jcol]
            vals = [seed_interval([s[key] for s in summary[r]["methods"][m.name]["seeds"].values()]) for m in ms]
            y = np.arange(len(ms))
            mean = np.array([v[0] for v in vals]) * 100
            err = np.array([[v[0] - v[1], v[2] - v[0]] if np.isfinite(v[1]) else [0, 0] for v in vals]).T * 100
            colors = [{"baseline": "0.55", "vsr": "C0", "replay": "C2", "extra": "C3", "composition": "C4"}.get(m.family, "C5") for m in ms]
            ax.barh(y, mean, xerr=err, color=colors, capsize=3)
            base = [v[key] for v in summary[r]["base"].values() if v.get(key) is not None]
            if base:
                ax.axvline(np.mean(base) * 100, color="k", ls="--", lw=1, label="starting checkpoint")
                ax.legend(loc="lower right", fontsize=8)
            ax.set_yticks(y, [m.label for m in ms], fontsize=8)
            ax.invert_yaxis()
            ax.set_xlabel(("held-out avg@1 (%)" if key == "avg" else "held-out pass@k (%)") + " — mean and 95% CI over seeds")
            ax.set_title(f"{r} regime", fontsize=10)
    fig.tight_layout()
    names.append(save_figure(fig, out, "compare_final")[0].name)

    fig, axes = plt.subplots(1, len(regimes), figsize=(6.5 * len(regimes), 4.5), squeeze=False)
    for i, r in enumerate(regimes):
        ax = axes[0, i]
        base = [v["avg"] for v in summary[r]["base"].values() if v.get("avg") is not None]
        for m in suite.methods:
            if m.name not in summary[r]["methods"]:
                continue
            seeds = summary[r]["methods"][m.name]["seeds"].values()
            steps = sorted({c[0] for s in seeds for c in s["curve"]})
            ys = [np.mean([c[1] for s in seeds for c in s["curve"] if c[0] == st]) * 100 for st in steps]
            if base:
                steps, ys = [0] + steps, [np.mean(base) * 100] + ys
            ax.plot(steps, ys, marker="o", ms=3, lw=1.2, label=m.label,
                    ls="-" if m.family != "baseline" else "--")
        ax.set_xlabel("update")
        ax.set_ylabel("held-out avg@1 (%) — mean over seeds")
        ax.set_title(f"{r} regime", fontsize=10)
    axes[0, -1].legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
    fig.tight_layout()
    names.append(save_figure(fig, out, "compare_curves")[0].name)
    return names
