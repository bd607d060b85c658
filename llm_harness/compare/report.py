"""The comparison report: tables with seed confidence intervals, token accounting, overheads, curves.

For every (regime, method) the seeds' final held-out avg@1 (the mean over the ``k`` samples) and
pass@k are summarised by their mean and a 95% Student-t interval over seeds; the difference to the
reference method (GRPO) is taken seed by seed (same seed → same prompts order and evaluation
seed) as a paired t-test (:mod:`theory.metrics.paired`), Holm-adjusted over the suite's contrast family, with the
power the seed count had against the suite's ``min_effect`` at the measured spread. The verdict is
"better"/"worse" when the Holm-adjusted p is below 0.05. Per-update means come from the training
metrics: new generated tokens (plug-in Monte-Carlo tokens included), prompt instances, mixed-group
fractions (fresh and replayed-prefix groups), training reward, step and plug-in wall time.

``summary.json`` carries ``suite``, ``steps``, ``seeds`` (list), ``k``, ``protocol`` and ``methods``:
one object per (regime, method) with ``name``, ``regime``, ``final_avg``, ``ci_low``, ``ci_high``,
``delta_vs_grpo``, ``delta_ci_low``, ``delta_ci_high`` (vs the suite's reference), ``p``, ``p_holm``,
``power``, ``seeds_for_80``, ``new_tokens_per_update`` and more; ``regimes`` holds every per-seed
number behind them. Suites add report sections through :data:`SECTIONS`.

With ``timings_apart`` (:class:`llm_harness.compare.jobs.CompareConfig`) the wall-clock numbers
(:data:`TIMING_FIELDS` and the invocation's training time) go to ``timings.json`` beside the report instead: the
report and the summary then hold only what the runs' seeds determine.
"""

from __future__ import annotations

import math
import platform
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from llm_harness.compare.render import fmt_interval, fmt_p, ref_name, suite_figures
from llm_harness.compare.runs import mean_of, summarise
from llm_harness.compare.sections import load_sections
from llm_harness.compare.stats import seed_interval
from llm_harness.compare.suite import SUITES
from theory.metrics.paired import holm, paired_contrast, paired_power, seeds_for_power
from vsr_util.atomic import TIMINGS_FILE, json_safe, split_fields, write_json, write_text

__all__ = ["TIMING_FIELDS", "write_report"]

#: the summary's wall-clock fields (per method and per seed): ``timings.json`` holds them with ``timings_apart``
TIMING_FIELDS = frozenset({"wall_s", "step_s", "plugin_s", "step_ratio", "plugin_overhead_s"})

def _verdict(mean: float, p_adj: float) -> str:
    if not np.isfinite(p_adj):
        return "n/a"
    if p_adj < 0.05:
        return "better" if mean > 0 else "worse"
    return "not detected"


