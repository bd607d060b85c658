"""Seeded method comparisons on a shared budget (``vsr compare``; issue 7 item 5).

* :mod:`.suite` — suites of methods (config files) x regimes (overrides);
* :mod:`.runner` — ``run(CompareConfig)``: trains every (regime, method, seed) in worker
  processes, resumable, then writes the report;
* :mod:`.report` — tables with seed confidence intervals, token accounting, overheads, figures.
"""
import llm_harness.compare.suites_evidence  # noqa: E402,F401  (registers the replay and ExTra suites)
from llm_harness.compare import suites_agents  # noqa: E402,F401  (registers the 'agents' suite)
