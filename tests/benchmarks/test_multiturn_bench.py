"""The multi-turn benchmark runs both contenders on the same seeds (no timing asserted)."""

from __future__ import annotations

from benchmarks.multiturn import MultiturnBenchConfig, run


def test_the_benchmark_runs_both_contenders():
    res = run(MultiturnBenchConfig(episodes=2, repeats=1, hidden_size=16, num_layers=1, turn_tokens=3))
    assert res["repeats"] == 1 and res["episodes"] == 2 and res["ratio_median"] > 0
    assert res["rows"][0]["batched_turns_per_s"] > 0 and res["rows"][0]["looped_turns_per_s"] > 0
    assert res["train_ratio_median"] > 0 and res["train_rows"] >= 2 and res["share_prefix"] is True
