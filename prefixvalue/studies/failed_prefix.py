"""Failed-prefix analysis (VSR App. D.5): are prefixes of *failed* trajectories
worth replaying? Continuation success and all-fail fraction by prefix position, for failed vs
successful self-generated trajectories of the same problems.

Protocol: ``init_samples`` trajectories per problem from the bare prompt (T = ``init_temperature``);
problems with mixed outcomes (at least one success and one failure) are kept; the first failed
and the first successful trajectory (samples are exchangeable, so "first" is a uniform choice)
are cut at ``positions`` (default 25/50/75% of their tokens); ``n_continuations`` continuations
of each prefix are sampled in one batched call per chunk.

Per (source, position) the summary reports the mean continuation success (95% CI over groups),
the fraction of continuation groups with no success ("all-fail"; Clopper–Pearson CI) and the
fraction with mixed outcomes (the groups that still carry GRPO signal).

Departures from the paper: VSR does not state its prefix positions or group size; we use 25/50/75%
of the tokens and groups of 8 (its GRPO group size). Test-bed default problems: the 5-6-term
validation chains (mixed outcomes are common there).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from prefixvalue.analysis import bits, bits_matrix, fmt_ci, markdown_table, mean_success, pyplot, rate_interval, save_figure
from prefixvalue.config import StudyConfig, check_fractions, check_samples, check_temperature, check_top_p
from prefixvalue.engine import StudyContext
from prefixvalue.prefixes import alpha_cut
from prefixvalue.registry import Study, register_study, study_name
from vsr_util.seeding import derive_seed

NAME = study_name(__name__)  # the file name is the study's name (prefixvalue.registry)
SOURCES = ("failed", "successful")


@dataclass(frozen=True)
class FailedPrefixConfig(StudyConfig):
    """``vsr study failed-prefix``: continuation success from prefixes of failed vs successful trajectories."""

    min_difficulty: float = 5.0
    """Keep problems with ``difficulty >= min_difficulty`` (test bed: the 5-6-term chains)."""
    init_samples: int = 8
    """Self-generated trajectories per problem (the initial group)."""
    init_temperature: float = 1.0
    """Sampling temperature of the initial trajectories."""
    positions: tuple[float, ...] = (0.25, 0.5, 0.75)
    """Prefix positions as fractions of a trajectory's tokens."""
    n_continuations: int = 8
    """Continuations per prefix (one GRPO group)."""
    temperature: float = 1.0
    """Sampling temperature of the continuations."""
    top_p: float = 1.0
    """Nucleus mass of the continuations."""

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "positions", tuple(sorted(check_fractions(self.positions, "positions"))))
        check_samples(self, "init_samples", lo=2)
        check_samples(self, "n_continuations")
        check_temperature(self.init_temperature, "init_temperature")
        check_temperature(self.temperature, "temperature")
        check_top_p(self.top_p, "top_p")


SIZES = {
    "quick": {"n_problems": 120, "chunk_problems": 30, "response_budget": 160},
    "full": {"n_problems": 200, "chunk_problems": 50, "response_budget": 160},
}


