"""The check registry, ``vsr theory check`` and its JSON contract."""

from __future__ import annotations

import json

import numpy as np
import pytest

from theory.checks import Comparison, load_all, register_check, run_check
from theory.checks._registry import CHECKS, RTOL
from vsr.cli import main

#: Every result of VSR App. B–C, Replay App. E and ExTra App. E needs a registered check.
REQUIRED = {
    "VSR Lemma B.1": ["lemma_b1_trace_variance", "estimator_unbiased"],
    "VSR Thm B.2": ["thm_b2_optimal_baseline", "thm_b2_joint_optimum", "thm_b2_baseline_stationarity"],
    "VSR B.3 / Thm B.5": ["assumption_b3_consequences", "thm_b5_neyman_form", "thm_b5_variance_gap", "thm_b5_standardized_residual"],
    "VSR Lemma B.8": ["lemma_b8_gap_decomposition", "lemma_b8_general_rewards"],
    "VSR Lemma B.9": ["lemma_b9_variance_of_square"],
    "VSR B.6 / Thm B.7": [
        "assumption_b6_limit",
        "thm_b7_cs_sigma_K",
        "thm_b7_cs_sigma_sq_K",
        "thm_b7_var_square",
        "thm_b7_mean_sigma",
        "thm_b7_coupling_bound",
        "thm_b7_gap_bound",
        "thm_b7_variance_reduction",
    ],
    "VSR Remark B.10": ["remark_b10_bounded_rewards"],
    "mu_eps": ["mu_eps_convexity"],
    "SVMD": [
        "lemma_c6_performance_difference",
        "lemma_c7_mirror_step",
        "lemma_c7_three_point_identity",
        "lemma_c7_drift_bound",
        "lemma_c8_reweighting",
        "thm_c5_optimal_step",
        "thm_c5_exact_critic",
    ],
    "ExTra": [
        "extra_lemma_a1_degenerate_group",
        "extra_e2_post_normalization",
        "extra_prop_a2_mode_coverage",
        "extra_prop1_total_probability",
        "extra_prop1_regeneration",
    ],
    "Replay App. E": ["replay_e_closed_forms", "replay_e_minority_dominance"],
}


def test_every_spec_item_has_a_check():
    names = set(load_all())
    missing = {item: [n for n in req if n not in names] for item, req in REQUIRED.items()}
    assert not any(missing.values()), missing
    metric_checks = [n for n in names if n.startswith(("metric", "pass_at", "aes", "corr", "distinct", "self_bleu", "logdet", "within"))]
    assert len(metric_checks) >= 5, sorted(names)


def test_comparison_semantics():
    assert Comparison(1.0, 1.0 + 1e-9).evaluate()[3]
    assert not Comparison(1.0, 1.0 + 1e-6).evaluate()[3]
    assert Comparison(1e6, 1e6 + 1.0, scale=1e6).evaluate()[3] is False  # rel error 1e-6 > RTOL
    assert Comparison(0.0, 1e-9, scale=1.0).evaluate()[3]  # absolute floor scaled to magnitude
    err, rel, slack, ok = Comparison(2.0, 1.0, "<=").evaluate()
    assert not ok and slack == -1.0 and err == 1.0
    assert Comparison(1.0, 2.0, "<").evaluate()[3] and Comparison(2.0, 1.0, ">=").evaluate()[3]
    assert not Comparison(float("nan"), 1.0).evaluate()[3]
    assert RTOL == pytest.approx(4 * np.sqrt(np.finfo(float).eps))


def test_duplicate_registration_rejected():
    load_all()
    with pytest.raises(ValueError, match="already registered"):
        register_check("lemma_b1_trace_variance", "x")(lambda rng: Comparison(0, 0))


def test_run_check_is_deterministic():
    checks = load_all()
    a = run_check(checks["lemma_b1_trace_variance"], 5, seed=3)
    b = run_check(checks["lemma_b1_trace_variance"], 5, seed=3)
    assert a.worst_error == b.worst_error and a.passed


def test_cli_theory_check_json(tmp_path, capsys):
    out = tmp_path / "rows.json"
    rc = main(["theory", "check", "--cases", "3", "--seed", "1", "--json", str(out), "--no-progress"])
    text = capsys.readouterr().out
    assert rc == 0, text
    rows = json.loads(out.read_text())
    assert {r["name"] for r in rows} == set(load_all())
    for r in rows:
        assert {"name", "reference", "cases", "worst_error", "passed"} <= set(r)
        assert r["cases"] == 3 and r["passed"] is True
    assert "passed, 0 failed" in text


def test_cli_exit_code_on_failure(tmp_path, capsys):
    name = "zz_deliberately_false_claim"
    register_check(name, "test")(lambda rng: Comparison(1.0, 2.0))
    try:
        rc = main(["theory", "check", "--cases", "2", "--only", name, "--no-progress", "--json", str(tmp_path / "f.json")])
    finally:
        CHECKS.remove(name)
    assert rc == 1
    assert json.loads((tmp_path / "f.json").read_text())[0]["passed"] is False
    assert "FAIL" in capsys.readouterr().out


def test_cli_help_lists_commands(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "theory check" in out and "figures" in out
    assert main(["no-such-command"]) == 2
    with pytest.raises(SystemExit):
        main(["theory", "check", "--cases", "not-a-number"])


def test_cli_rejects_bad_cases(capsys):
    with pytest.raises(SystemExit, match="--cases must be >= 1"):
        main(["theory", "check", "--cases", "0", "--no-progress"])
