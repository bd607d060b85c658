"""The trainer-vs-TRL benchmark: FLOP counts by hand, interleaving and the summary (no timing asserted)."""

from __future__ import annotations

import json
import statistics

import pytest
import torch

from benchmarks.trainer_vs_trl import ModelShapes, TrlBenchConfig, limit_seconds, model_shapes, run, step_flops


def test_step_flops_match_a_hand_count():
    sh = ModelShapes({(4, 8): 1, (8, 4): 1}, head=(4, 10), layers=2, attn_width=4)
    lin, head = 2 * 32 * 2, 2 * 40  # per token: two 4x8 matmuls; head 4x10
    assert sh.linear_flops_per_token == lin and sh.head_flops_per_token == head
    att = lambda c: 4 * 2 * 4 * c  # noqa: E731  (QK^T and AV, 2 layers, width 4)
    # one group: context 3, responses of 1 and 3 tokens
    f = step_flops(sh, [(3, [1, 3])], [(3, 1), (3, 3)])
    prefill = 3 * lin + att(1) + att(2) + att(3) + head
    decode = 2 * (lin + head) + att(4) + att(5)  # the 3-token response forwards tokens 0 and 1
    assert f["decode_flops"] == prefill + decode and f["prefill_flops"] == prefill
    fwd = (4 * lin + sum(att(c) for c in range(1, 5)) + head) + (6 * lin + sum(att(c) for c in range(1, 7)) + 3 * head)
    assert f["train_flops"] == 3 * fwd


def test_model_shapes_count_every_decoder_linear():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    m = Qwen2ForCausalLM(Qwen2Config(vocab_size=11, hidden_size=16, intermediate_size=24, num_hidden_layers=2,
                                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32))
    sh = model_shapes(m)
    weights = sum(mod.weight.numel() for mod in m.get_decoder().modules() if isinstance(mod, torch.nn.Linear))
    assert sh.linear_flops_per_token == 2 * weights and sh.head == (16, 11) and sh.layers == 2 and sh.attn_width == 16


def test_config_refuses_unknown_or_repeated_contenders():
    with pytest.raises(ValueError, match="contenders"):
        TrlBenchConfig(contenders=("ours", "vllm"))
    with pytest.raises(ValueError, match="contenders"):
        TrlBenchConfig(contenders=("ours", "ours"))


def test_interleaved_runs_and_summary(tmp_path):
    torch.set_num_threads(1)
    out = tmp_path / "bench.json"
    cfg = TrlBenchConfig(contenders=("ours", "ours_static", "ours_fast", "ours_packed"), repeats=2, steps=1, warmup_steps=1, prompts=2,
                         group_size=2, max_new_tokens=6, eval_problems=0, threads=1, gemm_repeats=2, out=str(out),
                         fast_micro_batch_rows=1)
    assert run(cfg) == 0
    res = json.loads(out.read_text())
    order = ("ours", "ours_static", "ours_fast", "ours_packed")
    assert [(r["repeat"], r["contender"]) for r in res["runs"]] == [(i, c) for i in (0, 1) for c in order]
    assert [r["seed"] for r in res["runs"]] == [0] * 4 + [1] * 4
    assert [(r["static_decode"], r["micro_batch_rows"], r["packed_forward"]) for r in res["runs"][:4]] == [
        (False, 0, False), (True, 0, False), (True, 1, False), (True, 0, True)]
    for r in res["runs"]:
        assert r["decode_flops"] > 0 and r["limit_s"] > 0 and r["limit_fraction"] > 0
        assert len(r["load_before"]) == 3 and r["decode_s"] <= r["time_generate_s"] + 1e-9
    s = res["summary"]
    assert set(s["contenders"]) == set(order)
    assert list(s["ratios"]) == ["ours/ours_static", "ours/ours_fast", "ours_static/ours_packed"]
    assert len(s["ratios"]["ours/ours_static"]["per_repeat"]) == 2
    for c in ("ours", "ours_static", "ours_fast"):
        q = s["limit_fraction"][c]
        assert q["min"] <= q["median"] <= q["max"]
    # the static decode samples what the default backend samples: same rewards and token counts
    by = {(r["repeat"], r["contender"]): r for r in res["runs"]}
    for rep in (0, 1):
        a, b = by[(rep, "ours")], by[(rep, "ours_static")]
        assert a["gen_new_tokens"] == b["gen_new_tokens"] and a["train_reward"] == b["train_reward"]
    assert res["limit"]["decode_flops_per_s"] > 0 and isinstance(res["loaded_machine"], bool)
    assert out.with_suffix(".config.yaml").is_file()
    # the limit timed after each repeat: at that repeat's own shapes, every run's fraction against it
    for r in res["runs"]:
        lim = r["repeat_limit"]
        mine = [x for x in res["runs"] if x["repeat"] == r["repeat"]]
        assert lim["train_rows"] == max(1, int(round(statistics.median(x["trained_tokens"] for x in mine))))
        assert r["limit_fraction_adjacent"] == pytest.approx(limit_seconds(r, lim, bf16=False) / r["s_per_step"])
    assert res["runs"][0]["repeat_limit"] is not res["runs"][4]["repeat_limit"]
    assert set(s["limit_fraction_adjacent"]) == set(order)


