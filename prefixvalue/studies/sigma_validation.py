"""Statewise validation of VSR's zero-cost score σ̂ (VSR App. D.5).

Protocol: ``init_samples`` trajectories per problem from the bare prompt; problems with mixed
outcomes are kept (``0 < p0 < 1``, ``p0`` = initial success rate); one successful trajectory per
problem (the first) is cut at ``positions`` (25/50/75% of its tokens); ``n_continuations`` (16)
continuations per prefix give the empirical continuation standard deviation
``sqrt(q (1 - q))``, ``q`` = continuation success rate. The prediction is VSR's
``σ̂ = p̂ (1 - p̂)``, ``p̂ = (1 - α) p0 + α R(τ)`` with ``α = cut / |τ|`` and ``R(τ) = 1`` (and its
square root, the standard deviation Neyman allocation uses).

Summary: pooled Pearson and Spearman of predicted vs empirical std with Fisher-z 95% CIs; the same
within each prefix position; and the within-position correlation averaged through Fisher's z.
Departure from the paper: ``init_samples`` = 8 (VSR does not state how "mixed initial outcomes"
was measured); test-bed problems are the 5-6-term validation chains.

The calibrated σ̂ (``score: calibrated`` of the VSR plug-in) is evaluated on the
same states with no extra generation: ``p̂ = p0 + (1 − p0) f(α)``, ``f`` fitted by
``theory.prefix_scores.fit_interpolation`` from the states' own continuation outcomes with the
plug-in's transformation (target ``(q − p0)/(1 − p0)`` clipped to [0, 1], weight = continuations,
the plug-in's bins and prior). To keep a state's outcome out of its own prediction the fit is
*cross-fitted by problem*: problems are hashed (seeded, stable) into :data:`CROSS_FIT_FOLDS` folds
and each fold is predicted from the curve fitted on the other folds (:func:`cross_fit_calibrated`).
The calibrated − linear difference of each correlation gets a percentile interval from a seeded
bootstrap over problems that refits the folds' curves in every resample
(:func:`calibrated_minus_linear`). Departure from the plug-in: one static fit over the table (the
plug-in decays its evidence by ``calibration_decay`` per step because its policy moves; here the
policy is fixed).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from prefixvalue.analysis import bits, cluster_dict, correlation_dict, fmt_ci, markdown_table, pyplot, save_figure, within_dict
from prefixvalue.config import StudyConfig, check_fractions, check_samples, check_temperature, check_top_p
from prefixvalue.engine import StudyContext
from prefixvalue.prefixes import alpha_cut, empirical_std, p_hat, std_hat, variance_hat
from prefixvalue.registry import Study, register_study, study_name
from theory._validate import as_array
from theory.prefix_scores import calibration_fraction, fit_interpolation, interpolation, variance_hat_calibrated
from vsr_util.checks import check_number
from vsr_util.seeding import derive_seed

NAME = study_name(__name__)  # the file name is the study's name (prefixvalue.registry)
#: Linear (paper) σ̂ columns of the table.
LINEAR = ("sigma_hat", "sigma_hat_sqrt")
#: Cross-fitted calibrated σ̂ columns, added by :func:`with_calibrated` (same order as ``LINEAR``).
CALIBRATED = ("sigma_hat_calibrated", "sigma_hat_calibrated_sqrt")
PREDICTORS = LINEAR + CALIBRATED
#: Cross-fitting folds. 5: each curve is fitted on 80% of the problems (on the committed table
#: ≈ 70 problems, > 1000 continuations in every occupied α-bin against a prior of 4), so the held-out
#: curve is close to the pooled one; 2 folds would fit on half the data (noisier, pessimistic) and
#: leave-one-problem-out would refit ~17× more often for curves that barely differ.
CROSS_FIT_FOLDS = 5
#: Problem-bootstrap resamples of the calibrated − linear differences (each refits the fold curves;
#: 1000 is the usual floor for a 95% percentile interval and keeps the analysis under a minute).
BOOTSTRAP_RESAMPLES = 1000


@dataclass(frozen=True)
class SigmaValidationConfig(StudyConfig):
    """``vsr study sigma-validation``: does σ̂ = p̂(1-p̂) predict the empirical continuation std?"""

    min_difficulty: float = 5.0
    """Keep problems with ``difficulty >= min_difficulty`` (test bed: the 5-6-term chains)."""
    init_samples: int = 8
    """Self-generated trajectories per problem; ``p0`` is their success rate."""
    init_temperature: float = 1.0
    """Sampling temperature of the initial trajectories."""
    positions: tuple[float, ...] = (0.25, 0.5, 0.75)
    """Prefix positions as fractions of the successful trajectory's tokens."""
    n_continuations: int = 16
    """Continuations per prefix (the empirical std's sample size)."""
    temperature: float = 1.0
    """Sampling temperature of the continuations."""
    top_p: float = 1.0
    """Nucleus mass of the continuations."""

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "positions", tuple(sorted(check_fractions(self.positions, "positions"))))
        check_samples(self, "init_samples", "n_continuations", lo=2)
        check_temperature(self.init_temperature, "init_temperature")
        check_temperature(self.temperature, "temperature")
        check_top_p(self.top_p, "top_p")


