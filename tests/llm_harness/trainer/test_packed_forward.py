"""``run.packed_forward``: the decoder on the real tokens only gives the HF forward's log-probs and gradients."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "backends"))
from backend_models import tiny_gpt2, tiny_qwen2  # noqa: E402

from llm_harness.trainer.modeling import sequence_logprobs  # noqa: E402
from llm_harness.trainer.packed_forward import packed_hidden, right_padded, supports  # noqa: E402

MID = Path(__file__).resolve().parents[3] / "llm_harness" / "testbed" / "checkpoints" / "mid"


def _model(seed: int, llama: bool = False, **cfg):
    """A random Qwen2 (or Llama: SmolLM2's family) whose biases and norm weights are not HF's init (zeros, ones),
    so mistakes in them show."""
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    kw = dict(vocab_size=40, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
              intermediate_size=64, max_position_embeddings=64, pad_token_id=0)
    kw.update(cfg)
    model = LlamaForCausalLM(LlamaConfig(**kw)) if llama else Qwen2ForCausalLM(Qwen2Config(**kw))
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n.endswith("bias") or "norm" in n:
                p.add_(0.3 * torch.randn_like(p))
    return model


def _batch(vocab: int, rows: int, width: int, seed: int, shortest: int = 1):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(shortest, width + 1, (rows,), generator=g)
    lengths[0] = width
    mask = (torch.arange(width)[None] < lengths[:, None]).long()
    ids = torch.randint(2, vocab, (rows, width), generator=g) * mask
    loss = mask.clone()[:, 1:]
    loss[:, : width // 3] = 0  # targets start after a "prompt"
    return ids, mask, loss


def _grads(model):
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("seed, attention, cfg", [
    (0, "auto", {}),
    (1, "matmul", {}),
    (2, "sdpa", {}),
    (3, "matmul", {"num_key_value_heads": 1, "head_dim": 16}),  # one kv head; head_dim != hidden / heads
    (4, "sdpa", {"num_key_value_heads": 1, "head_dim": 16}),
    (5, "matmul", {"num_attention_heads": 8, "num_key_value_heads": 2, "tie_word_embeddings": True}),
    (6, "matmul", {"llama": True, "tie_word_embeddings": True, "rope_theta": 100000.0}),  # SmolLM2's family
    (7, "sdpa", {"llama": True, "attention_bias": True}),  # q/k/v/o biases
])
def test_hidden_states_and_gradients_equal_the_hf_forward(seed, attention, cfg):
    model = _model(seed, **cfg).train()
    ids, mask, _ = _batch(40, 7, 13, seed)
    w = torch.randn(*ids.shape, model.config.hidden_size, generator=torch.Generator().manual_seed(seed + 10))
    real = mask.bool()
    out = {}
    for name in ("hf", "packed"):
        model.zero_grad(set_to_none=True)
        if name == "hf":
            h = model.get_decoder()(input_ids=ids, attention_mask=mask).last_hidden_state
        else:
            h = packed_hidden(model, ids, mask, attention=attention)
        (h[real] * w[real]).sum().backward()
        out[name] = (h.detach(), _grads(model))
    torch.testing.assert_close(out["packed"][0][real], out["hf"][0][real], rtol=1e-5, atol=1e-5)
    assert float(out["packed"][0][~real].abs().max()) == 0.0  # padded positions stay zero
    assert out["packed"][1].keys() == out["hf"][1].keys() and len(out["hf"][1]) > 10
    for n, g in out["hf"][1].items():  # float32 summation order: differences relative to the gradient's scale
        assert float((out["packed"][1][n] - g).abs().max()) <= 5e-5 * float(g.abs().max()) + 1e-8, n


def test_empty_rows_and_unpadded_batches():
    model = _model(6)
    ids, mask, _ = _batch(40, 5, 9, 6, shortest=0)
    mask[1] = 0  # an empty row: every position padding
    h = packed_hidden(model, ids * mask, mask)
    assert bool(torch.isfinite(h).all()) and float(h[1].detach().abs().max()) == 0.0
    full = torch.ones_like(mask)
    ref = model.get_decoder()(input_ids=ids, attention_mask=full).last_hidden_state
    torch.testing.assert_close(packed_hidden(model, ids, full), ref, rtol=1e-5, atol=1e-5)


def test_bfloat16_rounding_is_of_the_hf_forwards_size():
    """In bfloat16 both forwards are off the float32 result by rounding; the packed one by no more than HF's."""
    model = _model(7)
    ids, mask, _ = _batch(40, 6, 12, 7)
    real = mask.bool()
    with torch.no_grad():
        ref = model.get_decoder()(input_ids=ids, attention_mask=mask).last_hidden_state[real]
        low = _model(7).to(torch.bfloat16)
        hf = low.get_decoder()(input_ids=ids, attention_mask=mask).last_hidden_state[real].float()
        pk = packed_hidden(low, ids, mask)
    assert pk.dtype == torch.bfloat16
    err_hf, err_pk = float((hf - ref).abs().max()), float((pk.float()[real] - ref).abs().max())
    assert 0 < err_hf < 0.5 and err_pk <= 1.5 * err_hf, (err_hf, err_pk)


def test_sequence_logprobs_agree_and_fall_back_on_left_padding():
    torch.manual_seed(3)
    model = tiny_qwen2(40).eval()
    ids, mask, loss = _batch(40, 6, 11, 3)
    with torch.no_grad():
        a, ea = sequence_logprobs(model, ids, mask, loss)
        b, eb = sequence_logprobs(model, ids, mask, loss, packed=True)
    torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(eb, ea, rtol=1e-5, atol=1e-5)
    assert float(a[loss == 0].abs().max()) == 0.0 and float(a[loss > 0].abs().min()) > 0
    left = torch.flip(mask, dims=[1])  # not right-padded: the HF forward runs
    assert right_padded(mask) and not right_padded(left)
    with torch.no_grad():
        c, _ = sequence_logprobs(model, ids, left, loss * left[:, 1:], packed=True)
        d, _ = sequence_logprobs(model, ids, left, loss * left[:, 1:])
    assert torch.equal(c, d)
    with pytest.raises(ValueError, match="right-padded"):
        packed_hidden(model, ids, left)
    with pytest.raises(ValueError, match="attention"):
        packed_hidden(model, ids, mask, attention="flash")
    with pytest.raises(ValueError, match="share_prefix is an alternative"):
        sequence_logprobs(model, ids, mask, loss, packed=True, share_prefix=True)


def test_unsupported_models_and_configs_are_refused(tmp_path):
    from llm_harness.trainer.config import RolloutConfig, RunConfig, TrainConfig
    from trainer_support import make_trainer, tiny_config

    assert supports(tiny_qwen2(40)) is None
    assert "gpt2" in supports(tiny_gpt2(40))
    with pytest.raises(ValueError, match="packed forward does not support"):
        packed_hidden(tiny_gpt2(40), torch.ones((1, 3), dtype=torch.long), torch.ones((1, 3), dtype=torch.long))
    with pytest.raises(ValueError, match="packed_forward: must be a bool"):
        RunConfig(run_dir=str(tmp_path), packed_forward=1)
    cfg = tiny_config(str(tmp_path / "r"))
    assert make_trainer(str(tmp_path / "ok"), run=replace(cfg.run, run_dir=str(tmp_path / "ok"), packed_forward=True))
    import llm_harness.trainer.packed_forward as pf

    with pytest.MonkeyPatch.context() as mp:  # the trainer asks packed_forward.supports and refuses with its reason
        mp.setattr(pf, "supports", lambda model: "a reason")
        with pytest.raises(ValueError, match="packed_forward: not available for this model \\(a reason\\)"):
            make_trainer(str(tmp_path / "no"), run=replace(cfg.run, run_dir=str(tmp_path / "no"), packed_forward=True))
    assert TrainConfig(run=RunConfig(run_dir=str(tmp_path), packed_forward=True), rollout=RolloutConfig(share_prefix=True))


def test_with_share_prefix_sampling_shares_and_the_loss_pass_packs(tmp_path, monkeypatch):
    from llm_harness.trainer import modeling
    from trainer_support import make_trainer, tiny_config

    calls = []
    real = modeling.packed_hidden
    monkeypatch.setattr(modeling, "packed_hidden", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    cfg = tiny_config(str(tmp_path))
    tr = make_trainer(str(tmp_path), run=replace(cfg.run, packed_forward=True),
                      rollout=replace(cfg.rollout, share_prefix=True))
    try:
        assert tr.backend.config.share_prefix is True
        rows = [tr.train_step() for _ in range(2)]
    finally:
        tr.close()
    assert any(r["optimizer_steps"] > 0 for r in rows) and len(calls) > 0


@pytest.mark.parametrize("group_prompt", [False, True])  # True: with run.group_prompt_once (trainer.packed_group)
def test_training_with_the_packed_forward_logs_the_same_metrics(tmp_path, group_prompt):
    """Three GRPO steps on a random tiny Qwen2 with and without ``run.packed_forward`` (and, parametrized, with
    ``run.group_prompt_once`` beside it): the same samples in step 1, and every metric of the three steps equal up
    to float rounding (the updates differ in the last bits)."""
    from llm_harness.trainer.runlog import is_timing_key
    from trainer_support import make_trainer, tiny_config

    torch.set_num_threads(1)
    rows = {}
    for packed in (False, True):
        run = replace(tiny_config(str(tmp_path / f"r{packed}")).run, packed_forward=packed,
                      group_prompt_once=packed and group_prompt)
        tr = make_trainer(str(tmp_path / f"r{packed}"), run=run)
        try:
            rows[packed] = [{k: v for k, v in tr.train_step().items() if not is_timing_key(k)} for _ in range(3)]
        finally:
            tr.close()
    assert any(r["optimizer_steps"] > 0 for r in rows[True])
    for fast, plain in zip(rows[True], rows[False]):
        assert sorted(fast) == sorted(plain)
        for k, v in plain.items():
            if isinstance(v, float) and v != v:
                assert fast[k] != fast[k], k
            elif isinstance(v, float):
                assert fast[k] == pytest.approx(v, rel=1e-4, abs=1e-6), k
            else:
                assert fast[k] == v, k


@pytest.mark.skipif(not (MID / "config.json").is_file(), reason="test-bed checkpoint not present")
def test_the_test_bed_model_gives_the_same_logprobs():
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(1)
    model = AutoModelForCausalLM.from_pretrained(MID, local_files_only=True).float().eval()
    ids, mask, loss = _batch(int(model.config.vocab_size), 16, 40, 7)
    out = {}
    for packed in (False, True):
        model.zero_grad(set_to_none=True)
        lp, _ = sequence_logprobs(model, ids, mask, loss, packed=packed, with_entropy=False)
        lp.sum().backward()
        out[packed] = (lp.detach(), [p.grad.clone() for p in model.parameters()])
    torch.testing.assert_close(out[True][0], out[False][0], rtol=1e-5, atol=2e-5)
    for a, b in zip(out[True][1], out[False][1]):
        assert float((a - b).abs().max()) <= 1e-5 * float(b.abs().max()) + 1e-8
