"""A run's largest training pass, estimated before the first step and checked against the machine's memory.

The logits dominate a policy-gradient pass on a CPU: a pass over ``rows`` sequences of ``tokens`` positions
holds ``rows x tokens x vocab`` float32 logits, and the log-softmax, the entropy and the logits' gradient
hold about as much again each. :func:`estimate_pass_bytes` counts those three copies (weights, activations of
the layers and the optimizer state come on top, so the estimate is a lower bound) and :func:`check_memory`
refuses a CPU run whose estimate exceeds the memory the kernel reports as available, naming the fields
that set it. ``VSR_NO_MEMORY_CHECK=1`` skips the check (e.g. for a machine with large swap).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

__all__ = ["PassEstimate", "available_bytes", "check_memory", "estimate_pass_bytes"]

#: float32 copies of the logits alive in one pass: logits, log-softmax/entropy, gradient
LOGIT_COPIES = 3


@dataclass(frozen=True)
class PassEstimate:
    """The largest training pass of a run: its shape and a lower bound of its memory."""

    rows: int
    tokens: int
    vocab: int

    @property
    def bytes(self) -> int:
        return self.rows * self.tokens * self.vocab * 4 * LOGIT_COPIES


def available_bytes() -> int | None:
    """``MemAvailable`` of ``/proc/meminfo`` in bytes (None where there is no such file)."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def estimate_pass_bytes(cfg: Any, *, prompt_tokens: int, vocab: int, max_context: int | None) -> PassEstimate:
    """The largest pass of ``cfg`` (a ``TrainConfig``): a mini-batch (``rollouts / algo.mini_batches`` rows,
    at most ``run.micro_batch_rows``) of the longest prompt plus the full response budget, capped by the
    model's context."""
    rollouts = cfg.rollout.prompts_per_step * cfg.rollout.group_size
    rows = math.ceil(rollouts / cfg.algo.mini_batches)
    if cfg.run.micro_batch_rows:
        rows = min(rows, cfg.run.micro_batch_rows)
    tokens = prompt_tokens + cfg.rollout.max_new_tokens
    if max_context:
        tokens = min(tokens, max_context)
    return PassEstimate(rows=max(1, rows), tokens=max(1, tokens), vocab=int(vocab))


def check_memory(cfg: Any, est: PassEstimate, available: int | None) -> None:
    """Refuse (ValueError naming the fields) a CPU run whose largest pass needs more than ``available`` bytes."""
    if os.environ.get("VSR_NO_MEMORY_CHECK", "") not in ("", "0") or available is None:
        return
    if str(cfg.model.device) != "cpu" or est.bytes <= available:
        return
    fit = max(1, available // (est.tokens * est.vocab * 4 * LOGIT_COPIES))
    raise ValueError(
        f"memory: the largest training pass holds about {est.bytes / 2**30:.1f} GiB of logits ({est.rows} rows x "
        f"{est.tokens} tokens x vocabulary {est.vocab} x 4 bytes x {LOGIT_COPIES} copies; rows = "
        "rollout.prompts_per_step x rollout.group_size / algo.mini_batches, tokens = longest prompt + "
        f"rollout.max_new_tokens) and this machine has {available / 2**30:.1f} GiB available; set "
        f"run.micro_batch_rows {fit} or less (the same update in smaller passes), or lower the batch or the "
        "response budget (VSR_NO_MEMORY_CHECK=1 skips this check)")