def collect(ctx: StudyContext, problems: Sequence, chunk: int) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Rows ``(problem, source, position)``."""
    cfg: FailedPrefixConfig = ctx.cfg  # type: ignore[assignment]
    init = ctx.sample([ctx.state(p) for p in problems], cfg.init_samples, temperature=cfg.init_temperature, top_p=1.0,
                      seed=derive_seed(cfg.seed, NAME, "init", chunk))
    states, meta = [], []
    n_all_fail = n_all_success = 0
    for p, group in zip(problems, init):
        fails = [group.completion_ids(j) for j, v in enumerate(group.verify) if not v.correct]
        wins = [group.completion_ids(j) for j, v in enumerate(group.verify) if v.correct]
        if not wins:
            n_all_fail += 1
            continue
        if not fails:
            n_all_success += 1
            continue
        p0 = len(wins) / group.size
        for source, traj in (("failed", fails[0]), ("successful", wins[0])):
            length = len(traj)
            for pos in cfg.positions:
                cut = alpha_cut(pos, length)
                states.append(ctx.state(p, traj[:cut]))
                meta.append((p, p0, source, pos, cut, length))
    counts = {"problems": len(problems), "eligible": len(problems) - n_all_fail - n_all_success,
              "all_fail_initially": n_all_fail, "all_success_initially": n_all_success}
    if not states:
        return [], counts
    groups = ctx.sample(states, cfg.n_continuations, temperature=cfg.temperature, top_p=cfg.top_p,
                        seed=derive_seed(cfg.seed, NAME, "continue", chunk))
    rows = []
    for (p, p0, source, pos, cut, length), g in zip(meta, groups):
        c = [v.correct for v in g.verify]
        k = int(sum(c))
        rows.append({
            "problem_id": p.id,
            "difficulty": p.difficulty,
            "p0": p0,
            "source": source,
            "position": pos,
            "cut_tokens": cut,
            "trajectory_tokens": length,
            "n": len(c),
            "n_correct": k,
            "success_rate": k / len(c),
            "all_fail": k == 0,
            "all_success": k == len(c),
            "mixed": 0 < k < len(c),
            "correct_bits": bits(c),
        })
    return rows, counts


def _paired_last_minus_first(table, first: float, last: float) -> dict[str, Any]:
    """Success from the last failed-prefix position minus the first, paired by problem (the problems with a failed
    group at both): the mean difference with a t-interval over problems (``theory.metrics.two_stage_interval``,
    equal weights) — the test the point-estimate trend above does not make."""
    from theory.metrics import two_stage_interval

    f = table[table["source"] == "failed"].copy()
    f["_success"] = [s.count("1") / len(s) if len(s) else float("nan") for s in f["correct_bits"]]
    per = f.groupby(["problem_id", "position"])["_success"].mean().unstack("position")
    if first not in per.columns or last not in per.columns:
        return {"error": "no problem has failed groups at both positions", "n_problems": 0}
    d = (per[last] - per[first]).dropna().to_numpy(dtype=np.float64)
    if d.size < 2:
        return {"error": f"only {d.size} problem(s) with failed groups at both positions", "n_problems": int(d.size)}
    if np.ptp(d) == 0:
        return {"estimate": float(d[0]), "lo": float(d[0]), "hi": float(d[0]), "p_value": float("nan"),
                "n_problems": int(d.size)}
    m, lo, hi, p = two_stage_interval(d, np.ones_like(d))
    return {"estimate": m, "lo": lo, "hi": hi, "p_value": p, "n_problems": int(d.size),
            "first": float(first), "last": float(last)}


def analyze(table, cfg: FailedPrefixConfig) -> dict[str, Any]:
    """Per (source, position): mean success with CI, all-fail / mixed / all-success fractions."""
    cells = []
    for (source, pos), grp in table.groupby(["source", "position"], sort=True):
        n = len(grp)
        ms = mean_success(bits_matrix(grp["correct_bits"].tolist()))
        cells.append({
            "source": source,
            "position": float(pos),
            "n_groups": n,
            "mean_success": ms["mean"],
            "success_lo": ms["lo"],
            "success_hi": ms["hi"],
            "all_fail": rate_interval(int(grp["all_fail"].sum()), n),
            "mixed": rate_interval(int(grp["mixed"].sum()), n),
            "all_success": rate_interval(int(grp["all_success"].sum()), n),
        })
    failed = [c for c in cells if c["source"] == "failed"]
    trend = {}
    if len(failed) >= 2:
        s = [c["mean_success"] for c in failed]
        f = [c["all_fail"]["rate"] for c in failed]
        trend = {"failed_success_decreasing": bool(np.all(np.diff(s) <= 0)),
                 "failed_all_fail_increasing": bool(np.all(np.diff(f) >= 0)),
                 "failed_mixed_at_last_position": failed[-1]["mixed"]["rate"],
                 "failed_last_minus_first": _paired_last_minus_first(table, failed[0]["position"],
                                                                     failed[-1]["position"])}
    return {"cells": cells, "trend": trend, "n_problems": int(table["problem_id"].nunique()),
            "n_continuations": int(cfg.n_continuations), "init_samples": int(cfg.init_samples)}


def render(summary: dict[str, Any]) -> str:
    """Markdown summary."""
    rows = []
    for c in summary["cells"]:
        rows.append((c["source"], f"{c['position']:.2f}", c["n_groups"],
                     f"{c['mean_success']:.3f} [{c['success_lo']:.3f}, {c['success_hi']:.3f}]",
                     fmt_ci(c["all_fail"], "rate"), fmt_ci(c["mixed"], "rate")))
    t = summary["trend"]
    lines = [
        f"# Failed-prefix analysis ({summary['model']}, {summary['task']}/{summary['split']}, {summary['n_problems']} "
        f"mixed-outcome problems, {summary['init_samples']} initial samples, groups of {summary['n_continuations']})",
        "",
        markdown_table(("source", "position", "groups", "mean success [95% CI]", "all-fail [95% CI]", "mixed [95% CI]"), rows),
        "",
    ]
    if t:
        lines.append(f"* failed prefixes, point estimates: success decreasing with position: "
                     f"{t['failed_success_decreasing']}; all-fail fraction increasing: {t['failed_all_fail_increasing']}; "
                     f"mixed groups at the last position: {t['failed_mixed_at_last_position']:.3f}")
        d = t.get("failed_last_minus_first")
        if d is not None:
            lines.append("* failed prefixes, success at the last position minus the first, paired by problem: "
                         + (f"n/a ({d['error']})" if "error" in d else
                            f"{d['estimate']:+.3f} [{d['lo']:+.3f}, {d['hi']:+.3f}] over {d['n_problems']} problems "
                            f"(t-interval over problems; p = {d['p_value']:.3g})"
                            + ("" if d["lo"] > 0 or d["hi"] < 0 else ": no trend detected")))
    return "\n".join(lines) + "\n"


def plot(table, summary: dict[str, Any], out_dir) -> list:
    """Mean continuation success and all-fail fraction vs prefix position, by source."""
    plt = pyplot()
    fig, ax = plt.subplots(1, 2, figsize=(9, 3.6))
    for source, style in zip(SOURCES, ("o-", "s--")):
        cs = [c for c in summary["cells"] if c["source"] == source]
        if not cs:
            continue
        x = np.array([c["position"] for c in cs])
        m = np.array([c["mean_success"] for c in cs])
        ax[0].errorbar(x, m, yerr=[m - np.array([c["success_lo"] for c in cs]), np.array([c["success_hi"] for c in cs]) - m],
                       fmt=style, capsize=3, label=f"{source} trajectories")
        f = np.array([c["all_fail"]["rate"] for c in cs])
        ax[1].errorbar(x, f, yerr=[f - np.array([c["all_fail"]["lo"] for c in cs]),
                                   np.array([c["all_fail"]["hi"] for c in cs]) - f], fmt=style, capsize=3, label=source)
    ax[0].set_ylabel("mean continuation success")
    ax[1].set_ylabel("fraction of all-fail groups")
    for a in ax:
        a.set_xlabel("prefix position (fraction of trajectory tokens)")
        a.set_ylim(-0.02, 1.02)
        a.legend(fontsize=8)
    fig.suptitle(f"Failed vs successful prefixes: {summary['model']} on {summary['split']} "
                 f"({summary['n_problems']} problems, 95% CIs)", fontsize=9)
    fig.tight_layout()
    return save_figure(fig, out_dir, "failed_prefix")


STUDY = register_study(Study(
    name=NAME,
    title="VSR App. D.5: continuation success from failed vs successful prefixes by position",
    config_cls=FailedPrefixConfig,
    default_split="validation",
    sizes=SIZES,
    eligibility="mixed initial outcomes (at least one correct and one incorrect initial trajectory)",
    collect=collect,
    analyze=analyze,
    render=render,
    plot=plot,
))
