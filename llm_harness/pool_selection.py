"""Selecting a hard-prompt pool like the VSR paper's hard subset (VSR §4.1, App. D.2).

The paper trains on a small set of hard prompts: problems sampled many times under the starting
policy, kept when at most one sample succeeds. :func:`select_pool` does the same on any task: from
a seeded permutation of the training split it takes ``candidates`` problems, draws ``samples``
completions of each with the starting model (:func:`llm_harness.trainer.evaluation.sample_and_verify`,
one seeded call per chunk), keeps the problems with ``<= max_successes`` successes in candidate order
and stops at ``size``. The file format and the loading side are :mod:`llm_harness.trainer.pool`; this
module builds a trainer, so it sits above the trainer package (``vsr pool select``, ``vsr compare``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from llm_harness.trainer.pool import POOL_FORMAT, write_pool
from vsr_util.checks import check_number
from vsr_util.seeding import derive_seed
from vsr_util.atomic import read_json

__all__ = ["POOL_STREAM", "PoolSelectConfig", "PoolSelection", "pool_is_current", "select_command", "select_pool",
           "select_to_file", "selection_config", "timings_path"]

#: role key of the selection's streams in :func:`vsr_util.seeding.derive_seed`
POOL_STREAM = 0x9001


@dataclass(frozen=True)
class PoolSelection:
    """How a hard-prompt pool is selected (module doc)."""

    candidates: int = 1024
    """Problems of the training split examined (a seeded permutation's first ``candidates``)."""
    samples: int = 16
    """Completions per candidate under the starting policy."""
    max_successes: int = 1
    """Keep a candidate with at most this many successes (paper: at most one)."""
    size: int = 128
    """Pool size (the first ``size`` kept candidates; fewer if fewer qualify — the file says so)."""
    temperature: float = 1.0
    """Sampling temperature of the selection (the training temperature)."""
    top_p: float = 1.0
    """Nucleus mass of the selection."""
    seed: int = 0
    """Seed of the candidate permutation and of the sampling."""

    def __post_init__(self) -> None:
        for name in ("candidates", "samples", "size"):
            check_number(name, getattr(self, name), 1, integer=True)
        check_number("max_successes", self.max_successes, 0, integer=True)
        check_number("temperature", self.temperature, 0, lo_open=True)
        check_number("top_p", self.top_p, 0, 1, lo_open=True)
        check_number("seed", self.seed, 0, integer=True)
        if self.max_successes >= self.samples:
            raise ValueError(f"max_successes: {self.max_successes} keeps every candidate of {self.samples} samples; "
                             "it must be below samples")


def select_pool(trainer: Any, sel: PoolSelection, *, progress: bool = False) -> dict[str, Any]:
    """The pool document of ``sel`` for the task, split and starting model of ``trainer`` (a
    :class:`~llm_harness.trainer.loop.Trainer`; its training split is the candidate set)."""
    from llm_harness.trainer.evaluation import sample_and_verify

    cfg = trainer.cfg
    problems = list(trainer.fresh.problems)
    order = np.random.default_rng(derive_seed(sel.seed, POOL_STREAM, 0)).permutation(len(problems))
    cand = [problems[int(i)] for i in order[: min(sel.candidates, len(problems))]]
    ev = sample_and_verify(trainer.sampling_session(sel.temperature, sel.top_p), cand, k=sel.samples,
                           seed=derive_seed(sel.seed, POOL_STREAM, 1), progress=progress, desc="pool selection")
    succ = ev.correct.sum(axis=1)
    kept = [i for i in range(len(cand)) if succ[i] <= sel.max_successes][: sel.size]
    hist = np.bincount(succ, minlength=sel.samples + 1)
    return {
        "format": POOL_FORMAT,
        "task": cfg.task.name,
        "task_params": dict(cfg.task.params),
        "split": cfg.task.train_split,
        "model": cfg.model.path,
        "selection": asdict(sel),
        "ids": [cand[i].id for i in kept],
        "successes": [int(succ[i]) for i in kept],
        "stats": {
            "candidates": len(cand),
            "qualifying": int((succ <= sel.max_successes).sum()),
            "kept": len(kept),
            "success_histogram": [int(h) for h in hist],
            "candidate_success_rate": float(ev.correct.mean()),
            "pool_success_rate": float(np.mean([succ[i] for i in kept]) / sel.samples) if kept else float("nan"),
            "pool_unsolved_frac": float(np.mean([succ[i] == 0 for i in kept])) if kept else float("nan"),
        },
    }


def selection_config(path: str | Path, **run: Any) -> Any:
    """The TrainConfig of a pool selection: the training config at ``path`` without its own ``task.pool``
    (the pool is what is being chosen), no progress bar, ``run`` fields as given."""
    from llm_harness.trainer.config import TrainConfig
    from vsr_util.config_io import deep_merge, from_dict, read_mapping

    mapping = deep_merge(read_mapping(path), {"run": {"progress": False, **run}})
    mapping.get("task", {}).pop("pool", None)
    return from_dict(TrainConfig, mapping, where=str(path))


def pool_is_current(path: str | Path, train_cfg: Any, sel: PoolSelection) -> bool:
    """Whether ``path`` holds a pool selected with ``sel`` from ``train_cfg``'s model and task parameters."""
    try:
        doc = read_json(Path(path))
    except (OSError, ValueError):
        return False
    return (doc.get("selection") == asdict(sel) and doc.get("model") == train_cfg.model.path
            and doc.get("task_params") == dict(train_cfg.task.params))


def select_to_file(train_cfg: Any, sel: PoolSelection, out: str | Path, *, progress: bool = True) -> dict[str, Any]:
    """Build ``train_cfg``'s trainer (nothing is written to its run directory), select the pool, write it to
    ``out`` (atomically) and print one summary line; returns the pool document with ``wall_s``. The wall time is not
    in the pool file (a pool's bytes are part of its runs' fingerprints, and a committed pool reproduces byte for
    byte) but in :func:`timings_path` beside it."""
    import time

    from llm_harness.trainer.entry import build_trainer
    from vsr_util.atomic import write_json

    t0 = time.perf_counter()
    tr = build_trainer(train_cfg)
    try:
        doc = select_pool(tr, sel, progress=progress)
    finally:
        tr.close()
    wall_s = time.perf_counter() - t0
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    write_pool(out, doc)
    write_json(timings_path(out), {"wall_s": wall_s})
    doc["wall_s"] = wall_s
    st = doc["stats"]
    print(f"pool: {st['kept']} of {st['candidates']} candidates ({st['qualifying']} with <= {sel.max_successes} successes "
          f"in {sel.samples}; pool success rate {st['pool_success_rate']:.3f}), {doc['wall_s']:.0f} s -> {out}", flush=True)
    return doc


def timings_path(pool: str | Path) -> Path:
    """Where :func:`select_to_file` puts the selection's wall time: ``<pool stem>.timings.json`` beside the pool (not
    committed: ``.gitignore``)."""
    pool = Path(pool)
    return pool.with_name(f"{pool.stem}.timings.json")


@dataclass(frozen=True)
class PoolSelectConfig:
    """Options of ``vsr pool select``."""

    train_config: str = "configs/regime_grpo.yaml"
    """Training config whose model, task and rollout settings the selection uses."""
    out: str = "runs/pools/pool.json"
    """Pool file written (train on it with ``--task.pool OUT``)."""
    selection: PoolSelection = field(default_factory=PoolSelection)
    """How candidates are examined and kept."""


def select_command(cfg: PoolSelectConfig) -> int:
    """``vsr pool select``: select a hard-prompt pool with a config's starting model and write it."""
    select_to_file(selection_config(cfg.train_config), cfg.selection, cfg.out)
    return 0
