"""``benchmarks/compiled_layer.py``: the synthetic batch's layout, and an end-to-end run on the test bed with dynamo's
graph capture only (``--backend eager``: no code generation, so the gradients must agree to the last bit)."""

from __future__ import annotations

import json

import pytest
import torch

from benchmarks.compiled_layer import main, synthetic_batch

BED = "llm_harness/testbed/checkpoints/mid"


def test_synthetic_batch_shares_each_groups_prompt_and_trains_the_responses():
    ids, att, lm = synthetic_batch(vocab=50, groups=3, group_size=2, context=4, response=6, seed=1)
    assert ids.shape[0] == 6 and lm.shape == (6, ids.shape[1] - 1)
    for u in range(3):
        assert torch.equal(ids[2 * u, :4], ids[2 * u + 1, :4])
    n = att.sum(1) - 4  # response tokens per row
    assert bool(((n >= 3) & (n <= 6)).all())
    assert torch.equal(lm.sum(1), n.float())  # every response token is a trained target
    assert bool((lm[:, :3] == 0).all()) and bool((lm[:, 3] == 1).all())  # the first target is the prompt's last position
    assert bool((att[:, 1:].sum(1) >= lm.sum(1)).all())
    assert torch.equal(synthetic_batch(50, 3, 2, 4, 6, 1)[0], ids)  # seeded


def test_runs_end_to_end_with_graph_capture_only(tmp_path):
    out = tmp_path / "c.json"
    assert main(["--model", BED, "--groups", "2", "--group-size", "2", "--context", "5", "--response", "4",
                 "--repeats", "2", "--inner", "1", "--threads", "1", "--backend", "eager", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["grad_max_rel_diff"] == 0.0  # the same operators, captured: identical gradients
    assert len(doc["compiled_over_eager"]) == 2 and all(t > 0 for t in doc["seconds_per_pass"]["eager"])
    s = doc["summary"]
    assert s["ratio_min"] <= s["ratio_median"] <= s["ratio_max"]


def test_a_group_of_one_is_refused():
    with pytest.raises(SystemExit) as e:
        main(["--model", BED, "--group-size", "1"])
    assert e.value.code == 2
