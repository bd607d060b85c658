"""Entry points: ``train(cfg)`` for ``vsr train`` and ``evaluate(cfg)`` for ``vsr eval``.

``train`` validates the config (and its registry names) before any work, writes the resolved
config to ``run_dir/config.yaml``, builds model, tokenizer, backend and task, optionally resumes
from the latest checkpoint, and trains. Exit codes: 0 success, 1 a non-finite loss stopped the
run (the offending batch is saved in the run directory).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch

from llm_harness.trainer.config import EvalConfig, TrainConfig
from vsr_util.atomic import read_json, write_json, write_text
from vsr_util.config_io import save_config
from vsr_util.runlock import FolderLock

__all__ = ["build_backend", "build_trainer", "evaluate", "resume_hint", "train"]


def build_backend(model: Any, tokenizer: Any, cfg: TrainConfig | EvalConfig, max_batch_sequences: int = 256,
                  share_prefix: bool = False) -> Any:
    """The generation backend for ``model`` (``hf``: shares the model object; ``vllm``: a separate engine,
    which caches prefixes itself); ``share_prefix``: the HF backend's common-prefix prefill."""
    from llm_harness.backends import BACKENDS, HFBackend, HFBackendConfig

    name = cfg.model.backend
    pad = getattr(tokenizer, "pad_token_id", None)
    run = getattr(cfg, "run", None)  # EvalConfig has no run section
    static = bool(getattr(run, "static_decode", False)) and name == "hf"
    hf = HFBackend(model, tokenizer, config=HFBackendConfig(max_batch_sequences=max_batch_sequences, pad_token_id=pad,
                                                            static_decode=static, share_prefix=share_prefix,
                                                            packed_weights=bool(getattr(run, "packed_weights", True)),
                                                            sampler=str(getattr(run, "sampler", "multinomial")),
                                                            autocast_bf16=_bf16(model, run)))
    if name == "hf":
        return hf
    from llm_harness.backends import VLLMBackendConfig

    # the folder the policy came from (a run's model for `vsr eval --run-dir`), in the policy's own dtype (never
    # vLLM's "auto", which would run an fp32 policy in bf16) unless run.precision is bf16; then the policy's own weights (a resumed or
    # evaluated checkpoint), so the engine samples exactly the model the caller holds
    path = str(getattr(model, "name_or_path", "") or "")
    if not path:
        raise ValueError("model.backend: vllm builds its engine from a model folder; this policy has none (a "
                         "random_init model: save it first, or use backend hf)")
    dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
    if _bf16(model, run):  # run.precision bf16: the engine samples in bf16 from the float32 master weights (cast
        dtype = "bfloat16"  # by vLLM's weight loaders at every sync, as verl's FSDP -> vLLM sync does)
    backend = BACKENDS[name].from_config(VLLMBackendConfig(model=path, dtype=dtype), scorer=hf)
    backend.load_weights(model.state_dict())
    return backend


def _bf16(model: Any, run: Any) -> bool:
    """Whether ``run.precision: bf16`` is in force for ``model`` (asked for, and native on its device)."""
    from llm_harness.trainer.precision import effective_bf16

    params = list(model.parameters())
    device = params[0].device if params else "cpu"
    return effective_bf16(str(getattr(run, "precision", "float32")), device)[0]


def build_trainer(cfg: TrainConfig, *, task: Any = None, extra_plugins: list | None = None) -> Any:
    """A :class:`~llm_harness.trainer.loop.Trainer` with the model, tokenizer and backend the config
    names (``task`` defaults to ``get_task(cfg.task.name, **cfg.task.params)``)."""
    from llm_harness.tasks import get_task
    from llm_harness.trainer.loop import Trainer
    from llm_harness.trainer.modeling import build_model

    if task is None:
        task = get_task(cfg.task.name, **cfg.task.params)
    model, tokenizer = build_model(cfg.model, cfg.seed)
    backend = build_backend(model, tokenizer, cfg, cfg.rollout.max_batch_sequences, cfg.rollout.share_prefix)
    return Trainer(cfg, model=model, tokenizer=tokenizer, backend=backend, task=task, extra_plugins=extra_plugins)


def check_resume_config(cfg: TrainConfig, run_dir: Path) -> None:
    """Refuse a resume whose configuration differs from the run's saved one in a field a resume must
    not change (ValueError naming every differing field, before anything is written)."""
    from llm_harness.trainer.loop import RESUMABLE_FIELDS
    from vsr_util.config_io import config_diff, read_mapping, to_dict

    saved = run_dir / "config.yaml"
    if not saved.is_file():
        return
    diff = config_diff(read_mapping(saved), to_dict(cfg), ignore=RESUMABLE_FIELDS)
    if diff:
        shown = "; ".join(f"{k}: {a!r} in the run, {b!r} now" for k, a, b in diff)
        raise ValueError(f"run.resume: incompatible configuration for {run_dir} ({shown}); "
                         "resume with the run's own values or start a new run_dir")


