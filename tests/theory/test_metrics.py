"""The metrics' `vsr theory check` entries (theory/checks/metrics.py) and the public surface."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

import theory.metrics as metrics
from theory.checks._registry import Comparison, registered_checks, run_check

importlib.import_module("theory.checks.metrics")

METRIC_CHECKS = [
    "pass_at_k_unbiased_binomial",
    "pass_at_k_exact_binomial_ratio",
    "pass_at_1_is_fraction_correct",
    "pass_at_k_monotone_in_k",
    "aes_reference_scores_zero",
    "aes_sign_conventions",
    "aes_monotone",
    "fisher_ci_brackets_estimate",
    "pearson_matches_scipy",
    "spearman_fisher_interval",
    "within_group_single_group_is_its_r",
    "within_group_ignores_group_offsets",
    "within_group_is_fisher_average",
    "bootstrap_ci_matches_scipy",
    "distinct_n_counts",
    "self_bleu_bounds_and_identity",
    "self_bleu_is_mean_bleu_against_others",
    "logdet_eigen_identity_and_hadamard",
]


def test_every_metric_check_is_registered_with_a_reference():
    checks = registered_checks()
    for name in METRIC_CHECKS:
        assert name in checks, name
        assert checks[name].reference and "SPEC" not in checks[name].reference
        assert checks[name].description


@pytest.mark.parametrize("name", METRIC_CHECKS)
def test_metric_check_passes_on_random_instances(name):
    check = registered_checks()[name]
    for seed in (0, 1):
        row = run_check(check, cases=25, seed=seed)
        assert row.passed, (name, seed, row.first_failure)
        assert row.comparisons >= 25


@pytest.mark.parametrize("name", METRIC_CHECKS)
def test_metric_check_returns_comparisons(name):
    out = registered_checks()[name].sample(np.random.default_rng(3))
    out = [out] if isinstance(out, Comparison) else list(out)
    assert out and all(isinstance(c, Comparison) for c in out)


def test_package_exports_everything_in_all():
    for name in metrics.__all__:
        assert hasattr(metrics, name), name
    for fn in ("pass_at_k", "avg_at_k", "pass_at_k_table", "aes", "pearson", "spearman",
               "within_group_correlation", "distinct_n", "self_bleu", "logdet_diversity"):
        assert callable(getattr(metrics, fn))
