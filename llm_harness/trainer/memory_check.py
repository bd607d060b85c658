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

__all__ = ["PassEstimate", "StepEstimate", "available_bytes", "check_memory", "check_step_memory", "estimate_pass_bytes",
           "estimate_step", "proc_kib_field"]

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


def proc_kib_field(path: str, key: str) -> int | None:
    """The ``key:`` line of a ``/proc`` file given in kB (``/proc/meminfo``, ``/proc/self/status``), in bytes; None
    where the file or the line is missing."""
    try:
        with open(path) as fh:
            for line in fh:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def available_bytes() -> int | None:
    """``MemAvailable`` of ``/proc/meminfo`` in bytes (None where there is no such file)."""
    return proc_kib_field("/proc/meminfo", "MemAvailable")


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


# ------------------------------------------------------------------------------ the whole step

#: bytes the runtime holds besides the tensors counted below (interpreter, libraries, tokenizer, allocator slack)
RUNTIME_BYTES = 768 * 2**20


def activation_bytes_per_token_layer(mc: Any, dtype_bytes: int = 4) -> int:
    """Bytes autograd keeps per token and decoder layer in a Llama/Qwen2-style layer (the tensors its backward
    reads): 7 hidden-size tensors (norm inputs and outputs, residual-side inputs of the projections), q and k
    before and after RoPE, attention's q/k/v/output, and 4 MLP-width tensors (gate, up, silu(gate), product).
    On SmolLM2-135M this counts 53 KB per token-layer; a measured forward pass kept 53 KB."""
    h = int(mc.hidden_size)
    heads = int(mc.num_attention_heads)
    d = int(getattr(mc, "head_dim", None) or h // heads)
    q, kv = heads * d, int(getattr(mc, "num_key_value_heads", None) or heads) * d
    inter = int(getattr(mc, "intermediate_size", None) or 4 * h)
    return dtype_bytes * (7 * h + 4 * q + 4 * kv + 4 * inter)


@dataclass(frozen=True)
class StepEstimate:
    """A training step's memory by part, in bytes (:func:`estimate_step`); the loss pass and the sampler do not
    overlap, so the step needs the fixed parts plus the larger of the two."""

    weights: int
    grads: int
    optimizer: int
    loss_pass: int
    """Activations autograd keeps plus the output head's logits for the largest loss pass."""
    sampler: int
    """KV cache and one step's sampling buffers for the largest decode batch."""
    runtime: int = RUNTIME_BYTES
    pass_tokens: int = 0
    decode_rows: int = 0

    @property
    def total(self) -> int:
        return self.weights + self.grads + self.optimizer + max(self.loss_pass, self.sampler) + self.runtime

    def parts(self) -> dict[str, int]:
        return {"weights": self.weights, "grads": self.grads, "optimizer": self.optimizer, "loss_pass": self.loss_pass,
                "sampler": self.sampler, "runtime": self.runtime, "total": self.total}

    def describe(self) -> str:
        g = 2**30
        return (f"weights {self.weights / g:.2f} + gradients {self.grads / g:.2f} + optimizer {self.optimizer / g:.2f} + "
                f"max(loss pass {self.loss_pass / g:.2f} [{self.pass_tokens} tokens], sampler {self.sampler / g:.2f} "
                f"[{self.decode_rows} rows]) + runtime {self.runtime / g:.2f} = {self.total / g:.2f} GiB")


def estimate_step(cfg: Any, model: Any, *, prompt_tokens: int) -> StepEstimate:
    """The memory of one step of ``cfg`` (a ``TrainConfig``) on ``model``, from its configuration and parameter
    count: weights, gradients and AdamW's two moments (float32 master copies), the largest loss pass (rows of
    the longest prompt plus the full response budget; with ``run.group_prompt_once`` the prompt counted once
    per group; ``run.micro_batch_rows`` bounds the rows) and the sampler's KV cache (``rollout.max_batch_sequences``
    rows of the same length)."""
    mc = model.config
    params = list(model.parameters())
    n_train = sum(p.numel() for p in params if p.requires_grad)
    weights = sum(p.numel() * p.element_size() for p in {id(p): p for p in params}.values())
    dtype_bytes = params[0].element_size() if params else 4
    grads = n_train * dtype_bytes
    optimizer = 2 * n_train * dtype_bytes
    G = cfg.rollout.group_size
    rows = math.ceil(cfg.rollout.prompts_per_step * G / cfg.algo.mini_batches)
    if cfg.run.micro_batch_rows:
        rows = min(rows, cfg.run.micro_batch_rows)
    resp = cfg.rollout.max_new_tokens
    ctx = getattr(mc, "max_position_embeddings", None)
    if ctx:
        prompt_tokens = min(prompt_tokens, max(0, int(ctx) - 1))
        resp = min(resp, max(1, int(ctx) - prompt_tokens))
    groups = math.ceil(rows / G) if getattr(cfg.run, "group_prompt_once", False) else rows
    tokens = rows * resp + groups * prompt_tokens
    layers = int(mc.num_hidden_layers)
    vocab = int(mc.vocab_size)
    loss_pass = tokens * layers * activation_bytes_per_token_layer(mc, dtype_bytes) + rows * resp * vocab * 4 * LOGIT_COPIES
    heads = int(mc.num_attention_heads)
    d = int(getattr(mc, "head_dim", None) or int(mc.hidden_size) // heads)
    kv = int(getattr(mc, "num_key_value_heads", None) or heads) * d
    dec_rows = min(cfg.rollout.prompts_per_step * G, cfg.rollout.max_batch_sequences)
    sampler = dec_rows * (prompt_tokens + resp) * layers * 2 * kv * dtype_bytes + dec_rows * vocab * 4 * 4
    return StepEstimate(weights=weights, grads=grads, optimizer=optimizer, loss_pass=loss_pass, sampler=sampler,
                        pass_tokens=tokens, decode_rows=dec_rows)


def check_step_memory(cfg: Any, est: StepEstimate, available: int | None) -> None:
    """Refuse (ValueError naming the field to change) a CPU run whose step needs more than ``available`` bytes."""
    if os.environ.get("VSR_NO_MEMORY_CHECK", "") not in ("", "0") or available is None:
        return
    if str(cfg.model.device) != "cpu" or est.total <= available:
        return
    fixed = est.weights + est.grads + est.optimizer + est.runtime
    if fixed >= available:
        advice = "the model, its gradients and AdamW's moments alone do not fit: use a smaller model or a larger machine"
    elif est.loss_pass >= est.sampler:
        room = available - fixed
        per_row = max(1, est.loss_pass // max(1, min(cfg.run.micro_batch_rows or 10**9,
                                                     cfg.rollout.prompts_per_step * cfg.rollout.group_size)))
        advice = (f"set run.micro_batch_rows {max(1, room // per_row)} or less (the same update in smaller passes)"
                  + ("" if getattr(cfg.run, "group_prompt_once", False) else ", and run.group_prompt_once true"))
    else:
        advice = "lower rollout.max_batch_sequences (fewer sequences decoded at once)"
    raise ValueError(f"memory: one training step needs about {est.describe()}, and this machine has "
                     f"{available / 2**30:.1f} GiB available; {advice} (VSR_NO_MEMORY_CHECK=1 skips this check)")
