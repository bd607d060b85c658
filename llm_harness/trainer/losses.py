"""Policy losses as pure tensor functions, with a registry of loss aggregations (Replay §3, Eq. 2; App. A, Table 7).

Per token ``t`` of sample ``b`` with log-ratio ``δ = log π_θ − log π_old`` and ``ρ = exp δ``::

    l1 = −A ρ,   l2 = −A clip(ρ, 1−ε_low, 1+ε_high)            (DAPO clip-higher)
    l  = max(l1, l2)                                            (PPO pessimism)
    l  = min(l, −c A)   where A < 0                             (dual clip, c = 10)
    l += β · k3,  k3 = exp(r − logπ) − (r − logπ) − 1           (optional KL to reference r)
    l *= w_b                                                    (optional per-sample weight)

Aggregations (registry ``AGGREGATIONS``; uniform signature ``agg(l[B, T], mask[B, T], norm_len)``):

* ``token_mean`` — Σ l·m / Σ m over the whole batch (DAPO token-level);
* ``seq_mean_token_mean`` — mean over samples of each sample's token mean (GRPO original);
* ``seq_mean_token_sum_norm`` — Σ l·m / (B · norm_len) (Dr. GRPO: a constant length normaliser).

Each is a sum of per-row terms over a batch-level normaliser, so a batch split into row chunks
(gradient accumulation, ``run.micro_batch_rows``) gets the same loss as ``Σ_c share_c · agg(chunk c)``;
:func:`chunk_share` gives ``share_c`` (each aggregation registers its own; one without cannot be split).

Objectives (registry ``OBJECTIVES``, config ``algo.objective``; one signature
``obj(logprobs, old_logprobs, advantages, mask, *, algo, norm_len, weights, ref_logprobs) ->
PolicyLossOutput``): ``ppo`` (the clipped surrogate above) and ``sft`` (negative log-likelihood,
nothing clipped).

Matches ``theory.extra.clipped_surrogate`` (the NumPy reference): ``l = −surrogate`` wherever the
dual clip is inactive.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

from vsr_util.checks import check_number
from vsr_util.registry import Registry

__all__ = [
    "AGGREGATIONS",
    "OBJECTIVES",
    "PolicyLossOutput",
    "aggregate",
    "chunk_share",
    "clip_fraction_by_origin",
    "k3_kl",
    "policy_loss",
    "register_aggregation",
    "sft_loss",
]

Aggregation = Callable[[torch.Tensor, torch.Tensor, float], torch.Tensor]

#: name -> aggregation ``agg(loss[B, T], mask[B, T], norm_len) -> scalar``.
AGGREGATIONS: Registry[Aggregation] = Registry("aggregation")


Share = Callable[[torch.Tensor, torch.Tensor], float]


def register_aggregation(name: str, *, share: Share | None = None) -> Callable[[Aggregation], Aggregation]:
    """Decorator adding an aggregation under ``name`` (duplicates are rejected), with its chunk ``share``
    (module doc; kept on the entry as ``chunk_share``; None: the aggregation cannot be split into row chunks)."""
    def deco(fn: Aggregation) -> Aggregation:
        fn.chunk_share = share  # type: ignore[attr-defined]
        return AGGREGATIONS.register(name)(fn)
    return deco


def _token_share(c: torch.Tensor, m: torch.Tensor) -> float:
    # Σ l m / max(N, 1) = Σ_c [Σ_c l m / max(N_c, 1)] · max(N_c, 1) / max(N, 1)  (an empty chunk adds 0 either way)
    return float(c.sum().clamp_min(1.0)) / float(m.sum().clamp_min(1.0))


def _row_share(c: torch.Tensor, m: torch.Tensor) -> float:
    # mean over rows, and Σ / (B · L): both weigh a chunk by its share of the rows
    return c.shape[0] / m.shape[0]


@register_aggregation("token_mean", share=_token_share)
def _token_mean(loss: torch.Tensor, mask: torch.Tensor, norm_len: float) -> torch.Tensor:
    """Σ_bt l m / max(Σ_bt m, 1) (DAPO token-level aggregation)."""
    return (loss * mask).sum() / mask.sum().clamp_min(1.0)


@register_aggregation("seq_mean_token_mean", share=_row_share)
def _seq_mean_token_mean(loss: torch.Tensor, mask: torch.Tensor, norm_len: float) -> torch.Tensor:
    """mean_b [Σ_t l m / max(Σ_t m, 1)] (GRPO sequence-mean)."""
    per_seq = (loss * mask).sum(-1) / mask.sum(-1).clamp_min(1.0)
    return per_seq.mean()


@register_aggregation("seq_mean_token_sum_norm", share=_row_share)
def _seq_mean_token_sum_norm(loss: torch.Tensor, mask: torch.Tensor, norm_len: float) -> torch.Tensor:
    """Σ_bt l m / (B · norm_len) (Dr. GRPO: constant normaliser, no length bias)."""
    return (loss * mask).sum() / (loss.shape[0] * float(norm_len))


def chunk_share(name: str, chunk_mask: torch.Tensor, batch_mask: torch.Tensor) -> float:
    """Weight of the loss aggregated (``name``) over rows ``chunk_mask`` within the batch ``batch_mask``, so that
    the weighted chunk losses sum to the batch's loss (module doc); ValueError for an aggregation without one."""
    fn = getattr(AGGREGATIONS.lookup(name, "algo.loss_agg"), "chunk_share", None)
    if fn is None:
        raise ValueError(f"algo.loss_agg: {name!r} has no chunk share (register_aggregation(..., share=...)), "
                         "so a mini-batch cannot be split into micro-batches; set run.micro_batch_rows: 0")
    return fn(chunk_mask.float(), batch_mask.float())


