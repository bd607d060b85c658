"""Supervised fine-tuning of the test-bed model on expert step-arithmetic solutions.

Cold start from expert text as in VSR §3.2 / App. D.2: each training sequence is the rendered prompt, the
expert solution, then ``<eos>`` (``task.expert_text(problem) + eos``); the loss is the mean
next-token cross-entropy over the **solution and EOS tokens only** (prompt and padding masked).

Determinism: the data of step ``s`` are ``task.sample_problems("train", batch_size,
seed=data_seed(seed, s))`` — fresh i.i.d. problems from the train split's region of expression
space (never a validation/test/hard expression) that depend only on ``(seed, s)``; the weights
are initialised under ``torch.manual_seed(seed)``; nothing else draws random numbers (no dropout).
So on one machine and thread count, two runs give identical losses, and any prefix of a run is
the same whatever the total number of steps when the schedule is ``"constant"`` (warm-up then a
constant rate), which is why checkpoints saved along one run are rebuilt by a longer or shorter
one. The schedules are the trainer's (:mod:`llm_harness.trainer.schedules`). ``data_seed`` is not
``vsr_util.seeding.derive_seed``: switching would change the training stream and with it the shipped
checkpoints, which ``vsr testbed build`` rebuilds bit-identically. Departure from common SFT
recipes: no epochs over a fixed set (a stream instead).

The agent test beds (``llm_harness.testbed.agents``) train with the same loop
(:func:`train_sft_batches`) on per-turn expert demonstrations, with ``share_prefix``: every prompt
of a batch starts with the same environment instruction, so the common token prefix is run once
(batch 1) and its key/value cache expanded to the batch before the suffixes run
(:func:`sft_logits`); the loss is the same function of the weights (the prefix positions predict
no target). On a Sokoban batch of 64 (323 tokens, 257 shared) a forward + backward step took
1.23 / 1.20 s shared against 6.98 / 6.63 s plain (interleaved A B A B, one thread, machine load
~2.5): about 5.5x.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from llm_harness.tasks import Problem, Task
from llm_harness.trainer.schedules import lr_lambda
from vsr_util.checks import check_number

__all__ = [
    "SFTBatch",
    "data_seed",
    "encode_sft_batch",
    "make_optimizer",
    "sft_logits",
    "sft_loss",
    "train_sft",
    "train_sft_batches",
]


@dataclass(frozen=True)
class SFTBatch:
    """A right-padded batch; ``loss_mask[b, t] = 1`` iff token ``t`` of row ``b`` is a target."""

    input_ids: torch.Tensor
    """``input_ids[b, t]`` (long), padded with the pad id on the right."""
    attention_mask: torch.Tensor
    """``attention_mask[b, t]`` = 1 on real tokens, 0 on padding."""
    loss_mask: torch.Tensor
    """``loss_mask[b, t]`` = 1 on solution and EOS tokens (the tokens the loss predicts), else 0."""


def encode_sft_batch(tokenizer: Any, prompts: Sequence[str], solutions: Sequence[str]) -> SFTBatch:
    """Tokenise ``prompt + solution + <eos>`` per row; mark the solution and EOS as targets.

    Prompt and solution are tokenised separately (no special tokens added), so the boundary is
    exact whatever the tokenizer; the EOS id is the tokenizer's.
    """
    if len(prompts) != len(solutions):
        raise ValueError(f"solutions: expected {len(prompts)} solutions (one per prompt), got {len(solutions)}")
    if not prompts:
        raise ValueError("prompts: must not be empty")
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    if eos is None or pad is None:
        raise ValueError("tokenizer: needs both an eos and a pad token")
    p_ids = tokenizer(list(prompts), add_special_tokens=False)["input_ids"]
    s_ids = tokenizer(list(solutions), add_special_tokens=False)["input_ids"]
    rows = []
    for i, (p, s) in enumerate(zip(p_ids, s_ids)):
        if not p:
            raise ValueError(f"prompts[{i}]: tokenises to nothing")
        if not s:
            raise ValueError(f"solutions[{i}]: tokenises to nothing")
        rows.append((p, s + [eos]))
    width = max(len(p) + len(s) for p, s in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    attn = torch.zeros((len(rows), width), dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for b, (p, s) in enumerate(rows):
        ids[b, : len(p) + len(s)] = torch.tensor(p + s, dtype=torch.long)
        attn[b, : len(p) + len(s)] = 1
        mask[b, len(p) : len(p) + len(s)] = 1
    return SFTBatch(ids, attn, mask)


def sft_loss(logits: torch.Tensor, input_ids: torch.Tensor, loss_mask: torch.Tensor) -> torch.Tensor:
    """Mean over targets of ``-log softmax(logits[b, t-1])[input_ids[b, t]]`` where ``loss_mask[b, t] = 1``.

    Shapes: ``logits[B, T, V]``, ``input_ids[B, T]``, ``loss_mask[B, T]``; position ``t - 1``
    predicts token ``t``, so ``loss_mask[:, 0]`` must be 0 (the first token has no predictor).
    """
    if logits.ndim != 3 or input_ids.shape != logits.shape[:2] or loss_mask.shape != input_ids.shape:
        raise ValueError(
            f"logits: expected [B, T, V] with input_ids and loss_mask [B, T], got {tuple(logits.shape)}, "
            f"{tuple(input_ids.shape)}, {tuple(loss_mask.shape)}"
        )
    if bool(loss_mask[:, 0].any()):
        raise ValueError("loss_mask: the first position cannot be a target")
    m = loss_mask[:, 1:].to(logits.dtype)
    n = m.sum()
    if float(n) == 0.0:
        raise ValueError("loss_mask: no target tokens in the batch")
    nll = torch.nn.functional.cross_entropy(
        logits[:, :-1].reshape(-1, logits.shape[-1]).float(), input_ids[:, 1:].reshape(-1), reduction="none"
    )
    return (nll * m.reshape(-1)).sum() / n


def make_optimizer(model, lr: float, weight_decay: float, betas: tuple[float, float] = (0.9, 0.98)):
    """AdamW; weight decay on matrices only (not on norms, biases)."""
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=1e-8)


def data_seed(seed: int, step: int) -> int:
    """Seed of the problems of step ``step`` (0-based) of a run with ``seed``."""
    return int(seed) * 1_000_000_007 + int(step)


def train_batch_problems(task: Task, batch_size: int, seed: int, step: int) -> tuple[Problem, ...]:
    """The training problems of step ``step``: i.i.d. from the train split's region (module doc)."""
    return task.sample_problems("train", batch_size, seed=data_seed(seed, step))


