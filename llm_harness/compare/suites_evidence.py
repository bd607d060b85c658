"""Comparison suites where rollout replay and ExTra act, with the papers' ablation tables (issue 14 item 1).

On the committed ``testbed`` comparison prompts never recur (240 draws from 20,000 problems), so
replay's age window and ExTra's per-prompt memory only ever meet unrelated prompts. The suites here
train on a **fixed pool of 64 prompts** (:data:`MID_POOL`: the ``mid`` checkpoint on the normal split,
problems not solved in all of 4 samples) at 8 prompts per update, so a prompt recurs every 8 updates:
inside Replay's default age window (τ_max = 10), outside τ_max = 1, and 4–7 times inside τ_max = 30/60;
ExTra's novelty memory Φ(x) and prefix cache are revisited ~``steps / 8`` times per prompt.

Suites (each about 2 hours on 2 cores at most, ``replay_priority``, ``replay_aes`` and ``extra_gamma`` once their
siblings have run; ``vsr compare --suite NAME``):

* ``replay`` — every arm of the Replay paper's Tables 1–4, 9 and 13 (17 arms, shared GRPO and
  default runs); the report renders each table with its **own** Holm family (section
  ``replay_tables``) and Table 13's AES ranking; the suite-level family is Table 1's (the method
  against the two naive pool baselines).
* ``replay_tau`` (Table 2), ``replay_priority`` (Tables 3 and 4), ``replay_ratio`` (Table 9) — one
  table each, so that one table can be run alone with more seeds in the same 2 hours; their regime
  ``recurring_lr5e-5`` trains at lr 5e-5 (at the ``replay`` suite's 1e-4 GRPO memorises the pool and
  every arm ends below its start: ``figures/compare_replay``).
* ``extra`` — GRPO, DAPO, ExTra-N / -R / full, the γ sweep (Table 5) and the novelty-signal
  ablation (Table 6): 10 arms; sections ``extra_tables`` (Holm within each table, on pass@1 and on
  pass@16), ``passk`` (pass@k, k = 1..16), ``extra_dynamics`` (Fig. 2: policy entropy and novelty bonus
  over training), ``prompt_efficiency`` (Fig. 3: cumulative prompt instances vs held-out pass@16).
* ``extra_gamma`` (Table 5), ``extra_signal`` (Table 6) and ``extra_main`` (Table 1: DAPO, ExTra-R / -N / full
  against GRPO) — one table each.

Every suite also has the ``eval_metrics`` section: length by correctness, Distinct-4, Self-BLEU-4,
LogDet and AES against GRPO from the runs' final validation rows (keys read defensively: a metric the
trainer does not log is shown as "–").

Sizing and seed counts: :data:`COST` and :func:`estimated_hours` model a suite's wall time (checked against the
committed records by ``benchmarks/suite_cost.py``); the measured hours per suite and how each suite's seed count was
reached are in ``figures/SUITES.md`` (dated measurements, not code).

Shared runs. The per-table suites of one paper train in one regime on one pool, so their common arms are the
same jobs (same fingerprint): ``replay_tau``, ``replay_priority`` and ``replay_ratio`` share GRPO and ``abs``, and
``replay_aes`` every arm of theirs; ``extra_gamma``, ``extra_signal`` and ``extra_main`` share GRPO, ExTra-R and
ExTra (full) (``Suite.shares_records_with``; ``extra`` predates records). A suite restores its siblings' matching
records before training.

Departures from the papers (the test bed is a 1M-parameter model on step arithmetic):

* ExTra's default embedding novelty uses MiniLM sentence embeddings; MiniLM is not installed offline
  and knows nothing of the character vocabulary, so Table 6's "embedding" row is the policy's own
  mean-pooled hidden state (``policy_hidden``, the test-bed default); 4-gram and surprise are as
  implemented in :mod:`llm_harness.methods.extra`.
* The γ values of ExTra Table 5 other than 0, 1 and 5 are not in the paper's text; 0.5 and 2 are ours.
* Warm-ups keep the papers' share of the run (Replay 20 of 200 updates, ExTra 30 of 250).
* Replay's evaluation is the paper's T 0.6, top-p 0.8 at k = 8 (its MATH-500 budget); ExTra's is
  T 0.7, top-p 0.9, n = 16.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from llm_harness.compare.section_base import _rows, moving_mean, register_section, seed_interval
from llm_harness.compare.stats import holm, paired_contrast, paired_power
from llm_harness.compare.suite import SUITES, Method, PoolSpec, Regime, Suite, register_suite
from vsr.atomic import save_figure, write_text

__all__ = ["COST", "EVIDENCE_SUITES", "EXTRA_METHODS", "EXTRA_TABLES", "MID_POOL", "REPLAY_METHODS", "REPLAY_TABLES", "REPLAY_AES_CONFIGS",
           "TableSpec", "estimated_hours", "final_eval", "job_seconds", "jobs_left", "table_rows"]

#: the pool both regimes train on: 64 prompts of the normal split the `mid` checkpoint does not solve in all
#: of 4 samples at T = 1 (probe: 85 of 96 candidates qualify; 44 % of the pool unsolved in 4 samples)
MID_POOL = PoolSpec("mid_pool64", "replay_grpo.yaml", {"candidates": 96, "samples": 4, "max_successes": 3, "size": 64,
                                                       "temperature": 1.0, "seed": 0})

# ---------------------------------------------------------------------------------------------- replay

_M = Method
#: every arm of the Replay suites, in report order (``configs/replay_*.yaml``)
REPLAY_METHODS: tuple[Method, ...] = (
    _M("grpo", "replay_grpo.yaml", "GRPO (no replay; zero-variance filter on, 2 mini-batches)"),
    _M("abs", "replay_abs.yaml", "Ours: |A|, rollout, fresh-anchored (r 0.5, τ 10, α 0.5)", "replay"),
    _M("abs_tau1", "replay_abs_tau1.yaml", "|A| rollout, τ_max = 1", "replay"),
    _M("abs_tau30", "replay_abs_tau30.yaml", "|A| rollout, τ_max = 30", "replay"),
    _M("abs_tau60", "replay_abs_tau60.yaml", "|A| rollout, τ_max = 60", "replay"),
    _M("abs_pool", "replay_abs_pool.yaml", "|A| rollout, pool composition", "replay"),
    _M("uniform_query", "replay_uniform_query.yaml", "uniform, query level", "replay"),
    _M("uniform_rollout", "replay_uniform_rollout.yaml", "uniform, rollout level", "replay"),
    _M("sigma_query", "replay_sigma_query.yaml", "σ_g, query level", "replay"),
    _M("sigma_rollout", "replay_sigma_rollout.yaml", "σ_g, rollout level", "replay"),
    _M("uniform_query_pool", "replay_uniform_query_pool.yaml", "naive: uniform, query level, pool", "replay"),
    _M("sigma_query_pool", "replay_sigma_query_pool.yaml", "naive: σ_g, query level, pool", "replay"),
    _M("abs_alpha1", "replay_abs_alpha1.yaml", "|A| rollout, r 0.5, α 1.0", "replay"),
    _M("abs_r1", "replay_abs_r1.yaml", "|A| rollout, r 1.0, α 0.5", "replay"),
    _M("abs_r1_alpha1", "replay_abs_r1_alpha1.yaml", "|A| rollout, r 1.0, α 1.0", "replay"),
    _M("uniform_rollout_tau1", "replay_uniform_rollout_tau1.yaml", "uniform rollout, τ_max = 1", "replay"),
    _M("uniform_rollout_tau30", "replay_uniform_rollout_tau30.yaml", "uniform rollout, τ_max = 30", "replay"),
)


@dataclass(frozen=True)
class TableSpec:
    """One paper table: its arms, each contrasted with the suite's reference; the arms form one Holm family."""

    name: str
    """Identifier (CSV rows, ``extra_cols`` keys)."""
    caption: str
    """Heading in the report."""
    arms: tuple[str, ...]
    """Method names of the table's rows (the reference is every table's first row)."""


