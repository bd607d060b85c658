"""Study analyses on synthetic tables with known answers (no model)."""

from __future__ import annotations

import dataclasses

import numpy as np
from scipy import stats
import pandas as pd
import pytest

from prefixvalue.analysis import bits, bits_matrix
from prefixvalue.studies import failed_prefix, hint_ratio, mte_correlation, prefix_selection, sigma_validation


def _hint_table(curve, n=8, problems=12, seed=0):
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(problems):
        for a, p in curve.items():
            c = rng.random(n) < p
            rows.append({"problem_id": f"p{i}", "alpha": a, "success_rate": c.mean(), "correct_bits": bits(c)})
    return pd.DataFrame(rows)


def test_hint_ratio_linear_curve_has_zero_chord_deviation():
    # success exactly alpha: every problem gets round(alpha * 8) successes
    rows = [{"problem_id": f"p{i}", "alpha": a, "success_rate": int(a * 8) / 8, "correct_bits": "1" * int(a * 8) + "0" * (8 - int(a * 8))}
            for i in range(6) for a in (0.0, 0.25, 0.5, 0.75, 1.0)]
    s = hint_ratio.analyze(pd.DataFrame(rows), hint_ratio.HintRatioConfig())
    lin = s["linearity"]
    assert lin["slope"] == pytest.approx(1.0) and lin["intercept"] == pytest.approx(0.0, abs=1e-12)
    assert lin["r2"] == pytest.approx(1.0) and lin["max_abs_chord_deviation"] == pytest.approx(0.0, abs=1e-12)
    assert lin["monotone_non_decreasing"]
    assert [c["mean"] for c in s["curve"]] == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert s["alpha_success_spearman"]["estimate"] == pytest.approx(1.0)


def test_hint_ratio_convex_curve_lies_below_the_chord():
    s = hint_ratio.analyze(_hint_table({0.0: 0.0, 0.5: 0.1, 1.0: 1.0}), hint_ratio.HintRatioConfig(alphas=(0.0, 0.5, 1.0)))
    dev = s["linearity"]["chord_deviation"]
    assert dev[0] == 0 and dev[2] == 0 and dev[1] < -0.2
    md = hint_ratio.render({**s, "model": "m", "task": "t", "split": "s"})
    assert "| 0.50 |" in md and "chord" in md


def test_failed_prefix_cells_and_trend():
    rows = []
    for i in range(10):
        for pos, k_fail, k_win in ((0.25, 4, 6), (0.5, 2, 7), (0.75, 0 if i < 8 else 1, 8)):
            for source, k in (("failed", k_fail), ("successful", k_win)):
                c = [True] * k + [False] * (8 - k)
                rows.append({"problem_id": f"p{i}", "source": source, "position": pos, "correct_bits": bits(c),
                             "all_fail": k == 0, "mixed": 0 < k < 8, "all_success": k == 8})
    s = failed_prefix.analyze(pd.DataFrame(rows), failed_prefix.FailedPrefixConfig())
    cell = {(c["source"], c["position"]): c for c in s["cells"]}
    assert cell[("failed", 0.75)]["all_fail"]["rate"] == 0.8
    assert cell[("failed", 0.25)]["mean_success"] == 0.5
    assert cell[("successful", 0.75)]["all_success"]["rate"] == 1.0
    d = s["trend"].pop("failed_last_minus_first")
    assert s["trend"] == {"failed_success_decreasing": True, "failed_all_fail_increasing": True,
                          "failed_mixed_at_last_position": 0.2}
    # paired by problem: 8 problems go 4/8 -> 0/8, two go 4/8 -> 1/8
    diffs = np.array([-0.5] * 8 + [-0.375] * 2)
    assert d["n_problems"] == 10 and d["estimate"] == pytest.approx(diffs.mean())
    half = stats.t.ppf(0.975, 9) * diffs.std(ddof=1) / np.sqrt(10)
    assert (d["lo"], d["hi"]) == pytest.approx((diffs.mean() - half, diffs.mean() + half))
    assert "no trend" not in failed_prefix.render({**s, "trend": {**s["trend"], "failed_last_minus_first": d},
                                                    "model": "m", "task": "t", "split": "s"})


