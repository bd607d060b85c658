"""Study analyses on synthetic tables with known answers (no model)."""

from __future__ import annotations

import numpy as np
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
    assert s["trend"] == {"failed_success_decreasing": True, "failed_all_fail_increasing": True,
                          "failed_mixed_at_last_position": 0.2}


def test_sigma_validation_perfect_prediction_gives_correlation_one():
    rng = np.random.default_rng(1)
    rows = []
    for i in range(20):
        for pos in (0.25, 0.5, 0.75):
            s = rng.uniform(0.01, 0.25)
            rows.append({"problem_id": f"p{i}", "position": pos, "sigma_hat": s, "sigma_hat_sqrt": np.sqrt(s),
                         "empirical_std": np.sqrt(s)})
    out = sigma_validation.analyze(pd.DataFrame(rows), sigma_validation.SigmaValidationConfig())
    assert out["sigma_hat_sqrt"]["pooled"]["pearson"]["estimate"] == pytest.approx(1.0)
    assert out["sigma_hat"]["pooled"]["spearman"]["estimate"] == pytest.approx(1.0)
    assert all(b["spearman"]["estimate"] == pytest.approx(1.0) for b in out["sigma_hat"]["by_position"])
    assert out["sigma_hat"]["within_position"]["spearman"]["estimate"] > 0.99
    assert out["n_states"] == 60


def test_sigma_validation_reports_undefined_correlations_instead_of_failing():
    rows = [{"problem_id": f"p{i}", "position": 0.5, "sigma_hat": 0.1 * (i + 1), "sigma_hat_sqrt": 0.1,
             "empirical_std": 0.0} for i in range(6)]
    out = sigma_validation.analyze(pd.DataFrame(rows), sigma_validation.SigmaValidationConfig())
    assert "error" in out["sigma_hat"]["pooled"]["pearson"]  # empirical std is constant


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
