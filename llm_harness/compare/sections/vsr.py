"""VSR's sections: the reverse curriculum on a language model, the calibrated σ̂ against the oracle in training, and
which link of VSR's argument holds.

* ``curriculum`` — the LLM analogue of the grid world's Figure 2 from the VSR arms' run logs
  (``llm_harness.methods.vsr.curriculum_metrics``): the α distribution of the replayed prefix groups and of the
  *mixed* ones over training windows, the success-vs-α curve of the policy on those groups per window (a leftward
  shift is the curriculum), the fraction of mixed fresh groups over training, and the share of expert (cold-start)
  entries left in the buffer. Whether the frontier moves toward the prompt is answered by the per-seed change of
  the mean α of mixed replayed groups between the first and the last window (paired over seeds, Student-t
  interval). Arms: the suite's ``vsr`` family; the first with runs is described.
* ``calibration`` — arms by role: ``oracle_score`` (Spearman of the oracle's Monte-Carlo variance with the
  linear and calibrated σ̂ of the same candidates) and ``calibrated_score`` (distance of the fitted curve from
  the chord).
* ``assumptions`` — per ``vsr``-family arm, paired by seed with the reference: (1) mixed groups, (2) the bare
  prompt's success, (3) held-out transfer; the first link that fails is named with its numbers.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from llm_harness.compare.render import moving_mean
from llm_harness.compare.runs import mean_of, mixed_key, read_rows
from llm_harness.compare.sections import register_section
from llm_harness.compare.stats import seed_interval
from llm_harness.methods.vsr import CURRICULUM_BINS
from vsr_util.atomic import save_figure

__all__ = ["curriculum_data", "replayed_mixed_shares"]


#: training windows of the curriculum section
WINDOWS = 4


def _windows(steps: int, n: int = WINDOWS) -> list[tuple[int, int]]:
    edges = np.linspace(0, steps, n + 1).round().astype(int)
    return [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:]) if b > a]


def curriculum_data(run_dirs: Sequence[Path], steps: int) -> dict[str, Any]:
    """Per seed and window: replayed / mixed / success counts per α-bin, mixed fresh fraction, expert share."""
    wins = _windows(steps)
    seeds = []
    for d in run_dirs:
        rows = read_rows(Path(d))
        if not rows or "vsr_alpha_b0_groups" not in rows[0]:
            continue
        per = []
        for a, b in wins:
            rs = [r for r in rows if a <= r["step"] < b]
            g = np.array([[r.get(f"vsr_alpha_b{k}_groups", 0.0) for k in range(CURRICULUM_BINS)] for r in rs]).sum(0)
            m = np.array([[r.get(f"vsr_alpha_b{k}_mixed", 0.0) for k in range(CURRICULUM_BINS)] for r in rs]).sum(0)
            s = np.array([[r.get(f"vsr_alpha_b{k}_success", 0.0) for k in range(CURRICULUM_BINS)] for r in rs]).sum(0)
            per.append({"groups": g, "mixed": m, "success": s})
        series = {key: [r.get(key, float("nan")) for r in rows]
                  for key in ("vsr_buffer_expert_frac", "vsr_buffer_trajectories", "vsr_replayed_alpha_mean")}
        series["mixed_frac_fresh"] = [r.get(mixed_key(rows), float("nan")) for r in rows]
        seeds.append({"windows": per, "series": series})
    return {"windows": wins, "seeds": seeds}


def replayed_mixed_shares(seeds: Sequence[dict[str, Any]]) -> list[float]:
    """Mixed share of the replayed groups per seed and window, over the windows that replayed any group.

    A window without replayed groups (the buffer still empty) has no share; counting it as 0 % would
    understate the share (it did: BabyAI's report said 78 % where the windows that replayed said 89 %)."""
    return [float(np.sum(w["mixed"]) / np.sum(w["groups"])) for s in seeds for w in s["windows"]
            if np.sum(w["groups"]) > 0]


def _mean_alpha(counts: np.ndarray) -> float:
    centres = (np.arange(CURRICULUM_BINS) + 0.5) / CURRICULUM_BINS
    return float((counts * centres).sum() / counts.sum()) if counts.sum() > 0 else float("nan")


@register_section("curriculum")
def curriculum_section(cfg: Any, jobs: Sequence[Any], summary: dict, suite: Any, out: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lines = ["## The reverse curriculum on a language model", ""]
    vsr_methods = [m.name for m in suite.methods if m.family == "vsr"]
    for regime in summary:
        steps = cfg.sizes_for(regime)["steps"]
        data = {}
        for name in vsr_methods:
            dirs = [Path(j.run_dir) for j in jobs if j.regime == regime and j.method == name]
            d = curriculum_data(dirs, steps)
            if d["seeds"]:
                data[name] = d
        if not data:
            continue
        primary = next(iter(data))  # the suite's first VSR-family arm with runs (report order)
        d = data[primary]
        wins = d["windows"]
        centres = (np.arange(CURRICULUM_BINS) + 0.5) / CURRICULUM_BINS
        fig, ax = plt.subplots(2, 3, figsize=(16, 8.5))
        tot_g = [np.sum([s["windows"][w]["groups"] for s in d["seeds"]], axis=0) for w in range(len(wins))]
        tot_m = [np.sum([s["windows"][w]["mixed"] for s in d["seeds"]], axis=0) for w in range(len(wins))]
        tot_s = [np.sum([s["windows"][w]["success"] for s in d["seeds"]], axis=0) for w in range(len(wins))]
        for w, (a, b) in enumerate(wins):
            lab = f"updates {a}-{b - 1}"
            g, m, sc = tot_g[w], tot_m[w], tot_s[w]
            ax[0, 0].plot(centres, g / max(g.sum(), 1), marker="o", label=lab)
            ax[0, 1].plot(centres, m / max(m.sum(), 1), marker="o", label=lab)
            with np.errstate(invalid="ignore", divide="ignore"):
                ax[0, 2].plot(centres, np.where(g > 0, sc / g, np.nan), marker="o", label=lab)
        ax[0, 0].set_title("α of the replayed prefix groups (share per bin)", fontsize=10)
        ax[0, 1].set_title("α of the mixed replayed groups (share per bin)", fontsize=10)
        ax[0, 2].set_title("success rate vs α on replayed groups\n(leftward shift = curriculum)", fontsize=10)
        for a_ in ax[0]:
            a_.set_xlabel("α = prefix length / trajectory length")
            a_.legend(fontsize=7)
        for name, dd in data.items():
            for key, axis in (("mixed_frac_fresh", ax[1, 0]), ("vsr_buffer_expert_frac", ax[1, 1]),
                              ("vsr_replayed_alpha_mean", ax[1, 2])):
                ys = np.array([s["series"][key] for s in dd["seeds"]], dtype=np.float64)
                with np.errstate(invalid="ignore"), warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)  # an update no seed logged: nan
                    y = np.nanmean(ys, axis=0)
                axis.plot(np.arange(len(y)), moving_mean(y, max(1, len(y) // 20)), label=name)
        ref_dirs = [Path(j.run_dir) for j in jobs if j.regime == regime and j.method == suite.reference]
        ys = [[r.get(mixed_key(rows), np.nan) for r in rows] for rows in map(read_rows, ref_dirs) if rows]
        if ys:
            n = min(len(y) for y in ys)
            y = np.nanmean(np.array([y[:n] for y in ys], dtype=np.float64), axis=0)
            ax[1, 0].plot(np.arange(len(y)), moving_mean(y, max(1, len(y) // 20)), "k--", label=suite.reference)
        ax[1, 0].set_title("mixed fresh groups (fraction, moving mean)", fontsize=10)
        ax[1, 1].set_title("expert (cold-start) share of buffer trajectories", fontsize=10)
        ax[1, 2].set_title("mean α of the replayed states per update", fontsize=10)
        for a_ in ax[1]:
            a_.set_xlabel("update")
            a_.legend(fontsize=7)
        fig.suptitle(f"VSR's reverse curriculum, regime {regime} (all seeds pooled)")
        fig.tight_layout()
        stem = f"curriculum_{regime}"
        save_figure(fig, out, stem)
        plt.close(fig)
        first = [_mean_alpha(s["windows"][0]["mixed"]) for s in d["seeds"]]
        last = [_mean_alpha(s["windows"][-1]["mixed"]) for s in d["seeds"]]
        diff = seed_interval([b - a for a, b in zip(first, last) if np.isfinite(a) and np.isfinite(b)])
        rep_first = [_mean_alpha(s["windows"][0]["groups"]) for s in d["seeds"]]
        rep_last = [_mean_alpha(s["windows"][-1]["groups"]) for s in d["seeds"]]
        rdiff = seed_interval([b - a for a, b in zip(rep_first, rep_last) if np.isfinite(a) and np.isfinite(b)])
        frac_mixed = replayed_mixed_shares(d["seeds"])
        moved = ("toward the prompt (smaller α)" if np.isfinite(diff[2]) and diff[2] < 0 else
                 "away from the prompt (larger α)" if np.isfinite(diff[1]) and diff[1] > 0 else
                 "not detectably (interval contains 0)" if np.isfinite(diff[1]) and np.isfinite(diff[2]) else
                 "not detectably (no interval: it needs two seeds with mixed replayed groups in both windows)")
        lines += [
            f"Regime `{regime}`, arm `{primary}` ({len(d['seeds'])} seeds):", "",
            f"* Mean α of the *mixed* replayed groups, first window → last window, per-seed change "
            f"{diff[0]:+.3f} [{diff[1]:+.3f}, {diff[2]:+.3f}]: the frontier moves {moved}.",
            f"* Mean α of all replayed groups: change {rdiff[0]:+.3f} [{rdiff[1]:+.3f}, {rdiff[2]:+.3f}].",
            f"* Share of replayed groups that were mixed: "
            f"{f'{100 * np.mean(frac_mixed):.0f}%' if frac_mixed else '–'} on average "
            f"(over the seeds' windows that replayed any group).",
            "* Success vs α per window (pooled seeds): " + "; ".join(
                f"updates {a}-{b - 1}: " + ", ".join(f"{c:.1f}→{(sc / g):.2f}" if g > 0 else f"{c:.1f}→–"
                                                     for c, g, sc in zip(centres, tot_g[w], tot_s[w]))
                for w, (a, b) in enumerate(wins)), "",
            f"![{stem}.png]({stem}.png)", "",
        ]
    if len(lines) == 2:
        return []
    return lines


@register_section("calibration")
def calibration_section(cfg: Any, jobs: Sequence[Any], summary: dict, suite: Any, out: Path) -> list[str]:
    """The calibrated σ̂ against the oracle in training: per seed of the oracle arm, the
    mean over updates of the Spearman correlation between the oracle's Monte-Carlo variance and each
    zero-cost score of the same candidates, and their paired difference over seeds. Arms by ``Method.roles``:
    ``oracle_score`` and ``calibrated_score``."""
    oracle = {m.name for m in suite.methods if "oracle_score" in m.roles}
    calibrated = {m.name for m in suite.methods if "calibrated_score" in m.roles}
    lines = []
    for regime in summary:
        per_seed = []
        gaps = []
        for j in jobs:
            if j.regime != regime:
                continue
            rows = read_rows(Path(j.run_dir))
            if j.method in oracle and rows:
                lin = [r.get("vsr_oracle_spearman_linear") for r in rows]
                cal = [r.get("vsr_oracle_spearman_calibrated") for r in rows]
                pairs = [(a, b) for a, b in zip(lin, cal) if isinstance(a, float) and isinstance(b, float)
                         and np.isfinite(a) and np.isfinite(b)]
                if pairs:
                    a, b = np.array(pairs).T
                    per_seed.append((float(a.mean()), float(b.mean()), len(pairs)))
            if j.method in calibrated and rows:
                g = [r.get("vsr_calib_gap") for r in rows if isinstance(r.get("vsr_calib_gap"), float)]
                if g:
                    gaps.append(g[-1])
        if not per_seed and not gaps:
            continue
        lines += [f"## Calibrated σ̂ against the oracle in training, regime `{regime}`", ""]
        if per_seed:
            lin = seed_interval([p[0] for p in per_seed])
            cal = seed_interval([p[1] for p in per_seed])
            diff = seed_interval([p[1] - p[0] for p in per_seed])
            lines += [
                "In the oracle arm, every update scores its candidate buffer states by Monte Carlo; on "
                f"those candidates the Spearman correlation of the oracle variance with the linear σ̂ averages "
                f"{lin[0]:.3f} [{lin[1]:.3f}, {lin[2]:.3f}] and with the calibrated σ̂ {cal[0]:.3f} [{cal[1]:.3f}, {cal[2]:.3f}] "
                f"(mean over updates, interval over {len(per_seed)} seeds); calibrated minus linear: {diff[0]:+.3f} "
                f"[{diff[1]:+.3f}, {diff[2]:+.3f}] — "
                + ("the calibrated score ranks states closer to the oracle." if np.isfinite(diff[1]) and diff[1] > 0 else
                   "the calibrated score ranks states worse than the linear one." if np.isfinite(diff[2]) and diff[2] < 0 else
                   "no detectable difference in ranking."), ""]
        if gaps:
            lines += [f"Calibrated arm: at the end of training the fitted interpolation f differs from the linear f(α) = α by "
                      f"{np.mean(gaps):.3f} on average over the α-bins (mean over {len(gaps)} seeds).", ""]
    return lines


@register_section("assumptions")
def assumptions_section(cfg: Any, jobs: Sequence[Any], summary: dict, suite: Any, out: Path) -> list[str]:
    """Which link of VSR's argument holds on the test bed, arm by arm, paired by seed with the reference:
    (1) replayed states give more mixed (informative) groups than fresh prompts; (2) learning on them
    reaches the bare pool prompts (fresh-group success over the last quarter of training); (3) it
    transfers to held-out problems (the main table's Δ). The first broken link is named with its numbers."""
    lines = []
    for regime in summary:
        ref_rows = {j.seed: read_rows(Path(j.run_dir)) for j in jobs if j.regime == regime and j.method == suite.reference}
        ref_rows = {s: r for s, r in ref_rows.items() if r}
        if not ref_rows:
            continue
        vsr_arms = [m for m in suite.methods if m.family == "vsr"]
        table = ["| arm | mixed groups: replayed prefixes (arm) vs fresh (reference) | Δ fresh-prompt success, last quarter (pp) "
                 "[CI] | Δ held-out avg@1 (pp) [CI] | first link that fails |", "|---|---|---|---|---|"]
        any_row = False
        for m in vsr_arms:
            arm = {j.seed: read_rows(Path(j.run_dir)) for j in jobs if j.regime == regime and j.method == m.name}
            seeds = sorted(s for s in arm if arm[s] and s in ref_rows)
            if not seeds:
                continue
            any_row = True
            mixed_arm = seed_interval([mean_of(arm[s], "mixed_frac_replayed_prefix") for s in seeds])
            mixed_ref = seed_interval([mean_of(ref_rows[s], "mixed_frac_fresh") for s in seeds])
            late = lambda rows: mean_of(rows, "accuracy_fresh", len(rows) * 3 // 4)  # noqa: E731 - the last quarter
            d_fresh = seed_interval([late(arm[s]) - late(ref_rows[s]) for s in seeds])
            meth = summary[regime]["methods"].get(m.name, {"seeds": {}})["seeds"]
            ref = summary[regime]["methods"].get(suite.reference, {"seeds": {}})["seeds"]
            d_held = seed_interval([meth[s]["avg"] - ref[s]["avg"] for s in seeds if s in meth and s in ref])
            if np.isfinite(mixed_arm[0]) and np.isfinite(mixed_ref[0]) and not mixed_arm[0] > mixed_ref[0]:
                broken = (f"(1) replayed groups are not more often mixed ({mixed_arm[0]:.2f} vs {mixed_ref[0]:.2f})")
            elif np.isfinite(d_fresh[1]) and not d_fresh[1] > 0:
                broken = "(2) no detectable gain on the bare pool prompts"
            elif np.isfinite(d_held[1]) and not d_held[1] > 0:
                broken = "(3) the gain on the pool does not detectably transfer to held-out problems"
            elif not np.isfinite(d_held[1]):
                broken = "n/a (fewer than 2 seeds)"
            else:
                broken = "none: every link holds"

            def pp(ci):
                return f"{100 * ci[0]:+.1f} [{100 * ci[1]:+.1f}, {100 * ci[2]:+.1f}]" if np.isfinite(ci[1]) else (
                    f"{100 * ci[0]:+.1f}" if np.isfinite(ci[0]) else "–")

            table.append(f"| {m.label} | {mixed_arm[0]:.2f} vs {mixed_ref[0]:.2f} | {pp(d_fresh)} | {pp(d_held)} | {broken} |")
        if any_row:
            lines += [f"## Which of VSR's assumptions hold, regime `{regime}`", "",
                      "VSR's argument is a chain: (1) restarting from replayed prefixes turns all-fail prompts into mixed "
                      "groups, which carry gradient; (2) what is learned from those restarts reaches the bare prompt (the "
                      "reverse curriculum); (3) it transfers to held-out problems. Per VSR arm, paired by seed with "
                      f"{suite.reference} (95% Student-t intervals):", ""] + table + [""]
    return lines
