"""The GRPO training loop with plug-in points (SPEC §3.1; issue 6 item 4).

One step::

    states  = sources.propose(...)                      # fresh source first, then plug-ins in order
    groups  = collect(states)                           # generate + verify (reward 0 on grader failure)
    repeat up to max_gen_rounds - 1 times:              # refills: plug-ins, then DAPO dynamic sampling
        groups += collect(refill states)                # every round's tokens counted
    groups  = estimator(groups); groups = shapers(...)  # advantages, then the shaping chain
    kept    = zero-variance filter(groups) (+ DAPO truncation to B mixed groups)
    batch   = kept + replay.replay(...)                 # stored rollouts with birth advantages
    for epoch, mini-batch: AdamW step on the clipped surrogate (or SFT NLL), grad clip
    scheduler.step(); sync weights to a separate engine; hooks.after_step(...); metrics; checkpoint

Departures: the zero-variance filter tests the *shaped* advantages (all zero → dropped), which is
DAPO's "rewards all equal" test when no shaper adds a bonus; dynamic sampling counts a group
as mixed by its rewards (DAPO) and keeps the first ``prompts_per_step`` mixed fresh groups.
The trainer never branches on plug-in or method names: estimators, aggregations, collectors
and plug-ins are registry entries.
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from llm_harness.trainer.advantages import ADVANTAGE_ESTIMATORS, estimate_advantages, informative
from llm_harness.trainer.checkpoint import latest_checkpoint, load_checkpoint, restore_rng, save_checkpoint
from llm_harness.trainer.config import TrainConfig
from llm_harness.trainer.data import ORIGINS, Origin, RolloutGroup, StartState, TrainBatch, build_batch
from llm_harness.trainer.losses import AGGREGATIONS, clip_fraction_by_origin, policy_loss, sft_loss
from llm_harness.trainer.metrics import MetricsWriter
from llm_harness.trainer.modeling import Codec, sequence_logprobs
from llm_harness.trainer.plugins import (
    AdvantageShaper,
    FreshPromptSource,
    Plugin,
    RolloutReplay,
    StartStateSource,
    StepHook,
    StepRecord,
    build_plugins,
)
from llm_harness.trainer.rollout import COLLECTORS, SafeVerifier, collect, derive_seed, merge_groups

__all__ = ["NonFiniteLossError", "TrainContext", "Trainer", "check_registries", "config_fingerprint", "lr_lambda"]


class NonFiniteLossError(RuntimeError):
    """Raised when a loss or gradient norm is NaN/inf; the offending batch is saved first."""


def check_registries(cfg: TrainConfig) -> None:
    """Registry-valued config fields must name registered entries (ValueError naming the field)."""
    from llm_harness.trainer.plugins import PLUGINS, import_plugin_modules

    import_plugin_modules()
    if cfg.algo.advantage not in ADVANTAGE_ESTIMATORS:
        raise ValueError(f"algo.advantage: unknown estimator {cfg.algo.advantage!r}; known: {sorted(ADVANTAGE_ESTIMATORS)}")
    if cfg.algo.loss_agg not in AGGREGATIONS:
        raise ValueError(f"algo.loss_agg: unknown aggregation {cfg.algo.loss_agg!r}; known: {sorted(AGGREGATIONS)}")
    if cfg.algo.collector not in COLLECTORS:
        raise ValueError(f"algo.collector: unknown collector {cfg.algo.collector!r}; known: {sorted(COLLECTORS)}")
    for name in cfg.plugins:
        if name not in PLUGINS:
            raise ValueError(f"plugins: unknown plug-in {name!r}; registered: {sorted(PLUGINS)}")


def config_fingerprint(cfg: TrainConfig) -> str:
    """Hash of the fields a resume must not change (everything but ``steps``, ``run`` and ``validation``)."""
    import hashlib
    import json

    from vsr.config_io import to_dict

    d = to_dict(cfg)
    for k in ("steps", "run", "validation"):
        d.pop(k, None)
    return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:16]


def lr_lambda(schedule: str, warmup: int, total: int) -> Callable[[int], float]:
    """LR multiplier at scheduler step ``s``: linear warm-up, then constant / linear / cosine to 0."""

    def f(s: int) -> float:
        if warmup > 0 and s < warmup:
            return (s + 1) / warmup
        if schedule == "constant":
            return 1.0
        frac = min(1.0, (s - warmup) / max(1, total - warmup))
        if schedule == "linear":
            return 1.0 - frac
        return 0.5 * (1.0 + math.cos(math.pi * frac))

    return f


@dataclass
class TrainContext:
    """What plug-ins and collectors may use (read-only by convention)."""

    config: TrainConfig
    task: Any
    codec: Codec
    backend: Any
    model: Any
    verifier: SafeVerifier
    run_dir: Path
    fresh: FreshPromptSource | None = None
    warnings: list[str] = field(default_factory=list)
    step: int = 0
    extra_new_tokens: int = 0
    """Tokens a plug-in generated outside the collector this step (e.g. an oracle's Monte-Carlo
    samples); plug-ins add to it and the trainer folds it into ``gen_new_tokens``."""

    def warn(self, msg: str) -> None:
        """Record a warning (counted in the step metrics, printed once per kind)."""
        self.warnings.append(msg)


class Trainer:
    """GRPO/DAPO/SFT trainer over a backend and a task, with plug-ins (module doc).

    ``model``/``tokenizer``/``backend``/``task`` may be passed in (tests, benchmarks); otherwise
    :func:`llm_harness.trainer.entry.train` builds them from the config.
    """

    def __init__(self, cfg: TrainConfig, *, model: Any, tokenizer: Any, backend: Any, task: Any,
                 extra_plugins: list[Plugin] | None = None):
        check_registries(cfg)
        if cfg.run.wandb_project:
            import importlib.util

            if importlib.util.find_spec("wandb") is None:
                raise ValueError("run.wandb_project: the wandb package is not installed (pip install wandb), or leave it empty")
        self.cfg = cfg
        self.model = model
        self.backend = backend
        self.task = task
        self.codec = Codec(tokenizer)
        self.run_dir = Path(cfg.run.run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.ckpt_dir = self.run_dir / "checkpoints"
        verifier = SafeVerifier(task, cfg.rollout.verify_timeout_s)
        self.ctx = TrainContext(cfg, task, self.codec, backend, model, verifier, self.run_dir)
        verifier.warn = self.ctx.warn
        problems = task.problems(task.check_split(cfg.task.train_split))
        self.fresh = FreshPromptSource(
            problems, lambda p: self.codec.encode(task.render_prompt(p, tokenizer)), cfg.rollout.prompts_per_step, cfg.seed
        )
        self.ctx.fresh = self.fresh
        self.plugins: list[Plugin] = [self.fresh] + build_plugins(cfg.plugins, self.ctx) + list(extra_plugins or [])
        self.sources = [p for p in self.plugins if isinstance(p, StartStateSource)]
        self.replays = [p for p in self.plugins if isinstance(p, RolloutReplay)]
        self.shapers = [p for p in self.plugins if isinstance(p, AdvantageShaper)]
        self.hooks = [p for p in self.plugins if isinstance(p, StepHook)]
        o = cfg.optim
        self.optimizer = torch.optim.AdamW(
            [p for p in model.parameters() if p.requires_grad], lr=o.lr, betas=(o.beta1, o.beta2), weight_decay=o.weight_decay
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
        self._t_plugins = 0.0
        params = list(model.parameters())
        self.device = params[0].device if params else torch.device("cpu")
        self.validation_problems = None

    # ------------------------------------------------------------------ checkpoints

    def save(self) -> Path:
        """Checkpoint the state after ``self.step`` completed steps."""
        return save_checkpoint(
            self.ckpt_dir,
            self.step,
            model=self.model,
            optimizer=self.optimizer,
            scheduler=self.scheduler,
            plugins=[p.state_dict() for p in self.plugins],
            fingerprint=self.fingerprint,
            keep=self.cfg.run.keep_checkpoints,
        )

    def resume(self) -> int:
        """Load the latest checkpoint (ValueError if none or if it is refused); returns its step."""
        path = latest_checkpoint(self.ckpt_dir)
        if path is None:
            raise ValueError(f"run.resume: no checkpoint in {self.ckpt_dir}")
        ck = load_checkpoint(path, fingerprint=self.fingerprint)
        if len(ck["plugins"]) != len(self.plugins):
            raise ValueError(f"checkpoint: {path} holds {len(ck['plugins'])} plug-in states, this run has {len(self.plugins)}")
        try:
            self.model.load_state_dict(ck["model"])
            self.optimizer.load_state_dict(ck["optim"])
            self.scheduler.load_state_dict(ck["sched"])
        except (RuntimeError, ValueError, KeyError) as exc:
            raise ValueError(f"checkpoint: {path} does not fit this model/optimizer ({exc})") from None
        for p, s in zip(self.plugins, ck["plugins"]):
            p.load_state_dict(s)
        restore_rng(ck["rng"])
        self.step = int(ck["meta"]["step"])
        self.sync_weights()
        return self.step

    # ------------------------------------------------------------------ pieces of a step

    def sync_weights(self) -> None:
        """Push the policy's weights to the backend when it is a separate engine (vLLM)."""
        if getattr(self.backend, "model", None) is self.model:
            return
        load = getattr(self.backend, "load_weights", None)
        if callable(load):
            load(self.model.state_dict())

    def _collect(self, step: int) -> tuple[list[RolloutGroup], dict[str, float]]:
        cfg = self.cfg
        states: list[StartState] = []
        tp = time.perf_counter()
        for src in self.sources:
            states = src.propose(step, states, self.ctx)
        self._t_plugins += time.perf_counter() - tp
        target = len(states)
        groups, st = collect(states, step=step, round=0, ctx=self.ctx)
        new_tokens, instances, samples, rounds = st.new_tokens, st.prompt_instances, st.samples, 1
        while rounds < cfg.algo.max_gen_rounds:
            more: list[StartState] = []
            tp = time.perf_counter()
            for src in self.sources:
                more += src.refill(step, groups, self.ctx)
            self._t_plugins += time.perf_counter() - tp
            if cfg.algo.dynamic_sampling:
                n_mixed = sum(g.mixed for g in merge_groups(groups + []) if g.birth_step == step)
                deficit = target - n_mixed - sum(1 for s in more if s.origin is Origin.FRESH)
                if deficit > 0:
                    more += self.fresh.draw(deficit)
            if not more:
                break
            extra, st = collect(more, step=step, round=rounds, ctx=self.ctx)
            groups = merge_groups(groups + extra)
            new_tokens += st.new_tokens
            instances += st.prompt_instances
            samples += st.samples
            rounds += 1
        acc = {
            "gen_new_tokens": float(new_tokens),
            "prompt_instances": float(instances),
            "gen_samples": float(samples),
            "gen_rounds": float(rounds),
            "target_groups": float(target),
        }
        return groups, acc

    def _forward(self, mb: TrainBatch, *, with_entropy: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        r = self.cfg.rollout
        return sequence_logprobs(
            self.model, mb.input_ids, mb.attention_mask, mb.loss_mask,
            temperature=r.temperature, top_p=r.top_p, with_entropy=with_entropy,
        )

    def _no_grad_logprobs(self, model: Any, batch: TrainBatch) -> torch.Tensor:
        r = self.cfg.rollout
        with torch.no_grad():
            lp, _ = sequence_logprobs(model, batch.input_ids, batch.attention_mask, batch.loss_mask,
                                      temperature=r.temperature, top_p=r.top_p, with_entropy=False)
        return lp

    def _save_bad_batch(self, batch: TrainBatch, step: int, what: str) -> Path:
        path = self.run_dir / f"nonfinite_batch_step{step:06d}.pt"
        torch.save({"what": what, "step": step, **batch.to_dict()}, path)
        return path

    def _update(self, batch: TrainBatch, step: int, old_lp: torch.Tensor, ref_lp: torch.Tensor | None) -> dict[str, float]:
        a, cfg = self.cfg.algo, self.cfg
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
                    mb = batch.rows(idx)
                    w = mb.loss_mask.shape[1]
                    mb_old = old_lp[idx, :w]
                    lp, ent = self._forward(mb, with_entropy=True)
                    if a.objective == "ppo":
                        out = policy_loss(
                            lp, mb_old, mb.advantages, mb.loss_mask,
                            eps_low=a.eps_low, eps_high=a.eps_high, dual_clip=a.dual_clip or None,
                            agg=a.loss_agg, norm_len=float(cfg.rollout.max_new_tokens), weights=mb.weights,
                            ref_logprobs=None if ref_lp is None else ref_lp[idx, :w], kl_coef=a.kl_coef,
                        )
                        loss = out.loss
                        c, t = clip_fraction_by_origin(out.clipped, mb.loss_mask, mb.origin, n_origins)
                        clip_c += c
                        clip_t += t
                        dual_c += float(out.dual_clipped.sum())
                        if out.kl is not None:
                            kls.append(float((out.kl.detach() * mb.loss_mask).sum() / mb.loss_mask.sum().clamp_min(1)))
                    else:
                        loss = sft_loss(lp, mb.loss_mask, agg=a.loss_agg, norm_len=float(cfg.rollout.max_new_tokens),
                                        weights=mb.weights)
                        clip_t += torch.zeros(n_origins, dtype=torch.float64, device=mb.origin.device).index_add_(
                            0, mb.origin, mb.loss_mask.sum(-1).double()).cpu()
                    if not torch.isfinite(loss):
                        p = self._save_bad_batch(mb, step, "loss")
                        raise NonFiniteLossError(f"non-finite loss {float(loss.detach())} at step {step}; batch saved to {p}")
                    self.optimizer.zero_grad(set_to_none=True)
                    loss.backward()
                    max_norm = cfg.optim.grad_clip if cfg.optim.grad_clip > 0 else float("inf")
                    gn = torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm)
                    if not torch.isfinite(gn):
                        p = self._save_bad_batch(mb, step, "grad_norm")
                        raise NonFiniteLossError(f"non-finite gradient norm at step {step}; batch saved to {p}")
                    self.optimizer.step()
                    losses.append(float(loss.detach()))
                    norms.append(float(gn))
                    if ent is not None:
                        ent_sum += float((ent * mb.loss_mask).sum())
                        ent_n += float(mb.loss_mask.sum())
        finally:
            self.model.eval()
        m: dict[str, float] = {
            "loss": float(np.mean(losses)) if losses else float("nan"),
            "grad_norm": float(np.mean(norms)) if norms else float("nan"),
            "entropy": ent_sum / ent_n if ent_n else float("nan"),
            "optimizer_steps": float(len(losses)),
            "clip_frac": float(clip_c.sum() / clip_t.sum()) if clip_t.sum() > 0 else float("nan"),
            "dual_clip_frac": dual_c / float(clip_t.sum()) if clip_t.sum() > 0 else float("nan"),
        }
        for o, c, t in zip(ORIGINS, clip_c.tolist(), clip_t.tolist()):
            m[f"clip_frac_{o.value}"] = c / t if t > 0 else float("nan")
        if kls:
            m["kl"] = float(np.mean(kls))
        return m

    # ------------------------------------------------------------------ one step

    def train_step(self) -> dict[str, Any]:
        """Run one full step (module doc) and return its metrics."""
        cfg, step = self.cfg, self.step
        self.ctx.step = step
        n_warn0 = len(self.ctx.warnings)
        self.ctx.extra_new_tokens = 0
        self._t_plugins = 0.0
        t0 = time.perf_counter()
        groups, acc = self._collect(step)
        t_gen = time.perf_counter() - t0
        groups = estimate_advantages(cfg.algo.advantage, groups, cfg.algo.eps_sigma)
        tp = time.perf_counter()
        for sh in self.shapers:
            groups = sh.shape(step, groups, self.ctx)
        self._t_plugins += time.perf_counter() - tp
        kept = [g for g in groups if informative(g)] if cfg.algo.filter_zero_variance else list(groups)
        if cfg.algo.dynamic_sampling:
            fresh_kept = [g for g in kept if g.start.origin is Origin.FRESH][: int(acc["target_groups"])]
            keep_ids = {id(g) for g in fresh_kept}
            kept = [g for g in kept if g.start.origin is not Origin.FRESH or id(g) in keep_ids]
        trained = list(kept)
        tp = time.perf_counter()
        for rp in self.replays:
            trained = rp.compose(step, trained, self.ctx)
        self._t_plugins += time.perf_counter() - tp
        kept_ids = {id(g) for g in kept}
        replayed = [g for g in trained if id(g) not in kept_ids]
        kept = [g for g in trained if id(g) in kept_ids]
        t1 = time.perf_counter()
        m: dict[str, Any] = {"step": step}
        t_score = 0.0
        t_train = 0.0
        if trained:
            batch = build_batch(trained, self.codec.pad_token_id).to(self.device)
            old_lp = batch.old_logprobs
            if cfg.algo.old_logprobs == "recompute":
                fresh_rows = torch.tensor([g.birth_step == step for g in trained for _ in range(g.size)], device=self.device)
                rec = self._no_grad_logprobs(self.model, batch)
                old_lp = torch.where(fresh_rows[:, None], rec, old_lp)
            ref_lp = self._no_grad_logprobs(self.ref_model, batch) if self.ref_model is not None else None
            t_score = time.perf_counter() - t1
            t2 = time.perf_counter()
            m.update(self._update(batch, step, old_lp, ref_lp))
            t_train = time.perf_counter() - t2
        else:
            m.update({"loss": float("nan"), "grad_norm": float("nan"), "entropy": float("nan"), "optimizer_steps": 0.0})
        m["lr"] = float(self.scheduler.get_last_lr()[0])
        with warnings.catch_warnings():  # a step without an update still advances the schedule
            warnings.simplefilter("ignore", UserWarning)
            self.scheduler.step()
        self.sync_weights()
        m.update(acc)
        m.update(self._group_metrics(groups, kept, replayed))
        record = StepRecord(step=step, generated=groups, trained=trained, metrics=m)
        tp = time.perf_counter()
        for h in self.hooks:
            extra = h.after_step(step, record, self.ctx)
            m.update(extra or {})
        self._t_plugins += time.perf_counter() - tp
        m["plugin_new_tokens"] = float(self.ctx.extra_new_tokens)
        m["gen_new_tokens"] = m["gen_new_tokens"] + float(self.ctx.extra_new_tokens)
        m["verify_warnings"] = float(len(self.ctx.warnings) - n_warn0)
        m["verify_errors_total"] = float(self.ctx.verifier.errors)
        m["verify_timeouts_total"] = float(self.ctx.verifier.timeouts)
        m["time_generate_s"] = t_gen
        m["time_score_s"] = t_score
        m["time_train_s"] = t_train
        m["time_plugins_s"] = self._t_plugins
        m["time_step_s"] = time.perf_counter() - t0
        self.step += 1
        return m

    def _group_metrics(self, groups: list[RolloutGroup], kept: list[RolloutGroup], replayed: list[RolloutGroup]) -> dict[str, float]:
        fresh_gen = [g for g in groups if g.birth_step == self.step]
        rewards = np.concatenate([g.rewards for g in fresh_gen]) if fresh_gen else np.zeros(0)
        lens = [len(r) for g in fresh_gen for r in g.response_ids]
        correct = [bool(v.correct) for g in fresh_gen for v in g.verify if v is not None]
        m = {
            "reward_mean": float(rewards.mean()) if rewards.size else float("nan"),
            "accuracy": float(np.mean(correct)) if correct else float("nan"),
            "length_mean": float(np.mean(lens)) if lens else float("nan"),
            "length_max": float(np.max(lens)) if lens else float("nan"),
            "groups_generated": float(len(fresh_gen)),
            "groups_kept": float(len(kept)),
            "groups_replayed": float(len(replayed)),
            "trained_samples": float(sum(g.size for g in kept + replayed)),
            "trained_new_tokens": float(sum(g.n_new_tokens for g in kept + replayed)),
            "mixed_frac": float(np.mean([g.mixed for g in fresh_gen])) if fresh_gen else float("nan"),
            "truncated_frac": float(np.mean([f == "length" for g in fresh_gen for f in g.finish_reasons])) if lens else float("nan"),
        }
        for o in ORIGINS:
            gs = [g for g in fresh_gen if g.start.origin is o]
            m[f"mixed_frac_{o.value}"] = float(np.mean([g.mixed for g in gs])) if gs else float("nan")
            m[f"groups_{o.value}"] = float(len(gs))
        fresh_only = [bool(v.correct) for g in fresh_gen if g.start.origin is Origin.FRESH for v in g.verify if v is not None]
        m["accuracy_fresh"] = float(np.mean(fresh_only)) if fresh_only else float("nan")
        c_len = [len(r) for g in fresh_gen for r, v in zip(g.response_ids, g.verify) if v is not None and v.correct]
        w_len = [len(r) for g in fresh_gen for r, v in zip(g.response_ids, g.verify) if v is not None and not v.correct]
        m["length_correct"] = float(np.mean(c_len)) if c_len else float("nan")
        m["length_incorrect"] = float(np.mean(w_len)) if w_len else float("nan")
        return m

    # ------------------------------------------------------------------ validation and run

    def validate(self) -> dict[str, float]:
        """Periodic held-out evaluation (``config.validation``)."""
        from llm_harness.trainer.evaluation import evaluate_policy

        v = self.cfg.validation
        if self.validation_problems is None:
            self.validation_problems = list(self.task.problems(self.task.check_split(v.split)))[: v.n_problems]
        res = evaluate_policy(
            self.backend, self.codec, self.task, self.ctx.verifier, self.validation_problems,
            k=v.k, temperature=v.temperature, top_p=v.top_p, max_new_tokens=self.cfg.rollout.max_new_tokens,
            seed=derive_seed(self.cfg.seed, 0x7A1, 0),
        )
        out = {f"val_avg_at_{v.k}": res["avg_at_k"]}
        for j, val in res["pass_at"].items():
            out[f"val_pass_at_{j}"] = val
        out["val_length_mean"] = res["length_mean"]
        return out

    def _wandb_init(self) -> dict[str, Any] | None:
        """``wandb.init`` arguments (a stable run id from the run directory, so a resume continues the same run)."""
        r = self.cfg.run
        if not r.wandb_project:
            return None
        import hashlib

        from vsr.config_io import to_dict

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
                writer.log(m)
                rows.append(m)
                bar.set_postfix(acc=f"{m.get('accuracy', float('nan')):.3f}", loss=f"{m.get('loss', float('nan')):.3g}")
                every = cfg.run.checkpoint_every
                if (every and self.step % every == 0) or self.step == cfg.steps:
                    self.save()
        finally:
            writer.close()
        return rows

    def close(self) -> None:
        """Release the verifier pool."""
        self.ctx.verifier.close()