SIZES = {
    "quick": {"n_problems": 150, "chunk_problems": 50, "response_budget": 160},
    "full": {"n_problems": 200, "chunk_problems": 50, "response_budget": 160},
}


def collect(ctx: StudyContext, problems: Sequence, chunk: int) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Rows ``(problem, position)`` with σ̂, p̂ and the continuation outcomes."""
    cfg: SigmaValidationConfig = ctx.cfg  # type: ignore[assignment]
    init = ctx.sample([ctx.state(p) for p in problems], cfg.init_samples, temperature=cfg.init_temperature, top_p=1.0,
                      seed=derive_seed(cfg.seed, NAME, "init", chunk))
    states, meta = [], []
    n_all_fail = n_all_success = 0
    for p, group in zip(problems, init):
        wins = [group.completion_ids(j) for j, v in enumerate(group.verify) if v.correct]
        if not wins:
            n_all_fail += 1
            continue
        if len(wins) == group.size:
            n_all_success += 1
            continue
        p0 = len(wins) / group.size
        traj = wins[0]
        length = len(traj)
        for pos in cfg.positions:
            cut = alpha_cut(pos, length)
            states.append(ctx.state(p, traj[:cut]))
            meta.append((p, p0, pos, cut, length))
    counts = {"problems": len(problems), "eligible": len(problems) - n_all_fail - n_all_success,
              "all_fail_initially": n_all_fail, "all_success_initially": n_all_success}
    if not states:
        return [], counts
    groups = ctx.sample(states, cfg.n_continuations, temperature=cfg.temperature, top_p=cfg.top_p,
                        seed=derive_seed(cfg.seed, NAME, "continue", chunk))
    rows = []
    for (p, p0, pos, cut, length), g in zip(meta, groups):
        c = [v.correct for v in g.verify]
        k = int(sum(c))
        alpha = cut / length
        rows.append({
            "problem_id": p.id,
            "difficulty": p.difficulty,
            "p0": p0,
            "position": pos,
            "cut_tokens": cut,
            "trajectory_tokens": length,
            "alpha": alpha,
            "p_hat": float(p_hat(alpha, p0, 1.0)),
            "sigma_hat": float(variance_hat(alpha, p0, 1.0)),
            "sigma_hat_sqrt": float(std_hat(alpha, p0, 1.0)),
            "n": len(c),
            "n_correct": k,
            "success_rate": k / len(c),
            "empirical_std": float(empirical_std(k, len(c))),
            "correct_bits": bits(c),
        })
    return rows, counts


# ------------------------------------------------------------------ the calibrated σ̂, cross-fitted


def plugin_calibration() -> tuple[int, float]:
    """``(bins, prior)`` of the VSR plug-in's calibrated score (its config defaults, asked, not repeated)."""
    from llm_harness.methods.vsr import VSRConfig

    d = VSRConfig()
    return int(d.calibration_bins), float(d.calibration_prior)