#: the Replay paper's tables as arm lists (the reference, GRPO, is every table's first row)
REPLAY_TABLES: tuple[TableSpec, ...] = (
    TableSpec("replay_table1", "Replay Table 1 (main): the method against the naive pool baselines", ("uniform_query_pool", "sigma_query_pool", "abs")),
    TableSpec("replay_table2", "Replay Table 2: age-eviction horizon τ_max (clip fractions: fresh / replayed tokens)",
              ("abs_tau1", "abs", "abs_tau30", "abs_tau60")),
    TableSpec("replay_table3", "Replay Table 3: composition under rollout-level |A| priority", ("abs_pool", "abs")),
    TableSpec("replay_table4", "Replay Table 4: priority signal × level, fresh-anchored",
              ("uniform_query", "uniform_rollout", "sigma_query", "sigma_rollout", "abs")),
    TableSpec("replay_table9", "Replay Table 9: replay ratio r and priority exponent α", ("abs", "abs_alpha1", "abs_r1", "abs_r1_alpha1")),
)

#: Replay Table 13's 12 fresh-anchored configurations (ranked by AES against GRPO)
REPLAY_AES_CONFIGS: tuple[str, ...] = ("abs", "abs_tau1", "abs_r1", "abs_tau30", "uniform_rollout", "abs_alpha1", "uniform_query",
                                       "sigma_rollout", "abs_tau60", "uniform_rollout_tau30", "sigma_query", "uniform_rollout_tau1")

_REPLAY_REGIME = Regime(
    "recurring", "the `mid` checkpoint on the normal split (2-6 term chains), trained on a fixed pool of 64 prompts (each "
    "recurs every 8 updates, inside the default age window), GRPO as the Replay paper runs it (zero-variance filter on, "
    "2 mini-batches, clip 0.2/0.28, dual clip 10), lr 1e-4; held-out: validation problems at T 0.6, top-p 0.8, 8 samples "
    "(the Replay paper's protocol)")

#: the per-table Replay suites' regime: the same recipe at lr 5e-5 (the committed ``replay`` suite showed that at
#: 1e-4 GRPO memorises the 64-prompt pool and every arm ends below its start; the ExTra suites train at 5e-5 and
#: their held-out accuracy rises)
_REPLAY_REGIME_LR = Regime(
    "recurring_lr5e-5", _REPLAY_REGIME.description.replace("lr 1e-4", "lr 5e-5 (at 1e-4 GRPO memorises the pool: "
                                                            "figures/compare_replay)"),
    overrides={"optim": {"lr": 5.0e-5}})

_REPLAY_SECTIONS = ("pool", "replay_tables", "eval_metrics")


def _methods(pool: Sequence[Method], names: Sequence[str]) -> tuple[Method, ...]:
    by = {m.name: m for m in pool}
    return tuple(by[n] for n in names)


#: the per-table Replay suites (one regime, one pool): they share their GRPO and default (``abs``) runs by record;
#: ``replay_aes`` (Table 13) shares every arm the other three ran
REPLAY_TABLE_SUITES = ("replay_tau", "replay_priority", "replay_ratio", "replay_aes")


def _replay_suite(name: str, arms: Sequence[str], contrasts: Sequence[str], sizes: Mapping[str, int],
                  regime: Regime = _REPLAY_REGIME, shares: Sequence[str] = (), sections: Sequence[str] = _REPLAY_SECTIONS) -> Suite:
    return register_suite(Suite(name=name, methods=_methods(REPLAY_METHODS, ("grpo", *arms)), regimes=(regime,),
                                sizes=dict(sizes), pool=MID_POOL, contrasts=tuple(contrasts), min_effect=0.02,
                                sections=tuple(sections), shares_records_with=tuple(s for s in shares if s != name)))


# sizes: :data:`COST` (fitted to the records) puts each suite at or under 2 hours on 2 workers (:func:`estimated_hours`;
# replay_priority, 7 arms x 23 seeds: 2.02 h by the model, whose median is 2 % above the records)
_REPLAY_SIZES = {"steps": 80, "eval_problems": 128, "eval_k": 8, "eval_every": 20}
_replay_suite("replay", [m.name for m in REPLAY_METHODS[1:]], ("abs", "uniform_query_pool", "sigma_query_pool"),
              {"seeds": 4, **_REPLAY_SIZES})
_replay_suite("replay_tau", REPLAY_TABLES[1].arms, REPLAY_TABLES[1].arms, {"seeds": 22, **_REPLAY_SIZES}, _REPLAY_REGIME_LR,
              REPLAY_TABLE_SUITES)
_replay_suite("replay_priority", ("abs", "abs_pool", "uniform_query", "uniform_rollout", "sigma_query", "sigma_rollout"),
              REPLAY_TABLES[3].arms, {"seeds": 23, **_REPLAY_SIZES}, _REPLAY_REGIME_LR, REPLAY_TABLE_SUITES)
_replay_suite("replay_ratio", REPLAY_TABLES[4].arms, REPLAY_TABLES[4].arms, {"seeds": 26, **_REPLAY_SIZES}, _REPLAY_REGIME_LR,
              REPLAY_TABLE_SUITES)
#: Table 13 at the per-table suites' regime, at 27 seeds (its 10-seed report asked for 26, its 26-seed one for 27):
#: 10 of its 12 configurations are restored from their records (``replay_tau`` seeds 0-21, ``replay_priority`` 0-22,
#: ``replay_ratio`` 0-25), so after them it trains the two uniform-rollout τ variants and the other arms' later seeds
_replay_suite("replay_aes", REPLAY_AES_CONFIGS, REPLAY_AES_CONFIGS, {"seeds": 27, **_REPLAY_SIZES}, _REPLAY_REGIME_LR,
              REPLAY_TABLE_SUITES, sections=("pool", "replay_aes", "eval_metrics"))

# ---------------------------------------------------------------------------------------------- ExTra

