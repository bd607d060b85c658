"""The agents' section: episode accounting of multi-turn runs (new tokens and actions per update, success-mixed
groups, replayed success, the median replayed α early and late)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np

from llm_harness.compare.render import ref_name
from llm_harness.compare.runs import mean_of, read_rows
from llm_harness.compare.sections import register_section

__all__ = ["agent_summary", "format_agent_summary"]


def _seed_mean(values: Sequence[float]) -> float:
    v = [x for x in values if np.isfinite(x)]
    return float(np.mean(v)) if v else float("nan")


def agent_summary(jobs: Sequence[Any], reference: str = "gigpo") -> dict[str, dict[str, dict[str, float]]]:
    """``{regime: {method: {...}}}`` from the runs' ``metrics.jsonl`` (training jobs only; seeds
    averaged): ``new_tokens_per_update``, ``new_actions_per_update``, ``success_mixed_fresh``,
    ``success_mixed_replayed``, ``episode_success_replayed``, ``replayed_alpha_p50_first_third`` /
    ``_last_third`` (median replayed α, mean over the updates of that third of the run), ``seeds``, and
    ``token_ratio_vs_reference`` (new tokens per update / the reference method's; the paper's VSR vs
    GiGPO ratio is 39.27M / 81.30M = 0.48)."""
    per: dict[tuple[str, str], list[dict[str, float]]] = {}
    for j in jobs:
        if j.method == "base":
            continue
        rows = read_rows(j.run_dir)
        if not rows:
            continue
        third = max(1, len(rows) // 3)
        per.setdefault((j.regime, j.method), []).append({
            "new_tokens_per_update": mean_of(rows, "gen_new_tokens"),
            "new_actions_per_update": mean_of(rows, "gen_new_actions"),
            "success_mixed_fresh": mean_of(rows, "success_mixed_frac_fresh"),
            "success_mixed_replayed": mean_of(rows, "success_mixed_frac_replayed_prefix"),
            "episode_success_replayed": mean_of(rows, "episode_success_replayed_prefix"),
            "replayed_alpha_p50_first_third": mean_of(rows, "vsr_replayed_alpha_p50", 0, third),
            "replayed_alpha_p50_last_third": mean_of(rows, "vsr_replayed_alpha_p50", len(rows) - third),
        })
    out: dict[str, dict[str, dict[str, float]]] = {}
    for (regime, method), runs in per.items():
        row = {k: _seed_mean([r[k] for r in runs]) for k in runs[0]}
        row["seeds"] = float(len(runs))
        out.setdefault(regime, {})[method] = row
    for methods in out.values():
        ref = methods.get(reference, {}).get("new_tokens_per_update", float("nan"))
        for row in methods.values():
            row["token_ratio_vs_reference"] = row["new_tokens_per_update"] / ref if np.isfinite(ref) and ref > 0 else float("nan")
    return out


def format_agent_summary(summary: dict[str, dict[str, dict[str, float]]], reference: str = "GiGPO") -> str:
    """A markdown section of :func:`agent_summary` (one table per regime)."""
    def f(x: float, nd: int = 3) -> str:
        return "-" if not np.isfinite(x) else f"{x:.{nd}f}"

    lines = ["## Episode accounting (agents)", "",
             "New tokens and new actions are those the policy generated in the update (a replayed state's history is "
             "context). A group is *success-mixed* when its episodes neither all succeed nor all fail (VSR's regime); "
             "the main table's 'mixed groups' column counts the same for agents (their returns differ almost always, "
             "through per-step rewards).", ""]
    for regime, methods in summary.items():
        lines += [f"### {regime}", "",
                  f"| method | seeds | new tokens / update | new actions / update | token ratio vs {reference} | success-mixed groups: "
                  "initial | replayed | replayed success | median replayed α: first third | last third |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for m, r in methods.items():
            lines.append(f"| {m} | {int(r['seeds'])} | {f(r['new_tokens_per_update'], 0)} | {f(r['new_actions_per_update'], 1)} | "
                         f"{f(r['token_ratio_vs_reference'], 2)} | {f(r['success_mixed_fresh'])} | {f(r['success_mixed_replayed'])} | "
                         f"{f(r['episode_success_replayed'])} | {f(r['replayed_alpha_p50_first_third'])} | "
                         f"{f(r['replayed_alpha_p50_last_third'])} |")
        lines.append("")
    return "\n".join(lines)


@register_section("agent_accounting")
def agent_accounting_section(cfg: Any, jobs: Sequence[Any], summary: dict, suite: Any, out: Path) -> list[str]:
    """The report's episode accounting (:func:`format_agent_summary` of :func:`agent_summary`)."""
    done = [j for j in jobs if (Path(j.run_dir) / "metrics.jsonl").exists()]
    if not any(j.method != "base" for j in done):
        return ["## Episode accounting (agents)", "", "No finished training run yet.", ""]
    return format_agent_summary(agent_summary(done, reference=suite.reference), ref_name(suite)).splitlines() + [""]
