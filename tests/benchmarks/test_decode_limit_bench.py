"""``benchmarks/decode_limit.py`` runs end to end on the test bed, counts the model's own weights and reports every
variant."""

from __future__ import annotations

import json

import torch
from transformers import AutoModelForCausalLM

from benchmarks.decode_limit import main

BED = "llm_harness/testbed/checkpoints/mid"


def test_every_variant_is_timed_over_the_models_own_weights(tmp_path):
    out = tmp_path / "decode_limit.json"
    assert main(["--model", BED, "--rows", "3", "--context", "5", "--repeats", "2", "--sweeps", "2", "--inner", "2",
                 "--threads", "1", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    model = AutoModelForCausalLM.from_pretrained(BED, dtype=torch.float32)
    linear = [m.weight for m in model.get_decoder().modules() if isinstance(m, torch.nn.Linear)]
    linear.append(model.get_output_embeddings().weight)
    assert doc["weight_bytes"] == 4 * sum(w.numel() for w in linear)
    assert doc["matmul_flops_per_token"] == 2 * 3 * sum(w.numel() for w in linear)
    assert set(doc["variants"]) == {"reused", "streamed", "streamed_packed", "streamed_packed_layers", "decoder_step"}
    for row in doc["variants"].values():
        assert len(row["all"]) == 2 and 0 < row["min"] <= row["s_per_token"] <= row["max"]
    assert set(doc["ratios"]) == {"streamed/reused", "streamed_packed/reused", "streamed_packed/streamed",
                                  "decoder_step/streamed_packed_layers"}
    assert (tmp_path / "decode_limit.md").read_text().count("| decoder_step |") == 1


def test_sizes_below_one_are_refused(capsys):
    try:
        main(["--model", BED, "--rows", "0"])
    except SystemExit as e:
        assert e.code == 2
    else:
        raise AssertionError("--rows 0 was accepted")
    assert "--rows must be >= 1, got 0" in capsys.readouterr().err