def train(cfg: TrainConfig) -> int:
    """Run (or resume) a training run described by ``cfg``; returns a process exit code.

    Nothing is written to the run directory until the configuration, model, task and plug-ins are
    validated and, on resume, the configuration and the checkpoint's fingerprint have matched."""
    from llm_harness.trainer.loop import NonFiniteLossError, check_registries

    check_registries(cfg)
    if cfg.run.num_threads:
        torch.set_num_threads(cfg.run.num_threads)
    run_dir = Path(cfg.run.run_dir)
    lock = FolderLock(run_dir, field="run.run_dir").acquire()  # before any check of the folder's contents
    trainer = None
    try:
        if not cfg.run.resume and (run_dir / "checkpoints" / "latest").exists():
            raise ValueError(
                f"run.run_dir: {run_dir} already holds a run with checkpoints; pass --run.resume true to continue it "
                f"or choose another run_dir"
            )
        if cfg.run.resume:
            check_resume_config(cfg, run_dir)
        trainer = build_trainer(cfg)
        est = _check_memory(cfg, trainer)
        if cfg.run.dry_run:
            from llm_harness.trainer.memory_check import available_bytes

            avail = available_bytes()
            print(f"dry run: {est.describe()}; available {'unknown' if avail is None else f'{avail / 2**30:.1f} GiB'}; "
                  "the memory check passed, nothing was trained or written", file=sys.stderr)
            trainer.close()
            trainer = None
            lock.discard_if_created()
            return 0
    except BaseException:
        if trainer is not None:
            trainer.close()
        lock.discard_if_created()  # a refused run leaves no folder behind
        raise
    try:
        if cfg.run.resume:
            step = trainer.resume()
            print(f"resumed from step {step}", file=sys.stderr)
        save_config(cfg, run_dir / "config.yaml")
        trainer.fit()
    except NonFiniteLossError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        trainer.close()
        lock.release()
    return 0


def resume_hint(cfg: TrainConfig) -> str:
    """How to continue a ``vsr train`` run that stopped (Ctrl-C, SIGTERM, a full disk), from what its run folder
    holds now: the step of its newest complete checkpoint (the one ``--run.resume true`` starts from), or that it
    has none yet, so it starts again. Reads only the checkpoints' ``meta.json`` (no checksum of the tensors)."""
    from llm_harness.trainer.checkpoint import CorruptCheckpointError, folder_step, read_meta, step_folders

    root = Path(cfg.run.run_dir) / "checkpoints"
    for folder in step_folders(root):
        try:
            step = read_meta(folder).get("step")
        except CorruptCheckpointError:
            continue
        if step == folder_step(folder):
            return f"rerun the same command with --run.resume true to continue from the last checkpoint (step {step})"
    again = "rerun it without --run.resume" if cfg.run.resume else "rerun the same command"
    return (f"{again} to start the run again: it has no checkpoint yet (none complete in {root}), so "
            "--run.resume true would find nothing to resume")


def _check_memory(cfg: TrainConfig, trainer: Any) -> Any:
    """Refuse a run whose largest training pass, or whole step, cannot fit in this machine's memory
    (:mod:`.memory_check`); returns the step's estimate."""
    from llm_harness.trainer.memory_check import (
        available_bytes,
        check_memory,
        check_step_memory,
        estimate_pass_bytes,
        estimate_step,
    )

    sample = list(trainer.fresh.problems[:256])
    prompt = max((len(trainer.ctx.encode_prompt(p)) for p in sample), default=0)
    mc = trainer.model.config
    est = estimate_pass_bytes(cfg, prompt_tokens=prompt, vocab=int(mc.vocab_size),
                              max_context=getattr(mc, "max_position_embeddings", None))
    avail = available_bytes()
    check_memory(cfg, est, avail)
    step = estimate_step(cfg, trainer.model, prompt_tokens=prompt)
    check_step_memory(cfg, step, avail)
    return step


def _load_eval_model(cfg: EvalConfig) -> tuple[Any, Any]:
    """``(model, tokenizer)`` of ``cfg.model``, or of ``cfg.run_dir``'s latest intact checkpoint, in eval mode."""
    from llm_harness.trainer.checkpoint import find_resumable
    from llm_harness.trainer.modeling import build_model
    from vsr_util.config_io import load_config

    model_cfg, seed, state = cfg.model, cfg.seed, None
    if cfg.run_dir:
        run_cfg = load_config(TrainConfig, Path(cfg.run_dir) / "config.yaml")
        model_cfg, seed = run_cfg.model, run_cfg.seed
        path, ck, skipped = find_resumable(Path(cfg.run_dir) / "checkpoints")
        state = ck["model"]
        step = ck.get("meta", {}).get("step", "?")
        if skipped:  # never evaluate an older step silently
            print(f"vsr eval: evaluating step {step} ({path}), the newest intact checkpoint; skipped: "
                  + "; ".join(skipped), file=sys.stderr)
        else:
            print(f"vsr eval: evaluating step {step} ({path})", file=sys.stderr)
    model, tokenizer = build_model(model_cfg, seed)
    if state is not None:
        model.load_state_dict(state)
    return model.eval(), tokenizer