def aggregate(name: str, loss: torch.Tensor, mask: torch.Tensor, norm_len: float = 1.0) -> torch.Tensor:
    """Apply the registered aggregation ``name`` to ``loss[B, T]`` under ``mask[B, T]``."""
    agg = AGGREGATIONS.lookup(name, "algo.loss_agg")
    if loss.shape != mask.shape or loss.ndim != 2:
        raise ValueError(f"mask: shape {tuple(mask.shape)} must equal loss shape {tuple(loss.shape)} (2-D)")
    check_number("norm_len", norm_len, 0, lo_open=True)
    return agg(loss, mask.to(loss.dtype), norm_len)


def k3_kl(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, cap: float | None = None) -> torch.Tensor:
    """Per-token k3 estimator of KL(π_θ ‖ π_ref): ``exp(r − l) − (r − l) − 1`` ≥ 0 (Schulman's k3),
    clamped at ``cap`` when given (verl's ``kl_penalty("low_var_kl")`` clamps at 10)."""
    d = (ref_logprobs - logprobs).clamp(-20.0, 20.0)
    k3 = torch.exp(d) - d - 1.0
    return k3 if cap is None else k3.clamp(max=float(cap))


@dataclass(frozen=True)
class PolicyLossOutput:
    """Loss value and per-token diagnostics (all ``[B, T]`` except ``loss``)."""

    loss: torch.Tensor
    """Aggregated scalar loss (what ``backward`` is called on)."""
    token_loss: torch.Tensor
    """Per-token loss before aggregation."""
    clipped: torch.Tensor
    """Bool: the ratio clip is active (gradient cut by the trust region)."""
    dual_clipped: torch.Tensor
    """Bool: the dual clip bound −c A is active (A < 0, ρ > c)."""
    kl: torch.Tensor | None
    """Per-token k3 KL to the reference, or None without a reference."""
    ratio: torch.Tensor
    """Per-token ratio ρ (detached)."""


def policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.28,
    dual_clip: float | None = 10.0,
    agg: str = "token_mean",
    norm_len: float = 1.0,
    weights: torch.Tensor | None = None,
    ref_logprobs: torch.Tensor | None = None,
    kl_coef: float = 0.0,
    kl_cap: float | None = None,
) -> PolicyLossOutput:
    """Clipped PPO surrogate (module doc). ``logprobs[B, T]``, ``old_logprobs[B, T]``, ``mask[B, T]``,
    ``advantages[B]`` or ``[B, T]``, ``weights[B]`` or ``[B, T]``; DAPO clip-higher and dual clip as in Replay Table 7."""
    if logprobs.ndim != 2:
        raise ValueError(f"logprobs: expected shape [B, T], got {tuple(logprobs.shape)}")
    for name, t in (("old_logprobs", old_logprobs), ("mask", mask)):
        if t.shape != logprobs.shape:
            raise ValueError(f"{name}: shape {tuple(t.shape)} differs from logprobs {tuple(logprobs.shape)}")
    if advantages.ndim == 1:
        if advantages.shape[0] != logprobs.shape[0]:
            raise ValueError(f"advantages: expected shape ({logprobs.shape[0]},), got {tuple(advantages.shape)}")
        advantages = advantages[:, None].expand_as(logprobs)
    elif advantages.shape != logprobs.shape:
        raise ValueError(f"advantages: expected [B] or [B, T], got {tuple(advantages.shape)}")
    check_number("eps_low", eps_low, 0, 1, hi_open=True)
    check_number("eps_high", eps_high, 0)
    if dual_clip is not None:
        check_number("dual_clip", dual_clip, 1, lo_open=True)
    a = advantages.to(logprobs.dtype)
    log_ratio = (logprobs - old_logprobs.to(logprobs.dtype)).clamp(-20.0, 20.0)
    ratio = torch.exp(log_ratio)
    l1 = -a * ratio
    l2 = -a * ratio.clamp(1.0 - eps_low, 1.0 + eps_high)
    loss = torch.maximum(l1, l2)
    clipped = l2 > l1
    dual = torch.zeros_like(clipped)
    if dual_clip is not None:
        l3 = -a * dual_clip
        neg = a < 0
        dual = neg & (loss > l3)
        loss = torch.where(neg, torch.minimum(loss, l3), loss)
    kl = None
    if ref_logprobs is not None:
        if ref_logprobs.shape != logprobs.shape:
            raise ValueError(f"ref_logprobs: shape {tuple(ref_logprobs.shape)} differs from logprobs")
        kl = k3_kl(logprobs, ref_logprobs.to(logprobs.dtype), kl_cap)
        loss = loss + kl_coef * kl
    if weights is not None:
        loss = loss * _weight_grid(weights, logprobs).to(loss.dtype)
    m = mask.to(loss.dtype)
    return PolicyLossOutput(
        loss=aggregate(agg, loss, m, norm_len),
        token_loss=loss,
        clipped=clipped & (m > 0),
        dual_clipped=dual & (m > 0),
        kl=kl,
        ratio=ratio.detach(),
    )


