"""Token sampler: truncation rules against a brute-force reference, calibrated frequency checks."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st

from llm_harness.backends import SamplingParams, sample_next_tokens, sampling_log_probs, truncate_logits

#: false-failure rate of every Monte-Carlo assertion below.
DELTA = 1e-6


def _nucleus_reference(z: np.ndarray, top_k: int, top_p: float) -> np.ndarray:
    """Kept-token mask by the definitions: top-k set (ties kept), then the smallest descending
    prefix of the renormalised distribution whose mass reaches top_p."""
    keep = np.ones_like(z, dtype=bool)
    if 0 < top_k < z.size:
        kth = np.sort(z)[::-1][top_k - 1]
        keep &= z >= kth
    if top_p < 1.0:
        p = np.where(keep, np.exp(z - z[keep].max()), 0.0)
        p /= p.sum()
        order = np.argsort(-p, kind="stable")
        before = 0.0
        nucleus = np.zeros_like(keep)
        for i in order:
            if before >= top_p:
                break
            nucleus[i] = True
            before += p[i]
        keep &= nucleus
    return keep


@given(
    # distinct logits on a grid: probability ties would make the nucleus ambiguous
    z=st.lists(st.integers(-200, 200), min_size=2, max_size=12, unique=True),
    top_k=st.integers(0, 12),
    top_p=st.sampled_from([1.0, 0.95, 0.8, 0.5, 0.2, 0.01]),
)
def test_truncation_matches_definition(z, top_k, top_p):
    z = np.asarray(z, dtype=np.float64) / 37.0
    # keep clear of exact boundary cases, where rounding decides
    if top_p < 1.0:
        zz = z.copy()
        if 0 < top_k < z.size:
            zz = np.where(z >= np.sort(z)[::-1][top_k - 1], z, -np.inf)
        p = np.exp(zz - zz.max())
        p /= p.sum()
        cum = np.cumsum(np.sort(p)[::-1])
        assume(np.min(np.abs(cum - top_p)) > 1e-9)
    got = truncate_logits(torch.tensor(z)[None], top_k, top_p)[0].numpy()
    want = _nucleus_reference(z, top_k, top_p)
    np.testing.assert_array_equal(np.isfinite(got), want)
    np.testing.assert_array_equal(got[want], z[want])
    assert want.any()


def test_top_k_keeps_ties_and_top_p_always_keeps_the_argmax():
    z = torch.tensor([[3.0, 1.0, 3.0, 0.0]])
    assert torch.isfinite(truncate_logits(z, 1, 1.0)).tolist() == [[True, False, True, False]]
    z = torch.tensor([[10.0, 0.0, 0.0]])
    assert torch.isfinite(truncate_logits(z, 0, 1e-6)).tolist() == [[True, False, False]]


def test_sampling_log_probs_are_renormalised_tempered_truncated():
    logits = torch.tensor([[2.0, 1.0, 0.5, -1.0, -3.0]])
    lq = sampling_log_probs(logits, 0.5, 3, 1.0)[0]
    z = logits[0] / 0.5
    ref = z[:3] - torch.logsumexp(z[:3], 0)
    torch.testing.assert_close(lq[:3], ref)
    assert torch.isinf(lq[3:]).all()
    assert math.isclose(float(lq.exp().sum()), 1.0, rel_tol=1e-6)


@pytest.mark.parametrize("temperature,top_k,top_p", [(1.0, 0, 1.0), (0.6, 0, 1.0), (1.0, 3, 1.0), (1.5, 0, 0.7)])
def test_sample_frequencies_match_q(temperature, top_k, top_p):
    """Empirical frequencies of 40k draws vs q: Hoeffding per token, Bonferroni over tokens (DELTA)."""
    g = torch.Generator().manual_seed(0)
    logits = torch.tensor([1.2, 0.3, -0.4, 0.9, -1.5, 0.0])
    rows, reps = 400, 100
    sp = SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p, seed=0)
    q = sampling_log_probs(logits[None], temperature, top_k, top_p)[0].exp().double().numpy()
    counts = np.zeros(6)
    for _ in range(reps):
        tok, lp = sample_next_tokens(logits.expand(rows, 6), sp, g)
        # the returned log-prob is log q of the drawn token, exactly
        np.testing.assert_allclose(lp.double().numpy(), np.log(q[tok.numpy()]), rtol=1e-6)
        counts += np.bincount(tok.numpy(), minlength=6)
    n = rows * reps
    eps = math.sqrt(math.log(2 * 6 / DELTA) / (2 * n))
    assert np.all(np.abs(counts / n - q) <= eps), (counts / n, q, eps)
    assert np.all(counts[q == 0] == 0)  # truncated tokens are never drawn


def test_greedy_is_argmax_with_zero_logprob():
    logits = torch.tensor([[0.1, 2.0, -1.0], [5.0, 4.9, 0.0]])
    tok, lp = sample_next_tokens(logits, SamplingParams(temperature=0.0), None)
    assert tok.tolist() == [1, 0]
    assert lp.tolist() == [0.0, 0.0]


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(temperature=-0.1), "temperature"),
        (dict(temperature=float("nan")), "temperature"),
        (dict(top_p=0.0), "top_p"),
        (dict(top_p=1.5), "top_p"),
        (dict(top_k=-1), "top_k"),
        (dict(max_new_tokens=0), "max_new_tokens"),
        (dict(stop_token_ids=[3]), "stop_token_ids"),
        (dict(stop_token_ids=(3, -2)), r"stop_token_ids\[1\]"),
        (dict(seed=-1), "seed"),
        (dict(top_k=2.5), "top_k"),
    ],
)
def test_sampling_params_reject_bad_values(kwargs, match):
    with pytest.raises(ValueError, match=f"^{match}"):
        SamplingParams(**kwargs)
