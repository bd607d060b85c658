"""Does mean token entropy predict a prefix's Monte-Carlo value? (ExTra §5.6, Table 4; App. C)

Protocol (ExTra App. C.1): ``n_trajectories`` (32) trajectories per problem at T = 1; problems
with mixed outcomes are kept; every trajectory is split into reasoning steps
(``task.split_steps``) and truncated after ``round(f · S)`` of its ``S`` steps for
f in ``fractions`` (20/40/60/80%; at least one step kept and one left; duplicates dropped);
``n_continuations`` (16) continuations per prefix at T = 0.7, top-p 0.9 give the Monte-Carlo value
(the continuation pass rate). The trajectories are scored once (teacher forcing at T = 1, exact
full-vocabulary entropies) and every prefix's metrics are slices of that trace
(:mod:`prefixvalue.prefix_metrics`).

Analysis: for every metric, the within-problem Spearman correlation with the MC value (averaged
through Fisher's z, Fisher CI as in ExTra; primary, because regeneration chooses among prefixes of
one prompt) and the pooled Spearman (secondary: confounded by problem difficulty), ranked by
``|within-problem ρ|``. Metrics constant within every problem (e.g. ``p0``) get a pooled value only.
The Fisher CIs treat prefixes as independent and assume one correlation shared by every problem, but the
(up to four) prefixes of one trajectory are not independent and problems differ; the summary therefore also gives
intervals at the level of the randomness — a percentile bootstrap that resamples whole problems
(``within_bootstrap``) and the two-stage interval over the problems' own correlations (``within_two_stage``) —
and Cochran's Q of the problems' correlations (``theory.metrics.cochran_q``), which says whether the Fisher CI's
common-correlation assumption holds.

Departures from the paper: no per-problem balancing of the prefix pool; fewer trajectories in
quick mode (16); label-aware metrics are the test bed's exact step grader instead of semantic
similarity to the gold solution; ExTra's "layer consistency" metrics are not computed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from llm_harness.methods.mte import char_to_token_cut
from prefixvalue.analysis import bits, correlation_dict, fmt_ci, markdown_table, pyplot, save_figure, within_dict
from prefixvalue.config import StudyConfig, check_fractions, check_samples, check_temperature, check_top_p
from llm_harness.trainer.data import StartState
from prefixvalue.engine import StudyContext
from prefixvalue.prefix_metrics import answer_probe, label_metrics, metric_family
from prefixvalue.prefixes import entropy_stats, p_hat, step_cuts, variance_hat
from prefixvalue.registry import Study, register_study, study_name
from vsr_util.seeding import derive_seed

NAME = study_name(__name__)  # the file name is the study's name (prefixvalue.registry)


@dataclass(frozen=True)
class MTECorrelationConfig(StudyConfig):
    """``vsr study mte-correlation``: rank prefix metrics by correlation with the prefix's MC value."""

    min_difficulty: float = 5.0
    """Keep problems with ``difficulty >= min_difficulty`` (test bed: 5-6-term chains, 5-6 steps)."""
    n_trajectories: int = 0
    """Trajectories sampled per problem (ExTra: 32); 0 = study default (quick 12, full 32)."""
    init_temperature: float = 1.0
    """Sampling temperature of the trajectories (ExTra: 1.0)."""
    fractions: tuple[float, ...] = (0.2, 0.4, 0.6, 0.8)
    """Truncation points as fractions of a trajectory's step count."""
    n_continuations: int = 16
    """Continuations per prefix (the MC value's sample size; ExTra: 16)."""
    temperature: float = 0.7
    """Sampling temperature of the continuations (ExTra: 0.7)."""
    top_p: float = 0.9
    """Nucleus mass of the continuations (ExTra: 0.9)."""
    entropy_temperature: float = 1.0
    """Temperature of the scored distribution whose entropies/log-probs define the metrics."""

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "fractions", tuple(sorted(check_fractions(self.fractions, "fractions"))))
        check_samples(self, "n_trajectories", lo=0)
        if self.n_trajectories == 1:  # 0 = the study default; a correlation needs two trajectories
            raise ValueError("n_trajectories: must be 0 (default) or >= 2, got 1")
        check_samples(self, "n_continuations")
        for name in ("init_temperature", "temperature", "entropy_temperature"):
            check_temperature(getattr(self, name), name)
        check_top_p(self.top_p, "top_p")


