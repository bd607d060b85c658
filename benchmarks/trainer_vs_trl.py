"""Benchmark: this trainer vs TRL's ``GRPOTrainer`` on the same GRPO run (issue 6, "Performance").

Same model, task (step arithmetic), batch (8 prompts x 8 samples), sampling (T = 1, top-p 1,
top-k off, same response budget), loss (token-level DAPO aggregation, clip 0.2 / 0.28, no KL)
and optimizer (AdamW, same lr, grad clip 1); one optimizer step per batch. Reported: seconds
per step of each trainer (whole step: generation, reward, update), their ratio (target >= 2x),
held-out avg@k on the validation split before and after N steps, and our step-time split
(generate / score / train). TRL runs on CPU without vLLM.

Model: ``--model`` (a saved test-bed checkpoint, default ``llm_harness/testbed/checkpoints/mid``);
if that folder does not exist, a test-bed-shaped Qwen2 (hidden 128, 4 layers) is initialised and
SFT-trained for ``bootstrap_steps`` steps with this trainer's SFT baseline, and cached under
``cache_dir`` so later runs reuse it.

Departures (stated, not hidden): each trainer draws its own prompts in its own shuffled order
(TRL's sampler vs our seeded source) and its own samples, so accuracies are compared with their
binomial standard errors, not pairwise; our trainer drops zero-variance groups before the update
(TRL back-propagates their zero advantages), which is part of the speed difference — the
``ours_no_filter`` row keeps them. Needs ``pip install trl`` (a benchmark-only extra).

Run: ``python benchmarks/trainer_vs_trl.py --steps 20``.
"""

from __future__ import annotations

import csv
import io
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from vsr.atomic import write_text
from vsr.config_io import save_config


@dataclass(frozen=True)
class TrlBenchConfig:
    """Options of the trainer-vs-TRL benchmark."""

    model: str = "llm_harness/testbed/checkpoints/mid"
    """Saved test-bed checkpoint; when missing, a bootstrapped SFT model is used (module doc)."""
    cache_dir: str = "runs/bench_cache"
    """Where the bootstrapped model is cached."""
    bootstrap_steps: int = 400
    """SFT steps (64 expert sequences each, lr 2e-3) of the bootstrapped model."""
    steps: int = 20
    """GRPO steps per trainer."""
    prompts: int = 8
    """Prompts per step."""
    group_size: int = 8
    """Samples per prompt."""
    max_new_tokens: int = 96
    """Response budget."""
    lr: float = 2e-4
    """Learning rate of both trainers."""
    eval_problems: int = 200
    """Validation problems for held-out accuracy."""
    eval_k: int = 4
    """Samples per validation problem."""
    threads: int = 2
    """torch CPU threads."""
    seed: int = 0
    """Seed of both trainers."""
    skip_trl: bool = False
    """Only time this trainer."""
    out: str = "runs/bench/trainer_vs_trl.csv"
    """CSV of the results (the config is saved beside it)."""


def _bootstrap(cfg: TrlBenchConfig) -> Path:
    from llm_harness.tasks import get_task
    from llm_harness.testbed.model import TestbedModelConfig, make_model
    from llm_harness.testbed.tokenizer import build_tokenizer, save_tokenizer
    from llm_harness.trainer.config import AlgoConfig, OptimConfig, RolloutConfig, RunConfig, TrainConfig
    from llm_harness.trainer.entry import build_backend
    from llm_harness.trainer.loop import Trainer

    out = Path(cfg.cache_dir) / f"sft_{cfg.bootstrap_steps}"
    if (out / "config.json").is_file():
        return out
    tok = build_tokenizer()
    model = make_model(TestbedModelConfig(), tok, seed=cfg.seed)
    tcfg = TrainConfig(
        seed=cfg.seed,
        steps=cfg.bootstrap_steps,
        rollout=RolloutConfig(prompts_per_step=64, group_size=1, max_new_tokens=cfg.max_new_tokens, verify_timeout_s=0),
        algo=AlgoConfig(collector="expert", objective="sft", advantage="constant", filter_zero_variance=False),
        optim=OptimConfig(lr=2e-3, weight_decay=0.01, warmup_steps=50),
        run=RunConfig(run_dir=str(Path(cfg.cache_dir) / "bootstrap_run"), checkpoint_every=0, progress=True),
    )
    tr = Trainer(tcfg, model=model, tokenizer=tok, backend=build_backend(model, tok, tcfg), task=get_task("step_arith"))
    for _ in range(cfg.bootstrap_steps):
        tr.train_step()
    tr.close()
    model.save_pretrained(out)
    save_tokenizer(tok, out)
    return out


