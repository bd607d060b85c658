"""The 2026 prefix-restart methods as lab allocations (Prefix Sampling's hard side, PROS's nearest-0.5 node):
what each draws on a probe whose pass rates are chosen, that App. B predicts them, and that ``vsr advise`` ranks them."""

from __future__ import annotations

import numpy as np
import pytest

from llm_harness.lab.advise import gains, tuned
from llm_harness.lab.allocations import ALLOCATIONS, PS_LOW, PS_RATIO_HARD, AllocationParams
from llm_harness.lab.probe import ProbeResult, build_state_space
from llm_harness.lab.summary import predictions

ALPHAS = (0.25, 0.5, 0.75)


def _probe(k_prompt, k_prefix, n=8):
    """Prompts with ``k_prompt`` successes in ``n``; each prompt's prefix states (α 0.25, 0.5, 0.75) with ``k_prefix``."""
    P = len(k_prompt)
    space = build_state_space([40] * P, ALPHAS, budget=64)
    k = np.concatenate([k_prompt, [k_prefix[a] for a in space.alpha[P:]]])
    tokens = np.where(space.is_prefix, 40 * (1 - space.alpha), 40.0)
    return ProbeResult(space, np.full(space.size, n), k, tokens, np.full(space.size, np.nan))


def test_prefix_sampling_restarts_each_too_hard_prompt_from_its_long_prefix():
    # prompts: 0 unsolved (0/8: no success to keep), 1 hard (1/8), 2 hard (2/8 = 0.25 < 0.3), 3 mixed (4/8), 4 easy (7/8)
    probe = _probe(np.array([0, 1, 2, 4, 7]), {0.25: 2, 0.5: 4, 0.75: 6})
    sp = probe.space
    prop = ALLOCATIONS["prefix_sampling"].proposal(probe, AllocationParams(rho=0.5), 8)
    P = sp.n_prompts
    hard = [1, 2]
    assert PS_LOW == 0.3 and PS_RATIO_HARD == 0.25
    on = np.flatnonzero(prop.mu[P:] > 0) + P
    assert sorted(sp.problem[on].tolist()) == hard and np.allclose(sp.alpha[on], 1 - PS_RATIO_HARD)
    s = len(hard) / P  # 2 of 5 prompts are too hard: 0.4 of the groups (under the cap 0.5)
    assert prop.prefix_share == pytest.approx(s) and prop.biased
    assert prop.mu[:P] == pytest.approx((1 - s) / P) and prop.mu.sum() == pytest.approx(1.0)
    capped = ALLOCATIONS["prefix_sampling"].proposal(probe, AllocationParams(rho=0.25), 8)
    assert capped.prefix_share == pytest.approx(0.25)
    none_hard = ALLOCATIONS["prefix_sampling"].proposal(_probe(np.array([4, 5, 8]), {0.25: 2, 0.5: 4, 0.75: 6}),
                                                        AllocationParams(), 8)
    assert none_hard.prefix_share == 0.0 and not none_hard.biased  # nothing too hard: PS is GRPO


def test_pros_draws_each_prompts_node_nearest_one_half():
    # prompt 0: 0/8, its prefixes 1/8, 4/8, 8/8 -> the α 0.5 state; prompt 1: 4/8 itself (the bare prompt)
    P = 2
    probe = _probe(np.array([0, 4]), {0.25: 1, 0.5: 4, 0.75: 8})
    sp = probe.space
    prop = ALLOCATIONS["pros"].proposal(probe, AllocationParams(rho=0.5), 8)
    d = np.where(sp.is_prefix, 0.0, 1.0 / P)
    chosen = np.flatnonzero(prop.mu - 0.5 * d > 1e-12)  # the candidates carry the ρ share on top of (1 − ρ) d
    assert {(int(sp.problem[s]), float(sp.alpha[s])) for s in chosen} == {(0, 0.5), (1, 0.0)}
    assert prop.mu.sum() == pytest.approx(1.0) and prop.biased
    assert prop.mu[1] == pytest.approx(0.5 / P + 0.5 / P)  # prompt 1: its d share plus its candidate share


def test_app_b_predicts_both_and_advise_ranks_them():
    rng = np.random.default_rng(0)
    probe = _probe(rng.binomial(8, 0.08, size=24), {0.25: 2, 0.5: 4, 0.75: 6})
    preds = predictions(probe, AllocationParams(), ("uniform", "prefix_sampling", "pros"), 8)
    for name in ("prefix_sampling", "pros"):
        assert preds[name]["biased"] and np.isfinite(preds[name]["b4"]["gain"])
    g = gains(probe, AllocationParams(), 8, ("uniform", "prefix_sampling", "pros"))
    assert g["uniform"] == pytest.approx(1.0) and g["pros"] > 1.0  # sparse prompts, prefixes near 0.5: restarts pay
    knobs = tuned(probe, AllocationParams(), 8)
    assert knobs["prefix_sampling"][0] == "rho" and knobs["pros"][0] == "rho"
    assert ALLOCATIONS["prefix_sampling"].prefixes and not ALLOCATIONS["pros"].prefixes
