"""The agentic comparison suite ``vsr compare --suite agents`` (issue 16 item 4; SPEC §3.5b).

GiGPO (the reference) vs VSR + GiGPO vs the VSR paper's agentic ablations, on the shipped CPU
test-bed Sokoban agent ``mid`` (``llm_harness/testbed/checkpoints/sokoban/mid``: success 0.153
[0.119, 0.195] over the 128 fixed seeds, 52 % of its groups of 8 all-fail from the initial state,
62-91 % mixed from intermediate expert states -- VSR's regime). Methods are the configs
``configs/agent_sokoban_*.yaml``:

* ``gigpo`` -- GiGPO (γ 0.95, ω 1, ``mean_norm``), 8 initial states x G = 8 episodes per update;
* ``vsr_gigpo`` -- VSR over interaction states on GiGPO: ρ 0.3, W 5, σ̂ = p̂(1 − p̂), buffer filled
  from the policy only (the paper's agentic defaults);
* ``vsr_uniform`` -- w/o scoring (uniform draws from the same buffer);
* ``vsr_norecency`` -- w/o recency (insert during the first quarter of the run, then frozen);
* ``static_reset`` -- the static-reset control: expert interaction states of 512 training seeds,
  drawn uniformly, never updated (``cold_start: true, insert_policy: false, recency: false,
  score: uniform``).

Held-out success is the trainer's agent validation (``evaluate_agent``: episodes on the first
``eval_problems`` of the 128 fixed evaluation seeds, ``eval_k`` each, T = 1), so the runner's base
evaluation, curves and finals apply unchanged (``val_avg_at_k`` is the success rate).

**Only Sokoban.** The issue asks for each BabyAI level too; no BabyAI test-bed agent is shipped
(its SFT ran at 3.5 s/step here, and no checkpoint meets the card criteria yet), so the suite has
one regime. A BabyAI regime is one ``Regime`` with the level's configs once an agent exists.

**Agent-specific accounting** (:func:`agent_summary`, for the report): per update, new generated
tokens and new actions (policy turns; a replayed state's history is context, not new -- the paper's
episode-length accounting), the fraction of success-mixed groups from initial vs replayed states
(``success_mixed_frac_*``; the trainer's ``mixed_frac_*`` compares returns, which Sokoban's per-step
rewards make differ almost always), and the replayed α distribution early vs late in training (does
the frontier walk back toward the initial state, as in the gridworld?).

**Sizing** (measured on this 2-core machine, loaded by other jobs -- indicative). One update of 8 x 8
Sokoban episodes with the mid agent (HF backend, ``share_prefix``, one torch thread per worker) took
STEP_S s (GiGPO) and VSR_STEP_S s (VSR + GiGPO), and one evaluation of the 128 seeds x 2 episodes
EVAL_S s. Power: the final success of a run has evaluation noise (the card's interval at 1024
episodes gives a clustered standard error 0.019 at k = 8, about 0.025 at k = 2 by the card's
intra-seed correlation 0.28) plus between-run training noise, unknown before the suite has run; with
a per-run standard deviation of 0.03 for both, the paired difference has SD ≈ 0.042 (0.03·√2) and a
two-sided paired test at the Holm-worst level 0.05/4 (four contrasts vs GiGPO) needs
n ≈ ((z_0.994 + z_0.8) · 0.042 / 0.05)² = ((2.50 + 0.84) · 0.84)² ≈ 7.9 → 8-9 seeds for 80 % power on
a 5-point difference (about 6 at the unadjusted 0.05). The cost of 5 methods x 8 seeds x U updates
is 40 · (U · STEP_S + 2 · EVAL_S) s of one core; the 2 h x 2 cores budget (14 400 core-s) therefore
allows U ≈ UPDATES updates -- BUDGET_NOTE. The defaults below (:data:`SUITE_SIZES`) are that choice;
the report must show the power actually achieved from the observed seed spread.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np

from llm_harness.compare.suite import Method, Regime, Suite, register_suite

__all__ = ["AGENT_METHODS", "SUITE_SIZES", "agent_summary", "format_agent_summary"]

AGENT_METHODS: tuple[Method, ...] = (
    Method("gigpo", "agent_sokoban_gigpo.yaml", "GiGPO"),
    Method("vsr_gigpo", "agent_sokoban_vsr_gigpo.yaml", "VSR + GiGPO (rho 0.3, W 5)", "vsr"),
    Method("vsr_uniform", "agent_sokoban_vsr_uniform.yaml", "VSR w/o scoring (uniform)", "vsr"),
    Method("vsr_norecency", "agent_sokoban_vsr_norecency.yaml", "VSR w/o recency (frozen buffer)", "vsr"),
    Method("static_reset", "agent_sokoban_static_reset.yaml", "static uniform expert-state resets", "vsr"),
)

#: the suite's intended ``vsr compare`` sizes (module doc, "Sizing"): pass them as ``--seeds``,
#: ``--steps``, ``--eval-problems``, ``--eval-k``
SUITE_SIZES: dict[str, int] = {"seeds": 8, "steps": 0, "eval_problems": 128, "eval_k": 2}

register_suite(
    Suite(
        name="agents",
        methods=AGENT_METHODS,
        regimes=(
            Regime("sokoban", "the shipped 'mid' Sokoban test-bed agent (6x6, 1 box, 15 steps), window 0, 8-token replies"),
        ),
        reference="gigpo",
    )
)


def _mean(rows: Sequence[dict], key: str, lo: int = 0, hi: int | None = None) -> float:
    v = [r[key] for r in rows[lo:hi] if isinstance(r.get(key), (int, float)) and np.isfinite(r[key])]
    return float(np.mean(v)) if v else float("nan")


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
    from llm_harness.trainer.runlog import read_metrics

    per: dict[tuple[str, str], list[dict[str, float]]] = {}
    for j in jobs:
        if j.method == "base":
            continue
        rows = read_metrics(Path(j.run_dir) / "metrics.jsonl")
        if not rows:
            continue
        third = max(1, len(rows) // 3)
        per.setdefault((j.regime, j.method), []).append({
            "new_tokens_per_update": _mean(rows, "gen_new_tokens"),
            "new_actions_per_update": _mean(rows, "gen_new_actions"),
            "success_mixed_fresh": _mean(rows, "success_mixed_frac_fresh"),
            "success_mixed_replayed": _mean(rows, "success_mixed_frac_replayed_prefix"),
            "episode_success_replayed": _mean(rows, "episode_success_replayed_prefix"),
            "replayed_alpha_p50_first_third": _mean(rows, "vsr_replayed_alpha_p50", 0, third),
            "replayed_alpha_p50_last_third": _mean(rows, "vsr_replayed_alpha_p50", len(rows) - third),
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


def format_agent_summary(summary: dict[str, dict[str, dict[str, float]]]) -> str:
    """A markdown section of :func:`agent_summary` (one table per regime)."""
    def f(x: float, nd: int = 3) -> str:
        return "-" if not np.isfinite(x) else f"{x:.{nd}f}"

    lines = ["## Episode accounting (agents)", ""]
    for regime, methods in summary.items():
        lines += [f"### {regime}", "",
                  "| method | seeds | new tokens / update | new actions / update | token ratio vs GiGPO | success-mixed groups: "
                  "initial | replayed | replayed success | median replayed α: first third | last third |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for m, r in methods.items():
            lines.append(f"| {m} | {int(r['seeds'])} | {f(r['new_tokens_per_update'], 0)} | {f(r['new_actions_per_update'], 1)} | "
                         f"{f(r['token_ratio_vs_reference'], 2)} | {f(r['success_mixed_fresh'])} | {f(r['success_mixed_replayed'])} | "
                         f"{f(r['episode_success_replayed'])} | {f(r['replayed_alpha_p50_first_third'])} | "
                         f"{f(r['replayed_alpha_p50_last_third'])} |")
        lines.append("")
    return "\n".join(lines)
