"""Sizing of the comparison suites: a cost model of one job's wall time and a suite's hours on a number of
workers, with the jobs left once its sibling suites' records exist.

:data:`COST` holds the fitted constants (``benchmarks/suite_cost.py`` checks them against the committed records;
``figures/SUITES.md`` has the measurements and the hours per suite); each plug-in's factor on an update's time is
part of its registration (``PluginSpec.cost`` in :mod:`llm_harness.trainer.plugins`, beside the plug-in), so this
module never names a plug-in.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from llm_harness.compare.suite import SUITES

__all__ = ["COST", "estimated_hours", "job_seconds", "jobs_left", "plugin_cost"]


#: Cost model of the suites: wall seconds of one run at one torch thread, 2 runs on 2 otherwise idle cores.
#: ``update_s``: one GRPO update; ``replay_row_share``: replay trains ``1 + r`` times the fresh rows and an update costs
#: ``1 + replay_row_share x r`` times GRPO's; ``plugin_factor``: ExTra's scoring passes; ``redraw_factor``: DAPO's
#: redraws; ``eval_seq_s``: one evaluated sequence; ``startup_s``: spawn, imports, model load, saving. Fitted to the
#: committed records (``benchmarks/suite_cost.py`` prints the medians; the measurements are in ``figures/SUITES.md``).
#: ``oracle_continuation_share``: VSR's oracle score, one scoring continuation's share of an update (its 16 candidates x
#: 8 continuations made the VSR regime's updates 1.45x GRPO's: 0.45 / 128).
COST = {"update_s": 0.72, "replay_row_share": 0.6, "plugin_factor": 1.2, "redraw_factor": 1.4, "eval_seq_s": 0.0032,
        "startup_s": 4.0, "oracle_continuation_share": 0.0035}


def plugin_cost(name: str, params: Mapping[str, Any], cost: Mapping[str, float] = COST) -> float:
    """One update's time with plug-in ``name`` (configured with ``params``) over GRPO's, from its registration."""
    from llm_harness.trainer.plugins import PLUGINS, import_plugin_modules

    import_plugin_modules()
    return float(PLUGINS.lookup(name, "plugins (a suite's configuration)").cost(params or {}, cost))


def job_seconds(mapping: Mapping[str, Any], steps: int, evals: int, base: bool = False,
                cost: Mapping[str, float] = COST) -> float:
    """Wall seconds of one job from :data:`COST`: ``mapping`` is its config as the suite writes it (keys it leaves out
    take the trainer's defaults), ``evals`` its number of held-out evaluations (a ``base`` job: one evaluation, no
    training). Each configured plug-in multiplies the update time by its registered cost factor
    (:func:`plugin_cost`; an unknown plug-in is refused naming the registered ones)."""
    v = mapping["validation"]
    seqs = int(v["n_problems"]) * int(v["k"])
    if base:
        return cost["startup_s"] + seqs * cost["eval_seq_s"]
    factor = 1.0
    for name, params in (mapping.get("plugins") or {}).items():
        factor *= plugin_cost(name, params or {}, cost)
    return cost["startup_s"] + steps * cost["update_s"] * factor + evals * seqs * cost["eval_seq_s"]


def jobs_left(suite_name: str, after_siblings: bool | str | Sequence[str] = False) -> list:
    """The suite's planned jobs (``jobs.plan_jobs`` at its own sizes) that are left to train once its siblings have
    run: those no suite it shares records with (``Suite.shares_records_with``; ``True``: all of them, or the named
    ones) also plans. A name it shares nothing with is an error."""
    from llm_harness.compare.jobs import CompareConfig, plan_jobs

    def planned(name: str) -> list:
        return plan_jobs(CompareConfig(suite=name, out=Path(f"/nonexistent/{name}")))

    sibs: tuple[str, ...] = ()
    if after_siblings is True:
        sibs = SUITES[suite_name].shares_records_with
    elif after_siblings:
        sibs = (after_siblings,) if isinstance(after_siblings, str) else tuple(after_siblings)
        unknown = sorted(set(sibs) - set(SUITES[suite_name].shares_records_with))
        if unknown:
            raise ValueError(f"suite {suite_name!r} shares no records with {unknown}; "
                             f"its siblings are {list(SUITES[suite_name].shares_records_with)}")
    shared = {j.fingerprint for sib in sibs for j in planned(sib)}
    return [j for j in planned(suite_name) if j.fingerprint not in shared]


def estimated_hours(suite_name: str, workers: int = 2, cost: Mapping[str, float] = COST,
                    after_siblings: bool | str | Sequence[str] = False) -> float:
    """Wall hours of ``vsr compare --suite NAME`` at its own sizes on ``workers`` otherwise idle cores, from
    :data:`COST` (a load of L processes per core multiplies it by about L); ``after_siblings``: of the jobs
    :func:`jobs_left` once those suites have run."""
    from llm_harness.compare.jobs import CompareConfig

    z = CompareConfig(suite=suite_name, out=Path(f"/nonexistent/{suite_name}")).sizes
    evals_per_run = len({min(s, z["steps"]) for s in range(z["eval_every"], z["steps"] + z["eval_every"], z["eval_every"])})
    total = sum(job_seconds(j.mapping, z["steps"], evals_per_run, base=j.method == "base", cost=cost)
                for j in jobs_left(suite_name, after_siblings))
    return total / workers / 3600.0