def _records(cfg: Any, reg: dict, suite: Any) -> list[dict[str, Any]]:
    """Per method of one regime: intervals, the paired contrast with the reference (Holm over the
    suite's family), its power against ``suite.min_effect`` and the per-update means."""
    ref = reg["methods"].get(suite.reference, {"seeds": {}})["seeds"]
    ref_tokens = np.mean([s["tokens"] for s in ref.values()]) if ref else float("nan")
    ref_plugin = np.mean([s["plugin_s"] for s in ref.values()]) if ref else float("nan")
    ref_step = np.mean([s["step_s"] for s in ref.values()]) if ref else float("nan")
    family = set(suite.family())
    records = []
    for meth in suite.methods:
        if meth.name not in reg["methods"]:
            continue
        seeds = reg["methods"][meth.name]["seeds"]
        common = sorted(set(seeds) & set(ref))
        c = paired_contrast([seeds[s]["avg"] - ref[s]["avg"] for s in common])
        tokens = float(np.mean([s["tokens"] for s in seeds.values()]))
        mp = [s["mixed_prefix"] for s in seeds.values() if s["mixed_prefix"] is not None and np.isfinite(s["mixed_prefix"])]
        step_s = float(np.mean([s["step_s"] for s in seeds.values()]))
        plug_s = float(np.mean([s["plugin_s"] for s in seeds.values()]))
        is_ref = meth.name == suite.reference
        records.append({
            "method": meth.name, "label": meth.label, "family": meth.family, "n_seeds": len(seeds),
            "avg": seed_interval([s["avg"] for s in seeds.values()]), "pass": seed_interval([s["pass"] for s in seeds.values()]),
            "diff_vs_ref": (c.mean, c.ci_low, c.ci_high), "diff_sd": c.sd, "p": math.nan if is_ref else c.p,
            "in_family": (not is_ref) and meth.name in family, "tokens": tokens,
            "tokens_ratio": tokens / ref_tokens if ref_tokens else float("nan"),
            "instances": float(np.mean([s["instances"] for s in seeds.values()])),
            "mixed_fresh": mean_of(list(seeds.values()), "mixed_fresh"),
            "mixed_prefix": float(np.mean(mp)) if mp else float("nan"),
            "reward": mean_of(list(seeds.values()), "reward"), "step_s": step_s, "plugin_s": plug_s,
            "plugin_overhead_s": plug_s - ref_plugin, "step_ratio": step_s / ref_step if ref_step else float("nan"),
            "wall_s": float(np.sum([s["wall_s"] or 0.0 for s in seeds.values()])),
        })
    fam = [r for r in records if r["in_family"]]
    for r, adj in zip(fam, holm([r["p"] for r in fam])):
        r["p_holm"] = adj
    m = max(1, len(fam))
    for r in records:
        r.setdefault("p_holm", r["p"])
        if r["method"] == suite.reference:
            r["verdict"], r["power"], r["power_holm"], r["seeds_for_80"] = "reference", math.nan, math.nan, None
            continue
        r["verdict"] = _verdict(r["diff_vs_ref"][0], r["p_holm"])
        sd, n = r["diff_sd"], r["n_seeds"]
        r["power"] = paired_power(suite.min_effect, sd, n, 0.05)
        a = 0.05 / m if r["in_family"] else 0.05
        r["power_holm"] = paired_power(suite.min_effect, sd, n, a)  # Holm's first step: the most conservative
        r["seeds_for_80"] = seeds_for_power(suite.min_effect, sd, 0.8, a) if np.isfinite(sd) and sd > 0 else None
    return records


def _table(cfg: Any, regime: str, reg: dict, suite: Any, timed: bool = True) -> tuple[list[str], list[dict[str, Any]]]:
    """The regime's table; ``timed``: with the step and plug-in seconds columns."""
    k = cfg.sizes["eval_k"]
    lines = [
        f"| method | avg@1 % [95% CI] | pass@{k} % [95% CI] | Δ avg@1 vs {ref_name(suite)} (pp) [CI] | p (Holm) | verdict "
        f"| power at {100 * suite.min_effect:.0f} pp | new tokens / update | × {ref_name(suite)} | prompt instances / update "
        "| mixed groups: fresh / prefix | train reward |" + (" step s | plug-in s / step |" if timed else ""),
        "|" + "---|" * (14 if timed else 12),
    ]
    base = reg["base"]
    if base:
        b_avg = seed_interval([v["avg"] for v in base.values()])
        b_pass = seed_interval([v["pass"] for v in base.values()])
        lines.append(f"| starting checkpoint (no training) | {fmt_interval(*b_avg)} | {fmt_interval(*b_pass)} |"
                     + " |" * (11 if timed else 9))
    records = _records(cfg, reg, suite)
    for rec in records:
        is_ref = rec["method"] == suite.reference
        d_txt = "" if is_ref else fmt_interval(*rec["diff_vs_ref"])
        p_txt = "" if is_ref else (f"{fmt_p(rec['p'])} ({fmt_p(rec['p_holm'])})" if rec["in_family"] else fmt_p(rec["p"]))
        pw = "" if is_ref or not np.isfinite(rec["power_holm"]) else f"{rec['power_holm']:.2f}"
        label = rec["label"].replace("|", "\\|")
        mp_txt = f"{rec['mixed_prefix']:.2f}" if np.isfinite(rec["mixed_prefix"]) else "–"
        lines.append(
            f"| {label} ({rec['n_seeds']} seeds) | {fmt_interval(*rec['avg'])} | {fmt_interval(*rec['pass'])} | {d_txt} | {p_txt} | "
            f"{rec['verdict']} | {pw} | {rec['tokens']:.0f} | {rec['tokens_ratio']:.2f} | {rec['instances']:.1f} | "
            f"{rec['mixed_fresh']:.2f} / {mp_txt} | {rec['reward']:.3f} |"
            + (f" {rec['step_s']:.2f} | {rec['plugin_s']:.3f} |" if timed else "")
        )
    return lines, records


