"""Chunked exact log-probs / entropies against a direct full-softmax computation."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from llm_harness.backends import chunked_logprobs_entropy, rows_per_chunk, sampling_log_probs
from llm_harness.backends.scoring import BYTES_PER_ENTRY, make_workspace


def _direct(hidden, weight, targets, temperature, top_k=0, top_p=1.0):
    """Reference in float64 over the whole [N, V] logits at once."""
    z = hidden.double() @ weight.double().T
    logp = torch.log_softmax(z / temperature, dim=-1)
    ent = -(logp.exp() * logp).sum(-1)
    lq = sampling_log_probs(z, temperature, top_k, top_p)
    return lq.gather(-1, targets[:, None]).squeeze(-1), ent


class _CountingHead(torch.nn.Module):
    def __init__(self, weight):
        super().__init__()
        self.weight = torch.nn.Parameter(weight)
        self.max_rows = 0

    def forward(self, h):
        self.max_rows = max(self.max_rows, h.shape[0])
        return h @ self.weight.T


@given(
    n=st.integers(1, 23),
    vocab=st.sampled_from([2, 26, 300]),
    chunk=st.integers(1, 9),
    temperature=st.sampled_from([1.0, 0.6, 1.7]),
    scale=st.sampled_from([0.1, 3.0, 300.0]),
    seed=st.integers(0, 2**16),
)
def test_chunked_equals_direct(n, vocab, chunk, temperature, scale, seed):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(n, 8, generator=g) * scale
    weight = torch.randn(vocab, 8, generator=g)
    targets = torch.randint(0, vocab, (n,), generator=g)
    head = _CountingHead(weight)
    with torch.no_grad():
        lp, ent = chunked_logprobs_entropy(hidden, head, targets, chunk_size=chunk, temperature=temperature)
    ref_lp, ref_ent = _direct(hidden, weight, targets, temperature)
    # float32 logits of magnitude up to |z|: absolute error scales with it
    zmax = float((hidden @ weight.T).abs().max()) / temperature
    tol = 1e-6 * (1.0 + zmax) * 8
    np.testing.assert_allclose(lp.double().numpy(), ref_lp.numpy(), atol=tol, rtol=1e-5)
    np.testing.assert_allclose(ent.double().numpy(), ref_ent.numpy(), atol=tol, rtol=1e-5)
    assert np.all(ent.numpy() >= -tol) and np.all(ent.numpy() <= np.log(vocab) + tol)
    assert head.max_rows <= chunk  # never more than one chunk of logits at a time


@pytest.mark.parametrize("top_k,top_p", [(3, 1.0), (0, 0.7), (5, 0.8)])
def test_truncated_logprobs_and_untruncated_entropy(top_k, top_p):
    g = torch.Generator().manual_seed(1)
    hidden, weight = torch.randn(11, 8, generator=g), torch.randn(40, 8, generator=g)
    z = hidden @ weight.T
    targets = torch.argmax(z, dim=-1)  # always inside the nucleus
    targets[::3] = torch.argmin(z, dim=-1)[::3]  # outside it: log-prob -inf
    lp, ent = chunked_logprobs_entropy(hidden, lambda h: h @ weight.T, targets, chunk_size=4, top_k=top_k, top_p=top_p)
    ref_lp, ref_ent = _direct(hidden, weight, targets, 1.0, top_k, top_p)
    np.testing.assert_allclose(lp.double().numpy(), ref_lp.numpy(), atol=1e-5)
    assert np.all(np.isneginf(lp.numpy()[::3]))
    np.testing.assert_allclose(ent.double().numpy(), ref_ent.numpy(), atol=1e-5)


def test_without_entropy_returns_none_and_same_logprobs():
    g = torch.Generator().manual_seed(2)
    hidden, weight = torch.randn(7, 8, generator=g), torch.randn(30, 8, generator=g)
    targets = torch.randint(0, 30, (7,), generator=g)
    head = lambda h: h @ weight.T  # noqa: E731
    lp1, ent1 = chunked_logprobs_entropy(hidden, head, targets, chunk_size=3, with_entropy=False)
    lp2, _ = chunked_logprobs_entropy(hidden, head, targets, chunk_size=3)
    assert ent1 is None
    torch.testing.assert_close(lp1, lp2)


@pytest.mark.parametrize("checkpoint", [True, False])
def test_gradients_match_direct(checkpoint):
    g = torch.Generator().manual_seed(3)
    h0, w0 = torch.randn(9, 8, generator=g), torch.randn(25, 8, generator=g)
    targets = torch.randint(0, 25, (9,), generator=g)
    h1, w1 = h0.clone().requires_grad_(), w0.clone().requires_grad_()
    lp, ent = chunked_logprobs_entropy(h1, lambda h: h @ w1.T, targets, chunk_size=2, temperature=0.8, checkpoint=checkpoint)
    (lp.sum() + 0.3 * ent.sum()).backward()
    h2, w2 = h0.clone().requires_grad_(), w0.clone().requires_grad_()
    logp = torch.log_softmax((h2 @ w2.T) / 0.8, dim=-1)
    ref = logp.gather(-1, targets[:, None]).sum() + 0.3 * (-(logp.exp() * logp).sum())
    ref.backward()
    torch.testing.assert_close(h1.grad, h2.grad, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(w1.grad, w2.grad, atol=1e-5, rtol=1e-4)


def test_rows_per_chunk_respects_the_budget():
    for vocab in (26, 32_000, 152_064):
        for budget in (1, 10**6, 256 * 2**20):
            c = rows_per_chunk(vocab, budget)
            assert c >= 1
            assert c == 1 or c * vocab * BYTES_PER_ENTRY <= budget
            assert (c + 1) * vocab * BYTES_PER_ENTRY > budget
    assert rows_per_chunk(152_064) == 176  # the example in the module docstring
    assert rows_per_chunk(1000, 10**6, truncated=True) < rows_per_chunk(1000, 10**6)
    with pytest.raises(ValueError, match="^vocab_size"):
        rows_per_chunk(0)


def test_bad_shapes_are_rejected():
    w = torch.randn(5, 4)
    with pytest.raises(ValueError, match="^hidden"):
        chunked_logprobs_entropy(torch.randn(3), lambda h: h @ w.T, torch.zeros(3, dtype=torch.long), chunk_size=1)
    with pytest.raises(ValueError, match="^targets"):
        chunked_logprobs_entropy(torch.randn(3, 4), lambda h: h @ w.T, torch.zeros(2, dtype=torch.long), chunk_size=1)
    with pytest.raises(ValueError, match="^chunk_size"):
        chunked_logprobs_entropy(torch.randn(3, 4), lambda h: h @ w.T, torch.zeros(3, dtype=torch.long), chunk_size=0)


def test_workspace_is_used_and_gives_identical_results():
    g = torch.Generator().manual_seed(4)
    hidden = torch.randn(13, 8, generator=g)
    head = torch.nn.Linear(8, 300, bias=False)
    targets = torch.randint(0, 300, (13,), generator=g)
    ws = make_workspace(5, 300)
    marker = ws[0].data_ptr()
    with torch.inference_mode():
        a = chunked_logprobs_entropy(hidden, head, targets, chunk_size=5, workspace=ws)
        b = chunked_logprobs_entropy(hidden, head, targets, chunk_size=5)
        # a workspace that is too small is ignored, not overrun
        c = chunked_logprobs_entropy(hidden, head, targets, chunk_size=5, workspace=make_workspace(2, 300))
    assert ws[0].data_ptr() == marker and torch.isfinite(ws[1][:5]).all()  # it was written into
    for x, y in ((a, b), (a, c)):
        torch.testing.assert_close(x[0], y[0], rtol=0, atol=0)
        torch.testing.assert_close(x[1], y[1], rtol=0, atol=0)
    ref_lp, ref_ent = _direct(hidden, head.weight.detach(), targets, 1.0)
    np.testing.assert_allclose(a[1].double().numpy(), ref_ent.numpy(), atol=1e-5)
    np.testing.assert_allclose(a[0].double().numpy(), ref_lp.numpy(), atol=1e-5)


def test_large_logits_stay_finite_with_autograd():
    """The max-shift keeps exp() finite in the autograd path too (logits of order 1e4)."""
    g = torch.Generator().manual_seed(5)
    hidden = (torch.randn(6, 8, generator=g) * 2000).requires_grad_()
    weight = torch.randn(30, 8, generator=g)
    targets = torch.randint(0, 30, (6,), generator=g)
    lp, ent = chunked_logprobs_entropy(hidden, lambda h: h @ weight.T, targets, chunk_size=4)
    ref_lp, ref_ent = _direct(hidden.detach(), weight, targets, 1.0)
    assert torch.isfinite(lp).all() and torch.isfinite(ent).all()
    zmax = float((hidden.detach() @ weight.T).abs().max())
    np.testing.assert_allclose(lp.detach().double().numpy(), ref_lp.numpy(), atol=1e-6 * zmax * 8)
    np.testing.assert_allclose(ent.detach().double().numpy(), ref_ent.numpy(), atol=1e-6 * zmax * 8)
    (lp.sum() + ent.sum()).backward()
    assert torch.isfinite(hidden.grad).all()
