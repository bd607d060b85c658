"""Check the evidence suites' cost model (:data:`llm_harness.compare.sizing.COST`) against the committed records.

For every (paper, regime, arm) with records in the records store, ``records/compare_*`` (a run shared by sibling suites
counted once) it prints the median measured wall seconds of a run (``done.json['wall_s']``, timed inside the worker,
after its imports), the median per-update step time and evaluation time per sequence from the run's metrics, and
:func:`~llm_harness.compare.sizing.job_seconds`' prediction for the same config (which includes
``startup_s``, so the part of startup outside the worker is not checked here; base jobs have no metrics and are not
checked either)::

    python benchmarks/suite_cost.py [--records records]

The records were written by runs two at a time on 2 otherwise idle cores (each suite's README says when), so this
reads timings that were already measured; it does not time anything itself.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
from pathlib import Path
from typing import Any


def record_timings(store: Path) -> list[dict[str, Any]]:
    """One row per (paper, regime, arm) of the evidence suites' records in ``store`` (``records/``: one folder per
    suite, ``compare_<suite>/<regime>/<arm>/seed<k>``). A run that sibling suites share is stored
    once (the others' manifests point at it: ``llm_harness.compare.records``, "Pointers"); a copy kept before pointers
    existed would hold the same ``done.json`` and is counted once, under the first suite that holds it.
    Failed runs and runs without per-update timings are skipped."""
    from llm_harness.compare.sizing import job_seconds
    from llm_harness.compare.suites_evidence import EVIDENCE_SUITES

    seen: set[tuple[str, str, str, str, str]] = set()
    groups: dict[tuple[str, str, str], list[tuple[float, float, float, dict]]] = {}
    first_suite: dict[tuple[str, str, str], str] = {}
    for seed_dir in sorted(store.glob("compare_*/*/*/seed*")):
        suite, regime, arm = seed_dir.parts[-4], seed_dir.parts[-3], seed_dir.parts[-2]
        if suite.removeprefix("compare_") not in EVIDENCE_SUITES:
            continue
        done_p, metrics_p = seed_dir / "done.json", seed_dir / "metrics.jsonl.gz"
        if not done_p.is_file() or not metrics_p.is_file():
            continue
        done = json.loads(done_p.read_text())
        cfg = done.get("config") or {}
        if done.get("rc") != 0 or "validation" not in cfg or not done.get("wall_s"):
            continue
        paper = suite.removeprefix("compare_").split("_")[0]  # replay / extra: their regimes and arm names overlap
        fingerprint = done.get("fingerprint")
        ident = (paper, regime, arm, seed_dir.name, str(fingerprint))
        if fingerprint is not None and ident in seen:
            continue
        seen.add(ident)
        with gzip.open(metrics_p, "rt") as fh:
            rows = [json.loads(line) for line in fh if line.strip()]
        steps = [r["time_step_s"] for r in rows if isinstance(r.get("time_step_s"), (int, float))]
        evals = [r["time_eval_s"] for r in rows if isinstance(r.get("time_eval_s"), (int, float)) and r["time_eval_s"] > 0]
        if not steps or not evals:
            continue
        seqs = int(cfg["validation"]["n_problems"]) * int(cfg["validation"]["k"])
        key = (paper, regime, arm)
        first_suite.setdefault(key, suite)
        groups.setdefault(key, []).append((float(done["wall_s"]), statistics.median(steps), statistics.median(evals) / seqs,
                                           cfg | {"_evals": len(evals), "_steps": len(steps)}))
    out = []
    for key, runs in sorted(groups.items()):
        cfg = runs[0][3]
        out.append({"suite": first_suite[key], "regime": key[1], "arm": key[2], "runs": len(runs),
                    "wall_s": statistics.median(r[0] for r in runs), "step_s": statistics.median(r[1] for r in runs),
                    "eval_seq_ms": 1000 * statistics.median(r[2] for r in runs),
                    "predicted_s": job_seconds(cfg, int(cfg["_steps"]), int(cfg["_evals"]))})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=Path, default=Path("records"), help="the records store (default: records)")
    args = ap.parse_args(argv)
    rows = record_timings(args.records)
    if not rows:
        raise SystemExit(f"no evidence-suite records with configs under {args.records}/compare_*")
    print(f"{'suite':24s} {'arm':24s} {'runs':>4s} {'step s':>7s} {'eval ms/seq':>11s} {'wall s':>7s} {'model s':>7s} {'model/wall':>10s}")
    for r in rows:
        print(f"{r['suite']:24s} {r['arm']:24s} {r['runs']:4d} {r['step_s']:7.2f} {r['eval_seq_ms']:11.2f} {r['wall_s']:7.1f} "
              f"{r['predicted_s']:7.1f} {r['predicted_s'] / r['wall_s']:10.2f}")
    ratios = sorted(r["predicted_s"] / r["wall_s"] for r in rows)
    print(f"model / measured wall over {len(rows)} arms: median {statistics.median(ratios):.2f}, range [{ratios[0]:.2f}, {ratios[-1]:.2f}]")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