def _power_lines(recs: list[dict[str, Any]], suite: Any) -> list[str]:
    fam = [r for r in recs if r["in_family"]]
    if not fam:
        return []
    m = len(fam)
    lines = [f"Power: each contrast is a paired t-test over seeds; the Holm family is {m} contrast(s) "
             f"({', '.join(r['method'] for r in fam)}). The power column is the chance to detect a true "
             f"{100 * suite.min_effect:.0f}-point difference at the measured seed-to-seed spread of that contrast, at "
             f"Holm's first-step level 0.05/{m} (conservative).", "",
             "| contrast | sd of paired Δ (pp) | seeds | power at 0.05 | power at 0.05/m | seeds for 80 % at 0.05/m |",
             "|---|---|---|---|---|---|"]
    for r in fam:
        sd = r["diff_sd"]
        lines.append(f"| {r['method']} vs {ref_name(suite)} | {100 * sd:.2f} | {r['n_seeds']} | "
                     f"{r['power']:.2f} | {r['power_holm']:.2f} | {r['seeds_for_80'] if r['seeds_for_80'] else '–'} |"
                     if np.isfinite(sd) else f"| {r['method']} vs {ref_name(suite)} | – | {r['n_seeds']} | – | – | – |")
    sds = [r["diff_sd"] for r in fam if np.isfinite(r["diff_sd"])]
    if sds:
        pooled = float(np.sqrt(np.mean(np.square(sds))))
        n = min(r["n_seeds"] for r in fam)
        lines += ["", f"Pooled over the family: sd {100 * pooled:.2f} pp, power {paired_power(suite.min_effect, pooled, n, 0.05 / m):.2f} "
                      f"with {n} seeds; {seeds_for_power(suite.min_effect, pooled, 0.8, 0.05 / m)} seeds would give 80 %."]
    return lines + [""]


def _protocol(jobs: Sequence[Any]) -> dict[str, Any]:
    """Evaluation and training settings shared by the suite's jobs (from the reference job's mapping)."""
    from llm_harness.trainer.config import TrainConfig
    from vsr_util.config_io import from_dict

    j = next((j for j in jobs if j.method != "base"), None) or (jobs[0] if jobs else None)
    if j is None:
        return {}
    c = from_dict(TrainConfig, j.mapping, where=f"{j.regime}/{j.method}")
    return {"eval_temperature": c.validation.temperature, "eval_top_p": c.validation.top_p, "eval_k": c.validation.k,
            "eval_problems": c.validation.n_problems, "eval_split": c.validation.split, "train_temperature": c.rollout.temperature,
            "prompts_per_step": c.rollout.prompts_per_step, "group_size": c.rollout.group_size,
            "filter_zero_variance": c.algo.filter_zero_variance, "mini_batches": c.algo.mini_batches,
            "eps_low": c.algo.eps_low, "eps_high": c.algo.eps_high, "lr": c.optim.lr, "model": c.model.path,
            "task": c.task.name, "task_params": dict(c.task.params), "pool": c.task.pool or None}


def _contract(cfg: Any, suite: Any, records_all: dict[str, list[dict[str, Any]]], summary: dict) -> list[dict[str, Any]]:
    """The ``methods`` list of ``summary.json`` (module doc)."""
    out = []
    for regime, recs in records_all.items():
        for r in recs:
            seeds = summary[regime]["methods"][r["method"]]["seeds"]
            out.append({
                "name": r["method"], "regime": regime, "label": r["label"], "family": r["family"], "n_seeds": r["n_seeds"],
                "final_avg": r["avg"][0], "ci_low": r["avg"][1], "ci_high": r["avg"][2],
                "final_pass": r["pass"][0], "pass_ci_low": r["pass"][1], "pass_ci_high": r["pass"][2],
                "delta_vs_grpo": 0.0 if r["method"] == suite.reference else r["diff_vs_ref"][0],
                "delta_ci_low": None if r["method"] == suite.reference else r["diff_vs_ref"][1],
                "delta_ci_high": None if r["method"] == suite.reference else r["diff_vs_ref"][2],
                "reference": suite.reference, "p": r["p"], "p_holm": r["p_holm"], "in_holm_family": r["in_family"],
                "verdict": r["verdict"], "delta_sd": r["diff_sd"], "power": r["power"], "power_holm": r["power_holm"],
                "seeds_for_80": r["seeds_for_80"], "new_tokens_per_update": r["tokens"], "tokens_vs_reference": r["tokens_ratio"],
                "prompt_instances_per_update": r["instances"], "mixed_frac_fresh": r["mixed_fresh"],
                "mixed_frac_prefix": r["mixed_prefix"], "train_reward": r["reward"], "step_s": r["step_s"],
                "plugin_s": r["plugin_s"], "wall_s": r["wall_s"],
                "final_avg_by_seed": {str(k): v["avg"] for k, v in sorted(seeds.items())},
            })
    return out