def problem_folds(problem_ids: Sequence[str], folds: int, seed: int) -> np.ndarray:
    """``fold[i]`` in ``0..folds-1``: a seeded, stable hash of ``problem_ids[i]`` (all states of a
    problem share a fold; the same ids and seed give the same folds on every machine)."""
    check_number("folds", folds, 1, integer=True)
    return np.array([derive_seed(seed, NAME, "fold", str(pid)) % folds for pid in problem_ids], dtype=np.int64)


def fit_curve(alpha, p0, success_rate, n, *, bins: int, prior: float) -> np.ndarray:
    """``f[bins]`` fitted on states ``i`` (prefix ratio ``alpha[i]``, initial success ``p0[i]``,
    continuation success ``success_rate[i]`` over ``n[i]`` continuations, ``R = 1``) the way the VSR
    plug-in fits it online: target ``calibration_fraction``, weight ``n``."""
    a = as_array(alpha, "alpha", ndim=1, allow_empty=True)
    p = as_array(p0, "p0", ndim=1, shape=(a.shape[0],), allow_empty=True)
    q = as_array(success_rate, "success_rate", ndim=1, shape=(a.shape[0],), allow_empty=True)
    w = as_array(n, "n", ndim=1, shape=(a.shape[0],), allow_empty=True)
    frac = calibration_fraction(q, p, 1.0) if a.size else np.zeros(0)
    ok = np.isfinite(frac)
    return fit_interpolation(a[ok], frac[ok], w[ok], bins=bins, prior=prior)


def cross_fit_calibrated(alpha, p0, success_rate, n, fold, *, folds: int, bins: int,
                         prior: float) -> tuple[np.ndarray, np.ndarray]:
    """``(sigma[i], curves[folds, bins])``: the calibrated σ̂ ``p̂ (1 − p̂)``, ``p̂ = p0 + (1 − p0) f(α)``,
    of state ``i`` from the curve ``curves[fold[i]]`` fitted (:func:`fit_curve`) on the states of
    every *other* fold, so no state's outcome enters its own prediction. ``fold[i]`` in
    ``0..folds-1``; with one fold the curve has no data and σ̂ is the linear (paper) one."""
    a = as_array(alpha, "alpha", ndim=1)
    k_i = np.asarray(fold)
    if k_i.shape != a.shape or (k_i.size and (k_i.min() < 0 or k_i.max() >= folds)):
        raise ValueError(f"fold: expected shape {a.shape} with values in 0..{folds - 1}")
    cols = [as_array(v, name, ndim=1, shape=a.shape) for v, name in ((p0, "p0"), (success_rate, "success_rate"), (n, "n"))]
    p, q, w = cols
    sigma = np.full(a.shape[0], np.nan)
    curves = np.empty((folds, bins))
    for k in range(folds):
        train, test = k_i != k, k_i == k
        curves[k] = fit_curve(a[train], p[train], q[train], w[train], bins=bins, prior=prior)
        if test.any():
            sigma[test] = variance_hat_calibrated(a[test], p[test], 1.0, curves[k])
    return sigma, curves


def with_calibrated(table, seed: int, *, folds: int = CROSS_FIT_FOLDS, bins: int, prior: float):
    """``(table + fold / calibrated σ̂ columns, curves[folds, bins])`` (:func:`cross_fit_calibrated`)."""
    t = table.copy()
    t["fold"] = problem_folds(t["problem_id"].tolist(), folds, seed)
    sigma, curves = cross_fit_calibrated(t["alpha"], t["p0"], t["success_rate"], t["n"], t["fold"].to_numpy(),
                                         folds=folds, bins=bins, prior=prior)
    t[CALIBRATED[0]] = sigma
    t[CALIBRATED[1]] = np.sqrt(sigma)
    return t, curves


def _within_estimate(x, y, g, method: str) -> float:
    from theory.metrics import within_group_correlation

    try:
        return float(within_group_correlation(x, y, g, method).estimate)
    except ValueError:
        return float("nan")