#: every arm of the ExTra suites, in report order (``configs/extra_*.yaml``)
EXTRA_METHODS: tuple[Method, ...] = (
    _M("grpo", "extra_grpo.yaml", "GRPO (G 6, zero-variance groups kept, 2 mini-batches)"),
    _M("dapo", "extra_dapo.yaml", "DAPO (dynamic sampling, ≤ 4 rounds)"),
    _M("extra_n", "extra_n.yaml", "ExTra-N (novelty only)", "extra"),
    _M("extra_r", "extra_r.yaml", "ExTra-R (regeneration only; = γ 0)", "extra"),
    _M("extra_full", "extra_full.yaml", "ExTra (full; γ 1, policy-hidden novelty)", "extra"),
    _M("gamma0.5", "extra_full_gamma0.5.yaml", "ExTra, γ 0.5", "extra"),
    _M("gamma2", "extra_full_gamma2.yaml", "ExTra, γ 2", "extra"),
    _M("gamma5", "extra_full_gamma5.yaml", "ExTra, γ 5", "extra"),
    _M("ngram4", "extra_full_ngram4.yaml", "ExTra, 4-gram novelty", "extra"),
    _M("surprise", "extra_full_surprise.yaml", "ExTra, policy-surprise novelty", "extra"),
)

#: the ExTra paper's tables (contrasts with GRPO on pass@1 = avg and on pass@16)
EXTRA_TABLES: tuple[TableSpec, ...] = (
    TableSpec("extra_table1", "ExTra Table 1 (main): baselines and the mechanism decomposition", ("dapo", "extra_r", "extra_n", "extra_full")),
    TableSpec("extra_table5", "ExTra Table 5: novelty weight γ (γ = 0 is ExTra-R)", ("extra_r", "gamma0.5", "extra_full", "gamma2", "gamma5")),
    TableSpec("extra_table6", "ExTra Table 6: novelty signal on top of regeneration (policy-hidden stands in for MiniLM)",
              ("surprise", "ngram4", "extra_full")),
)

_EXTRA_REGIME = Regime(
    "recurring", "the `mid` checkpoint on the normal split (2-6 term chains: all-correct and all-incorrect groups both "
    "occur), trained on a fixed pool of 64 prompts (each recurs every 8 updates, so ExTra's per-prompt memory and prefix "
    "cache fill), G = 6, zero-variance groups kept, 2 mini-batches, lr 5e-5 (at 1e-4 GRPO memorises the pool and its "
    "held-out accuracy falls); held-out: validation problems at T 0.7, top-p 0.9, 16 samples (the ExTra paper's protocol)")

_EXTRA_SECTIONS = ("pool", "extra_tables", "passk", "extra_dynamics", "prompt_efficiency", "eval_metrics")


#: the ExTra suites (one regime, one pool): they share their GRPO and ExTra runs by record
EXTRA_SUITES = ("extra", "extra_gamma", "extra_signal", "extra_main")


def _extra_suite(name: str, arms: Sequence[str], contrasts: Sequence[str], sizes: Mapping[str, int]) -> Suite:
    return register_suite(Suite(name=name, methods=_methods(EXTRA_METHODS, ("grpo", *arms)), regimes=(_EXTRA_REGIME,),
                                sizes=dict(sizes), pool=MID_POOL, contrasts=tuple(contrasts), min_effect=0.02,
                                sections=_EXTRA_SECTIONS, shares_records_with=tuple(s for s in EXTRA_SUITES if s != name)))


_EXTRA_SIZES = {"steps": 80, "eval_problems": 128, "eval_k": 16, "eval_every": 20}
_extra_suite("extra", [m.name for m in EXTRA_METHODS[1:]], EXTRA_TABLES[0].arms, {"seeds": 6, **_EXTRA_SIZES})
#: Table 5 at the seeds its 20-seed report measured as needed (its 10-seed one asked for 20): 2.3 h alone, so run it
#: after ``extra_main``, whose GRPO / ExTra-R / ExTra (full) runs are the same jobs
_extra_suite("extra_gamma", EXTRA_TABLES[1].arms, EXTRA_TABLES[1].arms, {"seeds": 28, **_EXTRA_SIZES})
_extra_suite("extra_signal", EXTRA_TABLES[2].arms, EXTRA_TABLES[2].arms, {"seeds": 16, **_EXTRA_SIZES})
#: ExTra Table 1 (the headline: DAPO and the mechanism decomposition against GRPO, pass@1 and pass@16) at the seeds
#: its 22-seed report measured as needed for 80 % power at 2 pp (the 16-seed one asked for 22): 1.9 h alone, so on a
#: fresh clone run it before ``extra_gamma``. The other way round (as the committed records were made) it restores
#: GRPO, ExTra-R and ExTra (full) from ``extra_gamma`` and trains only DAPO / ExTra-N (their seeds 0-5 belong to the
#: ``extra`` suite, which predates records, so on a clone they are trained again)
_extra_suite("extra_main", EXTRA_TABLES[0].arms, EXTRA_TABLES[0].arms, {"seeds": 27, **_EXTRA_SIZES})

#: every suite this module registers
EVIDENCE_SUITES = ("replay", *REPLAY_TABLE_SUITES, *EXTRA_SUITES)


# ---------------------------------------------------------------------------------------------- sizing

#: Cost model of the suites (wall seconds of one run at one torch thread, 2 runs on 2 otherwise idle cores), fitted
#: to the committed records (``benchmarks/suite_cost.py`` prints the medians it comes from, 2026-12-03): a GRPO update
#: takes 0.64-0.74 s; replay trains ``1 + r`` times the fresh rows, and an update costs ``1 + replay_row_share x r``
#: times GRPO's (r 0.5: 0.85-0.90 s, r 1: 1.09-1.13 s); ExTra's scoring passes add ``plugin_factor`` (0.79-0.88 s);
#: the ``dapo`` plug-in (it redraws zero-variance groups, up to ``algo.max_gen_rounds`` rounds) costs ``redraw_factor``
#: (DAPO 1.45x GRPO's step in ``extra_main``, 1.53x its new tokens); one evaluated sequence 2.6-3.4 ms;
#: ``startup_s``: spawn, imports, model load, saving (0.6-1.6 s inside the run, the rest outside it).
#: The previous constants (1.9 s per update, 6.8 ms per sequence) came from a probe on a loaded machine and
#: overestimated every suite about 2x.
COST = {"update_s": 0.72, "replay_row_share": 0.6, "plugin_factor": 1.2, "redraw_factor": 1.4, "eval_seq_s": 0.0032,
        "startup_s": 4.0}


def job_seconds(mapping: Mapping[str, Any], steps: int, evals: int, base: bool = False,
                cost: Mapping[str, float] = COST) -> float:
    """Wall seconds of one job of the suites from :data:`COST`: ``mapping`` is its config as the suite writes it (keys
    it leaves out take the trainer's defaults: replay ``ratio`` 0.5), ``evals`` its number of held-out evaluations
    (a ``base`` job: one evaluation, no training). Only the suites' plug-ins are modelled (replay, ExTra, DAPO)."""
    v = mapping["validation"]
    seqs = int(v["n_problems"]) * int(v["k"])
    if base:
        return cost["startup_s"] + seqs * cost["eval_seq_s"]
    plugins = mapping.get("plugins") or {}
    factor = 1.0
    if "replay" in plugins:
        factor *= 1.0 + cost["replay_row_share"] * float((plugins["replay"] or {}).get("ratio", 0.5))
    if any(name.startswith("extra") for name in plugins):
        factor *= cost["plugin_factor"]
    if "dapo" in plugins:  # redraws zero-variance groups (up to algo.max_gen_rounds rounds)
        factor *= cost["redraw_factor"]
    return cost["startup_s"] + steps * cost["update_s"] * factor + evals * seqs * cost["eval_seq_s"]


