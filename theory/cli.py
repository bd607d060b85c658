"""``vsr theory check``: run every registered identity and inequality on random instances."""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from pathlib import Path

from tqdm.auto import tqdm


@dataclass(frozen=True)
class TheoryCheckConfig:
    """Options of ``vsr theory check``."""

    cases: int = 200
    """Random instances per check."""
    seed: int = 0
    """Base seed; each check draws from its own stream derived from (seed, name)."""
    json: Path | None = None
    """Write the rows as a JSON list of objects (name, reference, cases, worst_error, passed, ...)."""
    only: tuple[str, ...] = ()
    """Run only checks whose name contains one of these substrings."""
    progress: bool = True
    """Show a progress bar."""


def _fmt(x: float | None) -> str:
    if x is None:
        return "-"
    if x == 0:
        return "0"
    if not math.isfinite(x):
        return str(x)
    return f"{x:.2e}"


def format_table(rows) -> str:
    """Plain-text table: name, reference, cases, worst abs/rel error, worst slack, pass/fail."""
    head = ("name", "reference", "cases", "worst_abs_err", "worst_rel_err", "worst_slack", "result")
    body = [
        (r.name, r.reference, str(r.cases), _fmt(r.worst_error), _fmt(r.worst_rel_error), _fmt(r.worst_slack), "pass" if r.passed else "FAIL")
        for r in rows
    ]
    widths = [max(len(h), *(len(b[i]) for b in body)) if body else len(h) for i, h in enumerate(head)]
    line = lambda cols: "  ".join(c.ljust(w) for c, w in zip(cols, widths))  # noqa: E731
    out = [line(head), line(tuple("-" * w for w in widths))]
    out += [line(b) for b in body]
    return "\n".join(out)


def run_all(cfg: TheoryCheckConfig):
    """Run the selected checks and return their rows."""
    from theory.checks import load_all, run_check

    checks = load_all()
    names = sorted(checks)
    if cfg.only:
        names = [n for n in names if any(s in n for s in cfg.only)]
        if not names:
            raise ValueError(f"only: no check matches {list(cfg.only)}; known checks: {sorted(checks)}")
    rows = []
    for name in tqdm(names, desc="theory checks", disable=not cfg.progress, file=sys.stderr):
        rows.append(run_check(checks[name], cfg.cases, cfg.seed))
    return rows


def check(cfg: TheoryCheckConfig) -> int:
    """CLI entry point; exit code 1 if any check fails."""
    from vsr_util.atomic import write_json

    if cfg.cases < 1:
        raise SystemExit(f"vsr theory check: --cases must be >= 1, got {cfg.cases}")
    rows = run_all(cfg)
    print(format_table(rows))
    failed = [r for r in rows if not r.passed]
    print(f"\n{len(rows) - len(failed)} passed, {len(failed)} failed ({len(rows)} checks x {cfg.cases} cases)")
    for r in failed:
        print(f"FAILED {r.name}: {r.failures} comparison(s); first: {r.first_failure}", file=sys.stderr)
    if cfg.json is not None:
        write_json(cfg.json, [r.as_json() for r in rows])
    return 1 if failed else 0
