"""The evidence suites' cost model against the committed records (benchmarks/suite_cost.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.suite_cost import main, record_timings
from llm_harness.compare.sizing import COST, job_seconds

RECORDS = Path(__file__).resolve().parents[2] / "records"  # the records store


def test_cost_model_predicts_every_recorded_arm_within_a_third():
    """Each arm's predicted wall time lies within [0.75, 1.35] of the median measured one, and the model errs on the
    safe side overall (median ratio 1.0-1.3): the suites' 2-hour sizing rests on it."""
    rows = record_timings(RECORDS)
    assert {r["suite"].split("_")[1] for r in rows} == {"replay", "extra"} and len(rows) >= 20
    ratios = sorted(r["predicted_s"] / r["wall_s"] for r in rows)
    off = [(r["suite"], r["arm"], round(r["predicted_s"] / r["wall_s"], 2)) for r in rows if not 0.75 <= r["predicted_s"] / r["wall_s"] <= 1.35]
    assert not off, f"cost model off for {off}"
    assert 1.0 <= ratios[len(ratios) // 2] <= 1.3


def test_job_seconds_orders_the_configs_by_work():
    base = {"validation": {"n_problems": 128, "k": 8}, "algo": {}}
    grpo = job_seconds(base, 80, 4)
    r05 = job_seconds(base | {"plugins": {"replay": {"ratio": 0.5}}}, 80, 4)
    r1 = job_seconds(base | {"plugins": {"replay": {"ratio": 1.0}}}, 80, 4)
    dapo = job_seconds(base | {"plugins": {"dapo": {}}}, 80, 4)
    assert grpo < r05 < r1 and grpo < dapo
    assert grpo == pytest.approx(COST["startup_s"] + 80 * COST["update_s"] + 4 * 1024 * COST["eval_seq_s"])
    assert job_seconds(base, 80, 4, base=True) == pytest.approx(COST["startup_s"] + 1024 * COST["eval_seq_s"])


def test_record_timings_reads_a_record_and_skips_failed_and_foreign_runs(tmp_path, capsys):
    cfg = {"validation": {"n_problems": 2, "k": 4}, "algo": {}, "plugins": {}}

    def record(suite, arm, rc=0, fingerprint="f0"):
        d = tmp_path / f"compare_{suite}" / "reg" / arm / "seed0"  # the store's layout
        d.mkdir(parents=True)
        (d / "done.json").write_text(json.dumps({"rc": rc, "wall_s": 10.0, "config": cfg, "fingerprint": fingerprint}))
        import gzip
        with gzip.open(d / "metrics.jsonl.gz", "wt") as fh:
            for i in range(3):
                fh.write(json.dumps({"step": i, "time_step_s": 2.0, "time_eval_s": 0.8 if i == 2 else None}) + "\n")

    record("replay_tau", "grpo")
    record("replay_ratio", "grpo")  # the sibling's copy of the same run: counted once
    record("replay_tau", "abs", rc=1)
    record("testbed", "grpo")  # not an evidence suite
    rows = record_timings(tmp_path)
    assert [(r["suite"], r["arm"], r["runs"]) for r in rows] == [("compare_replay_ratio", "grpo", 1)]
    assert rows[0]["step_s"] == 2.0 and rows[0]["eval_seq_ms"] == pytest.approx(100.0)
    assert rows[0]["predicted_s"] == pytest.approx(job_seconds(cfg, 3, 1))
    assert main(["--records", str(tmp_path)]) == 0 and "model / measured wall" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="no evidence-suite records"):
        main(["--records", str(tmp_path / "none")])
