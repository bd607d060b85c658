"""Sections any suite may use: the prompt pool, held-out evaluation metrics, ablation pairs, a regime sweep, and
the renderer of paper tables (one Holm family per table) that the Replay and ExTra sections share."""

from __future__ import annotations

import math
import shutil
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from llm_harness.compare.render import arm_label, fmt_diff, fmt_p, fmt_pct, forest, forest_width, ref_name, write_csv
from llm_harness.compare.runs import final_evals, metric_key
from llm_harness.compare.sections import register_section
from llm_harness.compare.stats import finite, seed_interval, table_rows
from llm_harness.compare.suite import TableSpec
from theory.metrics.paired import holm, paired_contrast, paired_power, seeds_for_power
from vsr_util.atomic import read_json, save_figure

__all__ = ["ablation_rows", "aes_seed", "tables_section"]


@register_section("pool")
def pool_section(cfg: Any, jobs: Sequence[Any], summary: dict, suite: Any, out: Path) -> list[str]:
    path = cfg.pool_path
    if path is None or not Path(path).is_file():
        return ["## Prompt pool", "", "(no pool file found: run the suite to select it)", ""]
    doc = read_json(Path(path))
    if Path(path).resolve() != (out / "pool.json").resolve():
        shutil.copyfile(path, out / "pool.json")
    sel, st = doc["selection"], doc["stats"]
    hist = st["success_histogram"]
    steps, b = cfg.sizes["steps"], next((j.mapping["rollout"]["prompts_per_step"] for j in jobs if j.method != "base"), 8)
    return [
        "## Prompt pool", "",
        f"Selected as the VSR paper selects its hard subset (`pool.json` beside this report): {st['candidates']} problems of "
        f"the training split (seeded permutation, seed {sel['seed']}) were each sampled {sel['samples']} times by the starting "
        f"model `{doc['model']}` at T = {sel['temperature']}; {st['qualifying']} had at most {sel['max_successes']} success(es), "
        f"and the first {st['kept']} of them form the pool. Mean success rate: {100 * st['candidate_success_rate']:.1f}% over "
        f"the candidates, {100 * st['pool_success_rate']:.1f}% over the pool; {100 * st['pool_unsolved_frac']:.0f}% of the pool "
        f"was never solved in {sel['samples']} samples. With {b} prompts per update over {steps} updates, a pool prompt is "
        f"drawn about {steps * b / max(1, st['kept']):.1f} times per run (fewer when VSR claims slots).", "",
        "Successes per candidate (of " + str(sel["samples"]) + "): " + ", ".join(f"{i}: {h}" for i, h in enumerate(hist) if h), "",
    ]


