"""The one reader of finished comparison runs: metric rows, final evaluations, per-update series, the per-seed
summary the report and its sections build on.

A run folder is a normal training run directory (``metrics.jsonl``, one JSON row per update, held-out
evaluations as ``val_*`` keys on the rows of the updates they follow) ending with ``done.json`` (a base job,
the untrained checkpoint's evaluation, keeps its ``val_*`` numbers in ``done.json['validation']``). Rows are
read by ``llm_harness.trainer.runlog.read_metrics`` (a torn last line is skipped, any other damage named).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np

from llm_harness.compare.stats import finite
from vsr_util.atomic import read_json

__all__ = ["final_eval", "final_evals", "last_row_value", "mean_of", "metric_key", "mixed_key", "read_rows", "rows_series",
           "step_series", "summarise"]


def read_rows(run_dir: Path | str) -> list[dict[str, Any]]:
    """The metric rows of a run (``[]`` when it has none)."""
    from llm_harness.trainer.runlog import read_metrics

    return read_metrics(Path(run_dir) / "metrics.jsonl")


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


def mean_of(rows: Sequence[dict], key: str, lo: int = 0, hi: int | None = None) -> float:
    """Mean of the finite numeric values of ``key`` in ``rows[lo:hi]`` (nan if none)."""
    v = [r[key] for r in rows[lo:hi] if isinstance(r.get(key), (int, float)) and np.isfinite(r[key])]
    return float(np.mean(v)) if v else float("nan")


def final_eval(run_dir: Path | str, k: int) -> dict[str, float]:
    """The ``val_*`` scalars of a run's last held-out evaluation (the last metrics row with ``val_avg_at_{k}``;
    {} when there is none). A base job (the starting checkpoint) has them in ``done.json['validation']``."""
    d = Path(run_dir)
    rows = read_rows(d)
    key = f"val_avg_at_{k}"
    for r in reversed(rows):
        if key in r:
            return {a: float(b) for a, b in r.items() if a.startswith("val_") and isinstance(b, (int, float))}
    p = d / "done.json"
    if not rows and p.is_file():
        v = read_json(p).get("validation") or {}
        if key in v:
            return {a: float(b) for a, b in v.items() if a.startswith("val_") and isinstance(b, (int, float))}
    return {}


def final_evals(jobs: Sequence[Any], regime: str, k: int) -> dict[str, dict[int, dict[str, float]]]:
    """``{method: {seed: final val_* row}}`` of one regime's finished runs (base jobs under ``'base'``)."""
    out: dict[str, dict[int, dict[str, float]]] = {}
    for j in jobs:
        if j.regime != regime:
            continue
        ev = final_eval(j.run_dir, k)
        if ev:
            out.setdefault(j.method, {})[j.seed] = ev
    return out


def metric_key(metric: str, k: int) -> str:
    """``avg`` → ``val_avg_at_{k}``, ``pass`` → ``val_pass_at_{k}``, ``pass@j`` → ``val_pass_at_{j}``, else ``val_<metric>``."""
    if metric == "avg":
        return f"val_avg_at_{k}"
    if metric == "pass":
        return f"val_pass_at_{k}"
    if metric.startswith("pass@"):
        return f"val_pass_at_{int(metric[5:])}"
    return f"val_{metric}"


def step_series(run_dir: Path | str, key: str, steps: int) -> np.ndarray:
    """``key`` per update (nan where a row lacks it) over ``steps`` updates."""
    return rows_series(read_rows(run_dir), key, steps)


def rows_series(rows: Sequence[dict[str, Any]], key: str, steps: int) -> np.ndarray:
    """:func:`step_series` of metric rows already read (several keys of one run: read its rows once)."""
    y = np.full(steps, np.nan)
    for r in rows:
        s = r.get("step")
        if isinstance(s, int) and 0 <= s < steps and finite(r.get(key)):
            y[s] = float(r[key])
    return y


def summarise(cfg: Any, jobs: Sequence[Any]) -> dict[str, Any]:
    """Per regime: the base evaluation and, per method, seed-level finals and per-update means."""
    k = cfg.sizes["eval_k"]
    avg_key, pass_key = f"val_avg_at_{k}", f"val_pass_at_{k}"
    out: dict[str, Any] = {}
    for j in jobs:
        reg = out.setdefault(j.regime, {"base": {}, "methods": {}})
        d = Path(j.run_dir)
        done = d / "done.json"
        if not done.is_file():
            continue
        info = read_json(done)
        if j.method == "base":
            v = info.get("validation", {})
            reg["base"][j.seed] = {"avg": v.get(avg_key), "pass": v.get(pass_key)}
            continue
        rows = read_rows(d)
        if not rows or info.get("rc") != 0:
            continue
        evals = [(r["step"] + 1, r[avg_key], r.get(pass_key)) for r in rows if avg_key in r]
        last = evals[-1] if evals else (None, float("nan"), float("nan"))
        m = reg["methods"].setdefault(j.method, {"seeds": {}})
        m["seeds"][j.seed] = {
            "avg": last[1], "pass": last[2], "curve": evals, "wall_s": info.get("wall_s"),
            "tokens": mean_of(rows, "gen_new_tokens"), "instances": mean_of(rows, "prompt_instances"),
            "mixed_fresh": mean_of(rows, mixed_key(rows)), "mixed_prefix": mean_of(rows, mixed_key(rows, "replayed_prefix")),
            "mixed_guided": mean_of(rows, "mixed_frac_guided"), "step_s": mean_of(rows, "time_step_s"),
            "plugin_s": mean_of(rows, "time_plugins_s"), "trained_samples": mean_of(rows, "trained_samples"),
            "replayed_groups": mean_of(rows, "groups_replayed"), "reward": mean_of(rows, "reward_mean"),
            "length": last_row_value(rows, "val_length_mean"),
        }
    return out
