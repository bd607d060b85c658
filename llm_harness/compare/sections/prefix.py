"""The prefix-restart family's section (``prefix_dynamics``): what each arm's training batches looked like — the share of
mixed groups (PS's "solve_partial": the groups that carry a GRPO signal), the pass rate on bare prompts, the share of
groups started from a prefix, tokens generated and seconds per update — with a figure of the mixed share over updates.

Every number is a per-run mean over updates, then a 95 % Student-t interval over seeds; they describe the training
stream, not held-out accuracy (the report's main table has that)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np

from llm_harness.compare.render import arm_label, write_csv
from llm_harness.compare.runs import read_rows, rows_series
from llm_harness.compare.sections import register_section
from llm_harness.compare.stats import finite, seed_interval
from vsr_util.atomic import save_figure

__all__ = ["COLUMNS", "prefix_dynamics_section"]

#: (column, header, per-run value from the run's metric rows over ``steps`` updates, format, scale)
COLUMNS = (
    ("mixed", "mixed groups %", lambda r, n: np.nanmean(rows_series(r, "mixed_frac", n)), "{:.1f}", 100.0),
    ("bare_pass", "pass rate, bare prompts %", lambda r, n: np.nanmean(rows_series(r, "accuracy_fresh", n)), "{:.1f}", 100.0),
    ("prefix_share", "groups from a prefix %", lambda r, n: _prefix_share(r, n), "{:.1f}", 100.0),
    ("new_tokens", "tokens generated / update", lambda r, n: np.nanmean(rows_series(r, "gen_new_tokens", n)), "{:.0f}", 1.0),
    ("s_per_step", "s / update", lambda r, n: np.nanmean(rows_series(r, "time_step_s", n)), "{:.1f}", 1.0),
)


def _prefix_share(rows: Sequence[dict], steps: int) -> float:
    """Mean over updates of the share of the update's generated groups that started from a prefix (replayed or expert)."""
    kept = rows_series(rows, "groups_generated", steps)
    pre = np.nansum([np.nan_to_num(rows_series(rows, k, steps)) for k in ("groups_replayed_prefix", "groups_expert")], axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return float(np.nanmean(np.where(kept > 0, pre / kept, np.nan)))


def _cell(v: tuple[float, float, float], fmt: str, scale: float) -> str:
    m, lo, hi = v
    if not finite(m):
        return "–"
    s = fmt.format(scale * m)
    return s + (f" [{fmt.format(scale * lo)}, {fmt.format(scale * hi)}]" if finite(lo) else "")


@register_section("prefix_dynamics")
def prefix_dynamics_section(cfg: Any, jobs: Sequence[Any], summary: dict, suite: Any, out: Path) -> list[str]:
    """Per regime: one row per arm (module doc) and ``prefix_mixed_<regime>.png`` (the mixed share over updates)."""
    steps = int(cfg.sizes["steps"])
    lines: list[str] = []
    arms = [m.name for m in suite.methods]
    for regime in sorted({j.regime for j in jobs}):
        runs: dict[str, list[list[dict]]] = {}  # arm -> the metric rows of each finished run, read once
        for j in jobs:
            if j.regime == regime and j.method in arms:
                rows = read_rows(j.run_dir)
                if np.isfinite(rows_series(rows, "mixed_frac", steps)).any():
                    runs.setdefault(j.method, []).append(rows)
        runs = {a: runs[a] for a in arms if a in runs}
        if not runs:
            continue
        lines += [f"### The training stream, regime `{regime}`", "",
                  "Per run: the mean over updates; then the mean over seeds with its 95 % Student-t interval. Shares are of "
                  "the groups an update generated (DAPO's redrawn rounds included, before its filter). *Mixed groups*: groups "
                  "whose samples do not all score the same (the only ones with a GRPO signal; PS's \"solve_partial\"); "
                  "*bare prompts*: the pass rate of the samples started from a prompt alone; *from a prefix*: groups started "
                  "from a replayed or expert prefix.", "",
                  "| arm | seeds | " + " | ".join(c[1] for c in COLUMNS) + " |", "|---|---|" + "---|" * len(COLUMNS)]
        rows_csv = []
        curves = {}
        for a, js in runs.items():
            per = {c[0]: [float(c[2](r, steps)) for r in js] for c in COLUMNS}
            iv = {c[0]: seed_interval([v for v in per[c[0]] if np.isfinite(v)]) for c in COLUMNS}
            lines.append(f"| {arm_label(suite, a)} | {len(js)} | " + " | ".join(_cell(iv[c[0]], c[3], c[4]) for c in COLUMNS) + " |")
            rows_csv.append([a, len(js)] + [x for c in COLUMNS for x in iv[c[0]]])
            curves[a] = np.nanmean(np.stack([rows_series(r, "mixed_frac", steps) for r in js]), axis=0)
        name = f"prefix_dynamics_{regime}"
        write_csv(out / f"{name}.csv", ["arm", "seeds"] + [f"{c[0]}{s}" for c in COLUMNS for s in ("", "_lo", "_hi")], rows_csv)
        _figure(curves, suite, out, f"prefix_mixed_{regime}", regime)
        lines += ["", f"![prefix_mixed_{regime}.png](prefix_mixed_{regime}.png) (numbers: `{name}.csv`)", ""]
    return lines


def _figure(curves: dict[str, np.ndarray], suite: Any, out: Path, name: str, regime: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.0))
    w = 5
    for a, y in curves.items():
        ok = np.isfinite(y)
        if not ok.any():
            continue
        yy = np.where(ok, y, 0.0)
        num = np.convolve(yy, np.ones(w), mode="valid")
        den = np.convolve(ok.astype(float), np.ones(w), mode="valid")
        with np.errstate(invalid="ignore", divide="ignore"):
            sm = np.where(den > 0, num / den, np.nan)
        ax.plot(np.arange(len(sm)) + w // 2, 100 * sm, label=arm_label(suite, a).replace("\\|", "|"))
    ax.set_xlabel("update")
    ax.set_ylabel(f"mixed groups % (mean over seeds, {w}-update window)")
    ax.set_title(f"Groups with a signal per batch, regime {regime}")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    save_figure(fig, out, name)