def sft_loss(logprobs: torch.Tensor, mask: torch.Tensor, *, agg: str = "token_mean", norm_len: float = 1.0,
             weights: torch.Tensor | None = None) -> torch.Tensor:
    """Negative log-likelihood of the masked tokens, aggregated like the policy loss (SFT baseline)."""
    if logprobs.shape != mask.shape:
        raise ValueError(f"mask: shape {tuple(mask.shape)} differs from logprobs {tuple(logprobs.shape)}")
    loss = -logprobs
    if weights is not None:
        loss = loss * _weight_grid(weights, logprobs).to(loss.dtype)
    return aggregate(agg, loss, mask.to(loss.dtype), norm_len)


def _weight_grid(weights: torch.Tensor, logprobs: torch.Tensor) -> torch.Tensor:
    """Per-sample ``weights[B]`` as a ``[B, 1]`` column, or per-token ``weights[B, T]`` as they are (a sample's weight
    times its tokens' rollout-correction weights, ``trainer.precision``); ValueError for any other shape."""
    if weights.shape == (logprobs.shape[0],):
        return weights[:, None]
    if weights.shape == logprobs.shape:
        return weights
    raise ValueError(f"weights: expected shape ({logprobs.shape[0]},) or {tuple(logprobs.shape)}, got {tuple(weights.shape)}")


def clip_fraction_by_origin(clipped: torch.Tensor, mask: torch.Tensor, origin: torch.Tensor,
                            n_origins: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(clipped_tokens[o], tokens[o])`` per origin index ``o`` (float64 counts).

    ``clipped[B, T]`` bool, ``mask[B, T]``, ``origin[B]`` ints in ``[0, n_origins)``; the clip
    fraction of origin ``o`` is ``clipped_tokens[o] / tokens[o]`` (Replay §5.3.1, Table 2: fresh vs replay).
    """
    if clipped.shape != mask.shape or origin.shape != (clipped.shape[0],):
        raise ValueError(f"origin: expected shape ({clipped.shape[0]},) with clipped/mask of equal shape")
    m = mask.to(torch.float64)
    per_row_clip = (clipped.to(torch.float64) * m).sum(-1)
    per_row_tok = m.sum(-1)
    c = torch.zeros(n_origins, dtype=torch.float64, device=origin.device).index_add_(0, origin, per_row_clip)
    t = torch.zeros(n_origins, dtype=torch.float64, device=origin.device).index_add_(0, origin, per_row_tok)
    return c.cpu(), t.cpu()


Objective = Callable[..., PolicyLossOutput]
#: name -> objective (module doc); the trainer calls the configured one and never branches on it
OBJECTIVES: Registry[Objective] = Registry("objective")


@OBJECTIVES.register("ppo")
def _ppo_objective(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor, *,
                   algo: Any, norm_len: float, weights: torch.Tensor | None = None,
                   ref_logprobs: torch.Tensor | None = None) -> PolicyLossOutput:
    """The clipped surrogate with ``algo``'s clip bounds, dual clip, aggregation and KL coefficient."""
    return policy_loss(
        logprobs, old_logprobs, advantages, mask, eps_low=algo.eps_low, eps_high=algo.eps_high,
        dual_clip=algo.dual_clip or None, agg=algo.loss_agg, norm_len=norm_len, weights=weights,
        ref_logprobs=ref_logprobs, kl_coef=algo.kl_coef, kl_cap=algo.kl_cap or None,
    )


@OBJECTIVES.register("sft")
def _sft_objective(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor, *,
                   algo: Any, norm_len: float, weights: torch.Tensor | None = None,
                   ref_logprobs: torch.Tensor | None = None) -> PolicyLossOutput:
    """Negative log-likelihood (SFT baseline): advantages, old and reference log-probs are unused."""
    none = torch.zeros_like(mask, dtype=torch.bool)
    return PolicyLossOutput(
        loss=sft_loss(logprobs, mask, agg=algo.loss_agg, norm_len=norm_len, weights=weights),
        token_loss=-logprobs, clipped=none, dual_clipped=none, kl=None, ratio=torch.ones_like(logprobs).detach(),
    )
