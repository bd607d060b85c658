"""The inverse-CDF draw: the softmax's distribution (chi-square over many draws), never a masked token."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from llm_harness.backends import HFBackendConfig
from llm_harness.backends.protocol import SamplingParams
from llm_harness.backends.sampling import draw_inverse_cdf, sample_next_tokens, sampling_log_probs

#: false-failure rate of each chi-square test (the draws are seeded, so a pass is reproducible)
ALPHA = 1e-6


@pytest.mark.parametrize("temperature,top_k,top_p", [(1.0, 0, 1.0), (0.7, 0, 0.9), (1.3, 5, 1.0)])
def test_inverse_cdf_draws_follow_the_sampling_distribution(temperature: float, top_k: int, top_p: float) -> None:
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(1, 12, generator=g) * 2.0
    q = torch.exp(sampling_log_probs(logits, temperature, top_k, top_p))[0].double()
    n = 200_000
    draws = draw_inverse_cdf(torch.exp(sampling_log_probs(logits, temperature, top_k, top_p)).expand(n, -1),
                             torch.Generator().manual_seed(1))
    counts = np.bincount(draws.numpy(), minlength=12)
    support = (q > 0).numpy()
    assert counts[~support].sum() == 0  # a truncated token is never drawn
    expected = q.numpy()[support] * n
    chi2 = float(((counts[support] - expected) ** 2 / expected).sum())
    p = stats.chi2.sf(chi2, df=int(support.sum()) - 1)
    assert p > ALPHA, f"chi2 {chi2:.1f} on {support.sum() - 1} df (p {p:.2e})"


def test_zero_mass_at_the_edges_is_never_drawn() -> None:
    """Rounding of u * total onto the total, and u = 0, both land on tokens with mass."""
    q = torch.tensor([[0.0, 0.5, 0.5, 0.0, 0.0]]).expand(4, -1).contiguous()
    # u at the extremes of [0, 1)
    for u in (0.0, 1.0 - 2.0**-24):
        torch.manual_seed(0)
        orig = torch.rand
        try:
            torch.rand = lambda *a, **k: torch.full(a[0], u, dtype=k.get("dtype", torch.float32))  # type: ignore
            idx = draw_inverse_cdf(q, None)
        finally:
            torch.rand = orig
        assert set(idx.tolist()) <= {1, 2}, (u, idx.tolist())


def test_backend_sampler_field_and_logprobs() -> None:
    with pytest.raises(ValueError, match="sampler"):
        HFBackendConfig(sampler="gumbel")
    logits = torch.randn(6, 30, generator=torch.Generator().manual_seed(3))
    sp = SamplingParams(temperature=0.8, top_p=0.95, max_new_tokens=1, seed=0)
    tok, lp = sample_next_tokens(logits, sp, torch.Generator().manual_seed(0), sampler="inverse_cdf")
    ref = sampling_log_probs(logits, 0.8, 0, 0.95).gather(-1, tok[:, None]).squeeze(-1)
    assert torch.equal(lp, ref) and torch.isfinite(lp).all()
    tok2, _ = sample_next_tokens(logits, sp, torch.Generator().manual_seed(0), sampler="inverse_cdf")
    assert torch.equal(tok, tok2)  # same seed, same draws
