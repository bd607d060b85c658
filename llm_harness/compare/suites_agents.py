"""The agentic comparison suite ``vsr compare --suite agents`` (issue 16 item 4; VSR §4.2–4.3, App. D.3–D.5).

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

**Regimes.** ``sokoban`` and ``babyai`` (the shipped BabyAI OneRoomS8 agent ``mid`` under the
family's 16-turn budget; :data:`BABYAI_OVERRIDES` moves every method's config there). SynthLoc and
MiniBoss have GPU recipes (``configs/agent_babyai_*_gpu.yaml``) but no CPU test-bed agent: their
expert episodes are 5-7x longer than OneRoomS8's and a turn costs 3.8-4.8x as much (longer prompts),
so this design would take 29-144 h per level on 2 cores (``benchmarks/agent_level_cost.py``,
``benchmarks/results/agent_level_cost``). Run one regime at a time with ``--regimes``; the
sizing below is Sokoban's.

**Agent-specific accounting** (:func:`agent_summary`, for the report): per update, new generated
tokens and new actions (policy turns; a replayed state's history is context, not new -- the paper's
episode-length accounting), the fraction of success-mixed groups from initial vs replayed states
(``success_mixed_frac_*``; the trainer's ``mixed_frac_*`` compares returns, which Sokoban's per-step
rewards make differ almost always), and the replayed α distribution early vs late in training (does
the frontier walk back toward the initial state, as in the gridworld?).

**Design and sizing.** The seed counts, power calculations, measured costs and the history of the design are
in ``figures/compare_agents/DESIGN.md`` (moved out of this docstring: they are dated measurements, not code).

**Ablations** (:attr:`Suite.ablations`, report section ``ablations``): VSR + GiGPO against each of
``vsr_uniform``, ``vsr_norecency`` and ``static_reset``, paired by seed, Holm within each regime -- the direct
test of "does scoring / recency / a policy-filled buffer matter" (the main table contrasts every arm with GiGPO).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np

from llm_harness.compare.section_base import _mean, register_section
from llm_harness.compare.suite import Method, Regime, Suite, register_suite

__all__ = ["AGENT_METHODS", "BABYAI_OVERRIDES", "BABYAI_SIZES", "BUDGET_SIZES", "SUITE_SIZES", "agent_summary", "format_agent_summary"]

AGENT_METHODS: tuple[Method, ...] = (
    Method("gigpo", "agent_sokoban_gigpo.yaml", "GiGPO"),
    Method("vsr_gigpo", "agent_sokoban_vsr_gigpo.yaml", "VSR + GiGPO (rho 0.3, W 5)", "vsr"),
    Method("vsr_uniform", "agent_sokoban_vsr_uniform.yaml", "VSR w/o scoring (uniform)", "vsr"),
    Method("vsr_norecency", "agent_sokoban_vsr_norecency.yaml", "VSR w/o recency (frozen buffer)", "vsr"),
    Method("static_reset", "agent_sokoban_static_reset.yaml", "static uniform expert-state resets", "vsr"),
)

#: the BabyAI regime: every method's Sokoban config moved to the BabyAI test-bed agent, its level, budget and
#: window (those of ``configs/agent_babyai_oneroom_gigpo.yaml``, tested equal)
BABYAI_OVERRIDES: dict[str, Any] = {
    "model": {"path": "llm_harness/testbed/checkpoints/babyai/mid"},
    "task": {"params": {"env": "babyai", "env_params": {"level": "OneRoomS8", "max_steps": 16}, "window": 0}},
    "rollout": {"share_prefix": False, "prompts_per_step": 4},
}

#: the BabyAI regime's own seeds and updates (module doc, "BabyAI sizing"): GiGPO and VSR + GiGPO fit one 2-h part
BABYAI_SIZES: dict[str, int] = {"seeds": 8, "steps": 10}

#: the Sokoban design (module doc, "Sizing"): 8 seeds give 80 % power at 5 pp after Holm over the four contrasts at
#: the paired spread part 1 measured (1.9 pp; 4-5 seeds would do), with a margin for the ablations' own spread;
#: 5 methods x 8 seeds x 20 updates ≈ 3 h on 2 quiet cores, run in two parts
SUITE_SIZES: dict[str, int] = {"seeds": 8, "steps": 20, "eval_problems": 128, "eval_k": 2}
#: what fits 2 h on 2 quiet cores (80 % power per contrast at α = 0.05, not after Holm)
BUDGET_SIZES: dict[str, int] = {"seeds": 9, "steps": 12, "eval_problems": 128, "eval_k": 2}

register_suite(
    Suite(
        name="agents",
        methods=AGENT_METHODS,
        regimes=(
            Regime("sokoban", "the shipped 'mid' Sokoban test-bed agent (6x6, 1 box, 15 steps), window 0, 8-token replies"),
            Regime("babyai", "the shipped 'mid' BabyAI OneRoomS8 test-bed agent (16-turn budget), window 0, 8-token replies",
                   overrides=BABYAI_OVERRIDES, sizes=BABYAI_SIZES),
        ),
        reference="gigpo",
        sizes=SUITE_SIZES,
        min_effect=0.05,
        ablations=(("vsr_gigpo", "vsr_uniform"), ("vsr_gigpo", "vsr_norecency"), ("vsr_gigpo", "static_reset")),
        sections=("agent_accounting", "ablations", "curriculum"),
    )
)


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

    lines = ["## Episode accounting (agents)", "",
             "New tokens and new actions are those the policy generated in the update (a replayed state's history is "
             "context). A group is *success-mixed* when its episodes neither all succeed nor all fail (VSR's regime); "
             "the main table's 'mixed groups' column counts the same for agents (their returns differ almost always, "
             "through per-step rewards).", ""]
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


@register_section("agent_accounting")
def agent_accounting_section(cfg: Any, jobs: Sequence[Any], summary: dict, suite: Any, out: Path) -> list[str]:
    """The report's episode accounting (:func:`format_agent_summary` of :func:`agent_summary`)."""
    done = [j for j in jobs if (Path(j.run_dir) / "metrics.jsonl").exists()]
    if not any(j.method != "base" for j in done):
        return ["## Episode accounting (agents)", "", "No finished training run yet.", ""]
    return format_agent_summary(agent_summary(done, reference=suite.reference)).splitlines() + [""]