def sft_logits(model, batch: SFTBatch, *, share_prefix: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(logits, input_ids, loss_mask)`` for :func:`sft_loss` on ``batch`` (right padded).

    Without ``share_prefix``: one forward pass over ``input_ids[B, T]``. With it, the ``n`` tokens
    common to every row (capped so each row keeps a prompt token of its own, hence no target among
    them) run once with a cache that is expanded to ``B`` rows, then ``input_ids[:, n:]`` runs
    on that cache; the returned tensors are the ``[:, n:]`` slices (position ``t`` still predicts
    ``t + 1``, and the first kept position is a prompt token, so the loss is unchanged).
    """
    from llm_harness.backends.hf_backend import common_prefix_length

    device = next(model.parameters()).device
    ids = batch.input_ids.to(device)
    mask = batch.loss_mask.to(device)
    # right padding under a causal mask: real tokens never see the pads after them, so the
    # attention mask is not needed (and omitting it keeps SDPA on its is_causal fast path)
    if not share_prefix:
        return model(input_ids=ids, use_cache=False).logits, ids, mask
    first_target = int(batch.loss_mask.argmax(dim=1).min())  # shortest prompt length
    rows = batch.input_ids[:, :first_target].tolist()
    n = common_prefix_length(rows) if ids.shape[0] > 1 else 0
    if n == 0:
        return model(input_ids=ids, use_cache=False).logits, ids, mask
    # transformers >= 5.x names the cache argument `cache` (`past_key_values` is deprecated there)
    cache_kw = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    out = model(input_ids=ids[:1, :n], use_cache=True)
    cache = getattr(out, "cache", None)
    cache = out.past_key_values if cache is None else cache
    cache.batch_repeat_interleave(ids.shape[0])
    pos = torch.arange(n, ids.shape[1], device=device)[None].expand(ids.shape[0], -1)
    logits = model(input_ids=ids[:, n:], position_ids=pos, use_cache=True, **{cache_kw: cache}).logits
    return logits, ids[:, n:], mask[:, n:]


def train_sft(
    model,
    tokenizer: Any,
    task: Task,
    *,
    steps: int,
    batch_size: int,
    lr: float,
    seed: int,
    weight_decay: float = 0.0,
    warmup_steps: int = 0,
    schedule: str = "constant",
    grad_clip: float = 1.0,
    callback: Callable[[int, float], None] | None = None,
    progress: bool = True,
) -> list[float]:
    """Train ``model`` in place on step-arithmetic expert solutions for ``steps`` optimizer steps;
    return the loss of every step (:func:`train_sft_batches` with ``train_batch_problems``).

    ``callback(step, loss)`` runs after each step (``step`` counts completed steps, 1-based); it
    may evaluate or save the model (it must leave it in train mode and not touch the global RNG
    stream — the loop itself does not draw from it). ``grad_clip <= 0`` disables clipping.
    ``schedule`` names a :data:`llm_harness.trainer.schedules.SCHEDULES` entry.
    """
    if not hasattr(task, "sample_problems"):
        raise ValueError(f"task: {type(task).__name__} cannot sample training problems (needs sample_problems)")
    check_number("batch_size", batch_size, 1, integer=True)
    check_number("seed", seed, 0, integer=True)

    def batch_at(step: int) -> tuple[list[str], list[str]]:
        problems = train_batch_problems(task, batch_size, seed, step)
        return [task.render_prompt(p, tokenizer) for p in problems], [p.solution for p in problems]

    return train_sft_batches(
        model, tokenizer, batch_at, steps=steps, lr=lr, weight_decay=weight_decay, warmup_steps=warmup_steps,
        schedule=schedule, grad_clip=grad_clip, callback=callback, progress=progress,
    )


def train_sft_batches(
    model,
    tokenizer: Any,
    batch_at: Callable[[int], tuple[Sequence[str], Sequence[str]]],
    *,
    steps: int,
    lr: float,
    weight_decay: float = 0.0,
    warmup_steps: int = 0,
    schedule: str = "constant",
    grad_clip: float = 1.0,
    share_prefix: bool = False,
    callback: Callable[[int, float], None] | None = None,
    progress: bool = True,
) -> list[float]:
    """The SFT loop: step ``s`` (0-based) trains on ``batch_at(s) = (prompts, targets)``
    (:func:`encode_sft_batch`, loss on targets + EOS only); returns every step's loss.

    ``share_prefix`` runs the prompts' common prefix once per step (:func:`sft_logits`).
    ``callback`` and the other arguments as in :func:`train_sft`.
    """
    from tqdm.auto import tqdm

    for name, v, lo in (("steps", steps, 1), ("warmup_steps", warmup_steps, 0)):
        check_number(name, v, lo, integer=True)
    check_number("lr", lr, 0, lo_open=True)
    lr_at = lr_lambda(schedule, warmup_steps, steps, where="schedule")  # validates the name
    opt = make_optimizer(model, lr, weight_decay)
    model.train()
    losses: list[float] = []
    bar = tqdm(range(steps), desc="sft", disable=not progress, dynamic_ncols=True)
    for step in bar:
        for g in opt.param_groups:
            g["lr"] = lr * lr_at(step)
        prompts, targets = batch_at(step)
        logits, ids, mask = sft_logits(model, encode_sft_batch(tokenizer, prompts, targets), share_prefix=share_prefix)
        loss = sft_loss(logits, ids, mask)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        opt.step()
        losses.append(float(loss.detach()))
        if progress:
            bar.set_postfix(loss=f"{losses[-1]:.4f}")
        if callback is not None:
            callback(step + 1, losses[-1])
    return losses
