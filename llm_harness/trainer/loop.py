"""The GRPO training loop: one step value through typed stages (GRPO: Replay §3, Eq. 1–2).

One step (:class:`~llm_harness.trainer.step.Step` flows through; each line fills one field)::

    slots    = plug-in claims (in order, each offered the open slots) + fresh.draw(B − claimed)
    counts   = plug-ins' round-0 sample counts (Reinforce-Ada-Est stage 1)
    groups   = collect(slots)                             # generate + verify (reward 0 on grader failure)
    repeat up to max_gen_rounds − 1 times:               # refills: Reinforce-Ada-Est, DAPO, ...
        groups += collect(refill states + fresh draws)    # every round's tokens counted
    groups   = estimator(groups); groups = shapers(...)   # advantages, then the shaping chain
    kept     = zero-variance filter(groups), then keep plug-ins (DAPO truncation)
    fresh, replayed = replay plug-ins' composition of kept (default: fresh = kept)
    for epoch, mini-batch: AdamW step on the objective over fresh + replayed, grad clip
    scheduler.step(); sync weights to a separate engine; hooks.after_step(step); metrics; checkpoint

Departures: the zero-variance filter tests the *shaped* advantages (all zero → dropped), which is
DAPO's "rewards all equal" test when no shaper adds a bonus. The trainer never branches on plug-in
or method names: estimators, aggregations, objectives, collectors and plug-ins are registry entries.
Plug-ins never touch the fresh stream or the context: they claim slots and return results.
"""


from __future__ import annotations

import time
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from llm_harness.tasks.coverage import check_task_encodable
from llm_harness.trainer.advantages import ADVANTAGE_ESTIMATORS, estimate_advantages, informative
from llm_harness.trainer.checkpoint import (
    find_resumable,
    remove_stale_temporaries,
    restore_rng,
    save_checkpoint,
    tensors_to_bytes,
)
from llm_harness.trainer.config import TrainConfig
from llm_harness.trainer.data import ORIGINS, Origin, TrainBatch, build_batch
from llm_harness.trainer.losses import AGGREGATIONS, OBJECTIVES, chunk_share, clip_fraction_by_origin
from llm_harness.trainer.runlog import MetricsWriter
from llm_harness.trainer.modeling import Codec, sequence_logprobs
from llm_harness.trainer.plugins import (
    PLUGINS,
    AdvantageShaper,
    GroupFilter,
    Plugin,
    RolloutReplay,
    StartStateSource,
    StepHook,
    TrainContext,
    WarningLog,
    build_plugins,
    check_indices,
    import_plugin_modules,
    merge_metrics,
    plugin_label,
)
from llm_harness.trainer import multiturn as _multiturn  # noqa: F401  (registers the 'multiturn' collector)
from llm_harness.trainer.prompts import FreshPromptSource
from llm_harness.trainer.rollout import COLLECTORS, SafeVerifier, collect, derive_seed, merge_groups
from llm_harness.trainer.schedules import lr_lambda
from llm_harness.trainer.step import FRESH_OWNER, Refill, Slot, Step
from vsr_util.atomic import atomic_path

__all__ = ["NonFiniteLossError", "TrainContext", "Trainer", "check_registries", "config_fingerprint", "lr_lambda"]


class NonFiniteLossError(RuntimeError):
    """Raised when a loss or gradient norm is NaN/inf; the offending batch is saved first."""


def check_registries(cfg: TrainConfig) -> None:
    """Registry-valued config fields must name registered entries (ValueError naming the field);
    the registries own the names, the config does not repeat them."""
    from llm_harness.backends import BACKENDS

    import_plugin_modules()
    ADVANTAGE_ESTIMATORS.check(cfg.algo.advantage, "algo.advantage")
    if (getattr(ADVANTAGE_ESTIMATORS[cfg.algo.advantage], "needs_group", False) and cfg.algo.collector == "generate"
            and cfg.rollout.group_size < 2):
        raise ValueError(f"rollout.group_size: the {cfg.algo.advantage!r} estimator normalises within a group and needs "
                         f"G >= 2, got {cfg.rollout.group_size}")
    AGGREGATIONS.check(cfg.algo.loss_agg, "algo.loss_agg")
    COLLECTORS.check(cfg.algo.collector, "algo.collector")
    OBJECTIVES.check(cfg.algo.objective, "algo.objective")
    BACKENDS.check(cfg.model.backend, "model.backend")
    for name in cfg.plugins:
        PLUGINS.check(name, "plugins")


#: top-level config fields a resume may change; everything else is fingerprinted
RESUMABLE_FIELDS = ("steps", "run", "validation")
#: the latest validation's per-problem outcomes in the run folder (:meth:`Trainer.validate`)
EVAL_OUTCOMES = "eval_outcomes.json"


def config_fingerprint(cfg: TrainConfig) -> str:
    """Hash of the fields a resume must not change (everything but :data:`RESUMABLE_FIELDS`)."""
    import hashlib
    import json

    from vsr_util.config_io import to_dict

    d = to_dict(cfg)
    for k in RESUMABLE_FIELDS:
        d.pop(k, None)
    return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:16]


def seed_global_generators(seed: int) -> None:
    """Seed Python's, NumPy's and torch's global generators from the run seed (every stochastic part
    of a step uses its own derived generator; this only makes the saved RNG states reproducible)."""
    import random

    random.seed(derive_seed(seed, 0x61081))
    np.random.seed(derive_seed(seed, 0x61082))
    torch.manual_seed(derive_seed(seed, 0x61083))