SIZES = {
    "quick": {"n_problems": 16, "n_trajectories": 16, "chunk_problems": 4, "response_budget": 160},
    "full": {"n_problems": 24, "n_trajectories": 32, "chunk_problems": 4, "response_budget": 160},
}

#: Columns of the table that are not metrics.
_NOT_METRICS = ("chunk", "problem_id", "difficulty", "trajectory", "fraction", "cut_tokens", "trajectory_tokens",
                "trajectory_steps", "n", "n_correct", "mc_value", "correct_bits")


def _prefix_rows(ctx: StudyContext, p, p0: float, t_index: int, group, trace) -> list[tuple[dict[str, Any], StartState, str]]:
    """``(metric row without MC outcomes, prefix state, prefix text)`` for the step-truncated
    prefixes of trajectory ``t_index`` of ``group`` (``trace``: its teacher-forced entropies / log-probs)."""
    cfg: MTECorrelationConfig = ctx.cfg  # type: ignore[assignment]
    steps = ctx.task.split_steps(group.completion_text(t_index, ctx.codec))
    ids = group.completion_ids(t_index)
    reward = float(group.rewards[t_index])
    rows = []
    for f, k in step_cuts(len(steps), cfg.fractions):
        cut = char_to_token_cut(ids, steps[k - 1].end, ctx.decode)
        start = char_to_token_cut(ids, steps[k - 1].start, ctx.decode)
        if not 0 < cut < len(ids):
            continue
        start = min(start, cut - 1)
        prefix_text = ctx.decode(ids[:cut])
        alpha = cut / len(ids)
        row = {
            "problem_id": p.id,
            "difficulty": p.difficulty,
            "trajectory": t_index,
            "fraction": f,
            "cut_tokens": cut,
            "trajectory_tokens": len(ids),
            "trajectory_steps": len(steps),
            **entropy_stats(trace.entropies, trace.logprobs, cut, start),
            "prefix_tokens": cut,
            "position": alpha,
            "steps_in_prefix": k,
            "step_fraction": k / len(steps),
            "p0": p0,
            "trajectory_reward": reward,
            "p_hat": float(p_hat(alpha, p0, reward)),
            "sigma_hat": float(variance_hat(alpha, p0, reward)),
            **label_metrics(ctx.task.name, p, prefix_text),
        }
        rows.append((row, ctx.state(p, ids[:cut]), prefix_text))
    return rows


