"""bf16 compute with float32 master weights (``run.precision: bf16``), and the correction of the train/sample gap.

In bf16 mode the sampler and the loss pass run the same float32 parameters under ``torch.autocast`` to bfloat16
(the matmuls in bf16 — AMX-BF16 or AVX512-BF16 on a CPU that has them — norms, softmax and the output head's
log-softmax in float32); gradients and AdamW stay float32. Sampling one token at a time and scoring a whole
sequence still round differently, so the policy that sampled (behaviour, log-probs recorded by the sampler) and
the policy the loss pass computes differ by more than float32 rounding. The trainer then follows verl's
*decoupled* rollout correction (verl ``docs/algo/rollout_corr.md``, ``rollout_is: token``): the PPO anchor
``π_old`` is recomputed by the training pass, and each token's loss is weighted by

    w_t = min(π_old(y_t) / π_behaviour(y_t), C),   C = run.rollout_is_threshold (verl's default 2.0)

(truncated importance sampling; safety-bounded to exp(±20) as verl does; 1 for replayed rows, whose stored
log-probs are their own behaviour policy's). Untruncated (C ≥ the largest ratio), the weighted gradient is an
unbiased estimate of the on-policy gradient of π_old (the test checks this exactly on a tabular softmax policy);
truncation trades that for bounded variance. The gap is measured every step: mean and p99 of
``|log π_old − log π_behaviour|`` over the fresh trained tokens.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["PRECISIONS", "autocast", "bf16_support", "rollout_is_weights", "tis_weights"]

#: values of ``run.precision``
PRECISIONS = ("float32", "bf16")

#: verl's safety bound on a log-ratio before exponentiating
_LOG_BOUND = 20.0


def bf16_support(device: torch.device | str) -> str | None:
    """None if bf16 matmuls run natively on ``device``, else why not (a CPU without AMX-BF16 and AVX512-BF16
    converts them in software, several times slower than float32)."""
    device = torch.device(device)
    if device.type == "cuda":
        return None if torch.cuda.is_bf16_supported() else "this GPU does not support bfloat16"
    if device.type != "cpu":
        return f"device {device.type!r}"
    cpu = torch.cpu
    amx = getattr(cpu, "_is_amx_tile_supported", lambda: False)()
    avx = getattr(cpu, "_is_avx512_bf16_supported", lambda: False)()
    return None if (amx or avx) else "this CPU has neither AMX-BF16 nor AVX512-BF16"


def autocast(device: torch.device | str, enabled: bool) -> Any:
    """``torch.autocast`` to bfloat16 on ``device`` when ``enabled``; a no-op otherwise (the sampler's own context,
    :func:`llm_harness.backends.hf_backend.bf16_autocast`)."""
    from llm_harness.backends.hf_backend import bf16_autocast

    return bf16_autocast(torch.device(device).type, enabled)


def _log_gap(train_lp: torch.Tensor, behaviour_lp: torch.Tensor, mask: torch.Tensor, threshold: float,
             rows: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(delta, sel)``: the clamped ``log π_train − log π_behaviour`` (float32 at least) and the corrected tokens."""
    if train_lp.shape != behaviour_lp.shape or mask.shape != train_lp.shape:
        raise ValueError(f"train_lp {tuple(train_lp.shape)}, behaviour_lp {tuple(behaviour_lp.shape)} and mask "
                         f"{tuple(mask.shape)} must have one shape")
    if not threshold > 0:
        raise ValueError(f"rollout_is_threshold: must be > 0, got {threshold}")
    if rows is None:
        rows = torch.ones(train_lp.shape[0], dtype=torch.bool, device=train_lp.device)
    dtype = torch.promote_types(train_lp.dtype, torch.float32)  # float32 at least, float64 kept
    delta = (train_lp.to(dtype) - behaviour_lp.to(dtype)).clamp(-_LOG_BOUND, _LOG_BOUND)
    return delta, (mask > 0) & rows[:, None]


def _truncate(delta: torch.Tensor, sel: torch.Tensor, threshold: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``(w, raw)``: the weights ``min(exp(delta), C)`` on the corrected tokens (1 elsewhere) and ``exp(delta)``."""
    raw = torch.exp(delta)
    w = torch.where(sel, raw.clamp(max=float(threshold)), torch.ones_like(raw))
    return w.detach(), raw


def tis_weights(train_lp: torch.Tensor, behaviour_lp: torch.Tensor, mask: torch.Tensor, threshold: float,
                rows: torch.Tensor | None = None) -> torch.Tensor:
    """The truncated importance weights of :func:`rollout_is_weights` alone (no metrics: no host sync), for a
    part of a batch (the in-pass anchor computes them micro-batch by micro-batch)."""
    return _truncate(*_log_gap(train_lp, behaviour_lp, mask, threshold, rows), threshold)[0]


def rollout_is_weights(train_lp: torch.Tensor, behaviour_lp: torch.Tensor, mask: torch.Tensor,
                       threshold: float, rows: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """Token-level truncated importance weights ``w[B, T]`` (module doc) and the gap's metrics.

    ``train_lp[B, T]``: log π_old under the training pass; ``behaviour_lp[B, T]``: the sampler's; ``mask[B, T]``:
    trained tokens; ``rows[B]`` (bool): the rows to correct (others get weight 1). Metrics over the corrected
    trained tokens: ``mismatch_logp_mean`` / ``mismatch_logp_p99`` (|Δ log p|), ``tis_weight_mean``,
    ``tis_truncated_frac`` (weights cut at the threshold)."""
    delta, sel = _log_gap(train_lp, behaviour_lp, mask, threshold, rows)
    w, raw = _truncate(delta, sel, threshold)
    gap = delta.abs()[sel]
    m: dict[str, float] = {}
    if gap.numel():
        m = {"mismatch_logp_mean": float(gap.mean()),
             "mismatch_logp_p99": float(torch.quantile(gap.double(), 0.99)),
             "tis_weight_mean": float(w[sel].mean()),
             "tis_truncated_frac": float((raw[sel] > threshold).float().mean())}
    return w, m


def effective_bf16(precision: str, device: Any) -> tuple[bool, str | None]:
    """``(bf16 on?, why not)``: bf16 when asked for and supported; the reason it falls back to float32 otherwise."""
    if precision != "bf16":
        return False, None
    why = bf16_support(device)
    return why is None, why
