"""Every committed suite summary (``figures/compare_*/summary.json``) carries the contract fields
others rely on (developers' guide: ``steps``, ``seeds``, ``methods[]`` with ``name, final_avg,
ci_low, ci_high, delta_vs_grpo, delta_ci_low, delta_ci_high, new_tokens_per_update``), with values
that are consistent with each other."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SUMMARIES = sorted((ROOT / "figures").glob("compare_*/summary.json"))
FIELDS = ("name", "final_avg", "ci_low", "ci_high", "delta_vs_grpo", "delta_ci_low", "delta_ci_high", "new_tokens_per_update")


def test_there_are_committed_summaries():
    assert len(SUMMARIES) >= 3, SUMMARIES


@pytest.mark.parametrize("path", SUMMARIES, ids=lambda p: p.parent.name)
def test_summary_has_the_contract_fields(path):
    d = json.loads(path.read_text())
    assert isinstance(d["steps"], int) and d["steps"] > 0
    assert isinstance(d["seeds"], list) and d["seeds"] and all(isinstance(s, int) for s in d["seeds"])
    assert d["methods"], "no methods"
    names = [m["name"] for m in d["methods"]]
    for m in d["methods"]:
        missing = [f for f in FIELDS if f not in m]
        assert not missing, f"{m.get('name')}: missing {missing}"
        assert 0.0 <= m["final_avg"] <= 1.0
        if m["ci_low"] is not None:
            assert m["ci_low"] <= m["final_avg"] + 1e-12 <= m["ci_high"] + 2e-12
        if m["delta_ci_low"] is not None:
            assert m["delta_ci_low"] <= m["delta_vs_grpo"] + 1e-12 <= m["delta_ci_high"] + 2e-12
        tokens = m["new_tokens_per_update"]
        assert tokens is None or (math.isfinite(tokens) and tokens >= 0)  # SFT generates none
    # the reference of every regime is in the list with a zero delta
    refs = {m.get("reference") for m in d["methods"]} - {None}
    for ref in refs:
        assert ref in names, f"reference {ref} not among the methods"
        assert all(m["delta_vs_grpo"] == 0.0 for m in d["methods"] if m["name"] == ref)


#: the report folders whose runs' records are in the store (``records/compare_<suite>``)
RECORDED = sorted(ROOT / "figures" / p.name for p in (ROOT / "records").glob("compare_*")
                  if (ROOT / "figures" / p.name / "summary.json").is_file())


@pytest.mark.parametrize("folder", RECORDED, ids=lambda p: p.name)
def test_committed_records_rebuild_the_committed_summary(folder, tmp_path, monkeypatch):
    """A suite folder with run records in the store: ``--report-only`` from those records alone (with the records of
    the suites it shares runs with, which its manifest's pointers lead into, and the prompt pool they were trained on,
    if any; another checkout's layout, ``figures/`` and ``records/`` side by side, no run directories) reproduces the
    committed summary's numbers, i.e. the records are the committed result's runs and still match the suite's current
    configs."""
    import shutil

    from llm_harness.compare.jobs import CompareConfig
    from llm_harness.compare.runner import run
    from llm_harness.compare.suite import SUITES

    monkeypatch.chdir(ROOT)  # the suites' config paths are relative to the repository
    committed = json.loads((folder / "summary.json").read_text())
    out = tmp_path / "figures" / folder.name
    out.mkdir(parents=True)
    shutil.copytree(ROOT / "records" / folder.name, tmp_path / "records" / folder.name)
    for sib in SUITES[committed["suite"]].shares_records_with:  # its manifest's pointers lead into theirs
        if (ROOT / "records" / f"compare_{sib}").is_dir():
            shutil.copytree(ROOT / "records" / f"compare_{sib}", tmp_path / "records" / f"compare_{sib}")
    if (folder / "pool.json").is_file():  # a pool-trained suite: its records were trained on this pool
        shutil.copy(folder / "pool.json", out / "pool.json")
    regimes = tuple(sorted({m["regime"] for m in committed["methods"]}))
    # the committed seed count (a suite may have been extended with --seeds; records of further seeds are ignored)
    seeds = len(committed["seeds"])
    assert committed["seeds"] == list(range(seeds))
    assert run(CompareConfig(suite=committed["suite"], out=out, regimes=regimes, seeds=seeds, report_only=True)) == 0
    rebuilt = json.loads((out / "summary.json").read_text())
    key = lambda m: (m["regime"], m["name"])  # noqa: E731
    want = {key(m): m for m in committed["methods"]}
    got = {key(m): m for m in rebuilt["methods"]}
    assert set(got) == set(want)
    for k, m in want.items():
        for f in FIELDS[1:]:
            a, b = m[f], got[k][f]
            assert (a is None and b is None) or a == pytest.approx(b, rel=1e-9, abs=1e-12), (k, f)
