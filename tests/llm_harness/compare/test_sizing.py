"""The suites' cost model (llm_harness.compare.sizing): every plug-in a suite configures has a cost factor, and the
factors derived from the VSR regime's records say what those records measured."""

from __future__ import annotations

import pytest

from llm_harness.compare import sizing
from llm_harness.compare.suite import SUITES


@pytest.mark.parametrize("suite", sorted(SUITES))
def test_every_suite_can_be_sized(suite):
    """Every plug-in a committed suite configures is registered with its cost factor (job_seconds prices each)."""
    hours = sizing.estimated_hours(suite, workers=2)
    assert 0.0 < hours < 50.0


def test_plugin_factors_follow_their_parameters():
    c = sizing.COST
    def vsr(params, c):
        return sizing.plugin_cost("vsr", params, c)

    assert vsr({"score": "p1mp"}, c) == 1.0
    assert vsr({"score": "oracle", "oracle_candidates": 16, "oracle_samples": 8}, c) == pytest.approx(1.448)
    assert vsr({"score": "oracle", "oracle_candidates": 32, "oracle_samples": 8}, c) > vsr({"score": "oracle"}, c)
    assert sizing.plugin_cost("reinforce_ada_est", {}, c) == c["redraw_factor"]
    assert sizing.plugin_cost("replay", {"ratio": 1.0}, c) == pytest.approx(1.0 + c["replay_row_share"])
    assert sizing.plugin_cost("replay", {}, c) == pytest.approx(1.0 + c["replay_row_share"] * 0.5)


def test_an_unknown_plugin_is_refused_not_priced_at_one():
    mapping = {"validation": {"n_problems": 8, "k": 2}, "plugins": {"no_such_plugin": {}}}
    with pytest.raises(ValueError, match="no_such_plugin"):
        sizing.job_seconds(mapping, steps=10, evals=1)
