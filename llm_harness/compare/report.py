"""The comparison report: tables with seed confidence intervals, token accounting, overheads, curves.

For every (regime, method) the seeds' final held-out avg@1 (the mean over the ``k`` samples) and
pass@k are summarised by their mean and a 95% Student-t interval over seeds; the difference to the
reference method (GRPO) is taken seed by seed (same seed → same prompts order and evaluation
seed) as a paired t-test (:mod:`.stats`), Holm-adjusted over the suite's contrast family, with the
power the seed count had against the suite's ``min_effect`` at the measured spread. The verdict is
"better"/"worse" when the Holm-adjusted p is below 0.05. Per-update means come from the training
metrics: new generated tokens (plug-in Monte-Carlo tokens included), prompt instances, mixed-group
fractions (fresh and replayed-prefix groups), training reward, step and plug-in wall time.

``summary.json`` carries ``suite``, ``steps``, ``seeds`` (list), ``k``, ``protocol`` and ``methods``:
one object per (regime, method) with ``name``, ``regime``, ``final_avg``, ``ci_low``, ``ci_high``,
``delta_vs_grpo``, ``delta_ci_low``, ``delta_ci_high`` (vs the suite's reference), ``p``, ``p_holm``,
``power``, ``seeds_for_80``, ``new_tokens_per_update`` and more; ``regimes`` holds every per-seed
number behind them. Suites add report sections through :data:`SECTIONS`.
"""

from __future__ import annotations

import json
import math
import platform
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from llm_harness.compare.section_base import (  # noqa: F401  (re-exported: report's public helpers before)
    SECTIONS,
    _mean,
    _rows,
    last_row_value,
    mixed_key,
    moving_mean,
    register_section,
    seed_interval,
)
from llm_harness.compare.stats import holm, paired_contrast, paired_power, seeds_for_power
from llm_harness.compare.suite import SUITES
from vsr.atomic import json_safe, save_figure, write_json, write_text

__all__ = ["SECTIONS", "register_section", "seed_interval", "summarise", "write_report"]

def summarise(cfg: Any, jobs: Sequence[Any]) -> dict[str, Any]:
    """Per regime: the base evaluation and, per method, seed-level finals and per-update means."""
    k = cfg.sizes["eval_k"]
    avg_key, pass_key = f"val_avg_at_{k}", f"val_pass_at_{k}"
    out: dict[str, Any] = {}
    for j in jobs:
        reg = out.setdefault(j.regime, {"base": {}, "methods": {}})
        d = Path(j.run_dir)
        done = d / "done.json"
        if not done.is_file():
            continue
        info = json.loads(done.read_text())
        if j.method == "base":
            v = info.get("validation", {})
            reg["base"][j.seed] = {"avg": v.get(avg_key), "pass": v.get(pass_key)}
            continue
        rows = _rows(d)
        if not rows or info.get("rc") != 0:
            continue
        evals = [(r["step"] + 1, r[avg_key], r.get(pass_key)) for r in rows if avg_key in r]
        last = evals[-1] if evals else (None, float("nan"), float("nan"))
        m = reg["methods"].setdefault(j.method, {"seeds": {}})
        m["seeds"][j.seed] = {
            "avg": last[1], "pass": last[2], "curve": evals, "wall_s": info.get("wall_s"),
            "tokens": _mean(rows, "gen_new_tokens"), "instances": _mean(rows, "prompt_instances"),
            "mixed_fresh": _mean(rows, mixed_key(rows)), "mixed_prefix": _mean(rows, mixed_key(rows, "replayed_prefix")),
            "mixed_guided": _mean(rows, "mixed_frac_guided"), "step_s": _mean(rows, "time_step_s"),
            "plugin_s": _mean(rows, "time_plugins_s"), "trained_samples": _mean(rows, "trained_samples"),
            "replayed_groups": _mean(rows, "groups_replayed"), "reward": _mean(rows, "reward_mean"),
            "length": last_row_value(rows, "val_length_mean"),
        }
    return out


def _fmt(m: float, lo: float, hi: float, pct: bool = True) -> str:
    if not np.isfinite(m):
        return "–"
    s = 100.0 if pct else 1.0
    if not np.isfinite(lo):
        return f"{m * s:.1f}"
    return f"{m * s:.1f} [{lo * s:.1f}, {hi * s:.1f}]"


def _ref(suite: Any) -> str:
    """Short name of the reference arm in prose: its label before any parenthesis ("GRPO")."""
    m = next((m for m in suite.methods if m.name == suite.reference), None)
    return m.label.split(" (")[0] if m is not None else suite.reference


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
            "mixed_fresh": _mean(list(seeds.values()), "mixed_fresh"),
            "mixed_prefix": float(np.mean(mp)) if mp else float("nan"),
            "reward": _mean(list(seeds.values()), "reward"), "step_s": step_s, "plugin_s": plug_s,
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


