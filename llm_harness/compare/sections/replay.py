"""The Replay paper's sections: Tables 1–4 and 9 (``replay_tables``, one Holm family per table, Table 2 with its
clip-fraction columns) and Table 13 (``replay_aes``: the fresh-anchored configurations ranked by AES)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from llm_harness.compare.render import arm_label, fmt_diff, fmt_pct, forest, forest_width, ref_name, write_csv
from llm_harness.compare.runs import final_evals, step_series
from llm_harness.compare.sections import register_section
from llm_harness.compare.sections.common import aes_seed, tables_section
from llm_harness.compare.stats import finite, seed_interval
from llm_harness.compare.suites_evidence import REPLAY_AES_CONFIGS, REPLAY_TABLES
from vsr_util.atomic import save_figure

class _ClipCols:
    """Replay Table 2's clip-fraction columns: mean over updates of the fresh and replayed-token clip fractions."""

    header = ["clip % fresh", "clip % replay"]

    def cells(self, jobs: Sequence[Any], regime: str, arm: str) -> list[str]:
        out = []
        for key in ("clip_frac_fresh", "clip_frac_replayed_rollout"):
            v = [np.nanmean(y) for j in jobs if j.regime == regime and j.method == arm
                 for y in [step_series(j.run_dir, key, 10_000)] if np.isfinite(y).any()]
            out.append(f"{100 * np.mean(v):.3f}" if v else "–")
        return out


@register_section("replay_tables")
def replay_tables_section(cfg: Any, jobs: Sequence[Any], summary: dict, suite: Any, out: Path) -> list[str]:
    """Replay Tables 1–4 and 9 (Holm within each), Table 2's clip fractions, and Table 13's AES ranking."""
    lines = tables_section(cfg, jobs, suite, out, REPLAY_TABLES, "The Replay paper's tables on the test bed",
                            (("avg", "avg@k"), ("pass", "pass@k")), extra_cols={"replay_table2": _ClipCols()}, stem="replay_tables")
    lines += _aes_ranking(cfg, jobs, suite, out)
    return lines


def _aes_ranking(cfg: Any, jobs: Sequence[Any], suite: Any, out: Path, figure: bool = False) -> list[str]:
    """Replay Table 13: the fresh-anchored configurations ranked by AES against GRPO (paired by seed); ``figure``
    adds their AES intervals as ``replay_aes_<regime>.png``."""
    k = cfg.sizes["eval_k"]
    lines: list[str] = []
    for regime in sorted({j.regime for j in jobs}):
        finals = final_evals(jobs, regime, k)
        ref = finals.get(suite.reference, {})
        arms = [a for a in REPLAY_AES_CONFIGS if a in finals]
        if not ref or not arms:
            continue
        recs = []
        for a in arms:
            per = [aes_seed(finals[a][s], ref[s], k) for s in sorted(set(finals[a]) & set(ref))]
            recs.append({"arm": a, "acc": seed_interval([v.get(f"val_avg_at_{k}", math.nan) for v in finals[a].values()]),
                         "len": seed_interval([v.get("val_length_mean", math.nan) for v in finals[a].values()]),
                         "dl": seed_interval([p[0] for p in per]), "dacc": seed_interval([p[1] for p in per]),
                         "aes": seed_interval([p[2] for p in per])})
        recs.sort(key=lambda r: -r["aes"][0] if finite(r["aes"][0]) else np.inf)
        r_acc = seed_interval([v.get(f"val_avg_at_{k}", math.nan) for v in ref.values()])[0]
        r_len = seed_interval([v.get("val_length_mean", math.nan) for v in ref.values()])[0]
        lines += [f"### Replay Table 13: AES ranking of the fresh-anchored configurations, regime `{regime}`", "",
                  f"AES = ΔL + β ΔAcc against {ref_name(suite)} of the same seed (β 3 for a gain, "
                  f"5 for a loss; `theory.metrics.aes`), from the final held-out avg@{k} and mean response length; reference: "
                  f"acc {100 * r_acc:.1f} %, L {r_len:.1f} tokens. Intervals are 95% Student-t over seeds of the per-seed AES.", "",
                  "| rank | configuration | acc % | L (tokens) | ΔL % | ΔAcc % | AES [CI] |", "|---|---|---|---|---|---|---|"]
        rows_csv = []
        for i, r in enumerate(recs, 1):
            aes_txt = "–" if not finite(r["aes"][0]) else (
                f"{r['aes'][0]:+.3f}" + (f" [{r['aes'][1]:+.3f}, {r['aes'][2]:+.3f}]" if finite(r["aes"][1]) else ""))
            lines.append(f"| {i} | {arm_label(suite, r['arm'])} | {fmt_pct(r['acc'])} | "
                         + (f"{r['len'][0]:.1f}" if finite(r["len"][0]) else "–")
                         + f" | {fmt_diff(r['dl'])} | {fmt_diff(r['dacc'])} | {aes_txt} |")
            rows_csv.append([i, r["arm"], r["acc"][0], r["len"][0], r["dl"][0], r["dacc"][0], r["aes"][0], r["aes"][1], r["aes"][2]])
        missing = [a for a in REPLAY_AES_CONFIGS if a not in finals]
        if missing:
            lines += ["", f"Not run in this suite (all twelve: the `replay` or `replay_aes` suite): {', '.join(missing)}."]
        name = f"replay_aes_{regime}"
        write_csv(out / f"{name}.csv", ["rank", "arm", "acc", "length", "delta_length", "delta_acc", "aes", "aes_lo", "aes_hi"], rows_csv)
        if figure:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt

            labels = [arm_label(suite, r["arm"]).replace("\\|", "|") for r in recs]
            fig, ax = plt.subplots(figsize=(forest_width(labels), 0.45 * len(recs) + 1.6))
            forest(ax, labels, [r["aes"] for r in recs], f"Replay Table 13: AES vs {ref_name(suite)}",
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
