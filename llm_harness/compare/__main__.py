"""``python -m llm_harness.compare [--suite testbed] [--out DIR] [--seeds N] [--steps N] [--workers N] [--executor process|ray] [--quick]``
(the same as ``vsr compare`` without needing the CLI's dependencies)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from llm_harness.compare.jobs import CompareConfig
from llm_harness.compare.runner import run


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m llm_harness.compare", description=__doc__)
    d = CompareConfig()
    ap.add_argument("--suite", default=d.suite)
    ap.add_argument("--out", type=Path, default=d.out)
    ap.add_argument("--seeds", type=int, default=d.seeds)
    ap.add_argument("--steps", type=int, default=d.steps)
    ap.add_argument("--eval-problems", type=int, default=d.eval_problems)
    ap.add_argument("--eval-k", type=int, default=d.eval_k)
    ap.add_argument("--eval-every", type=int, default=d.eval_every)
    ap.add_argument("--workers", type=int, default=d.workers)
    ap.add_argument("--executor", default=d.executor)
    ap.add_argument("--methods", nargs="*", default=[])
    ap.add_argument("--regimes", nargs="*", default=[])
    ap.add_argument("--report-only", action="store_true")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-records", action="store_true")
    ap.add_argument("--records-dir", type=Path, default=d.records_dir)
    a = ap.parse_args(argv)
    cfg = CompareConfig(a.suite, a.out, a.seeds, a.steps, a.eval_problems, a.eval_k, a.eval_every, a.workers,
                        a.executor, tuple(a.methods), tuple(a.regimes), a.report_only, a.quick, not a.no_records,
                        records_dir=a.records_dir)
    return run(cfg)


if __name__ == "__main__":
    sys.exit(main())