def _p_txt(p: float) -> str:
    if not np.isfinite(p):
        return "–"
    return f"{p:.3f}" if p >= 0.001 else f"{p:.0e}"


def _table(cfg: Any, regime: str, reg: dict, suite: Any) -> tuple[list[str], list[dict[str, Any]]]:
    k = cfg.sizes["eval_k"]
    lines = [
        f"| method | avg@1 % [95% CI] | pass@{k} % [95% CI] | Δ avg@1 vs {_ref(suite)} (pp) [CI] | p (Holm) | verdict "
        f"| power at {100 * suite.min_effect:.0f} pp | new tokens / update | × {_ref(suite)} | prompt instances / update "
        "| mixed groups: fresh / prefix | train reward | step s | plug-in s / step |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    base = reg["base"]
    if base:
        b_avg = seed_interval([v["avg"] for v in base.values()])
        b_pass = seed_interval([v["pass"] for v in base.values()])
        lines.append(f"| starting checkpoint (no training) | {_fmt(*b_avg)} | {_fmt(*b_pass)} | | | | | | | | | | | |")
    records = _records(cfg, reg, suite)
    for rec in records:
        is_ref = rec["method"] == suite.reference
        d_txt = "" if is_ref else _fmt(*rec["diff_vs_ref"])
        p_txt = "" if is_ref else (f"{_p_txt(rec['p'])} ({_p_txt(rec['p_holm'])})" if rec["in_family"] else _p_txt(rec["p"]))
        pw = "" if is_ref or not np.isfinite(rec["power_holm"]) else f"{rec['power_holm']:.2f}"
        label = rec["label"].replace("|", "\\|")
        mp_txt = f"{rec['mixed_prefix']:.2f}" if np.isfinite(rec["mixed_prefix"]) else "–"
        lines.append(
            f"| {label} ({rec['n_seeds']} seeds) | {_fmt(*rec['avg'])} | {_fmt(*rec['pass'])} | {d_txt} | {p_txt} | "
            f"{rec['verdict']} | {pw} | {rec['tokens']:.0f} | {rec['tokens_ratio']:.2f} | {rec['instances']:.1f} | "
            f"{rec['mixed_fresh']:.2f} / {mp_txt} | {rec['reward']:.3f} | {rec['step_s']:.2f} | {rec['plugin_s']:.3f} |"
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
        lines.append(f"| {r['method']} vs {_ref(suite)} | {100 * sd:.2f} | {r['n_seeds']} | "
                     f"{r['power']:.2f} | {r['power_holm']:.2f} | {r['seeds_for_80'] if r['seeds_for_80'] else '–'} |"
                     if np.isfinite(sd) else f"| {r['method']} vs {_ref(suite)} | – | {r['n_seeds']} | – | – | – |")
    sds = [r["diff_sd"] for r in fam if np.isfinite(r["diff_sd"])]
    if sds:
        pooled = float(np.sqrt(np.mean(np.square(sds))))
        n = min(r["n_seeds"] for r in fam)
        lines += ["", f"Pooled over the family: sd {100 * pooled:.2f} pp, power {paired_power(suite.min_effect, pooled, n, 0.05 / m):.2f} "
                      f"with {n} seeds; {seeds_for_power(suite.min_effect, pooled, 0.8, 0.05 / m)} seeds would give 80 %."]
    return lines + [""]


def _figures(out: Path, summary: dict, suite: Any) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = []
    regimes = list(summary)
    fig, axes = plt.subplots(len(regimes), 2, figsize=(13, 4.2 * len(regimes)), squeeze=False)
    for i, r in enumerate(regimes):
        ms = [m for m in suite.methods if m.name in summary[r]["methods"]]
        for jcol, key in enumerate(("avg", "pass")):
            ax = axes[i, jcol]
            vals = [seed_interval([s[key] for s in summary[r]["methods"][m.name]["seeds"].values()]) for m in ms]
            y = np.arange(len(ms))
            mean = np.array([v[0] for v in vals]) * 100
            err = np.array([[v[0] - v[1], v[2] - v[0]] if np.isfinite(v[1]) else [0, 0] for v in vals]).T * 100
            colors = [{"baseline": "0.55", "vsr": "C0", "replay": "C2", "extra": "C3", "composition": "C4"}.get(m.family, "C5") for m in ms]
            ax.barh(y, mean, xerr=err, color=colors, capsize=3)
            base = [v[key] for v in summary[r]["base"].values() if v.get(key) is not None]
            if base:
                ax.axvline(np.mean(base) * 100, color="k", ls="--", lw=1, label="starting checkpoint")
                ax.legend(loc="lower right", fontsize=8)
            ax.set_yticks(y, [m.label for m in ms], fontsize=8)
            ax.invert_yaxis()
            ax.set_xlabel(("held-out avg@1 (%)" if key == "avg" else "held-out pass@k (%)") + " — mean and 95% CI over seeds")
            ax.set_title(f"{r} regime", fontsize=10)
    fig.tight_layout()
    names.append(save_figure(fig, out, "compare_final")[0].name)

    fig, axes = plt.subplots(1, len(regimes), figsize=(6.5 * len(regimes), 4.5), squeeze=False)
    for i, r in enumerate(regimes):
        ax = axes[0, i]
        base = [v["avg"] for v in summary[r]["base"].values() if v.get("avg") is not None]
        for m in suite.methods:
            if m.name not in summary[r]["methods"]:
                continue
            seeds = summary[r]["methods"][m.name]["seeds"].values()
            steps = sorted({c[0] for s in seeds for c in s["curve"]})
            ys = [np.mean([c[1] for s in seeds for c in s["curve"] if c[0] == st]) * 100 for st in steps]
            if base:
                steps, ys = [0] + steps, [np.mean(base) * 100] + ys
            ax.plot(steps, ys, marker="o", ms=3, lw=1.2, label=m.label,
                    ls="-" if m.family != "baseline" else "--")
        ax.set_xlabel("update")
        ax.set_ylabel("held-out avg@1 (%) — mean over seeds")
        ax.set_title(f"{r} regime", fontsize=10)
    axes[0, -1].legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
    fig.tight_layout()
    names.append(save_figure(fig, out, "compare_curves")[0].name)
    return names


def _protocol(jobs: Sequence[Any]) -> dict[str, Any]:
    """Evaluation and training settings shared by the suite's jobs (from the reference job's mapping)."""
    from llm_harness.trainer.config import TrainConfig
    from vsr.config_io import from_dict

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


def write_report(cfg: Any, jobs: Sequence[Any], *, train_wall_s: float | None = None,
                 missing: Sequence[Any] = ()) -> Path:
    """Write ``report.md``, ``summary.json`` and the figures into ``cfg.report_dir`` from ``jobs``, the finished
    runs (:func:`llm_harness.compare.runner.run` passes those whose ``done.json`` matches); returns the report path.
    ``missing``: planned runs without a finished result (failed or not run), listed at the top of the report and
    in ``summary.json``."""
    import torch

    suite = SUITES[cfg.suite]
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
        + (f"; training wall time of this invocation {train_wall_s / 60:.1f} min." if train_wall_s else "."),
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
        lines += [f"## Regime `{regime.name}`: {regime.description}", ""]
        tab, recs = _table(cfg, regime.name, summary[regime.name], suite)
        records_all[regime.name] = recs
        lines += tab + [""]
        better = [r["label"] for r in recs if r["verdict"] == "better"]
        worse = [r["label"] for r in recs if r["verdict"] == "worse"]
        same = [r["label"] for r in recs if r["verdict"] == "not detected"]
        lines.append("Plainly: " + " ".join(filter(None, [
            f"Better than {_ref(suite)} on avg@1 (Holm-adjusted p < 0.05): {' / '.join(better)}." if better else
            f"No method beats {_ref(suite)} on avg@1 at Holm-adjusted p < 0.05.",
            f"Worse than {_ref(suite)}: {' / '.join(worse)}." if worse else "",
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
        vsr = next((r for r in recs if r["method"] == "vsr"), None)
        if vsr is not None:
            lines.append(f"VSR generates {vsr['tokens_ratio']:.2f}x {_ref(suite)}'s new tokens per update in this regime "
                         "(paper: 0.48x at 1.5B agentic).")
        lines += [""] + _power_lines(recs, suite)
    lines += [f"## Per-step plug-in overhead vs {_ref(suite)}", "",
              "Wall time spent inside plug-in calls per step (claim/refill/shape/keep/compose/after_step, including an "
              "oracle's Monte-Carlo generation and ExTra's embedding and entropy scoring), minus the reference's (its "
              "fresh-prompt source), and the whole step time relative to the reference's (which also reflects different "
              "amounts of generation). Wall time per arm is the sum over its seeds' runs.", "",
              f"| regime | method | plug-in s / step over {_ref(suite)} | step time x {_ref(suite)} | wall min (all seeds) |",
              "|---|---|---|---|---|"]
    for reg, recs in records_all.items():
        for r in recs:
            lines.append(f"| {reg} | {r['label'].replace('|', chr(92) + '|')} | "
                         + ("" if r["method"] == suite.reference else f"{r['plugin_overhead_s']:+.3f}")
                         + f" | {r['step_ratio']:.2f} | {r['wall_s'] / 60:.1f} |")
    lines.append("")
    import llm_harness.compare.sections  # noqa: F401  (registers the built-in sections)

    for name in suite.sections:
        lines += SECTIONS.lookup(name, "report section")(cfg, jobs, summary, suite, out)
    figs = _figures(out, summary, suite) if any(v["methods"] for v in summary.values()) else []
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
    write_json(out / "summary.json", json_safe(doc))
    return out / "report.md"
