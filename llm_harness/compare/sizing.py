"""Sizing of the comparison suites: a cost model of one job's wall time and a suite's hours on a number of
workers, with the jobs left once its sibling suites' records exist.

:data:`COST` holds the fitted constants (``benchmarks/suite_cost.py`` checks them against the committed records;
``figures/SUITES.md`` has the measurements and the hours per suite); :data:`PLUGIN_COSTS` holds each plug-in's
factor on an update's time, so a new plug-in declares its cost where it is registered for sizing instead of in a
branch of this module.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from llm_harness.compare.suite import SUITES
from vsr.registry import Registry

__all__ = ["COST", "PLUGIN_COSTS", "estimated_hours", "job_seconds", "jobs_left", "register_plugin_cost"]


#: Cost model of the suites: wall seconds of one run at one torch thread, 2 runs on 2 otherwise idle cores.
#: ``update_s``: one GRPO update; ``replay_row_share``: replay trains ``1 + r`` times the fresh rows and an update costs
#: ``1 + replay_row_share x r`` times GRPO's; ``plugin_factor``: ExTra's scoring passes; ``redraw_factor``: DAPO's
#: redraws; ``eval_seq_s``: one evaluated sequence; ``startup_s``: spawn, imports, model load, saving. Fitted to the
#: committed records (``benchmarks/suite_cost.py`` prints the medians; the measurements are in ``figures/SUITES.md``).
#: ``oracle_continuation_share``: VSR's oracle score, one scoring continuation's share of an update (its 16 candidates x
#: 8 continuations made the VSR regime's updates 1.45x GRPO's: 0.45 / 128).
COST = {"update_s": 0.72, "replay_row_share": 0.6, "plugin_factor": 1.2, "redraw_factor": 1.4, "eval_seq_s": 0.0032,
        "startup_s": 4.0, "oracle_continuation_share": 0.0035}


#: plug-in name -> ``factor(params, cost) -> float``: how much one update with that plug-in costs relative to GRPO's
PLUGIN_COSTS: Registry[Callable[[Mapping[str, Any], Mapping[str, float]], float]] = Registry("plug-in cost")


def register_plugin_cost(name: str, factor: Callable[[Mapping[str, Any], Mapping[str, float]], float]) -> None:
    """Add the cost factor of a plug-in the suites configure (:data:`PLUGIN_COSTS`)."""
    PLUGIN_COSTS.add(name, factor)


# replay trains 1 + r times the fresh rows (``ratio`` defaults to 0.5 in the trainer)
register_plugin_cost("replay", lambda p, c: 1.0 + c["replay_row_share"] * float(p.get("ratio", 0.5)))
# ExTra's scoring passes (novelty embedding, entropy for regeneration): one factor per ExTra plug-in
for _name in ("extra", "extra_novelty", "extra_regen"):
    register_plugin_cost(_name, lambda p, c: c["plugin_factor"])
# DAPO redraws zero-variance groups (up to ``algo.max_gen_rounds`` rounds)
register_plugin_cost("dapo", lambda p, c: c["redraw_factor"])
# Reinforce-Ada-Est reallocates a fixed sample budget over a second generation round (``algo.max_gen_rounds`` 2): in
# the VSR regime's records its updates took 1.39x GRPO's, DAPO's redraw factor
register_plugin_cost("reinforce_ada_est", lambda p, c: c["redraw_factor"])


def _vsr_cost(params: Mapping[str, Any], cost: Mapping[str, float]) -> float:
    """VSR restarts part of the batch from stored states at no extra generation (its proxy scores are free: 0.98x
    GRPO's update in the VSR regime's records); the oracle score generates ``oracle_candidates x oracle_samples``
    continuations per update to score the candidates (unset: the plug-in's own defaults)."""
    if params.get("score") != "oracle":
        return 1.0
    from llm_harness.methods.vsr import VSRConfig

    n = int(params.get("oracle_candidates", VSRConfig.oracle_candidates)) * int(params.get("oracle_samples", VSRConfig.oracle_samples))
    return 1.0 + cost["oracle_continuation_share"] * n


register_plugin_cost("vsr", _vsr_cost)


def job_seconds(mapping: Mapping[str, Any], steps: int, evals: int, base: bool = False,
                cost: Mapping[str, float] = COST) -> float:
    """Wall seconds of one job from :data:`COST`: ``mapping`` is its config as the suite writes it (keys it leaves out
    take the trainer's defaults), ``evals`` its number of held-out evaluations (a ``base`` job: one evaluation, no
    training). Each configured plug-in multiplies the update time by its :data:`PLUGIN_COSTS` factor; a plug-in
    without an entry is refused (its cost is unknown, and a silent 1.0 would make a suite look cheaper than it is)."""
    v = mapping["validation"]
    seqs = int(v["n_problems"]) * int(v["k"])
    if base:
        return cost["startup_s"] + seqs * cost["eval_seq_s"]
    factor = 1.0
    for name, params in (mapping.get("plugins") or {}).items():
        factor *= PLUGIN_COSTS.lookup(name, "plug-in cost (llm_harness.compare.sizing.PLUGIN_COSTS)")(params or {}, cost)
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
