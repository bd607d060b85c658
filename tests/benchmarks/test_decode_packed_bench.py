"""``benchmarks/decode_packed.py`` runs end to end on the test bed and reports every variant."""

from __future__ import annotations

import json

from benchmarks.decode_packed import main


def test_every_variant_is_timed_and_reported(tmp_path):
    assert main(["--model", "llm_harness/testbed/checkpoints/mid", "--prompts", "2", "--n", "2",
                 "--max-new-tokens", "3", "--repeats", "1", "--threads", "1", "--out", str(tmp_path)]) == 0
    doc = json.loads((tmp_path / "decode_packed.json").read_text())
    assert {(r["max_new_tokens"], r["dtype"]) for r in doc["results"]} == {(3, "float32"), (3, "bf16")}
    assert all(r["plain_s"] > 0 and r["packed_s"] > 0 and r["ratio_min"] <= r["ratio_median"] <= r["ratio_max"]
               for r in doc["results"])
    assert (tmp_path / "table.md").read_text().count("\n") == 4
