"""HF backend specifics: shared prefill, early exit, cache compaction, loading, bad input."""

from __future__ import annotations

import types

import numpy as np
import pytest
import torch
from backend_models import successor_model, tiny_qwen2

from llm_harness.backends import HFBackend, HFBackendConfig, SamplingParams, continuation_budget
from llm_harness.backends.protocol import GenerationBackend


def _backend(model, **cfg):
    cfg.setdefault("pad_token_id", 0)
    return HFBackend(model, config=HFBackendConfig(**cfg))


def _record_decoder_batches(backend):
    """Wrap the decoder so every call records (batch, new tokens)."""
    calls = []
    inner = backend._decoder.forward

    def wrapped(*args, **kwargs):
        ids = kwargs["input_ids"]
        calls.append(tuple(ids.shape))
        return inner(*args, **kwargs)

    backend._decoder.forward = wrapped
    return calls


def test_satisfies_protocol():
    assert isinstance(_backend(tiny_qwen2()), GenerationBackend)


def test_prefill_once_then_expand_cache_for_n_samples():
    backend = _backend(tiny_qwen2(50))
    calls = _record_decoder_batches(backend)
    backend.generate([[1, 2, 3], [4, 5]], 5, SamplingParams(max_new_tokens=4, seed=0))
    assert calls[0] == (2, 3)  # one prefill over the 2 distinct, left-padded states
    assert calls[1:] == [(10, 1)] * 3  # then 2 x 5 rows decode from the shared cache


def test_early_exit_and_compaction():
    backend = _backend(successor_model(16), compact_fraction=0.25)
    calls = _record_decoder_batches(backend)
    # state [1] stops after 4 tokens (stop id 5); state [9] runs to the length limit
    out = backend.generate([[1], [9]], 2, SamplingParams(max_new_tokens=8, stop_token_ids=(5,), seed=0))
    assert [s.finish_reason for s in out[0] + out[1]] == ["stop", "stop", "length", "length"]
    decode_rows = [b for b, _ in calls[1:]]
    assert decode_rows[:3] == [4, 4, 4] and set(decode_rows[3:]) == {2}  # finished rows dropped
    # all rows stop: the loop ends when the last row finishes, not at max_new_tokens
    calls.clear()
    backend.generate([[1], [2]], 3, SamplingParams(max_new_tokens=50, stop_token_ids=(5,), seed=0))
    assert len(calls) == 1 + 3  # prefill + decode steps until [1] has emitted 2,3,4,5


def test_compaction_does_not_change_greedy_outputs():
    model = tiny_qwen2(50, seed=8)
    prompts = [[1, 2], [3], [4, 5, 6, 7], [8, 9, 10]]
    sp = SamplingParams(temperature=0.0, max_new_tokens=15, stop_token_ids=(3, 7, 11, 19))
    a = _backend(model, compact_fraction=0.01).generate(prompts, 2, sp)
    b = _backend(model, compact_fraction=1.0).generate(prompts, 2, sp)
    assert a == b
    assert {s.finish_reason for row in a for s in row} == {"stop", "length"}


def test_micro_batching_and_compaction_keep_logprobs_exact():
    backend = _backend(tiny_qwen2(50, seed=9), max_batch_sequences=4, compact_fraction=0.1)
    prompts = [[i, i + 1, (3 * i) % 50] for i in range(1, 6)]
    sp = SamplingParams(max_new_tokens=10, stop_token_ids=(2, 4, 6, 8, 10), seed=1)
    out = backend.generate(prompts, 3, sp)
    ctx = [p for p, row in zip(prompts, out) for _ in row]
    comp = [list(s.token_ids) for row in out for s in row]
    scored = backend.score_batch(ctx, comp, with_entropy=False)
    got = np.concatenate([np.asarray(s.sampling_logprobs) for row in out for s in row])
    want = np.concatenate([r.logprobs for r in scored])
    assert np.max(np.abs(got - want)) <= 1e-4


def test_score_batch_equals_individual_scores():
    backend = _backend(tiny_qwen2(50, seed=10), score_max_batch_tokens=20, score_chunk_bytes=2000)
    ctxs = [[1], [2, 3, 4, 5, 6], [7, 8], [9, 10, 11]]
    comps = [[12, 13, 14], [], [15], [16, 17, 18, 19, 20, 21]]
    batch = backend.score_batch(ctxs, comps)
    for c, y, r in zip(ctxs, comps, batch):
        single = backend.score(c, y)
        assert len(r) == len(y)
        np.testing.assert_allclose(r.logprobs, single.logprobs, atol=1e-5)
        np.testing.assert_allclose(r.entropies, single.entropies, atol=1e-5)


def test_from_pretrained_round_trip(tmp_path):
    model = tiny_qwen2(50, seed=11, eos_token_id=4)
    model.save_pretrained(tmp_path / "m")
    loaded = HFBackend.from_pretrained(str(tmp_path / "m"), config=HFBackendConfig(model=str(tmp_path / "m"), device="cpu"))
    assert loaded.tokenizer is None and loaded.pad_token_id == 4 and loaded.eos_token_ids == (4,)
    a = _backend(model).score([1, 2, 3], [5, 6, 7])
    b = loaded.score([1, 2, 3], [5, 6, 7])
    np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-6)
    with pytest.raises(ValueError, match="^model"):
        HFBackend.from_config(HFBackendConfig())


