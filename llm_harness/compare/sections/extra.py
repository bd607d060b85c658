"""The ExTra paper's sections: Tables 1, 5 and 6 (``extra_tables``: pass@k and pass@1 contrasts, one Holm family per
table and metric), pass@k for every k (``passk``), training dynamics (``extra_dynamics``, Fig. 2) and prompt
efficiency (``prompt_efficiency``, Fig. 3). The per-update figures draw ``Suite.figure_arms`` (default: the first six)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from llm_harness.compare.render import arm_label, moving_mean, quiet, ref_name, write_csv
from llm_harness.compare.runs import final_evals, read_rows, step_series
from llm_harness.compare.sections import register_section
from llm_harness.compare.sections.common import tables_section
from llm_harness.compare.stats import finite, seed_interval
from llm_harness.compare.suites_evidence import EXTRA_TABLES
from theory.metrics.paired import paired_contrast
from vsr_util.atomic import save_figure

@register_section("extra_tables")
def extra_tables_section(cfg: Any, jobs: Sequence[Any], summary: dict, suite: Any, out: Path) -> list[str]:
    """ExTra Tables 1, 5 and 6: pass@k (k = 16, the headline) and pass@1 contrasts with GRPO, Holm within each table and metric."""
    k = cfg.sizes["eval_k"]
    return tables_section(cfg, jobs, suite, out, EXTRA_TABLES, "The ExTra paper's tables on the test bed",
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
        finals = final_evals(jobs, regime, k)
        arms = [m.name for m in suite.methods if m.name in finals]
        ks = _pass_ks(finals)
        if not arms or not ks:
            continue
        ref = finals.get(suite.reference, {})
        lines += [f"## pass@k for k = 1..{k}, regime `{regime}`", "",
                  f"Unbiased pass@j from the {k} held-out samples per problem (final evaluation), mean over seeds; the "
                  f"figure shows each arm's paired difference to {ref_name(suite)} with its 95% "
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
                                     if finite(finals[a][s].get(key)) and finite(ref[s].get(key))])
                means.append(m)
                csv_rows.append([a, j, m, c.mean, c.ci_low, c.ci_high])
            lines.append(f"| {arm_label(suite, a)} | " + " | ".join("–" if not finite(m) else f"{100 * m:.1f}" for m in means) + " |")
            if a in shown:
                ax[0].plot(ks, 100 * np.array(means), marker="o", ms=3, label=arm_label(suite, a).replace("\\|", "|"),
                           ls="--" if a == suite.reference else "-")
                if a != suite.reference and ref:
                    d = np.array([[r[3], r[4], r[5]] for r in csv_rows if r[0] == a], dtype=np.float64) * 100
                    ax[1].plot(ks, d[:, 0], marker="o", ms=3, label=arm_label(suite, a).replace("\\|", "|"), color=f"C{ai}")
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
        write_csv(out / f"{name}.csv", ["arm", "k", "pass_at_k", "diff_vs_ref", "diff_lo", "diff_hi"], csv_rows)
        lines += ["", f"![{name}.png]({name}.png) (numbers: `{name}.csv`; first 7 arms drawn)", ""]
    return lines


#: per-step metrics of ExTra Fig. 2: the trainer's policy entropy and the plug-in's novelty bonus
_DYNAMICS = (("entropy", "policy entropy of the trained tokens (nats)"),
             ("extra_novelty_bonus_mean_correct", "mean novelty bonus of correct samples"),
             ("extra_novelty_bonus_pos_frac", "fraction of samples with a positive bonus"))


def _figure_arms(suite: Any) -> list[str]:
    """The arms drawn in the per-update figures: ``Suite.figure_arms`` in report order, else the first six."""
    return [m.name for m in suite.methods if m.name in suite.figure_arms] or [m.name for m in suite.methods][:6]


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
        arms = _figure_arms(suite)
        series = {}
        for a in arms:
            dirs = [j.run_dir for j in jobs if j.regime == regime and j.method == a and read_rows(Path(j.run_dir))]
            if dirs:
                series[a] = {key: np.array([step_series(d, key, steps) for d in dirs]) for key, _ in _DYNAMICS}
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
                with np.errstate(invalid="ignore"), quiet():
                    mean, lo, hi = np.nanmean(sm, 0), np.nanmin(sm, 0), np.nanmax(sm, 0)
                x = np.arange(steps)
                ax[i].plot(x, mean, color=f"C{ci}", label=arm_label(suite, a).replace("\\|", "|"),
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
        write_csv(out / f"{name}.csv", ["arm", "metric", "update", "mean", "min", "max"], csv_rows)
        q = max(1, steps // 4)
        lines += [f"## Training dynamics (ExTra Fig. 2), regime `{regime}`", "",
                  f"Entropy change per seed, mean over the last {q} updates minus the first {q}; 'vs reference' is the "
                  "paired difference of that change to the reference arm (negative: more entropy collapse than it). "
                  "Novelty bonus: mean over the last quarter.", "",
                  "| arm | seeds | Δ entropy (last − first quarter) [CI] | vs reference [CI] | novelty bonus of correct samples, last quarter |",
                  "|---|---|---|---|---|"]
        ref = series.get(suite.reference)

        def change(y: np.ndarray) -> np.ndarray:
            with np.errstate(invalid="ignore"), quiet():
                return np.nanmean(y[:, -q:], 1) - np.nanmean(y[:, :q], 1)

        for a, s in series.items():
            ch = change(s["entropy"])
            iv = seed_interval(list(ch))
            vs = ""
            if a != suite.reference and ref is not None:
                n = min(len(ch), len(ref["entropy"]))
                c = paired_contrast(list(ch[:n] - change(ref["entropy"])[:n]))
                vs = "–" if not finite(c.mean) else f"{c.mean:+.3f}" + (f" [{c.ci_low:+.3f}, {c.ci_high:+.3f}]" if finite(c.ci_low) else "")
            with np.errstate(invalid="ignore"), quiet():
                nb = np.nanmean(s["extra_novelty_bonus_mean_correct"][:, -q:]) if np.isfinite(s["extra_novelty_bonus_mean_correct"]).any() else math.nan
            lines.append(f"| {arm_label(suite, a)} | {len(ch)} | "
                         + ("–" if not finite(iv[0]) else f"{iv[0]:+.3f}" + (f" [{iv[1]:+.3f}, {iv[2]:+.3f}]" if finite(iv[1]) else ""))
                         + f" | {vs} | " + ("–" if not finite(nb) else f"{nb:.3f}") + " |")
        lines += ["", f"![{name}.png]({name}.png) (numbers: `{name}.csv`)", ""]
    return lines


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
        arms = _figure_arms(suite)
        pts: dict[str, dict[int, list[tuple[float, float, float]]]] = {}
        for j in jobs:
            if j.regime != regime or j.method not in arms:
                continue
            cum = 0.0
            for r in read_rows(Path(j.run_dir)):
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
                ax[i_].plot(x, yp if i_ == 0 else ya, marker="o", ms=3, color=f"C{ci}", label=arm_label(suite, a).replace("\\|", "|"),
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
        write_csv(out / f"{name}.csv", ["arm", "update", "cum_prompt_instances", f"pass_at_{k}", "pass_at_1"], csv_rows)
        lines += [f"## Sample efficiency (ExTra Fig. 3), regime `{regime}`", "",
                  "Cumulative generated prompt instances (each produces G samples; counted whether or not its group enters "
                  "the update, so DAPO's extra rounds count) against held-out accuracy at each evaluation, seed means.", "",
                  f"| arm | at update | cumulative prompt instances | pass@{k} % | pass@1 % |", "|---|---|---|---|---|"]
        lines += [f"| {arm_label(suite, a)} | {s} | {x:.0f} | {p:.1f} | {q:.1f} |" for a, s, x, p, q in final]
        lines += ["", f"![{name}.png]({name}.png) (numbers: `{name}.csv`)", ""]
    return lines
