"""Hint-ratio curve (VSR App. D.2, Fig. 7): continuation success vs the fraction α of an
expert trajectory given as a prefix.

Protocol: for every problem, the expert solution's tokens are cut at ``round(α |τ|)`` for
α in ``alphas`` (default 0, .25, .5, .75, 1); ``n_continuations`` (8) continuations of each
prefix are sampled (one batched call per chunk) and the full response ``prefix + continuation``
is verified. Per-problem success rates give the mean curve and its inter-quartile band.

Linearity (the σ̂ interpolation ``p̂ = (1 - α) p0 + α R`` assumes it): the summary reports the
least-squares line through the mean curve (slope, intercept, R²) and the deviation of every mean
from the *chord* ``(1 - α) m(0) + α m(1)``, i.e. exactly the interpolation VSR uses (positive =
concave / above the chord).

Departures from the paper: the expert trajectories are the task's own expert solutions (VSR uses
DeepSeek-R1 traces). On the CPU test bed the default problems are the 5-6-term validation chains
(~20% base success of the ``mid`` checkpoint): the 7-9-term "hard" split is longer than any
training chain, and there the model stops after about six steps whatever prefix it is given (its
curve is flat near 0.04 up to α = 0.75 and jumps to 1 at α = 1).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from prefixvalue.analysis import bits, bits_matrix, correlation_dict, fmt_ci, markdown_table, mean_success, pyplot, save_figure
from prefixvalue.config import StudyConfig, check_fractions, check_samples, check_temperature, check_top_p
from prefixvalue.engine import StudyContext
from prefixvalue.prefixes import alpha_cut
from prefixvalue.registry import Study, register_study, study_name
from vsr_util.seeding import derive_seed

NAME = study_name(__name__)  # the file name is the study's name (prefixvalue.registry)


@dataclass(frozen=True)
class HintRatioConfig(StudyConfig):
    """``vsr study hint-ratio``: success of continuations from expert prefixes vs hint ratio α."""

    min_difficulty: float = 5.0
    """Keep problems with ``difficulty >= min_difficulty``. Test-bed default 5: the longest chains
    the checkpoints were trained on (5-6 terms). The 7-9-term "hard" split lies beyond the
    training lengths: the model stops after about six steps whatever the prefix, so success stays
    near 0 until the whole solution is given."""
    alphas: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 1.0)
    """Hint ratios α: fraction of the expert solution's tokens given as the prefix."""
    n_continuations: int = 8
    """Continuations sampled per prefix."""
    temperature: float = 1.0
    """Sampling temperature of the continuations."""
    top_p: float = 1.0
    """Nucleus mass of the continuations."""

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "alphas", tuple(sorted(check_fractions(self.alphas, "alphas"))))
        check_samples(self, "n_continuations")
        check_temperature(self.temperature, "temperature")
        check_top_p(self.top_p, "top_p")


SIZES = {
    "quick": {"n_problems": 100, "chunk_problems": 25, "response_budget": 160},
    "full": {"n_problems": 200, "chunk_problems": 50, "response_budget": 160},
}