def calibrated_minus_linear(table, seed: int, *, folds: int = CROSS_FIT_FOLDS, bins: int, prior: float,
                            n_resamples: int | None = None, confidence: float = 0.95) -> dict[str, Any]:
    """Percentile intervals of ``corr(calibrated σ̂, std) − corr(linear σ̂, std)`` from a seeded
    bootstrap over problems: a resample draws problems with replacement (all their states, each
    copy keeping its problem's fold), refits the folds' curves on it and recomputes both
    correlations on the same resampled states (pooled, and within position via Fisher's z);
    ``n_resamples`` defaults to :data:`BOOTSTRAP_RESAMPLES`.

    Why a problem bootstrap and not a dependent-correlation test (Williams/Steiger): the three
    states of a problem share ``p0`` and the trajectory, so states are not independent pairs; the
    curve is estimated from the same data and its noise belongs in the interval; Spearman and the
    Fisher-z average have no closed-form paired test. Keys ``<linear column>/<method>/<scope>``.
    """
    from theory.metrics import CORRELATIONS

    n_resamples = BOOTSTRAP_RESAMPLES if n_resamples is None else check_number("n_resamples", n_resamples, 1, integer=True)
    codes, _ = _factorize(table["problem_id"])
    n_prob = int(codes.max()) + 1 if codes.size else 0
    rows_of = [np.flatnonzero(codes == j) for j in range(n_prob)]
    t, _ = with_calibrated(table, seed, folds=folds, bins=bins, prior=prior)
    cols = {c: t[c].to_numpy(dtype=np.float64) for c in ("alpha", "p0", "success_rate", "n", "empirical_std", "position") + LINEAR}
    fold = t["fold"].to_numpy()
    methods = ("pearson", "spearman")
    point = {}
    for lin, cal in zip(LINEAR, CALIBRATED):
        for m in methods:
            point[(lin, m, "pooled")] = [correlation_dict(t[c], t["empirical_std"], m) for c in (lin, cal)]
            point[(lin, m, "within_position")] = [within_dict(t[c], t["empirical_std"], t["position"], m) for c in (lin, cal)]
    boot = {key: np.full(n_resamples, np.nan) for key in point}
    if n_prob >= 2:
        rng = np.random.default_rng(derive_seed(seed, NAME, "bootstrap"))
        for b in range(n_resamples):
            idx = np.concatenate([rows_of[j] for j in rng.integers(0, n_prob, n_prob)])
            sig, _ = cross_fit_calibrated(cols["alpha"][idx], cols["p0"][idx], cols["success_rate"][idx], cols["n"][idx],
                                          fold[idx], folds=folds, bins=bins, prior=prior)
            y, g = cols["empirical_std"][idx], cols["position"][idx]
            for lin, cal_x in ((LINEAR[0], sig), (LINEAR[1], np.sqrt(sig))):
                lin_x = cols[lin][idx]
                for m in methods:
                    stat = CORRELATIONS.lookup(m, where="method").statistic
                    boot[(lin, m, "pooled")][b] = float(stat(cal_x, y)) - float(stat(lin_x, y))
                    boot[(lin, m, "within_position")][b] = _within_estimate(cal_x, y, g, m) - _within_estimate(lin_x, y, g, m)
    out: dict[str, Any] = {"method": "percentile bootstrap over problems, curves refitted per resample",
                           "n_resamples": int(n_resamples), "confidence": confidence, "n_problems": n_prob}
    tail = 100 * (1 - confidence) / 2
    for (lin, m, scope), (d_lin, d_cal) in point.items():
        key = f"{lin}/{m}/{scope}"
        if "error" in d_lin or "error" in d_cal:
            out[key] = {"error": d_lin.get("error") or d_cal.get("error")}
            continue
        draws = boot[(lin, m, scope)]
        draws = draws[np.isfinite(draws)]
        if draws.size < 2:
            out[key] = {"error": f"only {draws.size} usable bootstrap resamples ({n_prob} problems)"}
            continue
        out[key] = {"linear": d_lin["estimate"], "calibrated": d_cal["estimate"],
                    "estimate": d_cal["estimate"] - d_lin["estimate"],
                    "lo": float(np.percentile(draws, tail)), "hi": float(np.percentile(draws, 100 - tail)),
                    "share_above_zero": float(np.mean(draws > 0)), "n_resamples_used": int(draws.size)}
    return out


