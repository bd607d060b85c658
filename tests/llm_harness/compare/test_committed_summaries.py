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
