"""The huge-pages benchmark on a tiny random model: both contenders run, interleaved, and agree (no timing asserted)."""

from __future__ import annotations

import json

import pytest

from benchmarks.huge_pages import HugePagesBenchConfig, run


def test_both_contenders_run_interleaved_and_give_the_same_updates(tmp_path):
    out = tmp_path / "hp.json"
    assert run(HugePagesBenchConfig(model="random", prompts=2, group_size=2, max_new_tokens=4, steps=1, repeats=1,
                                    threads=1, out=out)) == 0
    res = json.loads(out.read_text())
    assert [r["thp"] for r in res["runs"]] == ["0", "1"]  # off, then on: the variable is each process's only difference
    s = res["summary"]
    assert s["same_losses"] is True and len(res["runs"][0]["losses"]) == 2
    assert s["ratio_off_over_on"]["s_per_step"]["median"] > 0 and s["faults_per_step"]["off"] > 0


def test_a_bad_precision_is_refused(tmp_path):
    with pytest.raises(SystemExit, match="precision: must be float32 or bf16"):
        run(HugePagesBenchConfig(model="random", precision="fp8", out=tmp_path / "x.json"))