def _load(path: Path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True).float().eval()
    tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    return model, tok


def _accuracy(model, tok, task, cfg: TrlBenchConfig) -> tuple[float, float]:
    from llm_harness.backends import HFBackend, HFBackendConfig
    from llm_harness.trainer.evaluation import evaluate_policy
    from llm_harness.trainer.modeling import Codec
    from llm_harness.trainer.rollout import SafeVerifier

    model.eval()
    be = HFBackend(model, tok, config=HFBackendConfig(pad_token_id=tok.pad_token_id))
    probs = list(task.problems("validation"))[: cfg.eval_problems]
    v = SafeVerifier(task, 0)
    res = evaluate_policy(be, Codec(tok), task, v, probs, k=cfg.eval_k, temperature=1.0,
                          max_new_tokens=cfg.max_new_tokens, seed=cfg.seed + 99)
    acc = res["avg_at_k"]
    return acc, math.sqrt(max(acc * (1 - acc), 1e-12) / len(probs))


def _ours(path: Path, task, cfg: TrlBenchConfig, *, filter_zero: bool) -> dict:
    from llm_harness.trainer.config import AlgoConfig, ModelConfig, OptimConfig, RolloutConfig, RunConfig, TrainConfig
    from llm_harness.trainer.entry import build_backend
    from llm_harness.trainer.loop import Trainer

    model, tok = _load(path)
    tcfg = TrainConfig(
        seed=cfg.seed,
        steps=cfg.steps,
        model=ModelConfig(path=str(path)),
        rollout=RolloutConfig(prompts_per_step=cfg.prompts, group_size=cfg.group_size, max_new_tokens=cfg.max_new_tokens,
                              verify_timeout_s=0),
        algo=AlgoConfig(filter_zero_variance=filter_zero),
        optim=OptimConfig(lr=cfg.lr, grad_clip=1.0),
        run=RunConfig(run_dir=str(Path(cfg.out).parent / f"ours_{int(filter_zero)}"), checkpoint_every=0, progress=False),
    )
    tr = Trainer(tcfg, model=model, tokenizer=tok, backend=build_backend(model, tok, tcfg), task=task)
    rows = []
    t0 = time.perf_counter()
    for _ in range(cfg.steps):
        rows.append(tr.train_step())
    wall = time.perf_counter() - t0
    tr.close()
    split = {k: sum(r[k] for r in rows) / cfg.steps for k in ("time_generate_s", "time_score_s", "time_train_s")}
    acc, se = _accuracy(model, tok, task, cfg)
    return {"s_per_step": wall / cfg.steps, "acc": acc, "acc_se": se,
            "train_reward": sum(r["reward_mean"] for r in rows) / len(rows), **split}