def _factorize(values) -> tuple[np.ndarray, np.ndarray]:
    import pandas as pd

    codes, uniques = pd.factorize(pd.Series(values), sort=False)
    return np.asarray(codes, dtype=np.int64), np.asarray(uniques)


def _correlations(table, pred: str) -> dict[str, Any]:
    y = table["empirical_std"].to_numpy()
    x = table[pred].to_numpy()
    res: dict[str, Any] = {"pooled": {m: correlation_dict(x, y, m) for m in ("pearson", "spearman")}}
    # the states of one problem share p0 and its trajectory: the interval at the level of the randomness
    # resamples whole problems (theory.metrics.cluster_bootstrap_correlation)
    res["pooled_problem_bootstrap"] = {m: cluster_dict(x, y, table["problem_id"].to_numpy(), m)
                                       for m in ("pearson", "spearman")}
    res["by_position"] = []
    for pos, grp in table.groupby("position", sort=True):
        res["by_position"].append({
            "position": float(pos),
            "n": int(len(grp)),
            "mean_predicted": float(grp[pred].mean()),
            "mean_empirical_std": float(grp["empirical_std"].mean()),
            **{m: correlation_dict(grp[pred], grp["empirical_std"], m) for m in ("pearson", "spearman")},
        })
    res["within_position"] = {m: within_dict(x, y, table["position"].to_numpy(), m) for m in ("pearson", "spearman")}
    return res


def analyze(table, cfg: SigmaValidationConfig) -> dict[str, Any]:
    """Pooled and within-position Pearson/Spearman of the linear and the cross-fitted calibrated σ̂
    vs the empirical std, with CIs; the calibrated − linear differences (problem bootstrap); the curve."""
    bins, prior = plugin_calibration()
    t, curves = with_calibrated(table, cfg.seed, bins=bins, prior=prior)
    y = t["empirical_std"].to_numpy()
    out: dict[str, Any] = {"n_states": int(len(t)), "n_problems": int(t["problem_id"].nunique()),
                           "n_continuations": int(cfg.n_continuations), "init_samples": int(cfg.init_samples)}
    for pred in PREDICTORS:
        out[pred] = _correlations(t, pred)
    # is σ̂ more than position? correlation of empirical std with position alone, for reference
    out["position_only_spearman"] = correlation_dict(t["position"], y, "spearman")
    pooled = fit_curve(t["alpha"], t["p0"], t["success_rate"], t["n"], bins=bins, prior=prior)
    frac = calibration_fraction(t["success_rate"].to_numpy(), t["p0"].to_numpy(), 1.0)
    by_pos = []
    for pos, idx in t.groupby("position", sort=True).indices.items():
        a, w, fr = t["alpha"].to_numpy()[idx], t["n"].to_numpy()[idx], frac[idx]
        ok = np.isfinite(fr)
        by_pos.append({"position": float(pos), "n": int(len(idx)), "mean_alpha": float(a.mean()),
                       "mean_fraction": float(np.average(fr[ok], weights=w[ok])) if ok.any() else None,
                       "f_pooled_at_mean_alpha": float(interpolation(float(a.mean()), pooled))})
    counts = np.bincount(t["fold"].to_numpy(), minlength=CROSS_FIT_FOLDS)
    problems = t.groupby("fold")["problem_id"].nunique().reindex(range(CROSS_FIT_FOLDS), fill_value=0)
    out["calibration"] = {
        "folds": CROSS_FIT_FOLDS, "bins": bins, "prior": prior, "seed": int(cfg.seed),
        "target": "clip((success_rate - p0) / (1 - p0), 0, 1), weight n (the VSR plug-in's)",
        "states_per_fold": [int(c) for c in counts], "problems_per_fold": [int(c) for c in problems],
        "bin_centres": [float(c) for c in (np.arange(bins) + 0.5) / bins],
        "curve_pooled": [float(v) for v in pooled], "curve_folds": curves.tolist(), "by_position": by_pos,
        # how far apart the two predictions are on these states (a near-identical ranking cannot correlate differently)
        "agreement": {"pearson": correlation_dict(t[LINEAR[0]], t[CALIBRATED[0]], "pearson"),
                      "spearman": correlation_dict(t[LINEAR[0]], t[CALIBRATED[0]], "spearman"),
                      "mean_abs_difference": float(np.mean(np.abs(t[LINEAR[0]] - t[CALIBRATED[0]]))) if len(t) else None},
    }
    out["calibrated_minus_linear"] = calibrated_minus_linear(table, cfg.seed, bins=bins, prior=prior)
    return out


