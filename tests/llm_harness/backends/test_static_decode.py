"""HFBackend's opt-in ``static_decode``: the same samples and log-probs as the HF decode step."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
import torch
from backend_models import tiny_gpt2, tiny_llama, tiny_qwen2

from llm_harness.backends import HFBackend, HFBackendConfig, SamplingParams
from llm_harness.backends.static_decode import StaticQwen2Decoder, supports

MID = Path(__file__).resolve().parents[3] / "llm_harness" / "testbed" / "checkpoints" / "mid"


def _prompts(seed=0, n=7):
    rng = np.random.default_rng(seed)
    return [rng.integers(2, 50, int(k)).tolist() for k in rng.integers(1, 12, n)]


def _same(a, b, atol=1e-5, rtol=1e-5):
    """Same tokens and finish reasons, and sampling log-probs equal up to float32 rounding (the two paths sum the
    attention in different orders: a log-prob of -3.7 has been seen 1.2e-5 apart, 3e-6 relative)."""
    n = 0
    for ra, rb in zip(a, b):
        for sa, sb in zip(ra, rb):
            assert sa.token_ids == sb.token_ids and sa.finish_reason == sb.finish_reason
            np.testing.assert_allclose(sa.sampling_logprobs, sb.sampling_logprobs, atol=atol, rtol=rtol)
            n += len(sa.token_ids)
    return n


@pytest.mark.parametrize("family", [tiny_qwen2, tiny_llama])
def test_one_step_equals_the_hf_step(family):
    """Prefill a left-padded batch through HF, then one decode step both ways: logits agree."""
    torch.manual_seed(0)
    model = family(50)
    be = HFBackend(model, config=HFBackendConfig(pad_token_id=0))
    ids = torch.tensor([[0, 0, 5, 6, 7], [3, 4, 5, 6, 7], [0, 9, 8, 7, 6]])
    mask = (ids != 0).long()
    mask[1, 0] = 1
    pos = (mask.cumsum(-1) - 1).clamp_min(0)
    with torch.inference_mode():
        _, cache = be._decode(ids, mask, pos, be._new_cache())
        fast = StaticQwen2Decoder.from_cache(model, copy.deepcopy(cache), extra=4)
        tok = torch.tensor([11, 12, 13])
        nxt = pos[:, -1] + 1
        for step in range(3):  # several steps: positions and cache columns advance
            mask = torch.cat([mask, mask.new_ones((3, 1))], dim=1)
            h_hf, cache = be._decode(tok[:, None], mask, (nxt + step)[:, None], cache)
            h_fast = fast.step(tok, nxt + step, mask)
            torch.testing.assert_close(h_fast, h_hf[:, -1], rtol=1e-5, atol=1e-6)
            tok = be._logits(h_hf[:, -1]).argmax(-1)
        with pytest.raises(ValueError, match="mask"):
            fast.step(tok, nxt, mask)  # one column short
        fast.step(tok, nxt + 3, torch.cat([mask, mask.new_ones((3, 1))], dim=1))
        with pytest.raises(ValueError, match="full"):
            fast.step(tok, nxt + 4, torch.ones((3, 10), dtype=torch.long))


@pytest.mark.parametrize("temperature, top_p", [(1.0, 1.0), (0.7, 0.9), (0.0, 1.0)])
@pytest.mark.parametrize("share_prefix", [False, True])
@pytest.mark.parametrize("family", [tiny_qwen2, tiny_llama])
def test_generate_gives_the_same_samples(temperature, top_p, share_prefix, family):
    model = family(50, eos_token_id=7)
    kw = dict(pad_token_id=0, share_prefix=share_prefix, compact_fraction=0.1, max_batch_sequences=12)
    plain = HFBackend(model, config=HFBackendConfig(**kw))
    fast = HFBackend(model, config=HFBackendConfig(static_decode=True, **kw))
    sp = SamplingParams(temperature=temperature, top_p=top_p, max_new_tokens=12, seed=5)
    a, b = plain.generate(_prompts(), 3, sp), fast.generate(_prompts(), 3, sp)
    assert _same(a, b) > 0
    if family is tiny_qwen2 or temperature > 0:  # (the tiny Llama's greedy rows never draw the stop token)
        assert any(s.finish_reason == "stop" for r in a for s in r)  # compaction ran (rows finished early)


@pytest.mark.skipif(not (MID / "config.json").is_file(), reason="test-bed checkpoint not present")
def test_the_test_bed_model_gives_the_same_samples():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from llm_harness.tasks import get_task
    from llm_harness.trainer.modeling import Codec

    torch.set_num_threads(1)
    model = AutoModelForCausalLM.from_pretrained(MID, local_files_only=True).float().eval()
    tok = AutoTokenizer.from_pretrained(MID, local_files_only=True)
    task = get_task("step_arith")
    prompts = [list(Codec(tok).encode(task.render_prompt(p, tok))) for p in task.problems("train")[:6]]
    sp = SamplingParams(temperature=1.0, max_new_tokens=48, seed=11)
    cfg = dict(pad_token_id=tok.pad_token_id)
    a = HFBackend(model, tok, config=HFBackendConfig(**cfg)).generate(prompts, 4, sp)
    b = HFBackend(model, tok, config=HFBackendConfig(static_decode=True, **cfg)).generate(prompts, 4, sp)
    assert _same(a, b) > 50


def test_unsupported_models_are_refused():
    assert supports(tiny_qwen2(50)) is None and supports(tiny_llama(50)) is None
    from transformers import LlamaConfig, LlamaForCausalLM

    biased = LlamaForCausalLM(LlamaConfig(vocab_size=50, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                                          intermediate_size=64, mlp_bias=True))
    assert supports(biased) == "MLP biases"
    assert "gpt2" in supports(tiny_gpt2(50))
    with pytest.raises(ValueError, match="static_decode: not available"):
        HFBackend(tiny_gpt2(50), config=HFBackendConfig(pad_token_id=0, static_decode=True))


def test_training_with_static_decode_logs_the_same_metrics(tmp_path):
    """Three GRPO steps on a random tiny Qwen2 with ``run.static_decode``: the same samples, so every count equal
    and every float metric equal up to the decode step's rounding (behaviour log-probs differ in the last bits)."""
    from dataclasses import replace

    from llm_harness.trainer.runlog import is_timing_key
    from trainer_support import make_trainer, tiny_config

    torch.set_num_threads(1)
    rows = {}
    for static in (False, True):
        run = replace(tiny_config(str(tmp_path / f"r{static}")).run, static_decode=static)
        tr = make_trainer(str(tmp_path / f"r{static}"), run=run)
        assert tr.backend.config.static_decode is static
        try:
            rows[static] = [{k: (None if isinstance(v, float) and v != v else v)  # NaN -> None (NaN != NaN)
                             for k, v in tr.train_step().items() if not is_timing_key(k)} for _ in range(3)]
        finally:
            tr.close()
    assert [sorted(r) for r in rows[True]] == [sorted(r) for r in rows[False]]
    for fast, plain in zip(rows[True], rows[False]):
        for k, v in plain.items():
            if isinstance(v, float) and not float(v).is_integer():
                assert fast[k] == pytest.approx(v, rel=1e-5, abs=1e-7), k
            else:
                assert fast[k] == v, k  # counts, rewards of the same samples, NaN-free flags
    assert sum(r["gen_new_tokens"] for r in rows[True]) > 0 and any(r["optimizer_steps"] > 0 for r in rows[True])