def evaluate_env(cfg: EvalConfig) -> int:
    """``vsr eval --env NAME``: success of an agent over the fixed evaluation seeds (``k`` episodes each,
    all advancing in one batched call per turn); writes eval.json / eval.md."""
    from llm_harness.envs.task import EVAL_SEEDS
    from llm_harness.tasks import get_task
    from llm_harness.tasks.coverage import check_task_encodable
    from llm_harness.trainer.modeling import Codec
    from llm_harness.trainer.multiturn import evaluate_agent

    task = get_task("env", env=cfg.env, env_params=dict(cfg.env_params), window=cfg.window, reply_format=cfg.reply_format)
    n = min(cfg.n_problems, len(EVAL_SEEDS))
    problems = list(task.problems("validation"))[:n]
    model, tokenizer = _load_eval_model(cfg)
    codec = Codec(tokenizer)
    check_task_encodable(codec, task, problems, tokenizer)
    backend = build_backend(model, tokenizer, cfg, share_prefix=True)  # every prompt starts with the instruction
    ev = evaluate_agent(backend, codec, task, problems, k=cfg.k, temperature=cfg.temperature, top_p=cfg.top_p,
                        turn_tokens=cfg.turn_tokens, seed=cfg.seed)
    rate, lo, hi = ev["success"], ev["ci_low"], ev["ci_high"]
    res = {"env": cfg.env, "env_params": dict(cfg.env_params), **{k: v for k, v in ev.items() if k not in ("avg_at_k", "n_problems")}}
    md = (f"# {cfg.env} {dict(cfg.env_params) or ''}\n\nsuccess over {n} fixed seeds x {cfg.k} episodes (T = "
          f"{cfg.temperature}): **{rate:.3f}** [{lo:.3f}, {hi:.3f}] (95 % CI, seeds as clusters); mean turns "
          f"{res['turns_mean']:.2f}, invalid actions {res['invalid_rate']:.3f}, mean return {res['return_mean']:.3f}\n")
    out = Path(cfg.out_dir)
    save_config(cfg, out / "eval_config.yaml")
    write_json(out / "eval.json", res)
    write_text(out / "eval.md", md)
    print(md)
    return 0


def _note_task_differs(cfg: EvalConfig, task: Any) -> bool:
    """Say on stderr when ``vsr eval --run-dir`` evaluates a task (name or parameters) other than the one the run
    trained on — legitimate (a held-out task, another reader) but never silent. True when they differ."""
    from llm_harness.tasks import get_task
    from vsr_util.config_io import load_config

    path = Path(cfg.run_dir) / "config.yaml"
    if not path.is_file():
        return False  # _load_eval_model names the missing file
    run_task = load_config(TrainConfig, path).task
    if run_task.name == cfg.task.name:
        try:
            a, b = getattr(get_task(run_task.name, **run_task.params), "config", None), getattr(task, "config", None)
        except (TypeError, ValueError, KeyError):
            a = b = None
        same = a == b if a is not None and b is not None else dict(run_task.params) == dict(cfg.task.params)
        if same:
            return False
    def shown(t: Any) -> str:
        return t.name + (" " + " ".join(f"{k}={v}" for k, v in sorted(t.params.items())) if t.params else "")
    print(f"vsr eval: the run in {cfg.run_dir} trained on {shown(run_task)}; evaluating {shown(cfg.task)} as the "
          "command sets it (give --task / --task-params to evaluate the run's own task)", file=sys.stderr)
    return True


def evaluate(cfg: EvalConfig) -> int:
    """Evaluate a checkpoint folder, or a run directory's latest checkpoint; writes eval.json/eval.md
    (with ``env`` set: an agent's success over the fixed evaluation seeds, :func:`evaluate_env`)."""
    if cfg.env:
        return evaluate_env(cfg)
    from llm_harness.tasks import get_task
    from llm_harness.tasks.coverage import check_task_encodable
    from llm_harness.trainer.evaluation import SamplingSession, evaluate_policy, format_eval_markdown
    from llm_harness.trainer.modeling import Codec
    from llm_harness.trainer.rollout import SafeVerifier

    task = get_task(cfg.task.name, **cfg.task.params)
    if cfg.run_dir:
        _note_task_differs(cfg, task)
    model, tokenizer = _load_eval_model(cfg)
    problems = list(task.problems(task.check_split(cfg.split)))[: cfg.n_problems]
    check_task_encodable(Codec(tokenizer), task, problems, tokenizer)
    backend = build_backend(model, tokenizer, cfg)
    verifier = SafeVerifier(task, 10.0)
    reference = read_json(Path(cfg.reference)) if cfg.reference else None
    try:
        session = SamplingSession(backend, Codec(tokenizer), task, verifier, temperature=cfg.temperature, top_p=cfg.top_p,
                                  max_new_tokens=cfg.max_new_tokens)
        res = evaluate_policy(session, problems, k=cfg.k, seed=cfg.seed, reference=reference)
    finally:
        verifier.close()
    out = Path(cfg.out_dir)
    save_config(cfg, out / "eval_config.yaml")
    write_json(out / "eval.json", res)
    write_text(out / "eval.md", format_eval_markdown(res))
    print(format_eval_markdown(res))
    return 0
