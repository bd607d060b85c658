"""What a long run should know about the machine before it starts: memory copy bandwidth and load.

The 2-core machines this project runs on are shared hosts. On 2026-12-06 one delivered 1-2 GB/s of memory copy
bandwidth against the 24-33 GB/s the committed benchmarks measured (``benchmarks/results/exact_sweep/``): every
memory-bound operation (a decode step reads all weights; vLLM's CPU decode most of all) ran 5-10x slower, the real
model's allocation lab sampled a batch in ~100 s instead of ~13 s, and a two-hour run would have taken a day. A
10 ms copy test finds that before the run does. Long-run scripts call ``python -m vsr_util.machine`` first: it prints
one line and, with ``--strict``, exits 3 on a starved machine; timed benchmarks record the bandwidth beside their load.

**Page size.** The starvation seen that day hit 4 KiB pages only: numpy's arrays, which ask for transparent huge
pages (``madvise``), copied at 19-21 GB/s while the same copy on 4 KiB pages ran at 0.4-0.7 GB/s, and torch, whose
CPU allocator uses 4 KiB pages unless ``THP_MEM_ALLOC_ENABLE=1``, copied at ~1 GB/s (~12 GB/s with it). So the check
measures both page sizes; when huge pages stream at least :data:`HUGE_PAGE_GAIN` times faster, ``--export`` prints
``export THP_MEM_ALLOC_ENABLE=1`` for a script to ``eval`` (torch reads it when it allocates; results do not change,
only where the bytes live). On a healthy host it prints nothing: there huge pages made a GRPO step ~1.35x *slower*
(``benchmarks/results/huge_pages/``).

Only numpy is used (this layer imports nothing heavier): one single-threaded copy of a ``mib``-MiB float64 array,
pre-touched, the best of ``repeats`` (read + write bytes over seconds), on 4 KiB pages and on huge pages (numpy's
``madvise`` switch, restored after).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Sequence

import numpy as np

__all__ = ["HUGE_PAGE_GAIN", "STARVED_GBPS", "copy_bandwidth", "machine_check", "main"]

#: below this single-thread copy bandwidth (GB/s) on 4 KiB pages a machine counts as starved (healthy: 24-33)
STARVED_GBPS = 8.0
#: huge pages this many times faster than 4 KiB pages: ``--export`` turns them on for torch
HUGE_PAGE_GAIN = 2.0


def copy_bandwidth(mib: int = 256, repeats: int = 3, *, huge_pages: bool = False) -> float:
    """Single-thread memory copy bandwidth in GB/s: ``2 × bytes / seconds`` of the best of ``repeats`` copies of a
    ``mib``-MiB array into a pre-touched one, both on 4 KiB pages (``huge_pages`` False: what torch's allocator
    uses by default) or on transparent huge pages where the kernel grants them."""
    if mib < 1 or repeats < 1:
        raise ValueError(f"copy_bandwidth: mib and repeats must be >= 1, got {mib}, {repeats}")
    switch = getattr(np._core.multiarray if hasattr(np, "_core") else np.core.multiarray, "_set_madvise_hugepage", None)
    before = switch(bool(huge_pages)) if switch is not None else None
    try:
        a = np.ones(mib * 2**20 // 8)
        b = np.empty_like(a)
    finally:
        if switch is not None:
            switch(before)
    np.copyto(b, a)  # touch every page first: page faults are not bandwidth
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        np.copyto(b, a)
        best = min(best, time.perf_counter() - t0)
    return 2 * a.nbytes / best / 1e9


def machine_check(mib: int = 256) -> dict[str, object]:
    """``{copy_gbps, copy_gbps_huge, load_1min, cpus, starved, huge_pages_help}``: the copy bandwidth on 4 KiB and
    on huge pages, the 1-minute load average, the CPUs this process may use, whether the 4 KiB bandwidth is under
    :data:`STARVED_GBPS`, and whether huge pages are :data:`HUGE_PAGE_GAIN` times faster."""
    small, huge = copy_bandwidth(mib), copy_bandwidth(mib, huge_pages=True)
    return {"copy_gbps": small, "copy_gbps_huge": huge, "load_1min": os.getloadavg()[0],
            "cpus": len(os.sched_getaffinity(0)), "starved": small < STARVED_GBPS,
            "huge_pages_help": huge >= HUGE_PAGE_GAIN * small}


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m vsr_util.machine [--strict] [--export] [--what NAME]``: one line on stderr; with ``--export``,
    ``export THP_MEM_ALLOC_ENABLE=1`` on stdout when huge pages help and the variable is unset (for ``eval``); exit 3
    with ``--strict`` when the machine is starved and huge pages do not rescue it (0 otherwise)."""
    ap = argparse.ArgumentParser(prog="python -m vsr_util.machine", description=__doc__.split("\n\n")[0])
    ap.add_argument("--strict", action="store_true", help="exit 3 on a starved machine instead of warning")
    ap.add_argument("--export", action="store_true",
                    help="print 'export THP_MEM_ALLOC_ENABLE=1' when huge pages stream memory much faster")
    ap.add_argument("--what", default="this run", help="what is about to start (named in the line)")
    ap.add_argument("--mib", type=int, default=256, help="size of the copied array")
    args = ap.parse_args(argv)
    m = machine_check(args.mib)
    use_huge = bool(m["huge_pages_help"]) and args.export and "THP_MEM_ALLOC_ENABLE" not in os.environ
    line = (f"machine: copy bandwidth {m['copy_gbps']:.1f} GB/s on 4 KiB pages, {m['copy_gbps_huge']:.1f} on huge "
            f"pages (one thread), 1-minute load {m['load_1min']:.2f}, {m['cpus']} CPUs")
    if use_huge:
        line += "; torch's allocations go on huge pages for this run (THP_MEM_ALLOC_ENABLE=1)"
    elif m["huge_pages_help"] and os.environ.get("THP_MEM_ALLOC_ENABLE") == "1":
        line += "; THP_MEM_ALLOC_ENABLE=1 is set"
    rescued = m["huge_pages_help"] and (use_huge or os.environ.get("THP_MEM_ALLOC_ENABLE") == "1")
    if m["starved"] and not rescued:
        line += (f" -- STARVED (< {STARVED_GBPS:g} GB/s; healthy hosts give 24-33): memory-bound work runs 5-10x "
                 f"slower, {args.what} may take many times its planned wall time, and its timings mean nothing")
    print(line, file=sys.stderr)
    if use_huge:
        print("export THP_MEM_ALLOC_ENABLE=1")
    return 3 if (m["starved"] and not rescued and args.strict) else 0


if __name__ == "__main__":
    raise SystemExit(main())