def _trl(path: Path, task, cfg: TrlBenchConfig) -> dict:
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from llm_harness.trainer.modeling import Codec

    model, tok = _load(path)
    n = cfg.steps * cfg.prompts
    probs = list(task.problems("train"))[: max(n, 64)]
    by_prompt = {task.render_prompt(p, tok): p for p in probs}
    ds = Dataset.from_dict({"prompt": list(by_prompt)})
    codec = Codec(tok)
    rewards_seen = []

    def reward(prompts, completions, **kw):
        out = []
        for p, c in zip(prompts, completions):
            text = c.replace(tok.eos_token, "").replace(tok.pad_token, "")
            out.append(task.verify(by_prompt[p], text).reward)
        rewards_seen.extend(out)
        return out

    args = GRPOConfig(
        output_dir=str(Path(cfg.out).parent / "trl"),
        per_device_train_batch_size=cfg.prompts * cfg.group_size,
        num_generations=cfg.group_size,
        gradient_accumulation_steps=1,
        max_completion_length=cfg.max_new_tokens,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        beta=0.0,
        epsilon=0.2,
        epsilon_high=0.28,
        loss_type="dapo",
        learning_rate=cfg.lr,
        lr_scheduler_type="constant",
        warmup_steps=0,
        max_grad_norm=1.0,
        max_steps=cfg.steps,
        use_cpu=True,
        report_to="none",
        logging_steps=max(1, cfg.steps),
        save_strategy="no",
        seed=cfg.seed,
        disable_dropout=True,
        gradient_checkpointing=False,
    )
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=args, train_dataset=ds, processing_class=tok)
    t0 = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - t0
    del codec
    # evaluate a clean copy of the trained weights (TRL leaves its training wrappers on the model)
    state = {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}
    model, tok = _load(path)
    model.load_state_dict(state)
    acc, se = _accuracy(model, tok, task, cfg)
    return {"s_per_step": wall / cfg.steps, "acc": acc, "acc_se": se,
            "train_reward": sum(rewards_seen) / max(1, len(rewards_seen))}


def run(cfg: TrlBenchConfig) -> int:
    """Run the benchmark, print a table, write the CSV and config."""
    from llm_harness.tasks import get_task

    torch.set_num_threads(cfg.threads)
    task = get_task("step_arith")
    path = Path(cfg.model)
    if not (path / "config.json").is_file():
        print(f"{path} not found: bootstrapping an SFT model ({cfg.bootstrap_steps} steps)", file=sys.stderr)
        path = _bootstrap(cfg)
    model, tok = _load(path)
    acc0, se0 = _accuracy(model, tok, task, cfg)
    del model
    rows = {"initial": {"s_per_step": float("nan"), "acc": acc0, "acc_se": se0}}
    rows["ours"] = _ours(path, task, cfg, filter_zero=True)
    print("ours:", rows["ours"], file=sys.stderr)
    rows["ours_no_filter"] = _ours(path, task, cfg, filter_zero=False)
    print("ours_no_filter:", rows["ours_no_filter"], file=sys.stderr)
    if not cfg.skip_trl:
        rows["trl"] = _trl(path, task, cfg)
        print("trl:", rows["trl"], file=sys.stderr)
    cols = ["contender", "s_per_step", "acc", "acc_se", "train_reward", "time_generate_s", "time_score_s", "time_train_s"]
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=cols, extrasaction="ignore")
    w.writeheader()
    for k, r in rows.items():
        w.writerow({"contender": k, **r})
    out = Path(cfg.out)
    write_text(out, buf.getvalue())
    save_config(cfg, out.with_suffix(".config.yaml"))
    print(f"model: {path}  steps: {cfg.steps}  batch: {cfg.prompts}x{cfg.group_size}  threads: {cfg.threads}")
    for k, r in rows.items():
        extra = "".join(f"  {c}={r[c]:.3f}" for c in cols[4:] if c in r)
        print(f"{k:16s} s/step={r['s_per_step']:.3f}  acc={r['acc']:.3f}±{r['acc_se']:.3f}{extra}")
    if "trl" in rows:
        print(f"speed ratio (TRL s/step / ours s/step): {rows['trl']['s_per_step'] / rows['ours']['s_per_step']:.2f}x "
              f"(no filter: {rows['trl']['s_per_step'] / rows['ours_no_filter']['s_per_step']:.2f}x; target >= 2x)")
    return 0


if __name__ == "__main__":
    import tyro

    sys.exit(run(tyro.cli(TrlBenchConfig)))