_LABELS = {"sigma_hat": "p(1-p)", "sigma_hat_sqrt": "sqrt(p(1-p))",
           "sigma_hat_calibrated": "calibrated p(1-p), cross-fitted", "sigma_hat_calibrated_sqrt": "calibrated sqrt(p(1-p)), cross-fitted"}


def _fmt_diff(d: dict[str, Any], digits: int = 3) -> str:
    if "error" in d:
        return f"n/a ({d['error']})"
    return f"{d['estimate']:+.{digits}f} [{d['lo']:+.{digits}f}, {d['hi']:+.{digits}f}]"


def verdict(d: dict[str, Any]) -> str:
    """``"calibrated better"`` / ``"linear better"`` when the difference's interval excludes 0, else
    ``"no detectable difference"`` (``"undefined"`` when it could not be computed)."""
    if "error" in d:
        return "undefined"
    if d["lo"] > 0:
        return "calibrated better"
    if d["hi"] < 0:
        return "linear better"
    return "no detectable difference"


def render(summary: dict[str, Any]) -> str:
    """Markdown summary."""
    lines = [
        f"# sigma-hat statewise validation ({summary['model']}, {summary['task']}/{summary['split']}, "
        f"{summary['n_problems']} mixed-outcome problems, {summary['n_states']} prefix states, "
        f"{summary['n_continuations']} continuations each)",
        "",
    ]
    cmp_ = summary["calibrated_minus_linear"]
    head = cmp_["sigma_hat/pearson/pooled"]
    word = {"calibrated better": "beats", "linear better": "is worse than",
            "no detectable difference": "does not detectably beat (nor lose to)",
            "undefined": "cannot be compared with"}[verdict(head)]
    cal = summary["calibration"]
    lines += [
        f"**Calibrated vs linear σ̂:** the cross-fitted calibrated σ̂ {word} the linear σ̂ on the headline "
        f"measure (pooled Pearson of p(1-p) with the empirical std): difference calibrated − linear "
        f"{_fmt_diff(head)} (95% problem-bootstrap interval, {cmp_['n_resamples']} resamples"
        f"{'; it includes 0' if verdict(head) == 'no detectable difference' else ''}). Over all "
        f"{sum(1 for k in cmp_ if '/' in k)} comparisons below: "
        + ", ".join(f"{sum(1 for k, d in cmp_.items() if '/' in k and verdict(d) == v)} {v}"
                    for v in ("calibrated better", "linear better", "no detectable difference")) + ".",
        "",
    ]
    for pred in PREDICTORS:
        res = summary[pred]
        lines.append(f"## predicted {_LABELS[pred]} vs empirical continuation std")
        lines.append("")
        rows = [("pooled (Fisher CI: states independent)", sum(b["n"] for b in res["by_position"]),
                 fmt_ci(res["pooled"]["pearson"]), fmt_ci(res["pooled"]["spearman"]))]
        if "pooled_problem_bootstrap" in res:
            pb = res["pooled_problem_bootstrap"]
            rows.append((f"pooled (problem bootstrap: {pb['pearson'].get('n_clusters', 0)} problems as units)", "",
                         fmt_ci(pb["pearson"]), fmt_ci(pb["spearman"])))
        rows += [(f"position {b['position']:.2f}", b["n"], fmt_ci(b["pearson"]), fmt_ci(b["spearman"]))
                 for b in res["by_position"]]
        rows.append(("within position (Fisher-z avg)", "", fmt_ci(res["within_position"]["pearson"]),
                     fmt_ci(res["within_position"]["spearman"])))
        lines += [markdown_table(("states", "n", "Pearson [95% CI]", "Spearman [95% CI]"), rows), ""]
    lines.append(f"* reference: Spearman(position, empirical std) = {fmt_ci(summary['position_only_spearman'])}")
    lines += ["", "## calibrated − linear, paired on the same states", ""]
    rows = []
    for key, d in cmp_.items():
        if "/" not in key:
            continue
        lin, m, scope = key.split("/")
        est = ("", "") if "error" in d else (f"{d['linear']:.3f}", f"{d['calibrated']:.3f}")
        rows.append((_LABELS[lin], m, scope.replace("_", " "), *est, _fmt_diff(d), verdict(d)))
    lines += [markdown_table(("σ̂", "correlation", "states", "linear", "calibrated", "difference [95% CI]", "verdict"), rows), ""]
    lines += [
        f"* calibrated σ̂: p̂ = p0 + (1 − p0) f(α), f fitted by `theory.prefix_scores.fit_interpolation` "
        f"({cal['bins']} α-bins, prior {cal['prior']:g}, the VSR plug-in's) on {cal['target']}; cross-fitted "
        f"over {cal['folds']} folds of problems (seeded hash; problems per fold {cal['problems_per_fold']}): a "
        "state's prediction comes from the curve fitted on the other folds. No extra generation.",
        f"* differences: {cmp_['method']}; Fisher-z CIs of the single correlations treat states as independent "
        "(the problem-bootstrap rows do not).",
        f"* the two predictions on these states: Pearson(linear, calibrated p(1-p)) = {fmt_ci(cal['agreement']['pearson'])}, "
        f"Spearman = {fmt_ci(cal['agreement']['spearman'])}, mean |difference| = "
        + ("n/a" if cal["agreement"]["mean_abs_difference"] is None else f"{cal['agreement']['mean_abs_difference']:.3f}")
        + " (p(1-p) <= 0.25).",
        "",
        "## fitted curve f (pooled fit) against the observed fractions (q − p0)/(1 − p0)",
        "",
        markdown_table(("position", "n", "mean α", "observed mean fraction", "f(mean α)", "linear α"),
                       [(f"{b['position']:.2f}", b["n"], f"{b['mean_alpha']:.3f}",
                         "n/a" if b["mean_fraction"] is None else f"{b['mean_fraction']:.3f}",
                         f"{b['f_pooled_at_mean_alpha']:.3f}", f"{b['mean_alpha']:.3f}") for b in cal["by_position"]]),
        "",
        "f at the bin centres: " + ", ".join(f"{c:.2f}: {v:.3f}" for c, v in zip(cal["bin_centres"], cal["curve_pooled"])),
    ]
    return "\n".join(lines) + "\n"


