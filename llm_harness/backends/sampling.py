"""Token sampling with exact behaviour log-probs (cached at generation time for replay, Replay §3).

Pure tensor functions shared by the HF sampler and by teacher-forced scoring, so that the
distribution a token is drawn from and the distribution ``score`` evaluates are built by the same
code (``truncate_logits``). The convention is stated in ``llm_harness.backends.protocol``.
"""

from __future__ import annotations

from typing import Callable

import torch

from llm_harness.backends.protocol import SamplingParams
from vsr_util.registry import Registry

NEG_INF = float("-inf")


def truncate_logits(z: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Mask ``z[r, v]`` (tempered logits) to the top-k tokens, then to the top-p nucleus.

    Order and rules follow HF's ``TopKLogitsWarper`` → ``TopPLogitsWarper`` and vLLM's
    ``apply_top_k_top_p``: top-k keeps every token whose logit is >= the k-th largest (ties kept);
    top-p is computed on the renormalised top-k distribution and keeps, in descending order, every
    token whose preceding mass is < ``top_p`` (the most likely token is always kept).
    Masked entries become ``-inf``. Returns ``z`` itself when nothing is truncated.
    """
    if z.ndim != 2:
        raise ValueError(f"z: expected 2 dimensions [rows, vocab], got shape {tuple(z.shape)}")
    vocab = z.shape[-1]
    if 0 < top_k < vocab:
        kth = torch.topk(z, top_k, dim=-1).values[:, -1:]
        z = z.masked_fill(z < kth, NEG_INF)
    if top_p < 1.0:
        sorted_z, order = torch.sort(z, dim=-1, descending=True)
        probs = torch.softmax(sorted_z, dim=-1)
        mass_before = torch.cumsum(probs, dim=-1) - probs
        drop_sorted = mass_before >= top_p
        drop_sorted[:, 0] = False
        drop = torch.zeros_like(drop_sorted).scatter_(-1, order, drop_sorted)
        z = z.masked_fill(drop, NEG_INF)
    return z


def sampling_log_probs(logits: torch.Tensor, temperature: float, top_k: int, top_p: float) -> torch.Tensor:
    """``log q[r, v]`` of the sampling distribution built from raw ``logits[r, v]`` (float32).

    ``q = softmax(truncate(logits / temperature))``; ``temperature`` must be > 0.
    """
    z = logits.float()
    if temperature != 1.0:
        z = z / temperature
    z = truncate_logits(z, top_k, top_p)
    return torch.log_softmax(z, dim=-1)


def draw_multinomial(q: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """One index per row of ``q[r, v]`` (probabilities) by ``torch.multinomial`` (the default draw)."""
    return torch.multinomial(q, 1, generator=generator).squeeze(-1)


def draw_inverse_cdf(q: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """One index per row of ``q[r, v]`` (probabilities) by inversion: ``u ~ U[0, 1)`` per row, the first index
    whose cumulative mass exceeds ``u · total``.

    The same distribution as :func:`draw_multinomial` (up to the float32 cumulative sum's rounding) from one
    uniform per row instead of ``torch.multinomial``'s exponential per vocabulary entry (which dominates a
    sampling step over a 49k vocabulary on the CPU); a different random stream, so samples differ from the
    multinomial draw's for the same seed. A zero-probability index is never drawn: the search is on the right
    side (a flat run of the cumulative sum is skipped), and a rounding of ``u · total`` onto the total is clamped
    to the last index with mass."""
    cdf = torch.cumsum(q, dim=-1)
    total = cdf[:, -1:].contiguous()
    u = torch.rand((q.shape[0], 1), generator=generator, device=q.device, dtype=cdf.dtype)
    idx = torch.searchsorted(cdf, u * total, right=True)
    last = torch.searchsorted(cdf, total, right=False)  # the first index reaching the total: the last with mass
    return torch.minimum(idx, last).squeeze(-1)


#: name -> draw ``(probabilities[r, v], generator) -> indices[r]`` (``HFBackendConfig.sampler``)
SAMPLERS: Registry[Callable[[torch.Tensor, torch.Generator | None], torch.Tensor]] = Registry("sampler", {
    "multinomial": draw_multinomial,
    "inverse_cdf": draw_inverse_cdf,
})


def sample_next_tokens(
    logits: torch.Tensor, sampling: SamplingParams, generator: torch.Generator | None, *, sampler: str = "multinomial"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw one token per row from ``logits[r, v]`` with the registered ``sampler``; return ``(tokens[r], logprobs[r])``.

    ``logprobs[r] = log q(tokens[r])`` under the distribution actually sampled from (float32);
    greedy (``temperature == 0``) returns the argmax with log-prob exactly 0.
    """
    if logits.ndim != 2:
        raise ValueError(f"logits: expected 2 dimensions [rows, vocab], got shape {tuple(logits.shape)}")
    if sampling.greedy:
        tokens = torch.argmax(logits, dim=-1)
        return tokens, torch.zeros(tokens.shape, dtype=torch.float32, device=logits.device)
    logq = sampling_log_probs(logits, sampling.temperature, sampling.top_k, sampling.top_p)
    tokens = SAMPLERS.lookup(sampler, "sampler")(torch.exp(logq), generator)
    return tokens, logq.gather(-1, tokens[:, None]).squeeze(-1)
