"""Contract every generation backend must satisfy (``backends.protocol``), run against each importable backend."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
import backend_models
from backend_models import FACTORIES, VLLM_SHAPE

from llm_harness.backends import BACKENDS, SamplingParams

# every backend runs the same models: head size 32, the smallest vLLM supports (backend_models.VLLM_SHAPE)
def tiny_qwen2(*args, **kw):
    return backend_models.tiny_qwen2(*args, **VLLM_SHAPE, **kw)


def successor_model(*args, **kw):
    return backend_models.successor_model(*args, **VLLM_SHAPE, **kw)


def tiny_gpt2(*args, **kw):
    return backend_models.tiny_gpt2(*args, num_heads=1, **kw)


#: fp32 generation vs teacher forcing (<= 1e-4).
LOGPROB_ATOL = 1e-4

PROMPTS = [[7], [3, 14, 15, 9], [2, 6, 5, 3, 5, 8, 9, 7, 9]]


def test_every_registered_backend_is_tested():
    assert set(FACTORIES) == set(BACKENDS)


def _check_against_score(backend, prompts, results, **score_kw):
    worst = 0.0
    for p, samples in zip(prompts, results):
        for s in samples:
            assert len(s.token_ids) >= 1
            sc = backend.score(p, list(s.token_ids), with_entropy=False, **score_kw)
            worst = max(worst, float(np.max(np.abs(sc.logprobs - np.asarray(s.sampling_logprobs)))))
    assert worst <= LOGPROB_ATOL, worst
    return worst


@pytest.mark.parametrize(
    "temperature,top_k,top_p",
    [(1.0, 0, 1.0), (0.7, 0, 1.0), (1.3, 5, 1.0), (1.0, 0, 0.8), (0.9, 8, 0.9)],
)
def test_behaviour_logprobs_equal_teacher_forced_score(make_backend, temperature, top_k, top_p):
    backend = make_backend(tiny_qwen2(50, seed=1))
    sp = SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p, max_new_tokens=12, seed=3)
    results = backend.generate(PROMPTS, 3, sp)
    assert [len(r) for r in results] == [3, 3, 3]
    _check_against_score(backend, PROMPTS, results, temperature=temperature, top_k=top_k, top_p=top_p)


def test_truncated_behaviour_logprobs_differ_from_untruncated_score(make_backend):
    """The convention is visible: with top-p the behaviour log-prob is the renormalised nucleus one."""
    backend = make_backend(tiny_qwen2(50, seed=1))
    sp = SamplingParams(temperature=1.0, top_p=0.5, max_new_tokens=8, seed=0)
    s = backend.generate([[4, 5]], 1, sp)[0][0]
    raw = backend.score([4, 5], list(s.token_ids), with_entropy=False).logprobs
    assert np.all(np.asarray(s.sampling_logprobs) >= raw - 1e-6)
    assert np.max(np.asarray(s.sampling_logprobs) - raw) > 1e-3


def test_same_seed_same_samples_different_seed_differs(make_backend):
    backend = make_backend(tiny_qwen2(50, seed=2))
    sp = SamplingParams(max_new_tokens=10, seed=11)
    a = backend.generate(PROMPTS, 4, sp)
    b = backend.generate(PROMPTS, 4, sp)
    c = backend.generate(PROMPTS, 4, SamplingParams(max_new_tokens=10, seed=12))
    assert a == b
    toks = lambda r: [s.token_ids for row in r for s in row]  # noqa: E731
    assert toks(a) != toks(c)
    # the n samples of one state are not copies of each other
    assert len({s.token_ids for s in a[2]}) > 1


def test_prefix_continuation_only_returns_new_tokens(make_backend):
    backend = make_backend(successor_model(16))
    prompt, prefix = [2, 3], [4, 5, 6]
    out = backend.generate([prompt + prefix], 3, SamplingParams(max_new_tokens=4, seed=0))[0]
    for s in out:
        # the model continues after the *last* prefix token and never repeats the state
        assert s.token_ids == (7, 8, 9, 10)
        assert s.finish_reason == "length"


def test_prefix_is_seen_by_the_model(make_backend):
    """Behaviour log-probs equal scores given prompt + prefix, not scores given the prompt alone."""
    backend = make_backend(tiny_qwen2(50, seed=4))
    prompt, prefix = [3, 1, 4], [1, 5, 9, 2, 6]
    s = backend.generate([prompt + prefix], 1, SamplingParams(max_new_tokens=10, seed=5))[0][0]
    with_prefix = backend.score(prompt + prefix, list(s.token_ids), with_entropy=False).logprobs
    without_prefix = backend.score(prompt, list(s.token_ids), with_entropy=False).logprobs
    assert np.max(np.abs(with_prefix - np.asarray(s.sampling_logprobs))) <= LOGPROB_ATOL
    assert np.max(np.abs(without_prefix - np.asarray(s.sampling_logprobs))) > 1e-2


@pytest.mark.parametrize("family", ["qwen2", "gpt2"])
def test_left_padded_batch_matches_unpadded_single_prompts(make_backend, family):
    # GPT-2 has absolute position embeddings, so wrong positions under left padding would show;
    # Qwen2's rotary embeddings only see position differences
    backend = make_backend(tiny_qwen2(50, seed=5) if family == "qwen2" else tiny_gpt2(50, seed=5))
    prompts = [[1], [9, 8, 7, 6, 5, 4, 3, 2, 1, 11, 12, 13], [20, 21, 22, 23, 24]]
    batched = backend.generate(prompts, 4, SamplingParams(max_new_tokens=9, seed=6))
    # every sampled token, scored on its own unpadded sequence, has the behaviour log-prob
    _check_against_score(backend, prompts, batched)
    # greedy decoding is deterministic: batched with padding == one prompt at a time
    greedy = SamplingParams(temperature=0.0, max_new_tokens=9)
    together = backend.generate(prompts, 2, greedy)
    for p, row in zip(prompts, together):
        alone = backend.generate([p], 1, greedy)[0][0]
        assert all(s.token_ids == alone.token_ids for s in row)
        assert all(lp == 0.0 for s in row for lp in s.sampling_logprobs)


def test_stop_tokens_end_samples(make_backend):
    backend = make_backend(successor_model(16))
    out = backend.generate([[1], [9]], 2, SamplingParams(max_new_tokens=8, stop_token_ids=(5,), seed=0))
    assert [s.token_ids for s in out[0]] == [(2, 3, 4, 5)] * 2
    assert [s.finish_reason for s in out[0]] == ["stop"] * 2
    # a sample that never meets the stop token ends by length (and wraps around the vocabulary)
    assert [s.token_ids for s in out[1]] == [(10, 11, 12, 13, 14, 15, 0, 1)] * 2
    assert [s.finish_reason for s in out[1]] == ["length"] * 2


def test_entropy_equals_full_softmax_entropy(make_backend):
    for vocab, chunk_bytes in ((50, 2**30), (32_000, 3 * 32_000 * 10)):
        model = tiny_qwen2(vocab, seed=7)
        backend = make_backend(model, score_chunk_bytes=chunk_bytes)
        ctx, comp = [5, 17, 2, 9], [33, 1, 40, 8, 8, 21, 3]
        res = backend.score(ctx, comp, temperature=0.8)
        with torch.no_grad():
            ref = copy.deepcopy(model).cpu()
            logits = ref(torch.tensor([ctx + comp])).logits[0].double() / 0.8
        pos = slice(len(ctx) - 1, len(ctx) - 1 + len(comp))
        logp = torch.log_softmax(logits[pos], dim=-1)
        ent = -(logp.exp() * logp).sum(-1).numpy()
        lp = logp[torch.arange(len(comp)), torch.tensor(comp)].numpy()
        np.testing.assert_allclose(res.entropies, ent, atol=1e-4, rtol=1e-5)
        np.testing.assert_allclose(res.logprobs, lp, atol=1e-4, rtol=1e-5)