def test_sigma_validation_perfect_prediction_gives_correlation_one(monkeypatch):
    monkeypatch.setattr(sigma_validation, "BOOTSTRAP_RESAMPLES", 20)
    rng = np.random.default_rng(1)
    rows = []
    for i in range(20):
        for pos in (0.25, 0.5, 0.75):
            s = rng.uniform(0.01, 0.25)
            rows.append({"problem_id": f"p{i}", "position": pos, "sigma_hat": s, "sigma_hat_sqrt": np.sqrt(s),
                         "empirical_std": np.sqrt(s), "p0": 0.5, "alpha": pos, "success_rate": 0.5, "n": 16})
    out = sigma_validation.analyze(pd.DataFrame(rows), sigma_validation.SigmaValidationConfig())
    assert out["sigma_hat_sqrt"]["pooled"]["pearson"]["estimate"] == pytest.approx(1.0)
    assert out["sigma_hat"]["pooled"]["spearman"]["estimate"] == pytest.approx(1.0)
    assert all(b["spearman"]["estimate"] == pytest.approx(1.0) for b in out["sigma_hat"]["by_position"])
    assert out["sigma_hat"]["within_position"]["spearman"]["estimate"] > 0.99
    assert out["n_states"] == 60


def test_sigma_validation_reports_undefined_correlations_instead_of_failing(monkeypatch):
    monkeypatch.setattr(sigma_validation, "BOOTSTRAP_RESAMPLES", 20)
    rows = [{"problem_id": f"p{i}", "position": 0.5, "sigma_hat": 0.1 * (i + 1), "sigma_hat_sqrt": 0.1,
             "empirical_std": 0.0, "p0": 0.1 * (i + 1), "alpha": 0.5, "success_rate": 1.0, "n": 8} for i in range(6)]
    out = sigma_validation.analyze(pd.DataFrame(rows), sigma_validation.SigmaValidationConfig())
    assert "error" in out["sigma_hat"]["pooled"]["pearson"]  # empirical std is constant
    assert "error" in out["sigma_hat_calibrated"]["pooled"]["pearson"]
    assert sigma_validation.verdict(out["calibrated_minus_linear"]["sigma_hat/pearson/pooled"]) == "undefined"
    assert "cannot be compared" in sigma_validation.render({**out, "model": "m", "task": "t", "split": "s"})


def _states(curve, problems=60, n=16, seed=0, positions=(0.25, 0.5, 0.75)):
    """Sigma-validation rows whose continuation success follows ``p0 + (1 - p0) curve(alpha)``."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(problems):
        p0 = rng.choice([0.125, 0.25, 0.375, 0.5, 0.625, 0.75])
        for pos in positions:
            a = pos + rng.uniform(-0.02, 0.02)
            k = rng.binomial(n, p0 + (1 - p0) * curve(a))
            q = k / n
            p = (1 - a) * p0 + a
            rows.append({"problem_id": f"p{i}", "p0": p0, "position": pos, "alpha": a, "success_rate": q, "n": n,
                         "n_correct": k, "empirical_std": np.sqrt(q * (1 - q)), "sigma_hat": p * (1 - p),
                         "sigma_hat_sqrt": np.sqrt(p * (1 - p))})
    return pd.DataFrame(rows)


def test_problem_folds_are_seeded_stable_and_shared_by_a_problems_states():
    ids = [f"p{i}" for i in range(200)]
    f0 = sigma_validation.problem_folds(ids + ids[:3], 5, seed=0)
    assert f0.tolist() == sigma_validation.problem_folds(ids + ids[:3], 5, seed=0).tolist()
    assert f0[200:].tolist() == f0[:3].tolist()  # the same problem, the same fold
    assert set(f0.tolist()) == set(range(5)) and np.bincount(f0).min() >= 20  # 200 into 5: none nearly empty
    assert (sigma_validation.problem_folds(ids, 5, seed=1) != f0[:200]).mean() > 0.5


def test_cross_fitting_never_uses_a_states_own_fold():
    """Fold 0's states all succeed (fraction 1), fold 1's succeed at p0 (fraction 0). An in-fold fit
    would predict p-hat = 1 (sigma 0) for fold 0 and p-hat = p0 for fold 1; cross-fitted it is the
    opposite. Then: a fold's predictions do not move when its own outcomes are rewritten, while
    the other fold's do."""
    m = 30
    alpha = np.tile([0.25, 0.5, 0.75], m)
    p0 = np.repeat(np.linspace(0.1, 0.8, m), 3)
    fold = np.repeat(np.arange(m) % 2, 3)
    q = np.where(fold == 0, 1.0, p0)
    n = np.full(alpha.shape, 1000.0)
    kw = dict(folds=2, bins=10, prior=4.0)
    sigma, curves = sigma_validation.cross_fit_calibrated(alpha, p0, q, n, fold, **kw)
    f0 = fold == 0
    np.testing.assert_allclose(sigma[f0], p0[f0] * (1 - p0[f0]), atol=0.01)  # from fold 1's f ~ 0
    assert np.all(sigma[~f0] < 0.005)  # from fold 0's f ~ 1: p-hat ~ 1
    assert curves[0][2:8].max() < 0.01 and curves[1][2:8].min() > 0.99  # bins 2..7 hold the data
    q2 = np.where(f0, p0, q)  # rewrite fold 0's own outcomes
    sigma2, _ = sigma_validation.cross_fit_calibrated(alpha, p0, q2, n, fold, **kw)
    np.testing.assert_array_equal(sigma2[f0], sigma[f0])
    assert np.abs(sigma2[~f0] - sigma[~f0]).max() > 0.1
    # the same invariance with five hashed folds on a realistic table
    t = _states(lambda a: a**3, problems=40)
    fold5 = sigma_validation.problem_folds(t["problem_id"].tolist(), 5, seed=3)
    base, _ = sigma_validation.cross_fit_calibrated(t.alpha, t.p0, t.success_rate, t.n, fold5, folds=5, bins=10, prior=4.0)
    for k in range(5):
        moved = t.success_rate.to_numpy().copy()
        moved[fold5 == k] = 1.0 - moved[fold5 == k]
        got, _ = sigma_validation.cross_fit_calibrated(t.alpha, t.p0, moved, t.n, fold5, folds=5, bins=10, prior=4.0)
        np.testing.assert_array_equal(got[fold5 == k], base[fold5 == k])
        assert not np.allclose(got[fold5 != k], base[fold5 != k])