class _StageClock:
    """Wall time spent inside plug-in calls during one step."""

    def __init__(self) -> None:
        self.total = 0.0

    def __enter__(self) -> "_StageClock":
        self._t = time.perf_counter()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.total += time.perf_counter() - self._t


class _StepMetrics:
    """Metrics and extra tokens the plug-in stages of one step return (owner-checked, see ``merge_metrics``)."""

    def __init__(self) -> None:
        self.metrics: dict[str, Any] = {}
        self.owners: dict[str, str] = {}
        self.new_tokens = 0
        self.clock = _StageClock()

    def add(self, result: Any, owner: str) -> None:
        """Fold one stage result (:class:`~llm_harness.trainer.step.Result`) of plug-in ``owner`` in."""
        merge_metrics(self.metrics, self.owners, result.metrics, owner)
        if result.new_tokens < 0:
            raise ValueError(f"plugins.{owner}: new_tokens must be >= 0, got {result.new_tokens}")
        self.new_tokens += int(result.new_tokens)


class Trainer:
    """GRPO/DAPO/SFT trainer over a backend and a task, with plug-ins (module doc).

    ``model``/``tokenizer``/``backend``/``task`` may be passed in (tests, benchmarks); otherwise
    :func:`llm_harness.trainer.entry.train` builds them from the config.
    """

    def __init__(self, cfg: TrainConfig, *, model: Any, tokenizer: Any, backend: Any, task: Any,
                 extra_plugins: list[Plugin] | None = None):
        check_registries(cfg)
        seed_global_generators(cfg.seed)  # identical runs write identical checkpoints (nothing here draws from them)
        if cfg.run.wandb_project:
            import importlib.util

            if importlib.util.find_spec("wandb") is None:
                raise ValueError("run.wandb_project: the wandb package is not installed (pip install wandb), or leave it empty")
        self.cfg = cfg
        self.model = model
        self.backend = backend
        self.task = task
        self.codec = Codec(tokenizer)
        self.run_dir = Path(cfg.run.run_dir)  # created by fit / save, never before the run is validated
        self.ckpt_dir = self.run_dir / "checkpoints"
        log = WarningLog()
        verifier = SafeVerifier(task, cfg.rollout.verify_timeout_s, warn=log.warn)
        problems = task.problems(task.check_split(cfg.task.train_split))
        if cfg.task.pool:
            from llm_harness.trainer.pool import load_pool, restrict_to_pool

            ids = load_pool(cfg.task.pool, task=cfg.task.name, task_params=cfg.task.params, split=cfg.task.train_split,
                            params_outside=task.params_outside(cfg.task.train_split))
            problems = restrict_to_pool(problems, ids)
        check_task_encodable(self.codec, task, problems, tokenizer)  # refuse silent garbage before any work

        def encode(p: Any) -> tuple[int, ...]:
            return self.codec.encode(task.render_prompt(p, tokenizer))

        self.fresh = FreshPromptSource(problems, encode, cfg.seed)
        self.ctx = TrainContext(cfg, task, self.codec, backend, model, verifier, self.run_dir,
                                train_problems=self.fresh.problems, encode_prompt=encode, log=log)
        self.plugins: list[Plugin] = build_plugins(cfg.plugins, self.ctx) + list(extra_plugins or [])
        for p in extra_plugins or []:
            if not isinstance(p, Plugin):
                raise ValueError(f"extra_plugins: {type(p).__name__} is not a Plugin")
        self.sources = [p for p in self.plugins if isinstance(p, StartStateSource)]
        self.shapers = [p for p in self.plugins if isinstance(p, AdvantageShaper)]
        self.filters = [p for p in self.plugins if isinstance(p, GroupFilter)]
        self.replays = [p for p in self.plugins if isinstance(p, RolloutReplay)]
        self.hooks = [p for p in self.plugins if isinstance(p, StepHook)]
        self.objective = OBJECTIVES[cfg.algo.objective]
        if cfg.run.packed_forward:
            from llm_harness.trainer.packed_forward import supports

            why = supports(model)
            if why is not None:
                raise ValueError(f"run.packed_forward: not available for this model ({why}); set it to false")
        o = cfg.optim
        self.optimizer = torch.optim.AdamW(
            [p for p in model.parameters() if p.requires_grad], lr=o.lr, betas=(o.beta1, o.beta2),
            weight_decay=o.weight_decay, fused=cfg.run.fused_optimizer or None,
        )
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lr_lambda(o.schedule, o.warmup_steps, cfg.steps))
        self.ref_model = None
        if cfg.algo.kl_coef > 0:
            import copy

            self.ref_model = copy.deepcopy(model).eval()
            for p in self.ref_model.parameters():
                p.requires_grad_(False)
        self.fingerprint = config_fingerprint(cfg)
        self.step = 0
        params = list(model.parameters())
        self.device = params[0].device if params else torch.device("cpu")
        self.validation_problems = None
        from llm_harness.trainer.memory_watch import PhaseMemory
        from llm_harness.trainer.precision import effective_bf16

        self.memory = PhaseMemory(self.device)
        self.bf16, why = effective_bf16(cfg.run.precision, self.device)
        if why is not None:
            warnings.warn(f"run.precision: bf16 falls back to float32 ({why})", stacklevel=2)

    # ------------------------------------------------------------------ checkpoints

    def save(self) -> Path:
        """Checkpoint the state after ``self.step`` completed steps."""
        return save_checkpoint(
            self.ckpt_dir,
            self.step,
            model=self.model,
            optimizer=self.optimizer,
            scheduler=self.scheduler,
            plugins=[self.fresh.state_dict()] + [p.state_dict() for p in self.plugins],
            fingerprint=self.fingerprint,
            keep=self.cfg.run.keep_checkpoints,
        )

    def resume(self) -> int:
        """Load the newest intact checkpoint (a damaged newer one is skipped with a warning naming it;
        ValueError if none is left or it is refused); stale temporary folders are removed; returns its step."""
        remove_stale_temporaries(self.ckpt_dir)
        # loading the states is part of choosing the checkpoint: a plug-in state that is damaged inside
        # files whose checksums hold (CorruptCheckpointError) falls back to the next older checkpoint
        path, ck, skipped = find_resumable(self.ckpt_dir, fingerprint=self.fingerprint, validate=self._load_states)
        for why in skipped:
            warnings.warn(f"resume: skipped a damaged checkpoint ({why}); resuming from {path.name}", stacklevel=2)
        restore_rng(ck["rng"])
        self.step = int(ck["meta"]["step"])
        self.sync_weights()
        return self.step

    def _load_states(self, path: Path, ck: dict[str, Any]) -> None:
        """Load checkpoint ``ck`` (folder ``path``) into the model, optimizer, scheduler, prompt source and
        plug-ins (:meth:`resume`'s ``validate``); ValueError when it does not fit this run."""
        if len(ck["plugins"]) != 1 + len(self.plugins):
            raise ValueError(f"checkpoint: {path} holds {len(ck['plugins']) - 1} plug-in states, this run has {len(self.plugins)}")
        try:
            self.model.load_state_dict(ck["model"])
            self.optimizer.load_state_dict(ck["optim"])
            for group in self.optimizer.param_groups:  # the run's kernel, whichever wrote the checkpoint
                group["fused"] = self.cfg.run.fused_optimizer or None
                group["foreach"] = None
                for param in group["params"]:  # the fused kernel reads its step count on the parameter's device
                    st = self.optimizer.state.get(param, {})
                    if torch.is_tensor(st.get("step")):
                        st["step"] = st["step"].to(device=param.device, dtype=torch.float32)
            self.scheduler.load_state_dict(ck["sched"])
        except (RuntimeError, ValueError, KeyError) as exc:
            raise ValueError(f"checkpoint: {path} does not fit this model/optimizer ({exc})") from None
        self.fresh.load_state_dict(ck["plugins"][0])
        for p, s in zip(self.plugins, ck["plugins"][1:]):
            p.load_state_dict(s)

    # ------------------------------------------------------------------ pieces of a step

    def sync_weights(self) -> None:
        """Push the policy's weights to the backend when it is a separate engine (vLLM)."""
        if getattr(self.backend, "model", None) is self.model:
            return
        load = getattr(self.backend, "load_weights", None)
        if callable(load):
            load(self.model.state_dict())

    # ------------------------------------------------------------------ stages of a step

    def _starts(self, step: Step, acc: "_StepMetrics") -> Step:
        """Slots: plug-in claims in plug-in order, each offered what is still open, then the fresh draw."""
        open_slots = self.cfg.rollout.prompts_per_step
        claimed: list[Slot] = []
        for src in self.sources:
            label = plugin_label(src)
            with acc.clock:
                c = src.claim(replace(step, slots=tuple(claimed)), open_slots, self.ctx)
            if len(c.states) > open_slots:
                raise ValueError(f"plugins.{label}: claimed {len(c.states)} slots, only {open_slots} were open")
            claimed += [Slot(s, label) for s in c.states]
            open_slots -= len(c.states)
            acc.add(c, label)
        slots = tuple([Slot(s, FRESH_OWNER, drawn=True) for s in self.fresh.draw(open_slots)] + claimed)
        for src in self.sources:
            label = plugin_label(src)
            with acc.clock:
                sc = src.plan_samples(replace(step, slots=slots), self.ctx)
            if sc is None:
                continue
            if len(sc.n) != len(slots):
                raise ValueError(f"plugins.{label}: plan_samples gave {len(sc.n)} counts for {len(slots)} slots")
            slots = tuple(sl if n is None else replace(sl, state=replace(sl.state, n=int(n))) for sl, n in zip(slots, sc.n))
            acc.add(sc, label)
        return replace(step, slots=slots)

    def _generate(self, step: Step, acc: "_StepMetrics") -> Step:
        """Round 0 from the slots, then refill rounds (plug-ins' states and fresh draws) up to the cap."""
        groups, st = collect(list(step.states), step=step.index, round=0, ctx=self.ctx)
        new_tokens, instances, samples, rounds = st.new_tokens, st.prompt_instances, st.samples, 1
        step = replace(step, groups=tuple(groups))
        while rounds < self.cfg.algo.max_gen_rounds:
            requested = Refill()
            more: list[Slot] = []
            for src in self.sources:
                label = plugin_label(src)
                with acc.clock:
                    r = src.refill(step, requested, self.ctx)
                if r.fresh < 0:
                    raise ValueError(f"plugins.{label}: refill asked for {r.fresh} fresh prompts")
                more += [Slot(s, label) for s in r.states] + [Slot(s, label, drawn=True) for s in self.fresh.draw(r.fresh)]
                requested = Refill(states=requested.states + r.states, fresh=requested.fresh + r.fresh)
                acc.add(r, label)
            if not more:
                break
            extra, st = collect([s.state for s in more], step=step.index, round=rounds, ctx=self.ctx)
            step = replace(step, groups=tuple(merge_groups(list(step.groups) + extra)), refills=step.refills + tuple(more))
            new_tokens += st.new_tokens
            instances += st.prompt_instances
            samples += st.samples
            rounds += 1
        acc.metrics.update({
            "gen_new_tokens": float(new_tokens),
            "prompt_instances": float(instances),
            "gen_samples": float(samples),
            "gen_rounds": float(rounds),
            "target_groups": float(step.target),
        })
        return step

    def collect_step(self) -> Step:
        """The current step's slots and generated groups, without training (advances the fresh stream;
        for tests and studies that need the trainer's rollouts)."""
        acc = _StepMetrics()
        return self._generate(self._starts(Step(index=self.step), acc), acc)

    def _advantages(self, step: Step, acc: "_StepMetrics") -> Step:
        """The estimator, then the shaping chain (each shaper returns the whole list of groups)."""
        a = self.cfg.algo
        step = replace(step, groups=tuple(estimate_advantages(a.advantage, list(step.groups), a.eps_sigma, a.std_ddof,
                                                                a.advantage_params)))
        for sh in self.shapers:
            label = plugin_label(sh)
            with acc.clock:
                r = sh.shape(step, self.ctx)
            if len(r.groups) != len(step.groups) or any(g.advantages is None for g in r.groups):
                raise ValueError(f"plugins.{label}: shape must return all {len(step.groups)} groups with advantages")
            step = replace(step, groups=tuple(r.groups))
            acc.add(r, label)
        return step

    def _keep(self, step: Step, acc: "_StepMetrics") -> Step:
        """Zero-variance filter (config), then the keep plug-ins (e.g. DAPO's truncation)."""
        groups = step.groups
        kept = tuple(g for g in groups if informative(g)) if self.cfg.algo.filter_zero_variance else groups
        step = replace(step, kept=kept)
        for f in self.filters:
            label = plugin_label(f)
            with acc.clock:
                r = f.keep(step, self.ctx)
            idx = check_indices(r.indices, len(step.kept), f"plugins.{label}.keep")
            step = replace(step, kept=tuple(step.kept[i] for i in idx))
            acc.add(r, label)
        return step

    def _compose(self, step: Step, acc: "_StepMetrics") -> Step:
        """The loss's groups by role: ``fresh = kept`` unless a replay plug-in composes otherwise."""
        step = replace(step, fresh=step.kept, replayed=())
        for rp in self.replays:
            label = plugin_label(rp)
            with acc.clock:
                c = rp.compose(step, self.ctx)
            bad_f = [g for g in c.fresh if g.birth_step != step.index or g.advantages is None]
            bad_r = [g for g in c.replayed if g.birth_step >= step.index or g.advantages is None]
            if bad_f or bad_r:
                raise ValueError(f"plugins.{label}: compose must return this step's groups as fresh and earlier ones "
                                 f"as replayed, all with advantages ({len(bad_f)} fresh, {len(bad_r)} replayed do not)")
            step = replace(step, fresh=tuple(c.fresh), replayed=tuple(c.replayed))
            acc.add(c, label)
        return step

    def _pass_mode(self) -> dict[str, bool]:
        """How the log-prob passes run: ``run.group_prompt_once``, ``run.packed_forward``, or the rollout's
        batch-wide shared prefix (the first that is set)."""
        run, r = self.cfg.run, self.cfg.rollout
        return {"group_prompt": run.group_prompt_once, "packed": run.packed_forward,
                "share_prefix": r.share_prefix and not (run.packed_forward or run.group_prompt_once)}

    def _forward(self, mb: TrainBatch, *, with_entropy: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        from llm_harness.trainer.precision import autocast

        r = self.cfg.rollout
        with autocast(self.device, self.bf16):
            return sequence_logprobs(
                self.model, mb.input_ids, mb.attention_mask, mb.loss_mask,
                temperature=r.temperature, top_p=r.top_p, with_entropy=with_entropy, **self._pass_mode(),
            )

    def _no_grad_logprobs(self, model: Any, batch: TrainBatch) -> torch.Tensor:
        from llm_harness.trainer.precision import autocast

        r = self.cfg.rollout
        with torch.no_grad(), autocast(self.device, self.bf16):
            lp, _ = sequence_logprobs(model, batch.input_ids, batch.attention_mask, batch.loss_mask,
                                      temperature=r.temperature, top_p=r.top_p, with_entropy=False, **self._pass_mode())
        return lp

    def _save_bad_batch(self, batch: TrainBatch, step: int, what: str) -> Path:
        """The offending mini-batch as safetensors (``what`` and ``step`` in its metadata)."""
        path = self.run_dir / f"nonfinite_batch_step{step:06d}.safetensors"
        with atomic_path(path) as tmp:
            tmp.write_bytes(tensors_to_bytes(batch.to_dict(), metadata={"what": what, "step": str(step)}))
        return path

    def _micro_batches(self, batch: TrainBatch, idx: torch.Tensor) -> list[tuple[torch.Tensor, float]]:
        """``[(rows, share)]``: mini-batch ``idx`` as one pass (share 1), or with ``run.micro_batch_rows`` as chunks
        of rows of similar length (stable sort, so ties keep the mini-batch's order), each weighted by its share
        of the mini-batch's loss (``losses.chunk_share``)."""
        size = self.cfg.run.micro_batch_rows
        if size <= 0 or len(idx) <= size:
            return [(idx, 1.0)]
        lengths = batch.attention_mask[idx].sum(-1)
        order = idx[torch.sort(lengths, stable=True).indices]
        if self.cfg.run.group_prompt_once:  # rows of one context together (each chunk runs a context once)
            from llm_harness.trainer.group_prompt import group_rows

            g = group_rows(batch.input_ids[order], batch.attention_mask[order], batch.loss_mask[order]).group
            first = {}
            for i, gi in enumerate(g.tolist()):  # groups in the order of their shortest row
                first.setdefault(gi, i)
            key = torch.tensor([first[gi] for gi in g.tolist()])
            order = order[torch.sort(key, stable=True).indices]
        full = batch.loss_mask[idx]
        return [(c, chunk_share(self.cfg.algo.loss_agg, batch.loss_mask[c], full)) for c in torch.split(order, size)]

    def _anchor_in_pass(self, rows: int) -> bool:
        """Whether π_old can come from the update's own forward pass (``run.anchor_in_pass`` and one epoch of one
        mini-batch: no parameter moves before every row has been through it, so its detached log-probs are what a
        separate no-grad pass would give, up to the kernels' rounding at another batch shape)."""
        a = self.cfg.algo
        return bool(self.cfg.run.anchor_in_pass) and a.ppo_epochs == 1 and min(a.mini_batches, rows) == 1

    def _update(self, batch: TrainBatch, step: int, old_lp: torch.Tensor, ref_lp: torch.Tensor | None,
                token_weights: torch.Tensor | None = None, anchor_rows: torch.Tensor | None = None) -> dict[str, float]:
        """One PPO update over ``batch``. ``anchor_rows[B]`` (bool; one epoch of one mini-batch only): the rows whose
        π_old is this pass's own log-probs, detached — what a separate no-grad pass before the update would compute
        (:meth:`_anchor_in_pass`); with bf16, their truncated importance weights against the sampler's log-probs
        (``old_lp``) are computed here too, and the gap's metrics returned."""
        a, cfg = self.cfg.algo, self.cfg
        if anchor_rows is not None and (a.ppo_epochs != 1 or min(a.mini_batches, batch.size) != 1):
            raise ValueError("anchor_rows: the in-pass anchor needs one epoch of one mini-batch")
        anchored = torch.zeros_like(old_lp) if anchor_rows is not None else None
        B = batch.size
        n_origins = len(ORIGINS)
        clip_c = torch.zeros(n_origins, dtype=torch.float64)
        clip_t = torch.zeros(n_origins, dtype=torch.float64)
        dual_c = 0.0
        losses, norms, ent_sum, ent_n, kls = [], [], 0.0, 0.0, []
        self.model.train()
        try:
            for epoch in range(a.ppo_epochs):
                gen = torch.Generator().manual_seed(derive_seed(cfg.seed, step, 0xB0, epoch))
                perm = torch.randperm(B, generator=gen) if a.mini_batches > 1 else torch.arange(B)
                for idx in torch.tensor_split(perm, min(a.mini_batches, B)):
                    if len(idx) == 0:
                        continue
                    self.optimizer.zero_grad(set_to_none=True)
                    mb_loss, mb_kl, mb_tokens = 0.0, 0.0, 0.0  # (kl and tokens become tensors: one pass logs as before)
                    for cidx, share in self._micro_batches(batch, idx):
                        mb = batch.rows(cidx)
                        w = mb.loss_mask.shape[1]
                        lp, ent = self._forward(mb, with_entropy=True)
                        wts = mb.weights
                        old = old_lp[cidx, :w]
                        tw = None if token_weights is None else token_weights[cidx, :w]
                        if anchored is not None:  # π_old of the anchor rows: this pass's log-probs, detached
                            here = anchor_rows[cidx][:, None]
                            anchored[cidx, :w] = lp.detach().to(anchored.dtype)
                            if self.bf16:  # the sampler's log-probs are the behaviour policy's: correct for the gap
                                from llm_harness.trainer.precision import tis_weights

                                tw = tis_weights(lp.detach(), old, mb.loss_mask, cfg.run.rollout_is_threshold,
                                                 rows=anchor_rows[cidx])
                            old = torch.where(here, lp.detach().to(old.dtype), old)
                        if tw is not None:  # bf16's rollout correction, times any per-sample weight
                            wts = tw if wts is None else wts.to(tw.dtype)[:, None] * tw
                        out = self.objective(
                            lp, old, mb.advantages, mb.loss_mask, algo=a,
                            norm_len=float(cfg.rollout.max_new_tokens), weights=wts,
                            ref_logprobs=None if ref_lp is None else ref_lp[cidx, :w],
                        )
                        loss = out.loss * share  # share 1.0 for one pass: x * 1.0 is x, bit for bit
                        c, t = clip_fraction_by_origin(out.clipped, mb.loss_mask, mb.origin, n_origins)
                        clip_c += c
                        clip_t += t
                        dual_c += float(out.dual_clipped.sum())
                        if out.kl is not None:
                            mb_kl = mb_kl + (out.kl.detach() * mb.loss_mask).sum()
                            mb_tokens = mb_tokens + mb.loss_mask.sum()
                        if not torch.isfinite(loss):
                            p = self._save_bad_batch(mb, step, "loss")
                            raise NonFiniteLossError(f"non-finite loss {float(loss.detach())} at step {step}; batch saved to {p}")
                        loss.backward()
                        mb_loss += float(loss.detach())
                        if ent is not None:
                            ent_sum += float((ent * mb.loss_mask).sum())
                            ent_n += float(mb.loss_mask.sum())
                    if out.kl is not None:
                        kls.append(float(mb_kl / mb_tokens.clamp_min(1)))
                    max_norm = cfg.optim.grad_clip if cfg.optim.grad_clip > 0 else float("inf")
                    gn = torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm)
                    if not torch.isfinite(gn):
                        p = self._save_bad_batch(batch.rows(idx), step, "grad_norm")
                        raise NonFiniteLossError(f"non-finite gradient norm at step {step}; batch saved to {p}")
                    self.optimizer.step()
                    losses.append(mb_loss)
                    norms.append(float(gn))
        finally:
            self.model.eval()
        m: dict[str, float] = {
            **({"loss": float(np.mean(losses)), "grad_norm": float(np.mean(norms))} if losses else {}),
            **({"entropy": ent_sum / ent_n} if ent_n else {}),
            "optimizer_steps": float(len(losses)),
            "clip_frac": float(clip_c.sum() / clip_t.sum()) if clip_t.sum() > 0 else float("nan"),
            "dual_clip_frac": dual_c / float(clip_t.sum()) if clip_t.sum() > 0 else float("nan"),
        }
        for o, c, t in zip(ORIGINS, clip_c.tolist(), clip_t.tolist()):
            m[f"clip_frac_{o.value}"] = c / t if t > 0 else float("nan")
        if anchored is not None and self.bf16:  # the gap's metrics over every anchor row, as the separate pass reports
            from llm_harness.trainer.precision import rollout_is_weights

            m.update(rollout_is_weights(anchored, old_lp, batch.loss_mask, cfg.run.rollout_is_threshold,
                                        rows=anchor_rows)[1])
        if kls:
            m["kl"] = float(np.mean(kls))
        return m

    # ------------------------------------------------------------------ one step

    def train_step(self) -> dict[str, Any]:
        """Run one full step (module doc) and return its metrics."""
        cfg = self.cfg
        n_warn0 = len(self.ctx.warnings)
        acc = _StepMetrics()
        mem = self.memory
        t0 = time.perf_counter()
        with mem.phase("generate"):
            step = self._starts(Step(index=self.step), acc)
            step = self._generate(step, acc)
        t_gen = time.perf_counter() - t0
        step = self._advantages(step, acc)
        step = self._keep(step, acc)
        step = self._compose(step, acc)
        trained = step.trained
        t1 = time.perf_counter()
        m: dict[str, Any] = {"step": step.index}
        t_score = t_train = 0.0
        if trained:
            with mem.phase("score"):
                batch = build_batch(trained, self.codec.pad_token_id).to(self.device)
                old_lp = batch.old_logprobs
                tis = anchor = None
                if cfg.algo.old_logprobs == "recompute" or self.bf16:  # this step's rows: the training pass's log-probs
                    n_fresh = sum(g.size for g in step.fresh)
                    fresh_rows = torch.arange(batch.size, device=self.device) < n_fresh
                if (cfg.algo.old_logprobs == "recompute" or self.bf16) and self._anchor_in_pass(batch.size):
                    anchor = fresh_rows  # no separate pass: the update's own forward is π_old (one epoch, one mini-batch)
                elif cfg.algo.old_logprobs == "recompute" or self.bf16:
                    rec = self._no_grad_logprobs(self.model, batch)
                    if self.bf16:  # the sampler's log-probs are the behaviour policy's: correct for the gap
                        from llm_harness.trainer.precision import rollout_is_weights

                        tis, tis_m = rollout_is_weights(rec, old_lp, batch.loss_mask, cfg.run.rollout_is_threshold,
                                                        rows=fresh_rows)
                        m.update(tis_m)
                    old_lp = torch.where(fresh_rows[:, None], rec, old_lp)
                ref_lp = self._no_grad_logprobs(self.ref_model, batch) if self.ref_model is not None else None
            t_score = time.perf_counter() - t1
            t2 = time.perf_counter()
            with mem.phase("train"):
                m.update(self._update(batch, step.index, old_lp, ref_lp, tis, anchor))
            t_train = time.perf_counter() - t2
        else:  # no update: loss, gradient norm and entropy are absent (not NaN), optimizer_steps says why
            m["optimizer_steps"] = 0.0
        m["lr"] = float(self.scheduler.get_last_lr()[0])
        with warnings.catch_warnings():  # a step without an update still advances the schedule
            warnings.simplefilter("ignore", UserWarning)
            self.scheduler.step()
        self.sync_weights()
        m.update(acc.metrics)
        m.update(self._group_metrics(step))
        step = replace(step, metrics=dict(m))
        for h in self.hooks:
            label = plugin_label(h)
            with acc.clock:
                r = h.after_step(step, self.ctx)
            acc.add(r, label)
        m.update(acc.metrics)
        m["plugin_new_tokens"] = float(acc.new_tokens)
        m["gen_new_tokens"] = m["gen_new_tokens"] + float(acc.new_tokens)
        m["verify_warnings"] = float(len(self.ctx.warnings) - n_warn0)
        m["verify_errors_total"] = float(self.ctx.verifier.errors)
        m["verify_timeouts_total"] = float(self.ctx.verifier.timeouts)
        m["time_generate_s"] = t_gen
        m["time_score_s"] = t_score
        m["time_train_s"] = t_train
        m["time_plugins_s"] = acc.clock.total
        m["time_step_s"] = time.perf_counter() - t0
        m.update(self._memory_metrics())
        self.step += 1
        return m

    def _memory_metrics(self) -> dict[str, float]:
        """This step's phase peaks and the fixed parts (``mem_*``, GiB; :mod:`.memory_watch`)."""
        from llm_harness.trainer.memory_watch import GB, fixed_parts

        out = self.memory.metrics()
        out.update({f"mem_{k}_gb": v / GB for k, v in fixed_parts(self.model, self.optimizer).items()})
        return out

    def memory_report(self) -> dict[str, Any]:
        """The run's memory so far (``memory.json``): fixed parts and the largest peak of each phase, in GiB."""
        from llm_harness.trainer.memory_watch import GB, fixed_parts

        return {"kind": self.memory.kind, "exact": self.memory.exact, "device": str(self.device),
                "fixed_gb": {k: v / GB for k, v in fixed_parts(self.model, self.optimizer).items()},
                "peak_gb": {k: v / GB for k, v in self.memory.peaks.items()}, "steps": self.step}

    def _group_metrics(self, step: Step) -> dict[str, float]:
        """Counts and rates of the step's groups by role and origin (generated = this step's groups)."""
        gen = step.groups
        rewards = np.concatenate([g.rewards for g in gen]) if gen else np.zeros(0)
        lens = [len(r) for g in gen for r in g.response_ids]
        correct = [bool(v.correct) for g in gen for v in g.verify if v is not None]
        trained = step.trained
        m = {
            "reward_mean": float(rewards.mean()) if rewards.size else float("nan"),
            "accuracy": float(np.mean(correct)) if correct else float("nan"),
            "length_mean": float(np.mean(lens)) if lens else float("nan"),
            "length_max": float(np.max(lens)) if lens else float("nan"),
            "groups_generated": float(len(gen)),
            "groups_kept": float(len(step.kept)),
            "groups_fresh_trained": float(len(step.fresh)),
            "groups_replayed": float(len(step.replayed)),
            "trained_samples": float(sum(g.size for g in trained)),
            "trained_new_tokens": float(sum(g.n_new_tokens for g in trained)),
            "mixed_frac": float(np.mean([g.mixed for g in gen])) if gen else float("nan"),
            "truncated_frac": float(np.mean([f == "length" for g in gen for f in g.finish_reasons])) if lens else float("nan"),
        }
        for o in ORIGINS:
            gs = [g for g in gen if g.start.origin is o]
            m[f"mixed_frac_{o.value}"] = float(np.mean([g.mixed for g in gs])) if gs else float("nan")
            m[f"groups_{o.value}"] = float(len(gs))
            m[f"trained_samples_{o.value}"] = float(sum(g.size for g in trained if g.start.origin is o))
        owners: dict[str, int] = {}
        for sl in step.slots:
            owners[sl.owner] = owners.get(sl.owner, 0) + 1
        for owner, n in owners.items():
            m[f"slots_{owner}"] = float(n)
        fresh_only = [bool(v.correct) for g in gen if g.start.origin is Origin.FRESH for v in g.verify if v is not None]
        m["accuracy_fresh"] = float(np.mean(fresh_only)) if fresh_only else float("nan")
        c_len = [len(r) for g in gen for r, v in zip(g.response_ids, g.verify) if v is not None and v.correct]
        w_len = [len(r) for g in gen for r, v in zip(g.response_ids, g.verify) if v is not None and not v.correct]
        m["length_correct"] = float(np.mean(c_len)) if c_len else float("nan")
        m["length_incorrect"] = float(np.mean(w_len)) if w_len else float("nan")
        if any(g.multiturn for g in gen):
            from llm_harness.trainer.multiturn import agent_group_metrics

            m.update(agent_group_metrics(gen, trained))
        return m

    # ------------------------------------------------------------------ validation and run

    def sampling_session(self, temperature: float, top_p: float = 1.0) -> Any:
        """This trainer's backend, codec, task and verifier as a :class:`~llm_harness.trainer.evaluation.SamplingSession`
        (the rollout's response budget; evaluation draws from it)."""
        from llm_harness.trainer.evaluation import SamplingSession

        return SamplingSession(self.backend, self.codec, self.task, self.ctx.verifier, temperature=temperature,
                               top_p=top_p, max_new_tokens=self.cfg.rollout.max_new_tokens)

    def validate(self) -> dict[str, float | None]:
        """Periodic held-out evaluation (``config.validation``; :func:`~llm_harness.trainer.evaluation.evaluate_policy`).

        Scalars: ``val_avg_at_{k}``; ``val_pass_at_{j}`` for every j = 1..k; ``val_length_mean`` /
        ``val_length_correct`` / ``val_length_incorrect``; ``val_distinct_4``, ``val_self_bleu_4`` and
        ``val_logdet`` (embedder ``validation.diversity_embedder``). A metric undefined on this
        evaluation (no correct sample, no 4-gram, k = 1) is None, as ``metrics.jsonl`` stores a
        non-finite value, so the row is strict JSON as returned. AES needs a reference run and is
        computed by the comparison report from ``val_length_mean`` and ``val_avg_at_{k}``.
        """
        from llm_harness.embedders import build_embedder
        from llm_harness.trainer.evaluation import evaluate_policy

        v = self.cfg.validation
        sp = v.sampling()  # k, temperature, top_p in force (a protocol fills the unset ones)
        if self.validation_problems is None:
            self.validation_problems = list(self.task.problems(self.task.check_split(v.split)))[: v.n_problems]
        if hasattr(self.task, "make_env"):  # agents: success over the fixed evaluation seeds
            from llm_harness.trainer.multiturn import evaluate_agent

            res = evaluate_agent(self.backend, self.codec, self.task, self.validation_problems, k=sp.k, temperature=sp.temperature,
                                 top_p=sp.top_p, turn_tokens=self.cfg.agent.turn_tokens, seed=derive_seed(self.cfg.seed, 0x7A1, 0),
                                 max_turns=self.cfg.agent.max_turns)
            out = {f"val_avg_at_{sp.k}": res["avg_at_k"], **{f"val_pass_at_{j}": x for j, x in res["pass_at"].items()}}
            out.update({f"val_{key}": res[key] for key in ("success", "ci_low", "ci_high", "length_mean", "turns_mean",
                                                           "invalid_rate", "return_mean")})
            return out
        embedder = getattr(self, "_validation_embedder", None)  # built once (minilm loads a model)
        if embedder is None:
            embedder = build_embedder(v.diversity_embedder, {}, self.ctx, "validation.diversity_embedder")
            self._validation_embedder = embedder
        res = evaluate_policy(
            self.sampling_session(sp.temperature, sp.top_p), self.validation_problems, k=sp.k,
            seed=derive_seed(self.cfg.seed, 0x7A1, 0), embedder=embedder, logdet_alpha=v.logdet_alpha,
        )
        out = {f"val_avg_at_{sp.k}": res["avg_at_k"]}
        for j, val in res["pass_at"].items():
            out[f"val_pass_at_{j}"] = val
        for key in ("length_mean", "length_correct", "length_incorrect", "distinct_4", "self_bleu_4", "logdet"):
            out[f"val_{key}"] = None if res[key] is None else float(res[key])
        self._write_eval_outcomes(sp.k, res["problem_ids"], res["problem_correct"])
        return out

    def _write_eval_outcomes(self, k: int, problem_ids: list[str], correct: list[int]) -> None:
        """``eval_outcomes.json`` in the run folder (atomic; the latest validation's): each evaluated problem's id and
        its number of correct samples out of ``k``, so a comparison can count the problems as a sample too
        (:func:`theory.metrics.crossed_contrast`); ``metrics.jsonl`` keeps only the averages."""
        from vsr_util.atomic import write_json

        if not self.run_dir.is_dir():  # a trainer built to evaluate only, before its run folder exists: nothing kept
            return
        write_json(self.run_dir / EVAL_OUTCOMES, {"format": 1, "step": int(self.step), "k": int(k),
                                                  "problem_ids": [str(p) for p in problem_ids],
                                                  "correct": [int(c) for c in correct]})

    def _wandb_init(self) -> dict[str, Any] | None:
        """``wandb.init`` arguments (a stable run id from the run directory, so a resume continues the same run)."""
        r = self.cfg.run
        if not r.wandb_project:
            return None
        import hashlib

        from vsr_util.config_io import to_dict

        rid = hashlib.sha256(str(self.run_dir.resolve()).encode()).hexdigest()[:12]
        return {"project": r.wandb_project, "name": self.run_dir.name, "id": rid, "resume": "allow", "mode": r.wandb_mode,
                "dir": str(self.run_dir), "config": to_dict(self.cfg)}

    def fit(self) -> list[dict[str, Any]]:
        """Train from ``self.step`` to ``config.steps`` (or ``run.stop_after`` steps), with metrics,
        validation and checkpoints; returns this invocation's metric rows."""
        from tqdm.auto import tqdm

        cfg = self.cfg
        writer = MetricsWriter(self.run_dir, resume_step=self.step, tensorboard=cfg.run.tensorboard, wandb=self._wandb_init())
        rows = []
        limit = cfg.steps if not cfg.run.stop_after else min(cfg.steps, self.step + cfg.run.stop_after)
        try:
            bar = tqdm(range(self.step, limit), disable=not cfg.run.progress, desc="train", initial=self.step, total=cfg.steps)
            for _ in bar:
                m = self.train_step()
                v = cfg.validation
                if v.every and (self.step % v.every == 0 or self.step == cfg.steps):
                    te = time.perf_counter()
                    m.update(self.validate())
                    m["time_eval_s"] = time.perf_counter() - te
                if self.step == 1:  # the first row names the configuration (compare records check it)
                    m = {**m, "config_fingerprint": config_fingerprint(cfg)}
                writer.log(m)
                rows.append(m)
                self._write_memory(first=len(rows) == 1)
                bar.set_postfix(acc=f"{m.get('accuracy', float('nan')):.3f}",
                                loss=f"{m['loss']:.3g}" if "loss" in m else "no update")
                every = cfg.run.checkpoint_every
                if (every and self.step % every == 0) or self.step == cfg.steps:
                    self.save()
        finally:
            writer.close()
        return rows

    def _write_memory(self, first: bool) -> None:
        """``memory.json`` in the run folder (atomic), and on this invocation's first step a line naming it."""
        import json
        import sys

        from vsr_util.atomic import write_text

        rep = self.memory_report()
        write_text(self.run_dir / "memory.json", json.dumps(rep, indent=2) + "\n")
        if first:
            fixed = ", ".join(f"{k} {v:.2f}" for k, v in rep["fixed_gb"].items())
            peaks = ", ".join(f"{k} {v:.2f}" for k, v in rep["peak_gb"].items())
            what = "peak allocated" if rep["kind"] == "peak_allocated" else "peak RSS"
            print(f"memory (GiB): {fixed}; {what} by phase: {peaks}{'' if rep['exact'] else ' (cumulative)'}"
                  f" -> {self.run_dir / 'memory.json'}", file=sys.stderr)

    def close(self) -> None:
        """Release the verifier pool."""
        self.ctx.verifier.close()