def test_limit_seconds_charge_each_phase_at_its_rate():
    r = {"prefill_flops": 2e9, "decode_flops": 5e9, "train_flops": 12e9}
    lim = {"prefill_flops_per_s": 2e9, "decode_flops_per_s": 1e9, "train_flops_per_s": 4e9,
           "bf16": {"prefill_flops_per_s": 4e9, "decode_flops_per_s": 3e9, "train_flops_per_s": 12e9}}
    assert limit_seconds(r, lim, bf16=False) == pytest.approx(1 + 3 + 3)
    assert limit_seconds(r, lim, bf16=True) == pytest.approx(0.5 + 1 + 1)


def test_shared_context_flops_count_the_context_once_per_group():
    sh = ModelShapes({(4, 8): 1, (8, 4): 1}, head=(4, 10), layers=2, attn_width=4)
    lin = 2 * 32 * 2
    plain = step_flops(sh, [(3, [1, 3])], [(3, 1), (3, 3)])
    shared = step_flops(sh, [(3, [1, 3])], [(3, 1), (3, 3)], shared_contexts=[3])
    assert plain["train_flops"] - shared["train_flops"] == 3 * (3 * lin)  # one repeat of a 3-token context


def test_lean_contenders_run_and_report(tmp_path):
    from llm_harness.trainer.precision import bf16_support

    torch.set_num_threads(1)
    out = tmp_path / "bench.json"
    order = ("ours_no_filter", "ours_lean") + (("ours_lean_bf16",) if bf16_support("cpu") is None else ())
    cfg = TrlBenchConfig(contenders=order, repeats=1, steps=1, warmup_steps=1, prompts=2, group_size=2,
                         max_new_tokens=6, eval_problems=0, threads=1, gemm_repeats=1, out=str(out))
    assert run(cfg) == 0
    res = json.loads(out.read_text())
    by = {r["contender"]: r for r in res["runs"]}
    assert by["ours_lean"]["run_options"]["group_prompt_once"] and not by["ours_lean"]["bf16"]
    assert by["ours_lean"]["peak_rss_gb"] > 0
    assert "ours_no_filter/ours_lean" in res["summary"]["ratios"]
    if "ours_lean_bf16" in by:
        assert by["ours_lean_bf16"]["bf16"] and by["ours_lean_bf16"]["mismatch_logp_mean"] > 0
        assert res["limit"]["bf16"]["train_flops_per_s"] > 0
        assert "ours_lean/ours_lean_bf16" in res["summary"]["ratios"]