def jobs_left(suite_name: str, after_siblings: bool | str | Sequence[str] = False) -> list:
    """The suite's planned jobs (``runner.plan_jobs`` at its own sizes) that are left to train once its siblings have
    run: those no suite it shares records with (``Suite.shares_records_with``; ``True``: all of them, or the named
    ones) also plans. A name it shares nothing with is an error."""
    from llm_harness.compare.runner import CompareConfig, plan_jobs

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
    from llm_harness.compare.runner import CompareConfig

    z = CompareConfig(suite=suite_name, out=Path(f"/nonexistent/{suite_name}")).sizes
    evals_per_run = len({min(s, z["steps"]) for s in range(z["eval_every"], z["steps"] + z["eval_every"], z["eval_every"])})
    total = sum(job_seconds(j.mapping, z["steps"], evals_per_run, base=j.method == "base", cost=cost)
                for j in jobs_left(suite_name, after_siblings))
    return total / workers / 3600.0


# ---------------------------------------------------------------------------------------------- reading runs


def final_eval(run_dir: Path | str, k: int) -> dict[str, float]:
    """The ``val_*`` scalars of a run's last held-out evaluation (the last metrics row with ``val_avg_at_{k}``;
    {} when there is none). A base job (the starting checkpoint) has them in ``done.json['validation']``."""
    import json

    d = Path(run_dir)
    rows = _rows(d)
    key = f"val_avg_at_{k}"
    for r in reversed(rows):
        if key in r:
            return {a: float(b) for a, b in r.items() if a.startswith("val_") and isinstance(b, (int, float))}
    p = d / "done.json"
    if not rows and p.is_file():
        v = json.loads(p.read_text()).get("validation") or {}
        if key in v:
            return {a: float(b) for a, b in v.items() if a.startswith("val_") and isinstance(b, (int, float))}
    return {}


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(float(x))


def _finals(jobs: Sequence[Any], regime: str, k: int) -> dict[str, dict[int, dict[str, float]]]:
    """``{method: {seed: final val_* row}}`` of one regime's finished runs (base jobs under ``'base'``)."""
    out: dict[str, dict[int, dict[str, float]]] = {}
    for j in jobs:
        if j.regime != regime:
            continue
        ev = final_eval(j.run_dir, k)
        if ev:
            out.setdefault(j.method, {})[j.seed] = ev
    return out


def _metric_key(metric: str, k: int) -> str:
    """``avg`` → ``val_avg_at_{k}``, ``pass`` → ``val_pass_at_{k}``, ``pass@j`` → ``val_pass_at_{j}``, else ``val_<metric>``."""
    if metric == "avg":
        return f"val_avg_at_{k}"
    if metric == "pass":
        return f"val_pass_at_{k}"
    if metric.startswith("pass@"):
        return f"val_pass_at_{int(metric[5:])}"
    return f"val_{metric}"


def table_rows(finals: Mapping[str, Mapping[int, Mapping[str, float]]], arms: Sequence[str], reference: str, key: str,
               min_effect: float = 0.02) -> list[dict[str, Any]]:
    """One table's contrasts on metric ``key``: per arm the seed mean and interval, the paired difference to
    ``reference`` over common seeds, its p-value and the Holm-adjusted p **within the table** (arms without
    runs are skipped), and the power against ``min_effect`` at Holm's first-step level."""
    ref = finals.get(reference, {})
    rows = []
    for a in arms:
        seeds = finals.get(a, {})
        if not seeds:
            continue
        common = sorted(s for s in set(seeds) & set(ref) if _finite(seeds[s].get(key)) and _finite(ref[s].get(key)))
        c = paired_contrast([seeds[s][key] - ref[s][key] for s in common])
        rows.append({"arm": a, "n": len(seeds), "value": seed_interval([v.get(key, math.nan) for v in seeds.values()]),
                     "diff": (c.mean, c.ci_low, c.ci_high), "sd": c.sd, "p": c.p, "n_paired": c.n})
    for r, adj in zip(rows, holm([r["p"] for r in rows])):
        r["p_holm"] = adj
        r["power"] = paired_power(min_effect, r["sd"], r["n_paired"], 0.05 / max(1, len(rows)))
    return rows


def _pp(v: tuple[float, float, float]) -> str:
    m, lo, hi = v
    if not _finite(m):
        return "–"
    return f"{100 * m:.1f}" if not _finite(lo) else f"{100 * m:.1f} [{100 * lo:.1f}, {100 * hi:.1f}]"


def _pd(v: tuple[float, float, float]) -> str:
    m, lo, hi = v
    if not _finite(m):
        return "–"
    return f"{100 * m:+.1f}" if not _finite(lo) else f"{100 * m:+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}]"


def _p(p: float) -> str:
    return "–" if not _finite(p) else (f"{p:.3f}" if p >= 0.001 else f"{p:.0e}")


def _label(suite: Any, name: str) -> str:
    m = next((m for m in suite.methods if m.name == name), None)
    return (m.label if m is not None else name).replace("|", "\\|")


