"""Seeded method comparisons on a shared budget (``vsr compare``).

Layers, each importing only those above it in this list:

* :mod:`.suite` — the data types (methods, regimes, pools, paper tables, suites), the registry, the VSR suites;
  :mod:`.suites_evidence` and :mod:`.suites_agents` — the Replay, ExTra and agent suites (definitions only);
* :mod:`.executors` — where jobs run (a process pool, Ray); :mod:`.stats` — seed intervals and paper-table rows over
  :mod:`theory.metrics.paired` (paired contrasts, Holm, power);
* :mod:`.runs` — the one reader of finished runs (metric rows, final evaluations, the per-seed summary);
* :mod:`.render` — formatting, CSV, forest plots, the suite's final and curve figures;
* :mod:`.jobs` — the options, one job, the plan of a suite's jobs, whether a run folder finishes a job;
* :mod:`.records` — a finished run's record (where it lives: the store ``records/``; save, restore, pointers to
  siblings' records, the manifest and its checks);
* :mod:`.sizing` — the cost model of a suite's wall time (per-plug-in factors from a registry);
* :mod:`.sections` — the report sections, one registry, one module per paper family;
* :mod:`.report` — report assembly (``report.md``, ``summary.json``, figures);
* :mod:`.runner` — ``run(CompareConfig)``: plans the jobs, restores records, trains what is
  missing in worker processes (resumable), then writes the report.

``tests/test_imports.py`` holds the order.
"""
import llm_harness.compare.suites_evidence  # noqa: E402,F401  (registers the replay and ExTra suites)
from llm_harness.compare import suites_agents  # noqa: E402,F401  (registers the 'agents' suite)
