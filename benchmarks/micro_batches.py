"""Benchmark: one agent training update in one pass vs in micro-batches (``run.micro_batch_rows``).

The update is the first step of the agents suite's BabyAI job (``vsr compare --suite agents --regimes babyai``,
method ``gigpo``, seed 0: 4 initial states x 8 episodes of the OneRoomS8 test-bed agent, ~500 turn rows of ~300
tokens in one mini-batch). Each contender runs in its own process (so its peak resident memory, ``ru_maxrss``, is
its own), one torch thread; repeats are interleaved (A B A B ...). Reported per contender: the
loss pass (``time_train_s``: forward, backward, optimizer), the whole step, and the peak RSS; the median ratio
one-pass / micro-batched with its min-max; and the update's loss and gradient norm, which must agree (the same
generated batch, the same update up to float rounding). Quote the machine load with the numbers.

Run: ``python benchmarks/micro_batches.py --repeats 2`` (about 6 minutes on a quiet 2-core machine).
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import tyro

__all__ = ["MicroBatchBenchConfig", "run"]


@dataclass(frozen=True)
class MicroBatchBenchConfig:
    """``python benchmarks/micro_batches.py``."""

    micro_batch_rows: int = 64
    """Rows per pass of the micro-batched contender."""
    repeats: int = 2
    """Interleaved repeats (one pass, micro-batched, one pass, ...)."""
    regime: str = "babyai"
    """Regime of the agents suite whose first GiGPO update is timed."""
    out: Path = Path("benchmarks/results/micro_batches/micro_batches.json")
    """Result file (every run and the summary)."""
    child: int = -1
    """Internal: run one contender with this ``micro_batch_rows`` and print its result as JSON."""


def _one(regime: str, micro: int) -> dict:
    import tempfile

    import torch

    from llm_harness.compare.jobs import CompareConfig, plan_jobs
    from llm_harness.trainer.config import TrainConfig
    from llm_harness.trainer.entry import build_trainer
    from vsr_util.config_io import from_dict

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        jobs = plan_jobs(CompareConfig(suite="agents", out=Path(tmp), seeds=1, steps=1, regimes=(regime,), methods=("gigpo",)))
        job = next(j for j in jobs if j.method == "gigpo")
        cfg = from_dict(TrainConfig, job.mapping)
        cfg = replace(cfg, run=replace(cfg.run, micro_batch_rows=micro, progress=False, checkpoint_every=0))
        tr = build_trainer(cfg)
        try:
            t0 = time.perf_counter()
            m = tr.train_step()
            wall = time.perf_counter() - t0
        finally:
            tr.close()
    return {"micro_batch_rows": micro, "wall_s": wall, "time_train_s": m["time_train_s"], "time_step_s": m["time_step_s"],
            "loss": m["loss"], "grad_norm": m["grad_norm"],
            "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}


def run(cfg: MicroBatchBenchConfig) -> int:
    if cfg.child >= 0:
        print("RESULT " + json.dumps(_one(cfg.regime, cfg.child)), flush=True)
        return 0
    runs = []
    load0 = os.getloadavg()
    for r in range(cfg.repeats):
        for micro in (0, cfg.micro_batch_rows):
            env = {**os.environ, "OMP_NUM_THREADS": "1"}
            p = subprocess.run([sys.executable, __file__, "--regime", cfg.regime, "--child", str(micro)], env=env,
                               capture_output=True, text=True, check=False)
            line = next((x for x in p.stdout.splitlines() if x.startswith("RESULT ")), None)
            if p.returncode != 0 or line is None:
                print(p.stdout[-2000:], p.stderr[-4000:], file=sys.stderr)
                raise SystemExit(f"contender micro_batch_rows={micro} failed (exit {p.returncode})")
            res = {**json.loads(line[7:]), "repeat": r, "load_after": os.getloadavg()[0]}
            runs.append(res)
            print(f"repeat {r} micro_batch_rows={micro:>3}: loss pass {res['time_train_s']:.1f} s, step {res['time_step_s']:.1f} s, "
                  f"peak RSS {res['peak_rss_gb']:.2f} GB, loss {res['loss']:.6g}, grad norm {res['grad_norm']:.6g}, "
                  f"load {res['load_after']:.2f}", flush=True)
    by = lambda m, k: [x[k] for x in runs if x["micro_batch_rows"] == m]  # noqa: E731
    ratios = [a / b for a, b in zip(by(0, "time_train_s"), by(cfg.micro_batch_rows, "time_train_s"))]
    summary = {
        "loss_pass_ratio_one_pass_over_micro": {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)},
        "peak_rss_gb": {"one_pass": max(by(0, "peak_rss_gb")), "micro": max(by(cfg.micro_batch_rows, "peak_rss_gb"))},
        "max_rel_diff_loss": max(abs(a - b) / max(abs(a), 1e-12) for a, b in zip(by(0, "loss"), by(cfg.micro_batch_rows, "loss"))),
        "max_rel_diff_grad_norm": max(abs(a - b) / max(abs(a), 1e-12)
                                      for a, b in zip(by(0, "grad_norm"), by(cfg.micro_batch_rows, "grad_norm"))),
        "load_before": load0[0],
    }
    print(json.dumps(summary, indent=2))
    from vsr_util.atomic import write_json

    write_json(cfg.out, {"config": {k: str(v) for k, v in cfg.__dict__.items()}, "runs": runs, "summary": summary})
    return 0


if __name__ == "__main__":
    sys.exit(run(tyro.cli(MicroBatchBenchConfig)))