def tables_section(cfg: Any, jobs: Sequence[Any], suite: Any, out: Path, specs: Sequence[TableSpec], title: str,
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
        finals = final_evals(jobs, regime, k)
        if suite.reference not in finals:
            continue
        present = [t for t in specs if sum(a in finals for a in t.arms) >= 2]  # one shared row is not the table
        if not present:
            continue
        lines += [f"## {title}, regime `{regime}`", "",
                  "Each table is its own Holm family: every arm is contrasted with "
                  f"{ref_name(suite)} by a paired t-test over seeds, Holm-adjusted over the "
                  f"arms of that table (separately per metric). Power: at a true {100 * suite.min_effect:.0f}-point "
                  "difference, the measured spread and Holm's first-step level.", ""]
        width = forest_width([arm_label(suite, a) for t in present for a in t.arms])
        fig, axes = plt.subplots(1, len(present), figsize=(width * len(present),
                                                           0.5 * max(len(t.arms) for t in present) + 2.2), squeeze=False)
        csv_rows = []
        for ti, t in enumerate(present):
            per_metric = {mname: table_rows(finals, t.arms, suite.reference, metric_key(mname, k), suite.min_effect)
                          for mname, _ in metrics}
            head = "| arm | seeds | " + " | ".join(
                f"{mlab} % | Δ {mlab} (pp) [CI] | p (Holm) | power" for _, mlab in metrics)
            xc = (extra_cols or {}).get(t.name)
            extra_head = xc.header if xc is not None else []
            lines += [f"### {t.caption}", "", head + "".join(f" | {h}" for h in extra_head) + " |",
                      "|" + "---|" * (2 + 4 * len(metrics) + len(extra_head))]
            ref_vals = [seed_interval([v.get(metric_key(mn, k), math.nan) for v in finals[suite.reference].values()])
                        for mn, _ in metrics]
            lines.append(f"| {arm_label(suite, suite.reference)} | {len(finals[suite.reference])} | "
                         + " | ".join(f"{fmt_pct(rv)} | | | " for rv in ref_vals)
                         + "".join(f" | {c}" for c in (xc.cells(jobs, regime, suite.reference) if xc else [])) + " |")
            first = per_metric[metrics[0][0]]
            for i, r in enumerate(first):
                cells = []
                for mname, _ in metrics:
                    rr = next((x for x in per_metric[mname] if x["arm"] == r["arm"]), None)
                    if rr is None:
                        cells.append("– | – | – | –")
                        continue
                    pw = f"{rr['power']:.2f}" if finite(rr["power"]) else "–"
                    cells.append(f"{fmt_pct(rr['value'])} | {fmt_diff(rr['diff'])} | {fmt_p(rr['p'])} ({fmt_p(rr['p_holm'])}) | {pw}")
                    csv_rows.append([t.name, r["arm"], mname, rr["value"][0], rr["diff"][0], rr["diff"][1], rr["diff"][2],
                                     rr["p"], rr["p_holm"], rr["n_paired"]])
                lines.append(f"| {arm_label(suite, r['arm'])} | {r['n']} | " + " | ".join(cells)
                             + "".join(f" | {c}" for c in (xc.cells(jobs, regime, r["arm"]) if xc else [])) + " |")
            missing = [a for a in t.arms if a not in finals]
            lines += ["", f"Not run in this suite: {', '.join(missing)}.", ""] if missing else [""]
            forest(axes[0, ti], [arm_label(suite, r["arm"]).replace("\\|", "|") for r in first], [r["diff"] for r in first],
                    t.caption.split(":")[0], f"Δ {metrics[0][1]} vs {ref_name(suite)} (pp), 95 % CI")
        fig.tight_layout()
        name = f"{stem}_{regime}"
        save_figure(fig, out, name)
        plt.close(fig)
        write_csv(out / f"{name}.csv", ["table", "arm", "metric", "mean", "diff", "diff_lo", "diff_hi", "p", "p_holm", "n_paired"], csv_rows)
        lines += [f"![{name}.png]({name}.png) (numbers: `{name}.csv`)", ""]
    return lines


@register_section("family_passk")
def family_passk_section(cfg: Any, jobs: Sequence[Any], summary: dict, suite: Any, out: Path) -> list[str]:
    """The suite's Holm family again on pass@k (k: the evaluation's samples per problem), its own Holm family, with
    power at the suite's effect size: a suite that reports pass@k beside avg@1 states what its contrasts can detect
    there (pass@k varies more across seeds, so its power is lower)."""
    k = cfg.sizes["eval_k"]
    spec = TableSpec("family_passk", f"pass@{k} over the avg@1 table's Holm family", suite.family())
    return tables_section(cfg, jobs, suite, out, (spec,), f"Contrasts on pass@{k}", (("pass", f"pass@{k}"),),
                          stem="family_passk")


def aes_seed(ev: Mapping[str, float], ref: Mapping[str, float], k: int) -> tuple[float, float, float]:
    """(ΔL, ΔAcc, AES) of one run's final evaluation against the reference's (same seed); nans when undefined."""
    from theory.metrics import aes_terms

    a, l_ = ev.get(f"val_avg_at_{k}"), ev.get("val_length_mean")
    ra, rl = ref.get(f"val_avg_at_{k}"), ref.get("val_length_mean")
    if not all(finite(x) for x in (a, l_, ra, rl)) or ra <= 0 or rl <= 0:
        return math.nan, math.nan, math.nan
    t = aes_terms(l_, a, rl, ra)
    return float(t.delta_length), float(t.delta_acc), float(t.score)


#: (val_* key stem, column label, scale) of the evaluation-metrics section
_EVAL_COLUMNS = (("length_mean", "L (tokens)", 1.0), ("length_correct", "L (correct)", 1.0), ("length_incorrect", "L (incorrect)", 1.0),
                 ("distinct_4", "Distinct-4", 1.0), ("self_bleu_4", "Self-BLEU-4", 1.0), ("logdet", "LogDet", 1.0))


@register_section("eval_metrics")
def eval_metrics_section(cfg: Any, jobs: Sequence[Any], summary: dict, suite: Any, out: Path) -> list[str]:
    """Length by correctness, diversity and AES against the reference per arm (final evaluation; mean [CI] over seeds)."""
    k = cfg.sizes["eval_k"]
    lines: list[str] = []
    for regime in sorted({j.regime for j in jobs}):
        finals = final_evals(jobs, regime, k)
        arms = [m.name for m in suite.methods if m.name in finals]
        if not arms:
            continue
        ref = finals.get(suite.reference, {})
        have = [c for c in _EVAL_COLUMNS if any(finite(v.get(f"val_{c[0]}")) for a in arms for v in finals[a].values())]
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
                cells.append("–" if not finite(iv[0]) else (f"{iv[0]:.3g}" + (f" [{iv[1]:.3g}, {iv[2]:.3g}]" if finite(iv[1]) else "")))
                csv_rows.append([a, key, iv[0], iv[1], iv[2]])
            per = [aes_seed(vals[s], ref[s], k)[2] for s in sorted(set(vals) & set(ref))]
            ae = seed_interval(per) if a != suite.reference else (0.0, math.nan, math.nan)
            csv_rows.append([a, "aes", ae[0], ae[1], ae[2]])
            base = finals.get("base", {})
            ab = seed_interval([aes_seed(vals[s], base[s], k)[2] for s in sorted(set(vals) & set(base))])
            csv_rows.append([a, "aes_vs_start", ab[0], ab[1], ab[2]])
            acc = seed_interval([v.get(f"val_avg_at_{k}", math.nan) for v in vals.values()])
            lines.append(f"| {arm_label(suite, a)} | {len(vals)} | {fmt_pct(acc)} | " + " | ".join(cells) + " | "
                         + ("reference" if a == suite.reference else "–" if not finite(ae[0]) else
                            f"{ae[0]:+.3f}" + (f" [{ae[1]:+.3f}, {ae[2]:+.3f}]" if finite(ae[1]) else "")) + " | "
                         + ("–" if not finite(ab[0]) else f"{ab[0]:+.3f}" + (f" [{ab[1]:+.3f}, {ab[2]:+.3f}]" if finite(ab[1]) else ""))
                         + " |")
        name = f"eval_metrics_{regime}"
        write_csv(out / f"{name}.csv", ["arm", "metric", "mean", "ci_low", "ci_high"], csv_rows)
        lines += ["", f"(numbers: `{name}.csv`)", ""]
    return lines


def ablation_rows(summary: dict, suite: Any, min_effect: float) -> dict[str, list[dict[str, Any]]]:
    """Per regime, each ``(method, ablation)`` pair of ``suite.ablations`` with both arms finished: the paired
    difference method − ablation of held-out avg@1 over their common seeds, its Holm-adjusted p (one family per
    regime) and the power for a true ``min_effect`` at the measured spread, at Holm's first-step level."""
    out: dict[str, list[dict[str, Any]]] = {}
    for regime, data in summary.items():
        rows = []
        for a, b in suite.ablations:
            sa, sb = data["methods"].get(a, {}).get("seeds", {}), data["methods"].get(b, {}).get("seeds", {})
            seeds = sorted(set(sa) & set(sb))
            diffs = [sa[k]["avg"] - sb[k]["avg"] for k in seeds
                     if sa[k].get("avg") is not None and sb[k].get("avg") is not None]
            if len(diffs) >= 2:
                rows.append({"method": a, "ablation": b, "contrast": paired_contrast(diffs)})
        for r, p in zip(rows, holm([r["contrast"].p for r in rows])):
            c, m = r["contrast"], max(1, len(rows))
            r.update(p_holm=p, power=paired_power(min_effect, c.sd, c.n, 0.05 / m),
                     seeds_for_80=seeds_for_power(min_effect, c.sd, 0.8, 0.05 / m))
        if rows:
            out[regime] = rows
    return out


@register_section("ablations")
def ablations_section(cfg: Any, jobs: Sequence[Any], summary: dict, suite: Any, out: Path) -> list[str]:
    """Does each ablated component matter? The method against each of its ablations, paired by seed, Holm within
    each regime (:func:`ablation_rows`)."""
    labels = {m.name: m.label for m in suite.methods}
    tables = ablation_rows(summary, suite, suite.min_effect)
    if not tables:
        return []
    pp = 100.0
    lines = ["## Ablations: the method against each ablation", "",
             "Δ = method − ablation in held-out avg@1, paired by seed over the seeds both finished; p is the paired "
             "t-test, Holm-adjusted within the regime's ablation family; a positive Δ means the removed component helps. "
             f"Power is for a true {pp * suite.min_effect:g}-point difference at the measured spread, at Holm's first-step "
             "level.", ""]
    for regime, rows in tables.items():
        lines += [f"### {regime}", "",
                  f"Holm family: the {len(rows)} pair(s) with finished runs, of {len(suite.ablations)} planned"
                  + (" (an unfinished pair joins the family when it finishes, which raises the adjusted p-values)."
                     if len(rows) < len(suite.ablations) else "."), "",
                  "| method | ablation | seeds | Δ avg@1 (pp) [95% CI] | p (Holm) | verdict | sd of paired Δ (pp) | power | "
                  "seeds for 80 % |", "|---|---|---|---|---|---|---|---|---|"]
        for r in rows:
            c = r["contrast"]
            verdict = ("not detected" if not (r["p_holm"] < 0.05) else
                       "the component helps" if c.mean > 0 else "the component hurts")
            lines.append(f"| {labels[r['method']]} | {labels[r['ablation']]} | {c.n} | {pp * c.mean:+.1f} "
                         f"[{pp * c.ci_low:+.1f}, {pp * c.ci_high:+.1f}] | {c.p:.3f} ({r['p_holm']:.3f}) | {verdict} | "
                         f"{pp * c.sd:.2f} | {r['power']:.2f} | {r['seeds_for_80']} |")
        lines.append("")
    return lines


@register_section("sweep")
def sweep_section(cfg: Any, jobs: Sequence[Any], summary: dict, suite: Any, out: Path) -> list[str]:
    """One table over the suite's regimes (e.g. learning rates): every arm's held-out avg@1 at each
    evaluation, the starting checkpoint's, and whether the arm ever fell below the start by more than
    two binomial standard errors of the evaluation (``unstable``)."""
    k = cfg.sizes["eval_k"]
    lines = ["## The sweep at a glance", "",
             "Held-out avg@1 (%) at each evaluation (mean over seeds). 'unstable': some evaluation fell more than two "
             f"standard errors (binomial, over {cfg.sizes['eval_problems']} problems x {k} samples, a lower bound on the "
             "true error) below the starting checkpoint.", "",
             "| regime | method | start | " + " | ".join(f"update {s}" for s in range(cfg.sizes["eval_every"], cfg.sizes["steps"] + 1,
                                                                    cfg.sizes["eval_every"])) + " | stable? |",
             "|---|---|---|" + "---|" * len(range(cfg.sizes["eval_every"], cfg.sizes["steps"] + 1, cfg.sizes["eval_every"])) + "---|"]
    n = cfg.sizes["eval_problems"] * k
    for regime in suite.regimes:
        reg = summary.get(regime.name)
        if not reg:
            continue
        base = [v["avg"] for v in reg["base"].values() if v.get("avg") is not None]
        b = float(np.mean(base)) if base else float("nan")
        se = float(np.sqrt(b * (1 - b) / n)) if np.isfinite(b) else float("nan")
        for m in suite.methods:
            if m.name not in reg["methods"]:
                continue
            seeds = reg["methods"][m.name]["seeds"].values()
            steps = sorted({c[0] for s in seeds for c in s["curve"]})
            vals = [float(np.mean([c[1] for s in seeds for c in s["curve"] if c[0] == st])) for st in steps]
            stable = "unstable" if any(v < b - 2 * se for v in vals) else "stable"
            lines.append(f"| {regime.name} | {m.name} | {100 * b:.1f} | " + " | ".join(f"{100 * v:.1f}" for v in vals) + f" | {stable} |")
    return lines + [""]