def _overhead_lines(records_all: dict[str, list[dict[str, Any]]], suite: Any) -> list[str]:
    """The per-step plug-in overhead section: wall-clock numbers only."""
    lines = [f"## Per-step plug-in overhead vs {ref_name(suite)}", "",
             "Wall time spent inside plug-in calls per step (claim/refill/shape/keep/compose/after_step, including an "
             "oracle's Monte-Carlo generation and ExTra's embedding and entropy scoring), minus the reference's (its "
             "fresh-prompt source), and the whole step time relative to the reference's (which also reflects different "
             "amounts of generation). Wall time per arm is the sum over its seeds' runs.", "",
             f"| regime | method | plug-in s / step over {ref_name(suite)} | step time x {ref_name(suite)} | wall min (all seeds) |",
             "|---|---|---|---|---|"]
    for reg, recs in records_all.items():
        for r in recs:
            lines.append(f"| {reg} | {r['label'].replace('|', chr(92) + '|')} | "
                         + ("" if r["method"] == suite.reference else f"{r['plugin_overhead_s']:+.3f}")
                         + f" | {r['step_ratio']:.2f} | {r['wall_s'] / 60:.1f} |")
    return lines + [""]


def write_report(cfg: Any, jobs: Sequence[Any], *, train_wall_s: float | None = None,
                 missing: Sequence[Any] = ()) -> Path:
    """Write ``report.md``, ``summary.json`` and the figures into ``cfg.report_dir`` from ``jobs``, the finished
    runs (:func:`llm_harness.compare.runner.run` passes those whose ``done.json`` matches); returns the report path.
    ``missing``: planned runs without a finished result (failed or not run), listed at the top of the report and
    in ``summary.json``. With ``cfg.timings_apart`` the wall-clock numbers go to ``timings.json`` (module doc)."""
    import torch

    suite = SUITES[cfg.suite]
    timed = not getattr(cfg, "timings_apart", False)
    out = Path(cfg.report_dir)
    out.mkdir(parents=True, exist_ok=True)
    summary = summarise(cfg, jobs)
    z = cfg.sizes
    proto = _protocol(jobs)
    k = z["eval_k"]
    sizes = "quick smoke sizes" if cfg.quick else (
        f"{z['steps']} updates per run, seeds 0..{z['seeds'] - 1}, held-out: {z['eval_problems']} "
        f"{proto.get('eval_split', 'validation')} problems x {k} samples (T = {proto.get('eval_temperature')}, "
        f"top-p {proto.get('eval_top_p')}), evaluated every {z['eval_every']} updates")
    own = {r: cfg.sizes_for(r) for r in summary if cfg.sizes_for(r) != z}
    if own and not cfg.quick:
        sizes += "; " + "; ".join(f"regime `{r}`: {o['steps']} updates, seeds 0..{o['seeds'] - 1}, evaluated every "
                                  f"{o['eval_every']} updates" for r, o in own.items())
    batch = {r: _protocol([j for j in jobs if j.regime == r]).get("prompts_per_step") for r in summary}
    if len(set(batch.values())) > 1:  # regimes train on different batches: say each
        proto = {**proto, "prompts_per_step": ", ".join(f"{b} (`{r}`)" for r, b in batch.items())}
    lines = [
        f"# Comparison report: suite `{cfg.suite}`",
        "",
        f"Setup: {sizes}. Batch per update: {proto.get('prompts_per_step')} start states x {proto.get('group_size')} samples "
        f"(each method's config in `configs/`); reference recipe: lr {proto.get('lr')}, zero-variance filter "
        f"{'on' if proto.get('filter_zero_variance') else 'off'}, {proto.get('mini_batches')} mini-batch(es) per step, "
        f"clip [{proto.get('eps_low')}, {proto.get('eps_high')}]. avg@1 is the mean success over the k held-out samples; "
        "pass@k is the unbiased estimator. Intervals are 95% Student-t over seeds; Δ is paired by seed (same prompt order "
        "and evaluation seed); p is the paired t-test, Holm-adjusted over the contrast family in parentheses; "
        "'better'/'worse' means Holm-adjusted p < 0.05.",
        f"Machine: {platform.machine()}, {platform.system()}, torch {torch.__version__}, one torch thread per run"
        + ((f"; training wall time of this invocation {train_wall_s / 60:.1f} min." if train_wall_s else ".") if timed
           else f"; wall-clock numbers (step and plug-in seconds, wall time) in `{TIMINGS_FILE}` beside this report "
                "(not committed: they differ on every run)."),
        "",
    ]
    missing_keys = [f"{j.regime}/{j.method}/seed{j.seed}" for j in missing]
    if missing_keys:
        lines += [f"**Incomplete: {len(missing_keys)} planned run(s) have no finished result (failed or not run) and "
                  f"are not in the tables below:** {', '.join(f'`{m}`' for m in missing_keys)}.", ""]
    records_all = {}
    for regime in suite.regimes:
        if regime.name not in summary or not summary[regime.name]["methods"]:
            continue
        rs = cfg.sizes_for(regime.name)  # the samples actually drawn, not a number written in the description
        lines += [f"## Regime `{regime.name}`: {regime.description}; held-out evaluation as run: "
                  f"{rs['eval_problems']} problems x {rs['eval_k']} samples", ""]
        tab, recs = _table(cfg, regime.name, summary[regime.name], suite, timed)
        records_all[regime.name] = recs
        lines += tab + [""]
        better = [r["label"] for r in recs if r["verdict"] == "better"]
        worse = [r["label"] for r in recs if r["verdict"] == "worse"]
        same = [r["label"] for r in recs if r["verdict"] == "not detected"]
        lines.append("Plainly: " + " ".join(filter(None, [
            f"Better than {ref_name(suite)} on avg@1 (Holm-adjusted p < 0.05): {' / '.join(better)}." if better else
            f"No method beats {ref_name(suite)} on avg@1 at Holm-adjusted p < 0.05.",
            f"Worse than {ref_name(suite)}: {' / '.join(worse)}." if worse else "",
            f"No difference detected at this budget: {' / '.join(same)}." if same else "",
        ])))
        base = summary[regime.name]["base"]
        if base and recs:
            b = float(np.mean([v["avg"] for v in base.values()]))
            above = [r["label"] for r in recs if np.isfinite(r["avg"][1]) and r["avg"][1] > b]
            below = [r["label"] for r in recs if np.isfinite(r["avg"][2]) and r["avg"][2] < b]
            lines.append(
                f"Against the starting checkpoint ({100 * b:.1f}%): seed CI entirely above it: "
                + (" / ".join(above) if above else "none") + "; entirely below it: " + (" / ".join(below) if below else "none") + "."
            )
        claims = {m.name: m.token_claim for m in suite.methods if m.token_claim}
        for r in recs:
            if r["method"] in claims:
                lines.append(f"{r['label']} generates {r['tokens_ratio']:.2f}x {ref_name(suite)}'s new tokens per update in "
                             f"this regime ({claims[r['method']]}).")
        lines += [""] + _power_lines(recs, suite)
    if timed:
        lines += _overhead_lines(records_all, suite)
    sections = load_sections()
    for name in suite.sections:
        lines += sections.lookup(name, "report section")(cfg, jobs, summary, suite, out)
    figs = suite_figures(out, summary, suite) if any(v["methods"] for v in summary.values()) else []
    for f in figs:
        lines.append(f"![{f}]({f})")
    text = "\n".join(lines) + "\n"
    write_text(out / "report.md", text)

    doc = {"suite": cfg.suite, "steps": z["steps"], "seeds": list(range(z["seeds"])), "k": k, "reference": suite.reference,
           "sizes_by_regime": {r: cfg.sizes_for(r) for r in summary},
           "min_effect": suite.min_effect, "protocol": proto, "methods": _contract(cfg, suite, records_all, summary),
           "regimes": summary, "records": records_all}
    if missing_keys:
        doc["missing"] = missing_keys
    doc = json_safe(doc)
    if not timed:
        doc, timings = split_fields(doc, TIMING_FIELDS, ids=("name", "regime", "method"))
        write_json(out / TIMINGS_FILE, {"train_wall_s": train_wall_s, **(timings or {})})
    write_json(out / "summary.json", doc)
    return out / "report.md"