def test_calibrated_sigma_is_the_linear_one_when_the_prior_dominates():
    from prefixvalue.prefixes import variance_hat

    t = _states(lambda a: a**3, problems=20)
    fold = sigma_validation.problem_folds(t["problem_id"].tolist(), 5, seed=0)
    lin = variance_hat(t.alpha.to_numpy(), t.p0.to_numpy(), 1.0)
    sig, curves = sigma_validation.cross_fit_calibrated(t.alpha, t.p0, t.success_rate, t.n, fold, folds=5, bins=10,
                                                        prior=1e12)
    np.testing.assert_allclose(sig, lin, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(curves, np.tile((np.arange(10) + 0.5) / 10, (5, 1)), atol=1e-9)
    # one fold: every state's "other folds" are empty, so there is no evidence at all
    sig1, _ = sigma_validation.cross_fit_calibrated(t.alpha, t.p0, t.success_rate, t.n, np.zeros(len(t), int), folds=1,
                                                    bins=10, prior=4.0)
    np.testing.assert_allclose(sig1, lin, atol=1e-15)
    # with the default prior the evidence moves it (a^3 is far below the chord)
    sig4, _ = sigma_validation.cross_fit_calibrated(t.alpha, t.p0, t.success_rate, t.n, fold, folds=5, bins=10, prior=4.0)
    assert np.abs(sig4 - lin).max() > 0.05


def test_analyze_reports_the_calibrated_sigma_and_its_paired_difference(monkeypatch):
    """Continuation success p0 + (1 - p0) a^3 (strongly convex): the calibrated p-hat tracks the true
    success, so its p(1-p) correlates with the empirical std clearly better than the linear one."""
    monkeypatch.setattr(sigma_validation, "BOOTSTRAP_RESAMPLES", 200)
    t = _states(lambda a: a**3, problems=80, n=64)
    out = sigma_validation.analyze(t, sigma_validation.SigmaValidationConfig())
    for pred in sigma_validation.PREDICTORS:
        assert {"pooled", "by_position", "within_position"} <= set(out[pred])
    cal = out["calibration"]
    assert cal["folds"] == sigma_validation.CROSS_FIT_FOLDS and sum(cal["states_per_fold"]) == len(t)
    assert cal["agreement"]["mean_abs_difference"] > 0.01  # a^3 moves p-hat well away from the chord
    assert sum(cal["problems_per_fold"]) == 80 and len(cal["curve_folds"]) == cal["folds"]
    f = np.asarray(cal["curve_pooled"])
    assert np.all(np.diff(f) >= -1e-12)
    for b in cal["by_position"]:  # the fit follows the truth a^3, not the chord a
        assert abs(b["f_pooled_at_mean_alpha"] - b["mean_alpha"] ** 3) < 0.08
    cmp_ = out["calibrated_minus_linear"]
    assert cmp_["n_resamples"] == 200
    keys = {f"{lin}/{m}/{s}" for lin in sigma_validation.LINEAR for m in ("pearson", "spearman")
            for s in ("pooled", "within_position")}
    assert keys <= set(cmp_)
    head = cmp_["sigma_hat/pearson/pooled"]
    assert head["estimate"] == pytest.approx(out["sigma_hat_calibrated"]["pooled"]["pearson"]["estimate"]
                                             - out["sigma_hat"]["pooled"]["pearson"]["estimate"])
    assert head["lo"] > 0 and sigma_validation.verdict(head) == "calibrated better"
    md = sigma_validation.render({**out, "model": "m", "task": "t", "split": "s"})
    assert "the cross-fitted calibrated σ̂ beats the linear σ̂ on the headline" in md
    # and when the truth is the chord, calibration cannot beat it
    lin_out = sigma_validation.analyze(_states(lambda a: a, problems=80, n=64, seed=1),
                                       sigma_validation.SigmaValidationConfig())
    assert sigma_validation.verdict(lin_out["calibrated_minus_linear"]["sigma_hat/pearson/pooled"]) != "calibrated better"


def test_reanalyze_rewrites_the_summary_from_the_stored_table_without_sampling(tmp_path, monkeypatch):
    import json

    from prefixvalue.config import identity_dict
    from prefixvalue.runner import resolved_config, run_study
    from vsr_util.config_io import save_config

    monkeypatch.setattr(sigma_validation, "BOOTSTRAP_RESAMPLES", 20)
    cfg = resolved_config("sigma-validation", sigma_validation.SigmaValidationConfig(quick=True, out=str(tmp_path)))
    t = _states(lambda a: a**2, problems=12)
    rec = tmp_path / "records"  # the records folder of a report folder outside figures/ (prefixvalue.store)
    rec.mkdir()
    t.to_parquet(rec / "results.parquet", index=False)
    save_config(cfg, rec / "config.yaml")
    (rec / "study.json").write_text(json.dumps({"format": 1, "study": "sigma-validation", "identity": identity_dict(cfg)}))
    (tmp_path / "summary.json").write_text(json.dumps({"counts": {"problems": 30, "eligible": 12}, "collect_seconds": 7.5}))
    with pytest.raises(ValueError, match=r"different sigma-validation config.*seed: 0 -> 1"):
        run_study("sigma-validation", dataclasses.replace(cfg, seed=1, reanalyze=True))
    run_study("sigma-validation", dataclasses.replace(cfg, reanalyze=True, progress=False))  # no backend: none is loaded
    s = json.loads((tmp_path / "summary.json").read_text())
    # a summary written before timings moved out: its collection time moves to timings.json, out of the summary
    assert s["reanalyzed"] is True and s["counts"] == {"problems": 30, "eligible": 12} and "collect_seconds" not in s
    assert json.loads((tmp_path / "timings.json").read_text()) == {"collect_seconds": 7.5}
    run_study("sigma-validation", dataclasses.replace(cfg, reanalyze=True, progress=False))  # read back from timings.json
    assert json.loads((tmp_path / "timings.json").read_text()) == {"collect_seconds": 7.5}
    assert s["n_states"] == len(t) and "sigma_hat_calibrated" in s and s["config"]["reanalyze"] is False
    assert (tmp_path / "sigma_validation.png").is_file() and "calibrated" in (tmp_path / "summary.md").read_text()
    states = pd.read_csv(tmp_path / "sigma_validation_states.csv")
    assert len(states) == len(t) and {"fold", "sigma_hat_calibrated"} <= set(states.columns)
    with pytest.raises(ValueError, match=r"lacks .*empty/records/study.json"):
        run_study("sigma-validation", dataclasses.replace(cfg, out=str(tmp_path / "empty"), reanalyze=True))
    assert not (tmp_path / "empty").exists()  # a refused reanalysis leaves no folder behind


def test_mte_ranking_orders_by_within_problem_strength():
    rng = np.random.default_rng(2)
    rows = []
    for g in range(6):
        offset = rng.normal()
        for t in range(12):
            v = rng.uniform()
            rows.append({"problem_id": f"p{g}", "mc_value": v,
                         "mte": -v + 0.05 * rng.normal() + offset,   # strong, negative
                         "perplexity": rng.normal(),                 # noise
                         "p0": offset,                               # constant within problems
                         "running_value_error": 5 * v + 3 * rng.normal()})
    s = mte_correlation.analyze(pd.DataFrame(rows), mte_correlation.MTECorrelationConfig(n_trajectories=12))
    names = [m["metric"] for m in s["ranking"]]
    assert names[0] == "mte" and names[-1] == "p0"
    assert s["mte"]["within"]["estimate"] < -0.9 and s["mte"]["within"]["hi"] < 0
    assert "error" in s["ranking"][-1]["within"] and "estimate" in s["ranking"][-1]["pooled"]
    assert s["mte"]["within_bootstrap"]["lo"] <= s["mte"]["within"]["estimate"] <= s["mte"]["within_bootstrap"]["hi"]
    assert set(names) == {"mte", "perplexity", "p0", "running_value_error"}


def test_prefix_selection_pass_at_k_matches_theory():
    from theory.metrics import pass_at_k_table

    rng = np.random.default_rng(3)
    rows = []
    for i in range(5):
        for m in prefix_selection.methods():
            c = rng.random(4) < {"scratch": 0.2, "oracle": 0.8}.get(m, 0.5)
            rows.append({"row_type": "selection", "problem_id": f"p{i}", "method": m, "correct_bits": bits(c),
                         "mc_value": np.nan if m == "scratch" else 0.5, "prefix_tokens": 0 if m == "scratch" else 9})
        for j in range(5):
            rows.append({"row_type": "candidate", "problem_id": f"p{i}", "method": "", "correct_bits": "0101",
                         "mc_value": j / 4, "mte": 1.0 - j / 4, "smoothed_mte": 1.0, "prefix_tokens": 5})
    t = pd.DataFrame(rows)
    s = prefix_selection.analyze(t, prefix_selection.PrefixSelectionConfig(eval_continuations=4))
    for m in prefix_selection.methods():
        sel = t[(t.row_type == "selection") & (t.method == m)].sort_values("problem_id")
        want = pass_at_k_table(bits_matrix(sel.correct_bits.tolist()), [1, 2, 3, 4])
        assert s["methods"][m]["pass_at_k"] == pytest.approx([want[k] for k in (1, 2, 3, 4)])
    assert s["random_expected_value"] == pytest.approx(0.5)
    assert s["candidate_mte_vs_mc"]["estimate"] == pytest.approx(-1.0, abs=1e-3)  # clipped at |r| = 0.9999
    # paired contrasts: per-problem pass@1 differences, recomputed by hand
    rate = {(r["method"], r["problem_id"]): np.mean([c == "1" for c in r["correct_bits"]])
            for r in rows if r["row_type"] == "selection"}
    got = {(c["a"], c["b"]): c for c in s["contrasts"]}
    assert set(got) == set(prefix_selection.CONTRASTS)
    for (a, b), c in got.items():
        d = [rate[(a, f"p{i}")] - rate[(b, f"p{i}")] for i in range(5)]
        assert c["n_problems"] == 5 and c["diff"] == pytest.approx(np.mean(d))
        assert c["lo"] <= c["diff"] <= c["hi"] and c["p"] <= c["p_holm"] <= 1.0
        assert c["sd"] == pytest.approx(np.std(d, ddof=1)) and 0.0 <= c["power_10pp"] <= 1.0
    assert "Holm over these rows" in prefix_selection.render({**s, "model": "m", "task": "t", "split": "test"})


def test_selectors_pick_the_documented_candidate():
    mte = np.array([0.5, 0.1, 0.9])
    sm = np.array([0.2, 0.3, 0.1])
    mc = np.array([0.0, 0.25, 1.0])
    rng = np.random.default_rng(0)
    sel = prefix_selection.SELECTORS
    assert sel["low_mte"](mte, sm, mc, rng) == 1
    assert sel["smoothed_mte"](mte, sm, mc, rng) == 2
    assert sel["oracle"](mte, sm, mc, rng) == 2
    draws = {sel["random"](mte, sm, mc, rng) for _ in range(200)}
    assert draws == {0, 1, 2}
    with pytest.raises(ValueError, match="already registered"):
        prefix_selection.register_selector("oracle", sel["oracle"])
