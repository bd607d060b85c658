"""Training-curve figure for ``make figures``.

``make_training_curve_figure(out_dir, quick)`` runs a short GRPO run and plots training reward,
held-out accuracy (periodic validation), generated tokens per update, the policy's entropy and the share of
mixed-reward groups.
Full mode trains the shipped middle test-bed checkpoint with the recipe of
``configs/testbed_grpo.yaml`` for 40 steps (validation every 10 on 100 problems); when that
checkpoint does not exist yet, or in quick mode, it trains a random tiny model on the learnable
toy task (:class:`llm_harness.trainer.smoke.FirstCharTask`) and says so in the title. Writes
``training_curve.png`` and ``metrics.csv`` (every plotted number), both committed and rewritten byte for byte by
``make figures``: what the machine measured (the ``time_*`` and ``mem_peak_*`` columns: wall time and peak memory)
goes to ``timings.csv`` and its step-time split to ``timings.png``, neither committed (``.gitignore``).
"""

from __future__ import annotations

import csv
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np

__all__ = ["is_measured", "make_training_curve_figure"]


def is_measured(column: str) -> bool:
    """Whether a ``metrics.csv`` column is measured on the machine (wall time, peak memory), so differs on every run."""
    return column.startswith(("time_", "mem_peak_"))


def _split_metrics(src: Path, out_dir: Path) -> None:
    """``src`` (a run's ``metrics.csv``) as ``out_dir/metrics.csv`` without the measured columns (:func:`is_measured`)
    and ``out_dir/timings.csv`` with ``step`` and those; every value keeps its text."""
    from vsr_util.atomic import write_csv

    with open(src, newline="") as fh:
        rows = list(csv.reader(fh))
    measured = [i for i, c in enumerate(rows[0]) if is_measured(c)]
    for name, keep in (("metrics.csv", [i for i in range(len(rows[0])) if i not in measured]),
                       ("timings.csv", [rows[0].index("step"), *measured])):
        write_csv(out_dir / name, None, ([r[i] if i < len(r) else "" for i in keep] for r in rows),
                  lineterminator="\r\n")


def _configs_dir() -> Path:
    return Path(__file__).resolve().parents[2] / "configs"


def make_training_curve_figure(out_dir: Path, quick: bool = False) -> Path:
    """Train briefly and plot the curves (module doc); returns the PNG path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from llm_harness.tasks import get_task
    from llm_harness.trainer.config import RunConfig, TrainConfig, ValidationConfig
    from llm_harness.trainer.entry import build_trainer
    from llm_harness.trainer.smoke import FirstCharTask, tiny_config
    from vsr_util.atomic import save_figure
    from vsr_util.config_io import load_config

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    run_dir = out_dir / "run"
    shutil.rmtree(run_dir, ignore_errors=True)
    recipe = load_config(TrainConfig, _configs_dir() / "testbed_grpo.yaml")
    ckpt = Path(recipe.model.path)
    if not ckpt.is_absolute() and not ckpt.is_dir():  # run from elsewhere than the repository root
        # (from the root, as `make figures` runs, the path stays relative: the config fingerprint in metrics.csv does
        # not name the clone's folder)
        ckpt = Path(__file__).resolve().parents[2] / ckpt
    if not quick and (ckpt / "config.json").is_file():
        cfg = replace(recipe, steps=40, model=replace(recipe.model, path=str(ckpt)),
                      validation=ValidationConfig(every=10, n_problems=100, k=2),
                      run=RunConfig(run_dir=str(run_dir), checkpoint_every=0, progress=True))
        task = get_task(cfg.task.name, **cfg.task.params)
        title = f"GRPO on step arithmetic from the test-bed 'mid' checkpoint ({cfg.steps} steps, 8x8)"
    else:
        steps = 6 if quick else 30
        cfg = tiny_config(str(run_dir), steps=steps, validation=ValidationConfig(every=max(2, steps // 3), n_problems=16, k=2))
        cfg = replace(cfg, run=replace(cfg.run, checkpoint_every=0))
        task = FirstCharTask()
        title = f"GRPO smoke run: random tiny model on the toy first-character task ({steps} steps)"
        if not quick:
            title += " - test-bed checkpoint not found"
    tr = build_trainer(cfg, task=task)
    try:
        rows = tr.fit()
    finally:
        tr.close()
    _split_metrics(run_dir / "metrics.csv", out_dir)
    step = np.array([r["step"] + 1 for r in rows])

    def col(k):
        return np.array([np.nan if r.get(k) is None else r.get(k, np.nan) for r in rows], dtype=float)

    fig, ax = plt.subplots(1, 3, figsize=(13, 3.6))
    ax[0].plot(step, col("reward_mean"), label="train reward (fresh groups)")
    val_key = next((k for k in rows[-1] if k.startswith("val_avg_at_")), None)
    if val_key:
        v = col(val_key)
        ok = np.isfinite(v)
        ax[0].plot(step[ok], v[ok], "o-", label=f"held-out {val_key[4:].replace('_at_', '@')}")
    ax[0].set_xlabel("step")
    ax[0].set_ylabel("accuracy / reward")
    ax[0].legend(fontsize=8)
    ax[1].plot(step, col("gen_new_tokens"), label="generated tokens / update")
    ax[1].plot(step, col("trained_new_tokens"), label="tokens in the loss")
    ax[1].set_xlabel("step")
    ax[1].legend(fontsize=8)
    ax[2].plot(step, col("mixed_frac"), label="mixed-reward groups (share)")
    ax[2].plot(step, col("entropy"), label="policy entropy (nats / token)")
    ax[2].set_xlabel("step")
    ax[2].legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    png = save_figure(fig, out_dir, "training_curve")[0]

    fig, ax = plt.subplots(figsize=(5, 3.6))  # the step-time split: measured, so beside the figure, not committed
    bottom = np.zeros(len(step))
    for k in ("time_generate_s", "time_score_s", "time_train_s"):
        y = np.nan_to_num(col(k))
        ax.bar(step, y, bottom=bottom, label=k[5:-2])
        bottom += y
    ax.set_xlabel("step")
    ax.set_ylabel("seconds")
    ax.legend(fontsize=8)
    ax.set_title("step time by phase (this machine, this run)", fontsize=10)
    fig.tight_layout()
    save_figure(fig, out_dir, "timings")
    shutil.rmtree(run_dir, ignore_errors=True)
    return png
