"""Benchmark: a GRPO step with and without transparent huge pages for torch's large CPU tensors.

torch's CPU allocator gives a tensor of 2 MiB or more 2 MiB alignment and ``madvise(MADV_HUGEPAGE)`` when the
environment variable ``THP_MEM_ALLOC_ENABLE=1`` is set before its first allocation (``c10/core/alloc_cpu.cpp``); the
kernel then backs it with 2 MiB pages where ``/sys/kernel/mm/transparent_hugepage/enabled`` allows ``madvise``. A
GRPO step allocates and frees ~1 GB of large temporaries (logits over the vocabulary, their gradients, weight casts
under bf16 autocast), and every fresh 4 KiB page costs a page fault; with 2 MiB pages there are far fewer. Whether
that pays is what this measures (``results/huge_pages/README.md``: on this machine it did not, so ``vsr`` leaves
the variable unset).

Each contender runs in its own process with the variable set to 0 or 1 (the only difference), repeats interleaved
(off on off on ...): the lean step of ``configs/real_smollm2_vsr_grpo.yaml`` at the sizes of
``benchmarks/trainer_vs_trl.py`` (4 prompts x 4 samples x 32 tokens, groups kept), one warm-up step, then ``steps``
timed steps. Reported per contender: s/step, the generate and training parts, minor page faults per step, peak RSS,
the huge pages in use at the end (``AnonHugePages``); the median ratio off/on with its min-max, and the machine load.
The updates must agree: the same seed gives the same loss in both (the allocator changes no number).

Run: ``python benchmarks/huge_pages.py --repeats 3`` (about 8 minutes on a quiet 2-core machine; needs
``make real-model``); ``--model random`` runs a tiny random model on ``step_arith`` instead (the tests).
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import tyro

__all__ = ["HugePagesBenchConfig", "run"]

ENV = "THP_MEM_ALLOC_ENABLE"


@dataclass(frozen=True)
class HugePagesBenchConfig:
    """``python benchmarks/huge_pages.py``."""

    model: str = "smollm2-135m-instruct"
    """A model folder or registered name (its task: the arithmetic ladder); ``random``: a tiny random model on
    ``step_arith`` (smoke tests)."""
    precision: str = "float32"
    """``float32`` or ``bf16`` (``run.precision``, with ``run.anchor_in_pass``)."""
    prompts: int = 4
    """Prompts per step."""
    group_size: int = 4
    """Samples per prompt."""
    max_new_tokens: int = 32
    """Response budget."""
    steps: int = 2
    """Timed steps per contender (after one warm-up step)."""
    repeats: int = 3
    """Interleaved repeats (off, on, off, on, ...)."""
    threads: int = 2
    """torch threads of each contender."""
    out: Path = Path("benchmarks/results/huge_pages/huge_pages.json")
    """Result file (every run and the summary)."""
    child: str = ""
    """Internal: run one contender in this process and print its result as JSON."""


def _anon_huge_kib() -> int:
    """``AnonHugePages`` of this process (kB), 0 when the kernel does not report it."""
    try:
        for line in Path("/proc/self/smaps_rollup").read_text().splitlines():
            if line.startswith("AnonHugePages:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _trainer(cfg: HugePagesBenchConfig, run_dir: str):
    from llm_harness.trainer.config import (AlgoConfig, ModelConfig, OptimConfig, RolloutConfig, RunConfig, TaskConfig,
                                            TrainConfig)
    from llm_harness.trainer.entry import build_trainer

    run = {"static_decode": True, "sampler": "inverse_cdf", "group_prompt_once": True, "fused_optimizer": True}
    if cfg.precision == "bf16":
        run.update(precision="bf16", anchor_in_pass=True)
    if cfg.model == "random":
        model = ModelConfig(random_init=True, hidden_size=64, num_layers=2, num_heads=4, max_context=96)
        task = TaskConfig(name="step_arith", params={"n_train": 64, "n_validation": 8, "n_test": 8, "n_hard": 4,
                                                     "max_terms": 3})
    else:
        model, task = ModelConfig(path=cfg.model), TaskConfig(name="arith_ladder")
    tcfg = TrainConfig(seed=0, steps=cfg.steps + 1, model=model, task=task,
                       rollout=RolloutConfig(prompts_per_step=cfg.prompts, group_size=cfg.group_size,
                                             max_new_tokens=cfg.max_new_tokens, verify_timeout_s=0),
                       algo=AlgoConfig(filter_zero_variance=False), optim=OptimConfig(lr=1e-6, grad_clip=1.0),
                       run=RunConfig(run_dir=run_dir, checkpoint_every=0, progress=False, **run))
    return build_trainer(tcfg)


def _one(cfg: HugePagesBenchConfig) -> dict:
    import tempfile

    import torch

    torch.set_num_threads(cfg.threads)
    with tempfile.TemporaryDirectory() as tmp:
        tr = _trainer(cfg, str(Path(tmp) / "run"))
        steps = []
        try:
            for i in range(cfg.steps + 1):
                f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
                t0 = time.perf_counter()
                m = tr.train_step()
                wall = time.perf_counter() - t0
                steps.append({"wall_s": wall, "time_generate_s": m["time_generate_s"], "time_train_s": m["time_train_s"],
                              "minor_faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0,
                              "loss": m["loss"], "warmup": i == 0})
        finally:
            tr.close()
    timed = [s for s in steps if not s["warmup"]]
    return {"thp": os.environ.get(ENV, ""), "s_per_step": statistics.mean(s["wall_s"] for s in timed),
            "generate_s": statistics.mean(s["time_generate_s"] for s in timed),
            "train_s": statistics.mean(s["time_train_s"] for s in timed),
            "faults_per_step": statistics.mean(s["minor_faults"] for s in timed),
            "anon_huge_mib": _anon_huge_kib() / 1024, "losses": [s["loss"] for s in steps],
            "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, "steps": steps}


def _thp_mode() -> str:
    try:
        return Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text().strip()
    except OSError:
        return "not reported"


def run(cfg: HugePagesBenchConfig) -> int:
    if cfg.precision not in ("float32", "bf16"):
        raise SystemExit(f"precision: must be float32 or bf16, got {cfg.precision!r}")
    if cfg.child:
        print("RESULT " + json.dumps(_one(cfg)), flush=True)
        return 0
    args = [f"--{k.replace('_', '-')}={v}" for k, v in cfg.__dict__.items() if k not in ("child", "out", "repeats")]
    runs = []
    load0 = os.getloadavg()
    for r in range(cfg.repeats):
        for mode in ("0", "1"):
            env = {**os.environ, ENV: mode, "OMP_NUM_THREADS": str(cfg.threads)}
            p = subprocess.run([sys.executable, __file__, *args, "--child", "yes"], env=env, capture_output=True,
                               text=True, check=False)
            line = next((x for x in p.stdout.splitlines() if x.startswith("RESULT ")), None)
            if p.returncode != 0 or line is None:
                print(p.stdout[-2000:], p.stderr[-4000:], file=sys.stderr)
                raise SystemExit(f"contender {ENV}={mode} failed (exit {p.returncode})")
            res = {**json.loads(line[7:]), "repeat": r, "load_after": round(os.getloadavg()[0], 2)}
            runs.append(res)
            print(f"repeat {r} {ENV}={mode}: {res['s_per_step']:.2f} s/step (generate {res['generate_s']:.2f}, train "
                  f"{res['train_s']:.2f}), {res['faults_per_step']:,.0f} faults/step, peak RSS {res['peak_rss_gb']:.2f} GB, "
                  f"huge pages {res['anon_huge_mib']:.0f} MiB, load {res['load_after']:.2f}", flush=True)
    by = lambda m, k: [x[k] for x in runs if x["thp"] == m]  # noqa: E731
    ratio = lambda k: [a / b for a, b in zip(by("0", k), by("1", k))]  # noqa: E731
    span = lambda xs: {"median": statistics.median(xs), "min": min(xs), "max": max(xs)}  # noqa: E731
    summary = {
        "ratio_off_over_on": {k: span(ratio(k)) for k in ("s_per_step", "generate_s", "train_s")},
        "faults_per_step": {"off": statistics.median(by("0", "faults_per_step")), "on": statistics.median(by("1", "faults_per_step"))},
        "peak_rss_gb": {"off": max(by("0", "peak_rss_gb")), "on": max(by("1", "peak_rss_gb"))},
        "same_losses": all(a == b for a, b in zip(by("0", "losses"), by("1", "losses"))),
        "thp_mode": _thp_mode(), "load_before": round(load0[0], 2), "cpu_count": os.cpu_count(),
    }
    print(json.dumps(summary, indent=2))
    from vsr_util.atomic import write_json

    write_json(cfg.out, {"config": {k: str(v) for k, v in cfg.__dict__.items()}, "runs": runs, "summary": summary})
    return 0


if __name__ == "__main__":
    sys.exit(run(tyro.cli(HugePagesBenchConfig)))
