"""The lab's access to a model: sample groups from start states, and the gradient of one mini-batch.

Built on the trainer (:func:`llm_harness.trainer.entry.build_trainer`), so the lab runs any model, backend
(HF, vLLM) and task a training config names, with the trainer's prompt rendering, verification and
log-probabilities. Nothing is trained (the replay step of :mod:`llm_harness.lab.staleness` excepted, through the
trainer's own ``train_step``, with the config's plug-ins left out and its run folder inside the lab's).

The gradient of a mini-batch of groups is the estimator of :mod:`llm_harness.lab.predict`:
``g = (1/n) Σ_i w_i A_i ∇ log π(y_i | s_i)`` over its ``n`` kept samples, ``A_i`` the leave-one-out advantage
within the sample's group, ``log π(y|s)`` the summed log-probability of the continuation's tokens (prompt and
prefix tokens excluded) under the sampling temperature. ``g`` points uphill (an estimate of ``∇J``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Sequence

import numpy as np

from llm_harness.trainer.data import Origin, RolloutGroup, StartState

__all__ = ["LabEngine", "leave_one_out_advantages"]


def leave_one_out_advantages(rewards) -> np.ndarray:
    """``A_i = r_i − mean_{k≠i} r_k`` (an unbiased baseline: it does not depend on sample ``i``)."""
    r = np.asarray(rewards, dtype=np.float64)
    n = r.shape[0]
    if r.ndim != 1 or n < 2:
        raise ValueError(f"rewards: need a group of >= 2 samples, got shape {r.shape}")
    return r - (r.sum() - r) / (n - 1)


class LabEngine:
    """Sampling and per-batch gradients of one training config's model (module doc)."""

    def __init__(self, train_cfg: Any):
        from llm_harness.trainer.entry import build_trainer

        self.cfg = train_cfg
        self.trainer = build_trainer(train_cfg)
        self.ctx = self.trainer.ctx
        self.model = self.trainer.model
        self.codec = self.trainer.codec
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.n_params = int(sum(p.numel() for p in self.params))
        self.problems = tuple(self.trainer.fresh.problems)

    def close(self) -> None:
        self.trainer.close()

    # ------------------------------------------------------------------ states

    def prompt_state(self, problem: Any, n: int | None = None) -> StartState:
        return StartState(tuple(self.ctx.encode_prompt(problem)), problem, n=n)

    def solution_ids(self, problem: Any) -> tuple[int, ...]:
        """The problem's reference solution as response tokens (with the end-of-sequence token, as VSR's cold start)."""
        if problem.solution is None:
            raise ValueError(f"problem {problem.id!r}: no reference solution; prefix states need one")
        eos = getattr(self.codec.tokenizer, "eos_token_id", None)
        return tuple(self.codec.encode(problem.solution)) + ((int(eos),) if eos is not None else ())

    def prefix_state(self, problem: Any, cut: int, alpha: float, n: int | None = None) -> StartState:
        """The prompt followed by the first ``cut`` tokens of the reference solution."""
        ids = self.solution_ids(problem)
        return StartState(tuple(self.ctx.encode_prompt(problem)), problem, prefix_ids=ids[:cut], origin=Origin.EXPERT,
                          n=n, meta={"alpha": float(alpha)})

    def heldout_problems(self, n: int) -> tuple[Any, ...]:
        """The first ``n`` problems of the task's validation split (disjoint from training by the task's split)."""
        task = self.ctx.task
        split = task.check_split(self.cfg.validation.split)
        probs = tuple(task.problems(split))
        if n > len(probs):
            raise ValueError(f"heldout_problems: {n} requested, split {split!r} has {len(probs)}")
        return probs[:n]

    # ------------------------------------------------------------------ sampling

    def sample(self, states: Sequence[StartState], *, seed: int, group_size: int | None = None) -> list[RolloutGroup]:
        """One group per state (its ``n`` or ``group_size`` samples), verified; seeds derived from ``seed``."""
        from llm_harness.trainer.rollout import sample_groups
        from vsr_util.seeding import derive_seed

        r = self.cfg.rollout
        groups, _ = sample_groups(states, backend=self.ctx.backend, codec=self.codec, verifier=self.ctx.verifier,
                                  n_default=group_size or r.group_size, temperature=r.temperature, top_p=r.top_p,
                                  max_new_tokens=r.max_new_tokens, seed=lambda c: derive_seed(seed, "lab", c))
        return groups

    # ------------------------------------------------------------------ gradients

    def _zero(self) -> None:
        for p in self.params:
            p.grad = None

    def flat_grad(self) -> Any:
        import torch

        return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1).detach().to(torch.float32)
                          for p in self.params])

    def gradient(self, groups: Sequence[RolloutGroup], weights: Sequence[float], *, advantages: Sequence[Any] | None = None,
                 normaliser: int | None = None) -> Any:
        """``(1/n) Σ w A ∇ log π`` over the samples of ``groups`` (module doc) as one float32 vector.

        ``weights[j]`` multiplies group ``j``'s samples; ``advantages[j]`` (optional) replaces the leave-one-out
        advantages (ExTra's shaped ones); ``normaliser`` the ``n`` to divide by (default: every sample)."""
        import torch

        from llm_harness.trainer.data import build_batch
        from llm_harness.trainer.modeling import sequence_logprobs

        if len(weights) != len(groups):
            raise ValueError(f"weights: {len(weights)} for {len(groups)} groups")
        n = normaliser if normaliser is not None else sum(g.size for g in groups)
        self._zero()
        if not groups or n <= 0:
            return self.flat_grad()
        gs = []
        for j, (g, w) in enumerate(zip(groups, weights)):
            adv = leave_one_out_advantages(g.rewards) if advantages is None else np.asarray(advantages[j], dtype=np.float64)
            gs.append(replace(g, advantages=adv * float(w), weights=None))
        batch = build_batch(gs, self.codec.pad_token_id)
        rows = self.cfg.run.micro_batch_rows
        idx = torch.arange(batch.size)
        chunks = [idx] if rows <= 0 else list(torch.split(idx, rows))
        r = self.cfg.rollout
        for c in chunks:  # the policy in eval mode: the one that sampled (no dropout)
            mb = batch.rows(c)
            if float(mb.advantages.abs().sum()) == 0.0:
                continue  # contributes exactly zero
            lp, _ = sequence_logprobs(self.model, mb.input_ids, mb.attention_mask, mb.loss_mask,
                                      temperature=r.temperature, top_p=r.top_p, with_entropy=False)
            seq = (lp * mb.loss_mask).sum(-1)
            ((seq * mb.advantages).sum() / n).backward()  # uphill: the gradient of + Σ w A log π / n
        return self.flat_grad()

    def sequence_logprobs(self, groups: Sequence[RolloutGroup]) -> list[np.ndarray]:
        """``log π(y_i | s)`` (summed over the continuation's tokens, the gradient's temperature and top-p) of every
        sample of every group, under the current parameters; no gradient."""
        import torch

        from llm_harness.trainer.data import build_batch
        from llm_harness.trainer.modeling import sequence_logprobs

        if not groups:
            return []
        ones = [replace(g, advantages=np.ones(g.size), weights=None) for g in groups]
        batch = build_batch(ones, self.codec.pad_token_id)
        rows = self.cfg.run.micro_batch_rows if self.cfg.run.micro_batch_rows > 0 else 64  # a pool is thousands of rows
        idx = torch.arange(batch.size)
        r = self.cfg.rollout
        sums = []
        with torch.no_grad():
            for c in torch.split(idx, rows):
                mb = batch.rows(c)
                lp, _ = sequence_logprobs(self.model, mb.input_ids, mb.attention_mask, mb.loss_mask,
                                          temperature=r.temperature, top_p=r.top_p, with_entropy=False)
                sums.append((lp * mb.loss_mask).sum(-1).to(torch.float64))
        flat = torch.cat(sums).numpy()
        out, i = [], 0
        for g in groups:
            out.append(flat[i:i + g.size].copy())
            i += g.size
        return out

    def score_sq_norms(self, group: RolloutGroup, k: int) -> list[float]:
        """``‖∇ log π(y_i | s)‖²`` of the group's first ``k`` samples (one backward pass each)."""
        import torch

        from llm_harness.trainer.data import build_batch
        from llm_harness.trainer.modeling import sequence_logprobs

        out = []
        r = self.cfg.rollout
        for i in range(min(k, group.size)):
            one = RolloutGroup(group.start, [group.response_ids[i]], [group.behaviour_logprobs[i]], group.rewards[i:i + 1],
                               group.birth_step, advantages=np.ones(1))
            b = build_batch([one], self.codec.pad_token_id)
            self._zero()
            lp, _ = sequence_logprobs(self.model, b.input_ids, b.attention_mask, b.loss_mask,
                                      temperature=r.temperature, top_p=r.top_p, with_entropy=False)
            (lp * b.loss_mask).sum().backward()
            g = self.flat_grad().to(torch.float64)
            out.append(float(g @ g))
        self._zero()
        return out