def test_eos_stops_unless_ignored():
    model = successor_model(16)
    model.generation_config.eos_token_id = 6
    backend = HFBackend(model, config=HFBackendConfig(pad_token_id=0))
    assert backend.generate([[3]], 1, SamplingParams(max_new_tokens=6))[0][0].token_ids == (4, 5, 6)
    ignored = backend.generate([[3]], 1, SamplingParams(max_new_tokens=6, ignore_eos=True))[0][0]
    assert ignored.token_ids == (4, 5, 6, 7, 8, 9) and ignored.finish_reason == "length"


def test_pad_token_resolution():
    model = tiny_qwen2(50)
    no_pad = types.SimpleNamespace(pad_token_id=None, eos_token_id=7)
    assert HFBackend(model, no_pad).pad_token_id == 7  # tokenizer without pad: use its EOS
    with_pad = types.SimpleNamespace(pad_token_id=9, eos_token_id=7)
    assert HFBackend(model, with_pad).pad_token_id == 9
    with pytest.raises(ValueError, match="^tokenizer: has no pad token"):
        HFBackend(model, types.SimpleNamespace(pad_token_id=None, eos_token_id=None))
    with pytest.raises(ValueError, match="^pad_token_id"):
        HFBackend(model, config=HFBackendConfig(pad_token_id=50))


def test_softcapped_logits_are_detected():
    class Wrapped(torch.nn.Module):
        """A causal LM whose logits are not lm_head(decoder output)."""

        def __init__(self, inner):
            super().__init__()
            self.inner, self.config, self.base_model_prefix = inner, inner.config, "inner"
            self.generation_config = inner.generation_config

        def get_decoder(self):
            return self.inner.model

        def get_output_embeddings(self):
            return self.inner.lm_head

        def forward(self, input_ids):
            return types.SimpleNamespace(logits=30 * torch.tanh(self.inner(input_ids=input_ids).logits / 30))

    with pytest.raises(ValueError, match="^model: .* not lm_head"):
        _backend(Wrapped(tiny_qwen2(50)))


@pytest.mark.parametrize(
    "prompts,n,sp,match",
    [
        ([], 1, SamplingParams(max_new_tokens=8), "^prompt_ids: must contain"),
        ([[]], 1, SamplingParams(max_new_tokens=8), r"^prompt_ids\[0\]: must not be empty"),
        ([[1, 2], []], 1, SamplingParams(max_new_tokens=8), r"^prompt_ids\[1\]: must not be empty"),
        ([[1, 50]], 1, SamplingParams(max_new_tokens=8), r"^prompt_ids\[0\]\[1\]: token id 50 outside"),
        ([[1, -1]], 1, SamplingParams(max_new_tokens=8), r"^prompt_ids\[0\]\[1\]"),
        ("abc", 1, SamplingParams(max_new_tokens=8), "^prompt_ids: must be a list"),
        ([[1] * 128], 1, SamplingParams(max_new_tokens=1), r"^prompt_ids\[0\]: length 128 leaves no room"),
        ([[1] * 100], 1, SamplingParams(max_new_tokens=40), r"^prompt_ids\[0\]: length 100 \+ max_new_tokens 40 exceeds"),
        ([[1]], 0, SamplingParams(max_new_tokens=8), "^n: must be >= 1"),
        ([[1]], 1, SamplingParams(max_new_tokens=8, stop_token_ids=(99,)), "^stop_token_ids: token id 99"),
        ([[1]], 1, dict(temperature=1.0), "^sampling: must be a SamplingParams"),
    ],
)
def test_generate_rejects_bad_input(prompts, n, sp, match):
    backend = _backend(tiny_qwen2(50, max_positions=128))
    with pytest.raises(ValueError, match=match):
        backend.generate(prompts, n, sp)


@pytest.mark.parametrize(
    "ctx,comp,kw,match",
    [
        ([], [1], {}, r"^context_ids\[0\]: must not be empty"),
        ([1], [1], dict(temperature=0.0), "^temperature: must be a finite number > 0"),
        ([1], [1], dict(top_p=0.0), "^top_p"),
        ([1] * 100, [1] * 29, {}, r"^context_ids\[0\]: context 100 \+ completion 29 tokens exceed"),
        ([1], [77], {}, r"^completion_ids\[0\]\[0\]: token id 77 outside"),
    ],
)
def test_score_rejects_bad_input(ctx, comp, kw, match):
    backend = _backend(tiny_qwen2(50, max_positions=128))
    with pytest.raises(ValueError, match=match):
        backend.score(ctx, comp, **kw)


def test_score_batch_length_mismatch():
    with pytest.raises(ValueError, match="^completion_ids: 1 completions for 2 contexts"):
        _backend(tiny_qwen2(50)).score_batch([[1], [2]], [[3]])


def test_continuation_budget():
    assert continuation_budget(0, 10) == 10
    assert continuation_budget(7, 10) == 3
    with pytest.raises(ValueError, match="^prefix_len: prefix of 10 tokens is not shorter than the response budget of 10"):
        continuation_budget(10, 10)
    with pytest.raises(ValueError, match="^prefix_len"):
        continuation_budget(-1, 10)


def test_config_rejects_bad_values():
    with pytest.raises(ValueError, match="^dtype"):
        HFBackendConfig(dtype="float8")
    with pytest.raises(ValueError, match="^compact_fraction"):
        HFBackendConfig(compact_fraction=0.0)
    with pytest.raises(ValueError, match="^max_batch_sequences"):
        HFBackendConfig(max_batch_sequences=0)
    with pytest.raises(ValueError, match="^device"):
        from llm_harness.backends.hf_backend import _resolve_device

        if torch.cuda.is_available():
            pytest.skip("CUDA present")
        _resolve_device("cuda")