def _jitter(rng, n):
    return rng.uniform(-0.006, 0.006, n)  # display only: many points share values


def plot(table, summary: dict[str, Any], out_dir) -> list:
    """Scatter of the linear and the calibrated σ̂ vs empirical std by position; the fitted curve f
    against the observed fractions; the calibrated − linear differences (forest, bootstrap CIs).
    Writes the figure's numbers beside it (``sigma_validation_states.csv``, ``sigma_validation_curve.csv``)."""
    import pandas as pd

    from vsr_util.atomic import write_frame_csv

    cal = summary["calibration"]
    t, curves = with_calibrated(table, cal["seed"], folds=cal["folds"], bins=cal["bins"], prior=cal["prior"])
    t["fraction"] = calibration_fraction(t["success_rate"].to_numpy(), t["p0"].to_numpy(), 1.0)
    pooled = np.asarray(cal["curve_pooled"])
    centres = np.asarray(cal["bin_centres"])
    plt = pyplot()
    fig, ax = plt.subplots(2, 2, figsize=(10, 7.6))
    rng = np.random.default_rng(0)
    for a, pred in ((ax[0, 0], "sigma_hat"), (ax[0, 1], "sigma_hat_calibrated")):
        for pos, grp in t.groupby("position", sort=True):
            a.scatter(grp[pred], grp["empirical_std"] + _jitter(rng, len(grp)), s=12, alpha=0.7, label=f"position {pos:.2f}")
        a.set_xlabel(("predicted" if pred == "sigma_hat" else "cross-fitted calibrated") + r" $\hat{p}(1 - \hat{p})$")
        a.set_ylabel("empirical continuation std")
        a.set_title(f"{'linear' if pred == 'sigma_hat' else 'calibrated'}: pooled Pearson "
                    f"{fmt_ci(summary[pred]['pooled']['pearson'], digits=2)}", fontsize=9)
        a.legend(fontsize=7)
    a = ax[1, 0]
    for pos, grp in t.groupby("position", sort=True):
        a.scatter(grp["alpha"], grp["fraction"] + _jitter(rng, len(grp)), s=8, alpha=0.35)
    for b in cal["by_position"]:
        if b["mean_fraction"] is not None:
            a.plot(b["mean_alpha"], b["mean_fraction"], "kD", ms=6)
    grid = np.linspace(0, 1, 201)
    for k in range(curves.shape[0]):
        a.plot(grid, interpolation(grid, curves[k]), color="tab:red", lw=0.6, alpha=0.4, label="fold fits" if k == 0 else None)
    a.plot(grid, interpolation(grid, pooled), color="tab:red", lw=2, label="pooled fit f")
    a.plot([0, 1], [0, 1], "k--", lw=0.8, label=r"linear $f(\alpha) = \alpha$")
    a.plot([], [], "kD", label="mean observed fraction")
    a.set_xlabel(r"prefix ratio $\alpha$")
    a.set_ylabel(r"$(q - p_0)/(1 - p_0)$, clipped to [0, 1]")
    a.set_title("hint-ratio interpolation f: fit vs observed", fontsize=9)
    a.legend(fontsize=7)
    a = ax[1, 1]
    cmp_ = summary["calibrated_minus_linear"]
    entries = [(k, d) for k, d in cmp_.items() if "/" in k and "error" not in d]
    entries.sort(key=lambda kd: kd[1]["estimate"])
    if entries:
        est = np.array([d["estimate"] for _, d in entries])
        lo = np.array([d["lo"] for _, d in entries])
        hi = np.array([d["hi"] for _, d in entries])
        yy = np.arange(len(entries))
        a.errorbar(est, yy, xerr=[est - lo, hi - est], fmt="o", capsize=3)
        labels = []
        for k, d in entries:
            lin, m, scope = k.split("/")
            labels.append(f"{'sqrt ' if lin.endswith('sqrt') else ''}{m.capitalize()} {'pooled' if scope == 'pooled' else 'within pos.'}"
                          f"\n{d['linear']:.2f} -> {d['calibrated']:.2f}")
        a.set_yticks(yy, labels, fontsize=7)
    a.axvline(0, color="k", lw=0.8)
    a.set_xlabel("calibrated − linear correlation (95% problem bootstrap)")
    a.set_title("paired difference on the same states", fontsize=9)
    fig.suptitle(rf"$\hat{{\sigma}}$ validation: {summary['model']} on {summary['split']} ({summary['n_states']} states)", fontsize=9)
    fig.tight_layout()
    out = save_figure(fig, out_dir, "sigma_validation")
    from pathlib import Path

    keep = ["problem_id", "position", "alpha", "p0", "n", "success_rate", "fraction", "empirical_std", "fold",
            *PREDICTORS]
    curve = pd.DataFrame({"bin_centre": centres, "f_pooled": pooled,
                          **{f"f_fold{k}": curves[k] for k in range(curves.shape[0])}})
    for name, frame in (("sigma_validation_states.csv", t[keep]), ("sigma_validation_curve.csv", curve)):
        write_frame_csv(Path(out_dir) / name, frame)
        out.append(Path(out_dir) / name)
    return out


STUDY = register_study(Study(
    name=NAME,
    title="VSR App. D.5: predicted sigma-hat vs empirical continuation std at 25/50/75% prefixes",
    config_cls=SigmaValidationConfig,
    default_split="validation",
    sizes=SIZES,
    eligibility="mixed initial outcomes (0 < p0 < 1 over the initial trajectories)",
    collect=collect,
    analyze=analyze,
    render=render,
    plot=plot,
))
