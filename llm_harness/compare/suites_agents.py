"""The agentic comparison suite ``vsr compare --suite agents`` (VSR §4.2–4.3, App. D.3–D.5).

GiGPO (the reference) vs VSR + GiGPO vs the VSR paper's agentic ablations, on the shipped CPU
test-bed Sokoban agent ``mid`` (``llm_harness/testbed/checkpoints/sokoban/mid``: most of its groups all-fail from the
initial state and are mixed from intermediate expert states -- VSR's regime; its numbers are in
``figures/compare_agents/DESIGN.md``). Methods are the configs
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

**Agent-specific accounting** (report section ``agent_accounting``, ``llm_harness.compare.sections.agents``): per update, new generated
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

from typing import Any

from llm_harness.compare.suite import Method, Regime, Suite, register_suite

__all__ = ["AGENT_METHODS", "BABYAI_OVERRIDES", "BABYAI_SIZES", "BUDGET_SIZES", "SUITE_SIZES"]

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
