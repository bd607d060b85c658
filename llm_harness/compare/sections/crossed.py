"""Seed × problem intervals (``crossed_intervals``): each arm's held-out difference from the reference with the
evaluation problems counted as a sample too, beside the seed-only interval of the main table.

The main table's intervals are over seeds with the evaluation problems fixed: they say how sure the difference is *on
these problems*. Where the runs kept their final evaluation's per-problem outcomes (``done.json['eval_outcomes']``,
written by ``vsr compare`` from the trainer's ``eval_outcomes.json``), the difference per seed and problem
``(c_arm − c_ref)/k`` goes into :func:`theory.metrics.crossed_contrast` (two-way crossed random effects); the section
prints it with its variance components and Holm over the suite's contrasts. Runs recorded before per-problem outcomes
were kept have none: the section says so."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from llm_harness.compare.render import arm_label, fmt_diff, fmt_p, write_csv
from llm_harness.compare.sections import register_section
from theory.metrics import crossed_contrast, holm, paired_contrast
from vsr_util.atomic import read_json

__all__ = ["crossed_intervals_section", "outcome_table", "regime_outcomes"]


def _outcomes(run_dir: str) -> dict[str, Any] | None:
    p = Path(run_dir) / "done.json"
    if not p.is_file():
        return None
    return read_json(p).get("eval_outcomes")


def regime_outcomes(jobs: Sequence[Any], regime: str) -> dict[tuple[str, int], dict[str, Any]]:
    """``{(method, seed): eval_outcomes}`` of the regime's runs that kept them (each ``done.json`` read once)."""
    out = {}
    for j in jobs:
        if j.regime == regime:
            o = _outcomes(j.run_dir)
            if o is not None:
                out[(j.method, j.seed)] = o
    return out


def outcome_table(by: dict[tuple[str, int], dict[str, Any]], arm: str, reference: str):
    """``(seeds, diffs[S, P])`` from :func:`regime_outcomes` ``by``: per common seed, the arm's minus the reference's
    success rate on each problem (only seeds whose two runs evaluated the same problems, in the same order, with the
    same k at the same step); None when fewer than 2 such seeds."""
    import numpy as np

    seeds, rows = [], []
    for s in sorted({s for (m, s) in by if m == arm} & {s for (m, s) in by if m == reference}):
        a, r = by[(arm, s)], by[(reference, s)]
        if (a["problem_ids_sha256"], a["k"], a["step"]) != (r["problem_ids_sha256"], r["k"], r["step"]):
            continue
        rows.append((np.asarray(a["correct"], float) - np.asarray(r["correct"], float)) / float(a["k"]))
        seeds.append(s)
    return (seeds, np.stack(rows)) if len(seeds) >= 2 else None


@register_section("crossed_intervals")
def crossed_intervals_section(cfg: Any, jobs: Sequence[Any], summary: dict, suite: Any, out: Path) -> list[str]:
    """Per regime: one row per contrast arm (module doc), Holm over the arms that have outcomes."""
    lines: list[str] = []
    arms = [m.name for m in suite.methods if m.name != suite.reference]
    for regime in sorted({j.regime for j in jobs}):
        rows = []
        by = regime_outcomes(jobs, regime)
        for a in arms:
            t = outcome_table(by, a, suite.reference)
            if t is None:
                continue
            seeds, d = t
            c = crossed_contrast(d)
            s = paired_contrast(d.mean(axis=1))
            rows.append((a, len(seeds), d.shape[1], s, c))
        lines += [f"### Seed × problem intervals, regime `{regime}`", ""]
        if not rows:
            why = ("fewer than 2 seeds of an arm and the reference kept outcomes on the same problems" if by else
                   "no run here kept its final evaluation's per-problem outcomes (records written before `done.json` "
                   "carried `eval_outcomes`)")
            lines += [f"No seed × problem interval: {why}. Only the seed intervals above, which hold the evaluation "
                      "problems fixed.", ""]
            continue
        adj = holm([r[4].p for r in rows])
        lines += ["Δ held-out avg@1 against the reference, the seed-only interval (problems fixed) beside the crossed one "
                  "(seeds and problems both random; `theory.metrics.crossed_contrast`); Holm over this table's arms. "
                  "Variance components of one seed × problem cell, in pp².", "",
                  "| arm | seeds | problems | Δ (pp) seeds only | Δ (pp) seeds × problems | p (Holm) | var seed | var problem | var residual |",
                  "|---|---|---|---|---|---|---|---|---|"]
        csv_rows = []
        for (a, n_s, n_p, s, c), p_adj in zip(rows, adj):
            lines.append(f"| {arm_label(suite, a)} | {n_s} | {n_p} | {fmt_diff((s.mean, s.ci_low, s.ci_high))} | "
                         f"{fmt_diff((c.mean, c.ci_low, c.ci_high))} | {fmt_p(c.p)} ({fmt_p(p_adj)}) | {1e4 * c.var_seed:.2f} | "
                         f"{1e4 * c.var_problem:.1f} | {1e4 * c.var_residual:.1f} |")
            csv_rows.append([a, n_s, n_p, s.mean, s.ci_low, s.ci_high, c.mean, c.ci_low, c.ci_high, c.p, p_adj, c.df,
                             c.var_seed, c.var_problem, c.var_residual])
        write_csv(out / f"crossed_{regime}.csv", ["arm", "seeds", "problems", "delta", "seed_lo", "seed_hi", "crossed_delta",
                                                  "crossed_lo", "crossed_hi", "p", "p_holm", "df", "var_seed", "var_problem",
                                                  "var_residual"], csv_rows)
        lines += ["", f"(numbers: `crossed_{regime}.csv`)", ""]
    return lines
