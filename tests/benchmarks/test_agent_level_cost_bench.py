"""The level-cost benchmark measures every level and projects from the committed suite (no timing asserted)."""

from __future__ import annotations

import json

import pytest

from benchmarks.agent_level_cost import LevelCostConfig, run, suite_seconds_per_turn


def test_the_benchmark_measures_every_level_and_projects_consistently(tmp_path):
    out = tmp_path / "cost.json"
    res = run(LevelCostConfig(seeds=2, rows=4, repeats=1, turn_tokens=2, out=str(out)))
    levels = {r["level"]: r for r in res["levels"]}
    assert list(levels) == ["OneRoomS8", "SynthLoc", "MiniBoss"]
    assert levels["OneRoomS8"]["cost_ratio_median"] == 1.0  # the calibration level against itself
    calib = res["calibration"]
    assert calib == suite_seconds_per_turn() and calib["s_per_turn"] > 0
    for r in levels.values():
        assert 1 <= r["episode_turns_median"] <= r["episode_turns_max"] and r["prompt_tokens_max"] < res["context"]
        assert r["projected_s_per_turn"] == pytest.approx(calib["s_per_turn"] * r["cost_ratio_median"])
        assert r["update_s_all_at_budget"] == pytest.approx(4 * 8 * r["budget"] * r["projected_s_per_turn"])
        assert r["update_s_all_expert_length"] == pytest.approx(4 * 8 * r["episode_turns_mean"] * r["projected_s_per_turn"])
        assert r["suite_h_all_at_budget"] == pytest.approx(5 * 8 * 10 * r["update_s_all_at_budget"] / 7200)
    # SynthLoc / MiniBoss prompts are longer than OneRoomS8's (their rooms hold more objects)
    assert levels["MiniBoss"]["prompt_tokens_mean"] > levels["OneRoomS8"]["prompt_tokens_mean"]
    assert json.loads(out.read_text())["levels"][1]["level"] == "SynthLoc"


def test_one_budget_per_level_is_required():
    with pytest.raises(ValueError, match="budgets: one per level"):
        run(LevelCostConfig(levels=("OneRoomS8", "SynthLoc"), budgets=(16,)))