def collect(ctx: StudyContext, problems: Sequence, chunk: int) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Rows ``(problem, α)`` with the successes of the continuations of the α-prefix."""
    cfg: HintRatioConfig = ctx.cfg  # type: ignore[assignment]
    states, meta = [], []
    no_solution = too_long = 0
    for p in problems:
        if not p.solution:
            no_solution += 1
            continue
        sol = ctx.codec.encode(p.solution)
        if len(sol) >= cfg.response_budget:
            too_long += 1
            continue
        for a in cfg.alphas:
            cut = alpha_cut(a, len(sol))
            states.append(ctx.state(p, sol[:cut]))
            meta.append((p, a, cut, len(sol)))
    counts = {"problems": len(problems), "eligible": len(problems) - no_solution - too_long,
              "no_expert_solution": no_solution, "solution_over_budget": too_long}
    if not states:
        return [], counts
    groups = ctx.sample(states, cfg.n_continuations, temperature=cfg.temperature, top_p=cfg.top_p,
                        seed=derive_seed(cfg.seed, NAME, chunk))
    rows = []
    for (p, a, cut, length), g in zip(meta, groups):
        c = [v.correct for v in g.verify]
        rows.append({
            "problem_id": p.id,
            "difficulty": p.difficulty,
            "alpha": a,
            "cut_tokens": cut,
            "alpha_actual": cut / length,
            "solution_tokens": length,
            "n": len(c),
            "n_correct": int(sum(c)),
            "success_rate": float(np.mean(c)),
            "correct_bits": bits(c),
            "mean_new_tokens": float(np.mean([len(r) for r in g.response_ids])),
            "n_unfinished": int(sum(not s for s in g.stopped)),
        })
    return rows, counts


def analyze(table, cfg: HintRatioConfig) -> dict[str, Any]:
    """Mean / quartiles of per-problem success per α, CIs, and linearity of the mean curve."""
    curve = []
    for a, grp in table.groupby("alpha", sort=True):
        s = grp["success_rate"].to_numpy()
        ms = mean_success(bits_matrix(grp["correct_bits"].tolist()))
        curve.append({
            "alpha": float(a),
            "mean": float(s.mean()),
            "ci_lo": ms["lo"],
            "ci_hi": ms["hi"],
            "q25": float(np.quantile(s, 0.25)),
            "median": float(np.median(s)),
            "q75": float(np.quantile(s, 0.75)),
            "n_problems": int(len(s)),
        })
    alpha = np.array([c["alpha"] for c in curve])
    mean = np.array([c["mean"] for c in curve])
    lin: dict[str, Any] = {}
    if len(alpha) >= 2:
        slope, intercept = np.polyfit(alpha, mean, 1)
        fit = intercept + slope * alpha
        ss_tot = float(np.sum((mean - mean.mean()) ** 2))
        r2 = 1.0 - float(np.sum((mean - fit) ** 2)) / ss_tot if ss_tot > 0 else float("nan")
        chord = (1 - alpha) * mean[0] + alpha * mean[-1] if alpha[0] == 0 and alpha[-1] == 1 else None
        lin = {"slope": float(slope), "intercept": float(intercept), "r2": r2}
        if chord is not None:
            dev = mean - chord
            lin["chord_deviation"] = [float(d) for d in dev]
            lin["max_abs_chord_deviation"] = float(np.max(np.abs(dev)))
        lin["monotone_non_decreasing"] = bool(np.all(np.diff(mean) >= 0))
    rise = correlation_dict(table["alpha"], table["success_rate"], "spearman")
    return {"curve": curve, "linearity": lin, "alpha_success_spearman": rise,
            "n_problems": int(table["problem_id"].nunique()), "n_continuations": int(cfg.n_continuations)}


def render(summary: dict[str, Any]) -> str:
    """Markdown summary."""
    rows = [(f"{c['alpha']:.2f}", f"{c['mean']:.3f}", f"[{c['ci_lo']:.3f}, {c['ci_hi']:.3f}]",
             f"{c['q25']:.3f}", f"{c['median']:.3f}", f"{c['q75']:.3f}", c["n_problems"]) for c in summary["curve"]]
    lin = summary["linearity"]
    lines = [
        f"# Hint-ratio curve ({summary['model']}, {summary['task']}/{summary['split']}, "
        f"{summary['n_problems']} problems x {summary['n_continuations']} continuations)",
        "",
        markdown_table(("alpha", "mean success", "95% CI", "q25", "median", "q75", "problems"), rows),
        "",
        f"* rises with alpha: Spearman(alpha, per-problem success) = {fmt_ci(summary['alpha_success_spearman'])}; "
        f"mean curve monotone: {lin.get('monotone_non_decreasing')}",
    ]
    if lin:
        lines.append(f"* linear fit of the mean curve: slope {lin['slope']:.3f}, intercept {lin['intercept']:.3f}, "
                     f"R^2 {lin['r2']:.3f}")
    if "chord_deviation" in lin:
        dev = ", ".join(f"{d:+.3f}" for d in lin["chord_deviation"])
        lines.append(f"* deviation from the chord (1-a) m(0) + a m(1) used by the sigma-hat interpolation: {dev} "
                     f"(max |dev| {lin['max_abs_chord_deviation']:.3f})")
    return "\n".join(lines) + "\n"


def plot(table, summary: dict[str, Any], out_dir) -> list:
    """Mean success vs α with the inter-quartile band, CIs and the interpolation chord."""
    plt = pyplot()
    c = summary["curve"]
    a = np.array([x["alpha"] for x in c])
    m = np.array([x["mean"] for x in c])
    fig, ax = plt.subplots(figsize=(5.2, 3.8))
    ax.fill_between(a, [x["q25"] for x in c], [x["q75"] for x in c], alpha=0.25, label="25-75 percentile")
    ax.errorbar(a, m, yerr=[m - np.array([x["ci_lo"] for x in c]), np.array([x["ci_hi"] for x in c]) - m],
                marker="o", capsize=3, label="mean per-problem success (95% CI)")
    if a[0] == 0 and a[-1] == 1:
        ax.plot([0, 1], [m[0], m[-1]], "k--", lw=1, label=r"chord ($\hat{\sigma}$ interpolation)")
    ax.set_xlabel("hint ratio α (fraction of the expert solution)")
    ax.set_ylabel("continuation success rate")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(f"Hint-ratio curve: {summary['model']} on {summary['split']} ({summary['n_problems']} problems)", fontsize=9)
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    return save_figure(fig, out_dir, "hint_ratio")


STUDY = register_study(Study(
    name=NAME,
    title="VSR Fig. 7: continuation success vs hint ratio alpha of an expert prefix",
    config_cls=HintRatioConfig,
    default_split="validation",
    sizes=SIZES,
    eligibility="has an expert solution shorter than the response budget",
    collect=collect,
    analyze=analyze,
    render=render,
    plot=plot,
))