def _csv(path: Path, header: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    def cell(x: Any) -> str:
        if isinstance(x, float):
            return "" if not math.isfinite(x) else f"{x:.6g}"
        s = str(x)
        return f'"{s}"' if ("," in s or '"' in s) else s

    write_text(path, "\n".join([",".join(header)] + [",".join(cell(x) for x in r) for r in rows]) + "\n")


def _step_series(run_dir: Path | str, key: str, steps: int) -> np.ndarray:
    """``key`` per update (nan where a row lacks it) over ``steps`` updates."""
    y = np.full(steps, np.nan)
    for r in _rows(Path(run_dir)):
        s = r.get("step")
        if isinstance(s, int) and 0 <= s < steps and _finite(r.get(key)):
            y[s] = float(r[key])
    return y


def _ref_name(suite: Any) -> str:
    """The reference arm's short name for prose and axis labels (its label before any parenthesis)."""
    return _label(suite, suite.reference).split(" (")[0]


def _forest_width(labels: Sequence[str]) -> float:
    """Inches of one forest panel: its longest 8-pt label (~0.065 in per character) plus the plot."""
    return 3.4 + 0.065 * max(map(len, labels))


def _forest(ax: Any, labels: Sequence[str], diffs: Sequence[tuple[float, float, float]], title: str, xlabel: str,
            scale: float = 100.0) -> None:
    """Paired differences (x ``scale``: fractions to points by default) with their intervals, sorted by the mean."""
    order = sorted(range(len(labels)), key=lambda i: diffs[i][0] if _finite(diffs[i][0]) else -np.inf)
    y = np.arange(len(order))
    for yi, i in zip(y, order):
        m, lo, hi = (scale * x if _finite(x) else np.nan for x in diffs[i])
        ax.plot([lo, hi], [yi, yi], color="C0", lw=2)
        ax.plot([m], [yi], "o", color="C0")
    ax.axvline(0, color="k", lw=1, ls="--")
    ax.set_yticks(y, [labels[i] for i in order], fontsize=8)
    ax.set_xlabel(xlabel)
    ax.set_title(title, fontsize=9)


def _tables_section(cfg: Any, jobs: Sequence[Any], suite: Any, out: Path, specs: Sequence[TableSpec], title: str,
                    metrics: Sequence[tuple[str, str]], extra_cols: Mapping[str, Any] | None = None,
                    stem: str = "tables") -> list[str]:
    """Markdown of every table in ``specs`` with at least two of its arms run (Holm within each table, per
    metric), and one forest plot (first metric) per table in ``<stem>_<regime>.png`` with its CSV.
    ``extra_cols[table name]`` adds columns (``.header``, ``.cells(jobs, regime, arm)``) to that table."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    k = cfg.sizes["eval_k"]
    lines: list[str] = []
    regimes = sorted({j.regime for j in jobs})
    for regime in regimes:
        finals = _finals(jobs, regime, k)
        if suite.reference not in finals:
            continue
        present = [t for t in specs if sum(a in finals for a in t.arms) >= 2]  # one shared row is not the table
        if not present:
            continue
        lines += [f"## {title}, regime `{regime}`", "",
                  "Each table is its own Holm family: every arm is contrasted with "
                  f"{_ref_name(suite)} by a paired t-test over seeds, Holm-adjusted over the "
                  f"arms of that table (separately per metric). Power: at a true {100 * suite.min_effect:.0f}-point "
                  "difference, the measured spread and Holm's first-step level.", ""]
        width = _forest_width([_label(suite, a) for t in present for a in t.arms])
        fig, axes = plt.subplots(1, len(present), figsize=(width * len(present),
                                                           0.5 * max(len(t.arms) for t in present) + 2.2), squeeze=False)
        csv_rows = []
        for ti, t in enumerate(present):
            per_metric = {mname: table_rows(finals, t.arms, suite.reference, _metric_key(mname, k), suite.min_effect)
                          for mname, _ in metrics}
            head = "| arm | seeds | " + " | ".join(
                f"{mlab} % | Δ {mlab} (pp) [CI] | p (Holm) | power" for _, mlab in metrics)
            xc = (extra_cols or {}).get(t.name)
            extra_head = xc.header if xc is not None else []
            lines += [f"### {t.caption}", "", head + "".join(f" | {h}" for h in extra_head) + " |",
                      "|" + "---|" * (2 + 4 * len(metrics) + len(extra_head))]
            ref_vals = [seed_interval([v.get(_metric_key(mn, k), math.nan) for v in finals[suite.reference].values()])
                        for mn, _ in metrics]
            lines.append(f"| {_label(suite, suite.reference)} | {len(finals[suite.reference])} | "
                         + " | ".join(f"{_pp(rv)} | | | " for rv in ref_vals)
                         + "".join(f" | {c}" for c in (xc.cells(jobs, regime, suite.reference) if xc else [])) + " |")
            first = per_metric[metrics[0][0]]
            for i, r in enumerate(first):
                cells = []
                for mname, _ in metrics:
                    rr = next((x for x in per_metric[mname] if x["arm"] == r["arm"]), None)
                    if rr is None:
                        cells.append("– | – | – | –")
                        continue
                    pw = f"{rr['power']:.2f}" if _finite(rr["power"]) else "–"
                    cells.append(f"{_pp(rr['value'])} | {_pd(rr['diff'])} | {_p(rr['p'])} ({_p(rr['p_holm'])}) | {pw}")
                    csv_rows.append([t.name, r["arm"], mname, rr["value"][0], rr["diff"][0], rr["diff"][1], rr["diff"][2],
                                     rr["p"], rr["p_holm"], rr["n_paired"]])
                lines.append(f"| {_label(suite, r['arm'])} | {r['n']} | " + " | ".join(cells)
                             + "".join(f" | {c}" for c in (xc.cells(jobs, regime, r["arm"]) if xc else [])) + " |")
            missing = [a for a in t.arms if a not in finals]
            lines += ["", f"Not run in this suite: {', '.join(missing)}.", ""] if missing else [""]
            _forest(axes[0, ti], [_label(suite, r["arm"]).replace("\\|", "|") for r in first], [r["diff"] for r in first],
                    t.caption.split(":")[0], f"Δ {metrics[0][1]} vs {_ref_name(suite)} (pp), 95 % CI")
        fig.tight_layout()
        name = f"{stem}_{regime}"
        save_figure(fig, out, name)
        plt.close(fig)
        _csv(out / f"{name}.csv", ["table", "arm", "metric", "mean", "diff", "diff_lo", "diff_hi", "p", "p_holm", "n_paired"], csv_rows)
        lines += [f"![{name}.png]({name}.png) (numbers: `{name}.csv`)", ""]
    return lines


class _ClipCols:
    """Replay Table 2's clip-fraction columns: mean over updates of the fresh and replayed-token clip fractions."""

    header = ["clip % fresh", "clip % replay"]

    def cells(self, jobs: Sequence[Any], regime: str, arm: str) -> list[str]:
        out = []
        for key in ("clip_frac_fresh", "clip_frac_replayed_rollout"):
            v = [np.nanmean(y) for j in jobs if j.regime == regime and j.method == arm
                 for y in [_step_series(j.run_dir, key, 10_000)] if np.isfinite(y).any()]
            out.append(f"{100 * np.mean(v):.3f}" if v else "–")
        return out


@register_section("replay_tables")
def replay_tables_section(cfg: Any, jobs: Sequence[Any], summary: dict, suite: Any, out: Path) -> list[str]:
    """Replay Tables 1–4 and 9 (Holm within each), Table 2's clip fractions, and Table 13's AES ranking."""
    lines = _tables_section(cfg, jobs, suite, out, REPLAY_TABLES, "The Replay paper's tables on the test bed",
                            (("avg", "avg@k"), ("pass", "pass@k")), extra_cols={"replay_table2": _ClipCols()}, stem="replay_tables")
    lines += _aes_ranking(cfg, jobs, suite, out)
    return lines


def _aes_seed(ev: Mapping[str, float], ref: Mapping[str, float], k: int) -> tuple[float, float, float]:
    """(ΔL, ΔAcc, AES) of one run's final evaluation against the reference's (same seed); nans when undefined."""
    from theory.metrics import aes_terms

    a, l_ = ev.get(f"val_avg_at_{k}"), ev.get("val_length_mean")
    ra, rl = ref.get(f"val_avg_at_{k}"), ref.get("val_length_mean")
    if not all(_finite(x) for x in (a, l_, ra, rl)) or ra <= 0 or rl <= 0:
        return math.nan, math.nan, math.nan
    t = aes_terms(l_, a, rl, ra)
    return float(t.delta_length), float(t.delta_acc), float(t.score)


def _aes_ranking(cfg: Any, jobs: Sequence[Any], suite: Any, out: Path, figure: bool = False) -> list[str]:
    """Replay Table 13: the fresh-anchored configurations ranked by AES against GRPO (paired by seed); ``figure``
    adds their AES intervals as ``replay_aes_<regime>.png``."""
    k = cfg.sizes["eval_k"]
    lines: list[str] = []
    for regime in sorted({j.regime for j in jobs}):
        finals = _finals(jobs, regime, k)
        ref = finals.get(suite.reference, {})
        arms = [a for a in REPLAY_AES_CONFIGS if a in finals]
        if not ref or not arms:
            continue
        recs = []
        for a in arms:
            per = [_aes_seed(finals[a][s], ref[s], k) for s in sorted(set(finals[a]) & set(ref))]
            recs.append({"arm": a, "acc": seed_interval([v.get(f"val_avg_at_{k}", math.nan) for v in finals[a].values()]),
                         "len": seed_interval([v.get("val_length_mean", math.nan) for v in finals[a].values()]),
                         "dl": seed_interval([p[0] for p in per]), "dacc": seed_interval([p[1] for p in per]),
                         "aes": seed_interval([p[2] for p in per])})
        recs.sort(key=lambda r: -r["aes"][0] if _finite(r["aes"][0]) else np.inf)
        r_acc = seed_interval([v.get(f"val_avg_at_{k}", math.nan) for v in ref.values()])[0]
        r_len = seed_interval([v.get("val_length_mean", math.nan) for v in ref.values()])[0]
        lines += [f"### Replay Table 13: AES ranking of the fresh-anchored configurations, regime `{regime}`", "",
                  f"AES = ΔL + β ΔAcc against {_ref_name(suite)} of the same seed (β 3 for a gain, "
                  f"5 for a loss; `theory.metrics.aes`), from the final held-out avg@{k} and mean response length; reference: "
                  f"acc {100 * r_acc:.1f} %, L {r_len:.1f} tokens. Intervals are 95% Student-t over seeds of the per-seed AES.", "",
                  "| rank | configuration | acc % | L (tokens) | ΔL % | ΔAcc % | AES [CI] |", "|---|---|---|---|---|---|---|"]
        rows_csv = []
        for i, r in enumerate(recs, 1):
            aes_txt = "–" if not _finite(r["aes"][0]) else (
                f"{r['aes'][0]:+.3f}" + (f" [{r['aes'][1]:+.3f}, {r['aes'][2]:+.3f}]" if _finite(r["aes"][1]) else ""))
            lines.append(f"| {i} | {_label(suite, r['arm'])} | {_pp(r['acc'])} | "
                         + (f"{r['len'][0]:.1f}" if _finite(r["len"][0]) else "–")
                         + f" | {_pd(r['dl'])} | {_pd(r['dacc'])} | {aes_txt} |")
            rows_csv.append([i, r["arm"], r["acc"][0], r["len"][0], r["dl"][0], r["dacc"][0], r["aes"][0], r["aes"][1], r["aes"][2]])
        missing = [a for a in REPLAY_AES_CONFIGS if a not in finals]
        if missing:
            lines += ["", f"Not run in this suite (all twelve: the `replay` or `replay_aes` suite): {', '.join(missing)}."]
        name = f"replay_aes_{regime}"
        _csv(out / f"{name}.csv", ["rank", "arm", "acc", "length", "delta_length", "delta_acc", "aes", "aes_lo", "aes_hi"], rows_csv)
        if figure:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt

            labels = [_label(suite, r["arm"]).replace("\\|", "|") for r in recs]
            fig, ax = plt.subplots(figsize=(_forest_width(labels), 0.45 * len(recs) + 1.6))
            _forest(ax, labels, [r["aes"] for r in recs], f"Replay Table 13: AES vs {_ref_name(suite)}",
                    "AES (ΔL + β ΔAcc), 95 % CI over seeds", scale=1.0)
            fig.tight_layout()
            save_figure(fig, out, name)  # closes the figure
            lines += ["", f"![{name}.png]({name}.png) (numbers: `{name}.csv`)", ""]
        else:
            lines += ["", f"(numbers: `{name}.csv`)", ""]
    return lines


@register_section("replay_aes")
def replay_aes_section(cfg: Any, jobs: Sequence[Any], summary: dict, suite: Any, out: Path) -> list[str]:
    """Replay Table 13 alone: the twelve fresh-anchored configurations ranked by AES, with a forest figure."""
    return _aes_ranking(cfg, jobs, suite, out, figure=True)


#: (val_* key stem, column label, scale) of the evaluation-metrics section
_EVAL_COLUMNS = (("length_mean", "L (tokens)", 1.0), ("length_correct", "L (correct)", 1.0), ("length_incorrect", "L (incorrect)", 1.0),
                 ("distinct_4", "Distinct-4", 1.0), ("self_bleu_4", "Self-BLEU-4", 1.0), ("logdet", "LogDet", 1.0))


@register_section("eval_metrics")
def eval_metrics_section(cfg: Any, jobs: Sequence[Any], summary: dict, suite: Any, out: Path) -> list[str]:
    """Length by correctness, diversity and AES against the reference per arm (final evaluation; mean [CI] over seeds)."""
    k = cfg.sizes["eval_k"]
    lines: list[str] = []
    for regime in sorted({j.regime for j in jobs}):
        finals = _finals(jobs, regime, k)
        arms = [m.name for m in suite.methods if m.name in finals]
        if not arms:
            continue
        ref = finals.get(suite.reference, {})
        have = [c for c in _EVAL_COLUMNS if any(_finite(v.get(f"val_{c[0]}")) for a in arms for v in finals[a].values())]
        lines += [f"## Held-out evaluation metrics, regime `{regime}`", "",
                  f"Final evaluation of each run (avg@{k}; response length in tokens, overall and by correctness; Distinct-4, "
                  "Self-BLEU-4 and LogDet over each problem's samples, averaged over problems; AES against the reference of the "
                  "same seed, and against the starting checkpoint as Replay Table 5's upper block). Mean [95% CI] over seeds; '–': the trainer did not log the metric."
                  + ("" if len(have) == len(_EVAL_COLUMNS) else
                     f" Not logged by this trainer: {', '.join(c[1] for c in _EVAL_COLUMNS if c not in have)}."), "",
                  "| arm | seeds | avg@k % | " + " | ".join(c[1] for c in _EVAL_COLUMNS) + " | AES vs reference | AES vs start |",
                  "|" + "---|" * (5 + len(_EVAL_COLUMNS))]
        csv_rows = []
        for a in arms:
            vals = finals[a]
            cells = []
            for key, _, _ in _EVAL_COLUMNS:
                iv = seed_interval([v.get(f"val_{key}", math.nan) for v in vals.values()])
                cells.append("–" if not _finite(iv[0]) else (f"{iv[0]:.3g}" + (f" [{iv[1]:.3g}, {iv[2]:.3g}]" if _finite(iv[1]) else "")))
                csv_rows.append([a, key, iv[0], iv[1], iv[2]])
            per = [_aes_seed(vals[s], ref[s], k)[2] for s in sorted(set(vals) & set(ref))]
            ae = seed_interval(per) if a != suite.reference else (0.0, math.nan, math.nan)
            csv_rows.append([a, "aes", ae[0], ae[1], ae[2]])
            base = finals.get("base", {})
            ab = seed_interval([_aes_seed(vals[s], base[s], k)[2] for s in sorted(set(vals) & set(base))])
            csv_rows.append([a, "aes_vs_start", ab[0], ab[1], ab[2]])
            acc = seed_interval([v.get(f"val_avg_at_{k}", math.nan) for v in vals.values()])
            lines.append(f"| {_label(suite, a)} | {len(vals)} | {_pp(acc)} | " + " | ".join(cells) + " | "
                         + ("reference" if a == suite.reference else "–" if not _finite(ae[0]) else
                            f"{ae[0]:+.3f}" + (f" [{ae[1]:+.3f}, {ae[2]:+.3f}]" if _finite(ae[1]) else "")) + " | "
                         + ("–" if not _finite(ab[0]) else f"{ab[0]:+.3f}" + (f" [{ab[1]:+.3f}, {ab[2]:+.3f}]" if _finite(ab[1]) else ""))
                         + " |")
        name = f"eval_metrics_{regime}"
        _csv(out / f"{name}.csv", ["arm", "metric", "mean", "ci_low", "ci_high"], csv_rows)
        lines += ["", f"(numbers: `{name}.csv`)", ""]
    return lines


# ---------------------------------------------------------------------------------------------- ExTra sections


@register_section("extra_tables")
def extra_tables_section(cfg: Any, jobs: Sequence[Any], summary: dict, suite: Any, out: Path) -> list[str]:
    """ExTra Tables 1, 5 and 6: pass@k (k = 16, the headline) and pass@1 contrasts with GRPO, Holm within each table and metric."""
    k = cfg.sizes["eval_k"]
    return _tables_section(cfg, jobs, suite, out, EXTRA_TABLES, "The ExTra paper's tables on the test bed",
                           (("pass", f"pass@{k}"), ("avg", "pass@1")), stem="extra_tables")  # pass@16 first: ExTra's headline


def _pass_ks(finals: Mapping[str, Mapping[int, Mapping[str, float]]]) -> list[int]:
    ks = set()
    for seeds in finals.values():
        for v in seeds.values():
            ks |= {int(key[len("val_pass_at_"):]) for key in v if key.startswith("val_pass_at_") and key[len("val_pass_at_"):].isdigit()}
    return sorted(ks)


@register_section("passk")
def passk_section(cfg: Any, jobs: Sequence[Any], summary: dict, suite: Any, out: Path) -> list[str]:
    """pass@j for every logged j (1..k) per arm, and the paired difference to the reference at each j (figure + CSV)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    k = cfg.sizes["eval_k"]
    lines: list[str] = []
    for regime in sorted({j.regime for j in jobs}):
        finals = _finals(jobs, regime, k)
        arms = [m.name for m in suite.methods if m.name in finals]
        ks = _pass_ks(finals)
        if not arms or not ks:
            continue
        ref = finals.get(suite.reference, {})
        lines += [f"## pass@k for k = 1..{k}, regime `{regime}`", "",
                  f"Unbiased pass@j from the {k} held-out samples per problem (final evaluation), mean over seeds; the "
                  f"figure shows each arm's paired difference to {_ref_name(suite)} with its 95% "
                  "interval over seeds.", "",
                  "| arm | " + " | ".join(f"pass@{j}" for j in ks) + " |", "|" + "---|" * (1 + len(ks))]
        fig, ax = plt.subplots(1, 2, figsize=(13, 4.5))
        csv_rows = []
        shown = [a for a in arms][:7]
        for ai, a in enumerate(arms):
            means = []
            for j in ks:
                key = f"val_pass_at_{j}"
                m = seed_interval([v.get(key, math.nan) for v in finals[a].values()])[0]
                c = paired_contrast([finals[a][s][key] - ref[s][key] for s in sorted(set(finals[a]) & set(ref))
                                     if _finite(finals[a][s].get(key)) and _finite(ref[s].get(key))])
                means.append(m)
                csv_rows.append([a, j, m, c.mean, c.ci_low, c.ci_high])
            lines.append(f"| {_label(suite, a)} | " + " | ".join("–" if not _finite(m) else f"{100 * m:.1f}" for m in means) + " |")
            if a in shown:
                ax[0].plot(ks, 100 * np.array(means), marker="o", ms=3, label=_label(suite, a).replace("\\|", "|"),
                           ls="--" if a == suite.reference else "-")
                if a != suite.reference and ref:
                    d = np.array([[r[3], r[4], r[5]] for r in csv_rows if r[0] == a], dtype=np.float64) * 100
                    ax[1].plot(ks, d[:, 0], marker="o", ms=3, label=_label(suite, a).replace("\\|", "|"), color=f"C{ai}")
                    ax[1].fill_between(ks, d[:, 1], d[:, 2], alpha=0.12, color=f"C{ai}")
        for a_ in ax:
            a_.set_xlabel("k")
            if a_.get_legend_handles_labels()[0]:
                a_.set_xscale("log", base=2)
                a_.legend(fontsize=7)
            else:
                a_.text(0.5, 0.5, "no paired reference runs", ha="center", va="center", transform=a_.transAxes)
        ax[0].set_ylabel("held-out pass@k (%), mean over seeds")
        ax[1].axhline(0, color="k", lw=1, ls="--")
        ax[1].set_ylabel(f"Δ pass@k vs {suite.reference} (pp), 95% CI over seeds")
        fig.tight_layout()
        name = f"passk_{regime}"
        save_figure(fig, out, name)
        plt.close(fig)
        _csv(out / f"{name}.csv", ["arm", "k", "pass_at_k", "diff_vs_ref", "diff_lo", "diff_hi"], csv_rows)
        lines += ["", f"![{name}.png]({name}.png) (numbers: `{name}.csv`; first 7 arms drawn)", ""]
    return lines


#: arms drawn in the dynamics and efficiency figures (at most ~6 per panel)
_FIGURE_ARMS = ("grpo", "dapo", "extra_n", "extra_r", "extra_full")
#: per-step metrics of ExTra Fig. 2: the trainer's policy entropy and the plug-in's novelty bonus
_DYNAMICS = (("entropy", "policy entropy of the trained tokens (nats)"),
             ("extra_novelty_bonus_mean_correct", "mean novelty bonus of correct samples"),
             ("extra_novelty_bonus_pos_frac", "fraction of samples with a positive bonus"))


@register_section("extra_dynamics")
def extra_dynamics_section(cfg: Any, jobs: Sequence[Any], summary: dict, suite: Any, out: Path) -> list[str]:
    """ExTra Fig. 2: policy entropy and the novelty signal over training (seed mean and min–max band, moving mean),
    and the per-seed change of entropy from the first to the last quarter of training, paired with the reference."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = cfg.sizes["steps"]
    w = max(1, steps // 10)
    lines: list[str] = []
    for regime in sorted({j.regime for j in jobs}):
        arms = [m.name for m in suite.methods if m.name in _FIGURE_ARMS] or [m.name for m in suite.methods][:6]
        series = {}
        for a in arms:
            dirs = [j.run_dir for j in jobs if j.regime == regime and j.method == a and _rows(Path(j.run_dir))]
            if dirs:
                series[a] = {key: np.array([_step_series(d, key, steps) for d in dirs]) for key, _ in _DYNAMICS}
        if not series:
            continue
        fig, ax = plt.subplots(1, len(_DYNAMICS), figsize=(5.5 * len(_DYNAMICS), 4.2))
        csv_rows = []
        for i, (key, lab) in enumerate(_DYNAMICS):
            for ci, (a, s) in enumerate(series.items()):
                y = s[key]
                if not np.isfinite(y).any():
                    continue
                sm = np.array([moving_mean(r, w) for r in y])
                with np.errstate(invalid="ignore"), _quiet():
                    mean, lo, hi = np.nanmean(sm, 0), np.nanmin(sm, 0), np.nanmax(sm, 0)
                x = np.arange(steps)
                ax[i].plot(x, mean, color=f"C{ci}", label=_label(suite, a).replace("\\|", "|"),
                           ls="--" if a == suite.reference else "-")
                ax[i].fill_between(x, lo, hi, color=f"C{ci}", alpha=0.15)
                csv_rows += [[a, key, int(t), float(mean[t]), float(lo[t]), float(hi[t])] for t in range(steps) if np.isfinite(mean[t])]
            ax[i].set_xlabel("update")
            ax[i].set_title(lab + f"\n({w}-update moving mean; band: min-max over seeds)", fontsize=9)
            if ax[i].get_legend_handles_labels()[0]:
                ax[i].legend(fontsize=7)
            else:
                ax[i].text(0.5, 0.5, "not logged by these arms", ha="center", va="center", transform=ax[i].transAxes)
        fig.tight_layout()
        name = f"extra_dynamics_{regime}"
        save_figure(fig, out, name)
        plt.close(fig)
        _csv(out / f"{name}.csv", ["arm", "metric", "update", "mean", "min", "max"], csv_rows)
        q = max(1, steps // 4)
        lines += [f"## Training dynamics (ExTra Fig. 2), regime `{regime}`", "",
                  f"Entropy change per seed, mean over the last {q} updates minus the first {q}; 'vs reference' is the "
                  "paired difference of that change to the reference arm (negative: more entropy collapse than it). "
                  "Novelty bonus: mean over the last quarter.", "",
                  "| arm | seeds | Δ entropy (last − first quarter) [CI] | vs reference [CI] | novelty bonus of correct samples, last quarter |",
                  "|---|---|---|---|---|"]
        ref = series.get(suite.reference)

        def change(y: np.ndarray) -> np.ndarray:
            with np.errstate(invalid="ignore"), _quiet():
                return np.nanmean(y[:, -q:], 1) - np.nanmean(y[:, :q], 1)

        for a, s in series.items():
            ch = change(s["entropy"])
            iv = seed_interval(list(ch))
            vs = ""
            if a != suite.reference and ref is not None:
                n = min(len(ch), len(ref["entropy"]))
                c = paired_contrast(list(ch[:n] - change(ref["entropy"])[:n]))
                vs = "–" if not _finite(c.mean) else f"{c.mean:+.3f}" + (f" [{c.ci_low:+.3f}, {c.ci_high:+.3f}]" if _finite(c.ci_low) else "")
            with np.errstate(invalid="ignore"), _quiet():
                nb = np.nanmean(s["extra_novelty_bonus_mean_correct"][:, -q:]) if np.isfinite(s["extra_novelty_bonus_mean_correct"]).any() else math.nan
            lines.append(f"| {_label(suite, a)} | {len(ch)} | "
                         + ("–" if not _finite(iv[0]) else f"{iv[0]:+.3f}" + (f" [{iv[1]:+.3f}, {iv[2]:+.3f}]" if _finite(iv[1]) else ""))
                         + f" | {vs} | " + ("–" if not _finite(nb) else f"{nb:.3f}") + " |")
        lines += ["", f"![{name}.png]({name}.png) (numbers: `{name}.csv`)", ""]
    return lines


class _quiet:
    """Silence numpy's 'mean of empty slice' warnings inside a block (all-nan columns are expected)."""

    def __enter__(self):
        import warnings

        self._w = warnings.catch_warnings()
        self._w.__enter__()
        warnings.simplefilter("ignore", category=RuntimeWarning)
        return self

    def __exit__(self, *exc):
        return self._w.__exit__(*exc)


@register_section("prompt_efficiency")
def prompt_efficiency_section(cfg: Any, jobs: Sequence[Any], summary: dict, suite: Any, out: Path) -> list[str]:
    """ExTra Fig. 3: held-out pass@k against the cumulative number of generated prompt instances (before × G,
    counted whether or not a group enters the update) at each evaluation point; seed means."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    k = cfg.sizes["eval_k"]
    lines: list[str] = []
    for regime in sorted({j.regime for j in jobs}):
        arms = [m.name for m in suite.methods if m.name in _FIGURE_ARMS] or [m.name for m in suite.methods][:6]
        pts: dict[str, dict[int, list[tuple[float, float, float]]]] = {}
        for j in jobs:
            if j.regime != regime or j.method not in arms:
                continue
            cum = 0.0
            for r in _rows(Path(j.run_dir)):
                cum += float(r.get("prompt_instances", 0.0) or 0.0)
                if f"val_avg_at_{k}" in r:
                    pts.setdefault(j.method, {}).setdefault(int(r["step"]) + 1, []).append(
                        (cum, float(r.get(f"val_pass_at_{k}", math.nan)), float(r[f"val_avg_at_{k}"])))
        if not pts:
            continue
        fig, ax = plt.subplots(1, 2, figsize=(12, 4.5))
        csv_rows, final = [], []
        for ci, a in enumerate(arms):
            if a not in pts:
                continue
            st = sorted(pts[a])
            x = np.array([np.mean([p[0] for p in pts[a][s]]) for s in st])
            yp = np.array([np.nanmean([p[1] for p in pts[a][s]]) for s in st]) * 100
            ya = np.array([np.nanmean([p[2] for p in pts[a][s]]) for s in st]) * 100
            for i_, lab in enumerate((f"pass@{k}", "pass@1")):
                ax[i_].plot(x, yp if i_ == 0 else ya, marker="o", ms=3, color=f"C{ci}", label=_label(suite, a).replace("\\|", "|"),
                            ls="--" if a == suite.reference else "-")
            csv_rows += [[a, s, float(xx), float(p), float(q)] for s, xx, p, q in zip(st, x, yp, ya)]
            final.append((a, st[-1], x[-1], yp[-1], ya[-1]))
        for i_, lab in enumerate((f"held-out pass@{k} (%)", "held-out pass@1 (%)")):
            ax[i_].set_xlabel("cumulative generated prompt instances (before × G)")
            ax[i_].set_ylabel(lab + ", mean over seeds")
            ax[i_].legend(fontsize=7)
        fig.tight_layout()
        name = f"prompt_efficiency_{regime}"
        save_figure(fig, out, name)
        plt.close(fig)
        _csv(out / f"{name}.csv", ["arm", "update", "cum_prompt_instances", f"pass_at_{k}", "pass_at_1"], csv_rows)
        lines += [f"## Sample efficiency (ExTra Fig. 3), regime `{regime}`", "",
                  "Cumulative generated prompt instances (each produces G samples; counted whether or not its group enters "
                  "the update, so DAPO's extra rounds count) against held-out accuracy at each evaluation, seed means.", "",
                  f"| arm | at update | cumulative prompt instances | pass@{k} % | pass@1 % |", "|---|---|---|---|---|"]
        lines += [f"| {_label(suite, a)} | {s} | {x:.0f} | {p:.1f} | {q:.1f} |" for a, s, x, p, q in final]
        lines += ["", f"![{name}.png]({name}.png) (numbers: `{name}.csv`)", ""]
    return lines
