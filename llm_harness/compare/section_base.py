"""What report sections share: the section registry and the readers of finished runs' metrics.

Report assembly (:mod:`.report`) and the sections (:mod:`.sections`, one function per registered name)
both import from here, so neither imports the other's internals: the report calls sections through
:data:`SECTIONS`, and sections read runs with :func:`_rows` / :func:`_mean` / :func:`seed_interval`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np

from vsr.registry import Registry

__all__ = ["SECTIONS", "last_row_value", "mixed_key", "moving_mean", "register_section", "seed_interval"]

#: name -> ``fn(cfg, jobs, summary, suite, out) -> list[str]`` (markdown lines; may save figures in ``out``)
SECTIONS: Registry[Any] = Registry("report section")


def register_section(name: str):
    """Decorator: add a report section a suite can name in ``Suite.sections``."""
    def deco(fn):
        SECTIONS.add(name, fn)
        return fn
    return deco


def seed_interval(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """``(mean, lo, hi)``: Student-t interval of the mean over seeds (``theory.metrics.t_interval``)."""
    from theory.metrics import t_interval

    return t_interval(values, confidence)


def _rows(run_dir: Path) -> list[dict[str, Any]]:
    from llm_harness.trainer.runlog import read_metrics

    return read_metrics(run_dir / "metrics.jsonl")


def mixed_key(rows: Sequence[dict], origin: str = "fresh") -> str:
    """The metric of a run's mixed-group fraction for ``origin``: agents log ``success_mixed_frac_*`` (a group
    whose episodes' successes differ; their returns almost always do), single-turn runs ``mixed_frac_*``."""
    agent = any("success_mixed_frac_fresh" in r for r in rows)
    return f"{'success_' if agent else ''}mixed_frac_{origin}"


def last_row_value(rows: list[dict], key: str) -> float:
    """The last finite value of ``key`` in a run's metric rows (nan if none)."""
    for r in reversed(rows):
        v = r.get(key)
        if isinstance(v, (int, float)) and np.isfinite(v):
            return float(v)
    return float("nan")


def _mean(rows: Sequence[dict], key: str, lo: int = 0, hi: int | None = None) -> float:
    """Mean of the finite numeric values of ``key`` in ``rows[lo:hi]`` (nan if none)."""
    v = [r[key] for r in rows[lo:hi] if isinstance(r.get(key), (int, float)) and np.isfinite(r[key])]
    return float(np.mean(v)) if v else float("nan")


def moving_mean(y: np.ndarray, w: int) -> np.ndarray:
    """Centred moving mean of width ``w`` over finite entries (nan where a window has none)."""
    y = np.asarray(y, dtype=np.float64)
    out = np.full_like(y, np.nan)
    for i in range(len(y)):
        seg = y[max(0, i - w // 2): i + w // 2 + 1]
        seg = seg[np.isfinite(seg)]
        if seg.size:
            out[i] = seg.mean()
    return out
