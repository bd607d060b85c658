"""Learning curve of one agent training run (a committed short run with its curve).

:func:`plot_agent_run` reads a run directory's ``metrics.jsonl`` and draws, against updates, the
held-out success over the fixed evaluation seeds (the trainer's agent validation, with its 95 %
interval; the untrained model's evaluation with the same seed at update 0 when given), the training
episodes' success from initial states, and the fraction of success-mixed groups. Writes
``curve.png`` and ``curve.csv`` (every plotted number) into ``out_dir``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

__all__ = ["plot_agent_run"]


def plot_agent_run(run_dir: str | Path, out_dir: str | Path, *, title: str, base: Mapping[str, Any] | None = None) -> Path:
    """Plot the run (module doc); ``base`` = ``{"success", "ci_low", "ci_high"}`` of the untrained model
    (same evaluation seed and size). Returns the PNG path; ValueError if the run has no metrics."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from llm_harness.trainer.runlog import read_metrics
    from vsr_util.atomic import save_figure, write_csv, write_text

    rows = read_metrics(Path(run_dir) / "metrics.jsonl")
    if not rows:
        raise ValueError(f"run_dir: {run_dir} has no metrics.jsonl rows")
    table = []
    for r in rows:
        table.append({"update": int(r["step"]) + 1, "train_success_fresh": r.get("accuracy_fresh", float("nan")),
                      "success_mixed_frac_fresh": r.get("success_mixed_frac_fresh", float("nan")),
                      "val_success": r.get("val_success", float("nan")), "val_ci_low": r.get("val_ci_low", float("nan")),
                      "val_ci_high": r.get("val_ci_high", float("nan"))})
    if base is not None:
        table.insert(0, {"update": 0, "train_success_fresh": float("nan"), "success_mixed_frac_fresh": float("nan"),
                         "val_success": float(base["success"]), "val_ci_low": float(base["ci_low"]),
                         "val_ci_high": float(base["ci_high"])})
    out = Path(out_dir)
    write_csv(out / "curve.csv", list(table[0]), table, lineterminator="\r\n")
    val = [t for t in table if t["val_success"] == t["val_success"]]
    tr = [t for t in table if t["train_success_fresh"] == t["train_success_fresh"]]
    fig, ax = plt.subplots(1, 2, figsize=(10, 3.8))
    x = [t["update"] for t in val]
    ax[0].errorbar(x, [t["val_success"] for t in val],
                   yerr=[[t["val_success"] - t["val_ci_low"] for t in val], [t["val_ci_high"] - t["val_success"] for t in val]],
                   fmt="o-", capsize=3, label="held-out success (128 fixed seeds, 95 % CI)")
    ax[0].set_xlabel("update")
    ax[0].set_ylabel("success")
    ax[0].legend(fontsize=8)
    ax[1].plot([t["update"] for t in tr], [t["train_success_fresh"] for t in tr], ".-", label="training episodes' success")
    ax[1].plot([t["update"] for t in tr], [t["success_mixed_frac_fresh"] for t in tr], ".-", label="success-mixed groups")
    ax[1].set_xlabel("update")
    ax[1].legend(fontsize=8)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    paths = save_figure(fig, out, "curve")
    write_text(out / "curve_meta.json", json.dumps({"run_dir": str(run_dir), "title": title, "base": dict(base or {})}, indent=1))
    return paths[0]
