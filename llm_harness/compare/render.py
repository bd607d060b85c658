"""Rendering of comparison results: number formatting for markdown tables, CSV files, forest plots, the suite's
final-difference forest and curve figures (:func:`suite_figures`, each with a CSV of its numbers), and their redrawing
from a written ``summary.json`` alone (:func:`figures_from_summary`; ``python -m llm_harness.compare.render FOLDER...``).

Formatting conventions: fractions print as percentage points with one decimal (``12.3 [10.1, 14.5]``),
differences with a sign, p-values with three decimals (scientific below 0.001), "–" for a missing number.
Labels come from the suite's :class:`~llm_harness.compare.suite.Method` entries, with ``|`` escaped for markdown.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from llm_harness.compare.stats import finite
from theory.metrics.paired import paired_contrast
from vsr_util.atomic import read_json, save_figure
from vsr_util.atomic import write_csv as atomic_write_csv

__all__ = ["arm_label", "curve_arms", "curve_rows", "figures_from_summary", "final_rows", "fmt_diff", "fmt_interval", "fmt_p",
           "fmt_pct", "forest", "forest_width", "moving_mean", "quiet", "ref_name", "suite_figures", "write_csv"]


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
    """A report table as CSV (:func:`vsr_util.atomic.write_csv`): floats at 6 significant digits, non-finite ones empty."""
    def cell(x: Any) -> Any:
        if isinstance(x, float):
            return "" if not math.isfinite(x) else f"{x:.6g}"
        return x

    atomic_write_csv(path, header, [[cell(x) for x in r] for r in rows])


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


def _num(x: Any) -> float:
    """``x`` as a float, nan when it is missing or not finite (JSON's null, a failed evaluation)."""
    return float(x) if finite(x) else math.nan


def _plain(label: str) -> str:
    """A label of :func:`arm_label` or :func:`ref_name` for a figure (no markdown escapes)."""
    return label.replace("\\|", "|")


def _arms(summary_regime: dict, suite: Any) -> list[str]:
    """The arms of one regime with runs: the suite's order, then any others by name."""
    present = summary_regime["methods"]
    known = [m.name for m in suite.methods if m.name in present]
    return known + sorted(set(present) - set(known))


def final_rows(summary: dict, suite: Any) -> list[dict[str, Any]]:
    """Per regime and arm the final held-out avg@1 and its paired difference to ``suite.reference`` over the common
    seeds (:func:`theory.metrics.paired.paired_contrast`; fractions), the starting checkpoint first as arm
    ``"base"`` when its evaluation exists: the numbers of ``compare_final.png``."""
    rows = []
    for r, reg in summary.items():
        if not reg["methods"]:
            continue
        ref = {s: _num(v.get("avg")) for s, v in reg["methods"].get(suite.reference, {"seeds": {}})["seeds"].items()}
        arms = [("base", {s: _num(v.get("avg")) for s, v in reg.get("base", {}).items()})]
        arms += [(a, {s: _num(v.get("avg")) for s, v in reg["methods"][a]["seeds"].items()}) for a in _arms(reg, suite)]
        for a, finals in arms:
            vals = [v for v in finals.values() if finite(v)]
            if not vals:
                continue
            common = sorted(s for s in finals if finite(finals[s]) and finite(ref.get(s)))
            c = paired_contrast([finals[s] - ref[s] for s in common])
            rows.append({"regime": r, "method": a, "n_seeds": len(vals), "final_avg": float(np.mean(vals)),
                         "diff": c.mean, "diff_lo": c.ci_low, "diff_hi": c.ci_high, "n_paired": c.n})
    return rows


def curve_rows(summary: dict, suite: Any) -> list[dict[str, Any]]:
    """Per regime, arm and evaluation step the held-out avg@1 over seeds (mean, min, max, number of seeds with a
    finite value), step 0 being the starting checkpoint of the arm's seeds when its evaluation exists: the numbers
    of ``compare_curves.png`` (every arm, not only the drawn ones)."""
    rows = []
    for r, reg in summary.items():
        base = reg.get("base", {})
        for a in _arms(reg, suite):
            by_step: dict[int, list[float]] = {}
            for s, v in reg["methods"][a]["seeds"].items():
                b = _num((base.get(s) or {}).get("avg"))
                if finite(b):
                    by_step.setdefault(0, []).append(b)
                for c in v.get("curve") or []:
                    if len(c) > 1 and finite(c[0]) and finite(c[1]):
                        by_step.setdefault(int(c[0]), []).append(float(c[1]))
            for st in sorted(by_step):
                y = by_step[st]
                rows.append({"regime": r, "method": a, "step": st, "mean": float(np.mean(y)), "min": float(min(y)),
                             "max": float(max(y)), "n_seeds": len(y)})
    return rows


def curve_arms(suite: Any, arms: Sequence[str], diffs: dict[str, float], limit: int = 6) -> tuple[list[str], str]:
    """The at most ``limit`` arms of one curve panel and how they were chosen: the reference, then
    ``suite.figure_arms`` when the suite sets it (and this regime has any of them), else the arms with the
    largest |mean final difference| to the reference; the others in order of that difference, largest first."""
    ref = suite.reference
    others = [a for a in arms if a != ref]
    order = {a: i for i, a in enumerate(others)}
    if len(others) <= limit - (ref in arms):
        chosen, how = others, "all arms"
    else:
        picked = [a for a in others if a in suite.figure_arms]
        if picked:
            how = "the suite's figure arms"
        else:
            picked = sorted(others, key=lambda a: (-abs(diffs[a]) if finite(diffs.get(a)) else math.inf, order[a]))
            how = "the arms with the largest |Δ|"
        chosen = picked[: limit - (ref in arms)]
    chosen = sorted(chosen, key=lambda a: (-diffs[a] if finite(diffs.get(a)) else math.inf, order[a]))
    return ([ref] if ref in arms else []) + chosen, how


def suite_figures(out: Path, summary: dict, suite: Any) -> list[str]:
    """The suite's two summary figures, each with its numbers in a CSV beside it; returns the PNG file names.

    * ``compare_final.png`` / ``.csv``: per regime a sorted forest of each arm's paired difference to the reference
      in final held-out avg@1 (percentage points, 95 % Student-t interval over the common seeds; an arm with one
      common seed is a point), the starting checkpoint's difference a dotted line.
    * ``compare_curves.png`` / ``.csv``: per regime held-out avg@1 per evaluation step, mean over seeds with the
      min–max band, step 0 the starting checkpoint, for the reference and at most five other arms
      (:func:`curve_arms`); the CSV holds every arm.

    ``summary`` is :func:`llm_harness.compare.runs.summarise`'s (seed keys may be ints or, after JSON, strings)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out)
    regimes = [r for r in summary if summary[r]["methods"]]
    ref = _plain(ref_name(suite))
    finals = final_rows(summary, suite)
    curves = curve_rows(summary, suite)
    names = []

    write_csv(out / "compare_final.csv", ["regime", "method", "n_seeds", "final_avg", "diff", "diff_lo", "diff_hi", "n_paired"],
              [[f[k] for k in ("regime", "method", "n_seeds", "final_avg", "diff", "diff_lo", "diff_hi", "n_paired")]
               for f in finals])
    panels = []
    for r in regimes:
        rows = [f for f in finals if f["regime"] == r and f["method"] not in ("base", suite.reference)]
        base = next((f for f in finals if f["regime"] == r and f["method"] == "base" and f["n_paired"]), None)
        panels.append((r, rows, base))
    labels_all = [_plain(arm_label(suite, f["method"])) for _, rows, _ in panels for f in rows] or [""]
    heights = [1.4 + 0.24 * max(1, len(rows)) for _, rows, _ in panels]
    fig, axes = plt.subplots(len(panels), 1, figsize=(max(7.5, forest_width(labels_all) + 1.0), sum(heights)),
                             gridspec_kw={"height_ratios": heights}, squeeze=False)
    for ax, (r, rows, base) in zip(axes[:, 0], panels):
        ns = sorted({f["n_paired"] for f in rows if f["n_paired"]})
        n = "–" if not ns else (str(ns[0]) if len(ns) == 1 else f"{ns[0]}–{ns[-1]}")
        marked = base is not None and finite(base["diff"])
        forest(ax, [_plain(arm_label(suite, f["method"])) for f in rows], [(f["diff"], f["diff_lo"], f["diff_hi"]) for f in rows],
               f"{r} regime: final held-out avg@1 minus {ref}'s (sorted)"
               + (f"\nred dotted line: the starting checkpoint ({100 * base['diff']:+.1f} pp)" if marked else ""),
               f"Δ vs {ref} (pp): mean, 95% t-CI, n = {n} paired seeds")
        ax.set_ylim(-0.7, max(1, len(rows)) - 0.3)
        if marked:
            ax.axvline(100 * base["diff"], color="C3", ls=":", lw=1.5)
        if not rows:
            ax.text(0.5, 0.5, f"no arm besides {ref}", transform=ax.transAxes, ha="center", va="center")
    fig.tight_layout()
    names.append(save_figure(fig, out, "compare_final")[0].name)

    write_csv(out / "compare_curves.csv", ["regime", "method", "step", "mean", "min", "max", "n_seeds"],
              [[c[k] for k in ("regime", "method", "step", "mean", "min", "max", "n_seeds")] for c in curves])
    fig = plt.figure(figsize=(6.2 * len(regimes), 6.2))
    grid = fig.add_gridspec(2, len(regimes), height_ratios=[3.3, 1.2])
    for i, r in enumerate(regimes):
        ax, lax = fig.add_subplot(grid[0, i]), fig.add_subplot(grid[1, i])
        arms = _arms(summary[r], suite)
        diffs = {f["method"]: f["diff"] for f in finals if f["regime"] == r}
        drawn, how = curve_arms(suite, arms, diffs)
        others = len(arms) - (suite.reference in arms)
        for j, a in enumerate(drawn):
            pts = [c for c in curves if c["regime"] == r and c["method"] == a]
            if not pts:
                continue
            x = [c["step"] for c in pts]
            color = "k" if a == suite.reference else f"C{j - (suite.reference in drawn)}"
            ax.plot(x, [100 * c["mean"] for c in pts], marker="o", ms=3, lw=1.8 if a == suite.reference else 1.2,
                    color=color, label=_plain(arm_label(suite, a)) + ("" if a == suite.reference else
                                                                      f" (Δ {100 * diffs[a]:+.1f} pp)" if finite(diffs.get(a)) else ""))
            ax.fill_between(x, [100 * c["min"] for c in pts], [100 * c["max"] for c in pts], color=color, alpha=0.12, lw=0)
        if how == "all arms":
            title = f"{r} regime: all {len(drawn)} arms"
        else:
            title = (f"{r} regime: {ref} + {len(drawn) - (suite.reference in drawn)} of {others} arms, {how}"
                     f"\nall arms in compare_curves.csv")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("update (0: starting checkpoint)" if any(c["step"] == 0 for c in curves if c["regime"] == r) else "update")
        ax.set_ylabel("held-out avg@1 (%): mean over seeds,\nband min–max over seeds", fontsize=9)
        lax.axis("off")
        lax.legend(*ax.get_legend_handles_labels(), loc="upper center", fontsize=7, frameon=False)
    fig.tight_layout()
    names.append(save_figure(fig, out, "compare_curves")[0].name)
    return names


def figures_from_summary(folder: Path | str) -> list[str]:
    """Redraw ``compare_final`` and ``compare_curves`` (PNG and CSV) of a written suite report from its
    ``summary.json`` alone (no runs, no records); returns the PNG file names. ValueError naming the file when it is
    missing, not JSON, or not a suite summary."""
    import llm_harness.compare  # noqa: F401  (registers every suite)
    from llm_harness.compare.suite import SUITES

    path = Path(folder) / "summary.json"
    if not path.is_file():
        raise ValueError(f"{path}: no such file (a suite report folder holds summary.json)")
    try:
        doc = read_json(path)
        regimes = doc["regimes"]
        summary = {r: {"base": {int(s): v for s, v in (reg.get("base") or {}).items()},
                       "methods": {m: {**mv, "seeds": {int(s): v for s, v in mv["seeds"].items()}}
                                   for m, mv in reg["methods"].items()}}
                   for r, reg in regimes.items()}
        name = doc["suite"]
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise ValueError(f"{path}: not a suite summary ({type(e).__name__}: {e})") from e
    if name not in SUITES:
        raise ValueError(f"{path}: unknown suite {name!r} (known: {', '.join(SUITES)})")
    if not any(reg["methods"] for reg in summary.values()):
        raise ValueError(f"{path}: no finished runs to draw")
    return suite_figures(Path(folder), summary, SUITES[name])


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m llm_harness.compare.render FOLDER...``: :func:`figures_from_summary` of each folder."""
    import argparse
    import sys

    ap = argparse.ArgumentParser(prog="python -m llm_harness.compare.render",
                                 description="Redraw compare_final and compare_curves (PNG and CSV) of suite report "
                                             "folders from their summary.json alone.")
    ap.add_argument("folders", nargs="+", type=Path)
    a = ap.parse_args(argv)
    rc = 0
    for f in a.folders:
        try:
            print(f"{f}: " + ", ".join(figures_from_summary(f)))
        except ValueError as e:
            print(f"error: {e}", file=sys.stderr)
            rc = 2
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