def collect(ctx: StudyContext, problems: Sequence, chunk: int) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Rows: one per (problem, trajectory, truncation) with every metric and its MC value."""
    cfg: MTECorrelationConfig = ctx.cfg  # type: ignore[assignment]
    init = ctx.sample([ctx.state(p) for p in problems], cfg.n_trajectories, temperature=cfg.init_temperature,
                      top_p=1.0, seed=derive_seed(cfg.seed, NAME, "init", chunk))
    kept, n_all_fail, n_all_success = [], 0, 0
    for p, group in zip(problems, init):
        k = sum(v.correct for v in group.verify)
        if k == 0:
            n_all_fail += 1
        elif k == group.size:
            n_all_success += 1
        else:
            kept.append((p, group, k / group.size))
    counts = {"problems": len(problems), "eligible": len(kept), "all_fail_initially": n_all_fail,
              "all_success_initially": n_all_success}
    if not kept:
        return [], counts
    trajs = [(p, p0, j, group) for p, group, p0 in kept for j in range(group.size) if group.completion_ids(j)]
    traces = ctx.backend.score_batch([list(ctx.prompt_ids(p)) for p, _, _, _ in trajs],
                                     [list(g.completion_ids(j)) for _, _, j, g in trajs],
                                     temperature=cfg.entropy_temperature, with_entropy=True)
    pending = []
    for (p, p0, j, g), tr in zip(trajs, traces):
        pending.extend(_prefix_rows(ctx, p, p0, j, g, tr))
    if not pending:
        return [], counts
    # gold-answer log-prob: the model made to answer right after the prefix (label-aware probe)
    ctxs, comps = [], []
    for row, state, prefix_text in pending:
        c_text, a_text = answer_probe(ctx.task.name, state.problem, prefix_text)
        ctxs.append(list(state.prompt_ids) + list(ctx.codec.encode(c_text)))
        comps.append(list(ctx.codec.encode(a_text)))
    probes = ctx.backend.score_batch(ctxs, comps, temperature=cfg.entropy_temperature, with_entropy=False)
    groups = ctx.sample([s for _, s, _ in pending], cfg.n_continuations, temperature=cfg.temperature,
                        top_p=cfg.top_p, seed=derive_seed(cfg.seed, NAME, "continue", chunk))
    rows = []
    for (row, _, _), probe, g in zip(pending, probes, groups):
        c = [v.correct for v in g.verify]
        row["gold_answer_logprob"] = float(np.mean(probe.logprobs)) if len(probe) else float("nan")
        row.update({"n": len(c), "n_correct": int(sum(c)), "mc_value": float(np.mean(c)), "correct_bits": bits(c)})
        rows.append(row)
    return rows, counts


def metric_columns(table, task: str) -> list[str]:
    """Numeric metric columns present in ``table`` (known families only)."""
    return [c for c in table.columns if c not in _NOT_METRICS and metric_family(c, task) is not None]


def analyze(table, cfg: MTECorrelationConfig) -> dict[str, Any]:
    """Within-problem (Fisher-z averaged) and pooled Spearman of every metric with the MC value."""
    y = table["mc_value"].to_numpy(dtype=np.float64)
    groups = table["problem_id"].to_numpy()
    ranking = []
    for col in metric_columns(table, cfg.task):
        x = table[col].to_numpy(dtype=np.float64)
        ranking.append({
            "metric": col,
            "family": metric_family(col, cfg.task),
            "within": within_dict(x, y, groups, "spearman"),
            "within_bootstrap": within_dict(x, y, groups, "spearman", ci_method="bootstrap"),
            "within_two_stage": within_dict(x, y, groups, "spearman", ci_method="two_stage"),
            "pooled": correlation_dict(x, y, "spearman"),
        })

    def key(m):
        w = m["within"]
        return (0, -abs(w["estimate"])) if "error" not in w else (1, -abs(m["pooled"].get("estimate", 0.0)))

    ranking.sort(key=key)
    per_problem = table.groupby("problem_id")["mc_value"].agg(["mean", "std", "count"])
    return {
        "ranking": ranking,
        "mte": next((m for m in ranking if m["metric"] == "mte"), None),
        "n_prefixes": int(len(table)),
        "n_problems": int(table["problem_id"].nunique()),
        "n_trajectories": int(cfg.n_trajectories),
        "n_continuations": int(cfg.n_continuations),
        "mean_mc_value": float(y.mean()),
        "mean_within_problem_mc_std": float(per_problem["std"].mean()),
    }


def render(summary: dict[str, Any]) -> str:
    """Markdown summary: the metric ranking."""
    rows = []
    for i, m in enumerate(summary["ranking"], 1):
        w = m["within"]
        rows.append((i, m["metric"], m["family"], fmt_ci(w), fmt_ci(m["within_bootstrap"]),
                     fmt_ci(m.get("within_two_stage", {"error": "not computed"})), _q(w), w.get("n_groups_used", 0),
                     fmt_ci(m["pooled"])))
    mte = summary["mte"]
    lines = [
        f"# Prefix metrics vs Monte-Carlo value ({summary['model']}, {summary['task']}/{summary['split']}, "
        f"{summary['n_problems']} mixed-outcome problems, {summary['n_prefixes']} prefixes, "
        f"{summary['n_continuations']} continuations each)",
        "",
    ]
    if mte is not None:
        w = mte["within"]
        het = w.get("q_p", float("nan"))
        lines += [f"* MTE: within-problem Spearman {fmt_ci(w)} (Fisher CI: every prefix independent and one common "
                  f"correlation; p = {w.get('p_value', float('nan')):.3g}); at the level of the randomness (problems "
                  f"as units): problem-bootstrap CI {fmt_ci(mte['within_bootstrap'])}, two-stage CI "
                  f"{fmt_ci(mte.get('within_two_stage', {'error': 'not computed'}))}; pooled Spearman {fmt_ci(mte['pooled'])}",
                  f"* do the problems share one correlation? Cochran's Q = {w.get('q_stat', float('nan')):.1f} on "
                  f"{w.get('q_df', 0)} df, p = {het:.3g}, I^2 = {w.get('i_squared', float('nan')):.2f}"
                  + (": no, so the Fisher CI is too narrow; read the problem-level intervals" if het < 0.05 else
                     ": no heterogeneity detected"), ""]
    lines += [markdown_table(("rank", "metric", "family", "within-problem Spearman [Fisher 95% CI]",
                              "[problem-bootstrap CI]", "[two-stage CI]", "Cochran's Q (p)", "problems",
                              "pooled Spearman [95% CI]"), rows)]
    return "\n".join(lines) + "\n"


def _q(w: dict[str, Any]) -> str:
    q = w.get("q_stat", float("nan"))
    return "n/a" if "error" in w or q != q else f"{q:.1f} ({w.get('q_p', float('nan')):.2g})"


def plot(table, summary: dict[str, Any], out_dir) -> list:
    """Forest plot of within-problem / pooled Spearman per metric; MTE vs MC value within problems."""
    plt = pyplot()
    ranked = [m for m in summary["ranking"] if "error" not in m["within"]]
    fig, ax = plt.subplots(1, 2, figsize=(11, max(3.8, 0.28 * len(ranked) + 1.2)),
                           gridspec_kw={"width_ratios": [1.3, 1]})
    colors = {"label-free": "C0", "outcome-aware": "C2", "label-aware": "C3"}
    yy = np.arange(len(ranked))
    for i, m in enumerate(ranked):
        w = m["within"]
        ax[0].errorbar([w["estimate"]], [i], xerr=[[w["estimate"] - w["lo"]], [w["hi"] - w["estimate"]]], fmt="o",
                       color=colors[m["family"]], capsize=2)
        if "error" not in m["pooled"]:
            ax[0].plot([m["pooled"]["estimate"]], [i], marker="x", color="k", ms=5)
    ax[0].axvline(0, color="k", lw=0.8)
    ax[0].set_yticks(yy, [m["metric"] for m in ranked], fontsize=7)
    ax[0].invert_yaxis()
    ax[0].set_xlabel("Spearman with MC value (dots: within-problem, 95% CI; x: pooled)")
    for fam, c in colors.items():
        ax[0].plot([], [], "o", color=c, label=fam)
    ax[0].legend(fontsize=7, loc="lower right")
    centred_x = table["mte"] - table.groupby("problem_id")["mte"].transform("mean")
    centred_y = table["mc_value"] - table.groupby("problem_id")["mc_value"].transform("mean")
    ax[1].scatter(centred_x, centred_y, s=8, alpha=0.5)
    ax[1].set_xlabel("MTE - problem mean")
    ax[1].set_ylabel("MC value - problem mean")
    mte = summary["mte"]
    if mte is not None:
        ax[1].set_title(f"MTE within-problem ρ = {fmt_ci(mte['within'], digits=2)}", fontsize=9)
    fig.suptitle(f"Prefix metrics vs MC value: {summary['model']} on {summary['split']} "
                 f"({summary['n_problems']} problems, {summary['n_prefixes']} prefixes)", fontsize=9)
    fig.tight_layout()
    return save_figure(fig, out_dir, "mte_correlation")


STUDY = register_study(Study(
    name=NAME,
    title="ExTra 5.6 / App. C: prefix metrics (MTE, ...) ranked by Spearman with the Monte-Carlo value",
    config_cls=MTECorrelationConfig,
    default_split="validation",
    sizes=SIZES,
    eligibility="mixed outcomes among the sampled trajectories",
    collect=collect,
    analyze=analyze,
    render=render,
    plot=plot,
))
