"""The 2026 prefix-restart methods as lab allocations (Prefix Sampling's hard side, PROS's nearest-0.5 node):
what each draws on a probe whose pass rates are chosen, that App. B predicts them, and that ``vsr advise`` ranks them."""

from __future__ import annotations

import numpy as np
import pytest

from llm_harness.lab.advise import gains, tuned
from llm_harness.lab.allocations import (ALLOCATIONS, PROS_POOL_SHARE, PS_RATIO_HARD, AllocationParams,
                                         hard_probability)
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


def test_hard_probability_is_the_chance_a_group_lands_in_the_hard_bucket():
    from scipy.stats import binom

    # n >= G: unbiased (hypergeometric) — its mean over Bin(n, p) draws of k is the binomial probability exactly
    G, n, p = 8, 16, 0.15
    ks = np.arange(n + 1)
    est = hard_probability(ks, np.full(n + 1, n), G)
    want = binom.pmf(1, G, p) + binom.pmf(2, G, p)  # 1 or 2 successes of 8 (< 0.3 x 8 = 2.4)
    assert float(np.sum(binom.pmf(ks, n, p) * est)) == pytest.approx(want, rel=1e-12)
    assert est[0] == 0.0 and est[n] == 0.0  # a prompt never (always) solved in 16 is never hard
    # n < G: the binomial at the Jeffreys rate
    assert hard_probability([1], [4], G)[0] == pytest.approx(binom.pmf(1, G, 1.5 / 5) + binom.pmf(2, G, 1.5 / 5))


def test_prefix_sampling_restarts_prompts_as_often_as_their_groups_are_too_hard():
    # 16 probe draws per state (n >= G): prompts 0/16 (never hard), 2/16, 4/16, 8/16, 16/16 (never hard)
    probe = _probe(np.array([0, 2, 4, 8, 16]), {0.25: 4, 0.5: 8, 0.75: 12}, n=16)
    sp = probe.space
    P = sp.n_prompts
    prop = ALLOCATIONS["prefix_sampling"].proposal(probe, AllocationParams(rho=0.5), 8)
    h = hard_probability(probe.k[:P], probe.n[:P], 8)
    assert h[0] == 0 and h[4] == 0 and h[1] > h[2] > h[3] > 0
    on = np.flatnonzero(prop.mu[P:] > 0) + P
    assert sorted(sp.problem[on].tolist()) == [1, 2, 3] and np.allclose(sp.alpha[on], 1 - PS_RATIO_HARD)
    s = h.mean() / (1 + h.mean())  # prefix tasks take fresh slots: s = (1 − s) h
    assert prop.prefix_share == pytest.approx(s) and prop.biased
    assert prop.mu[on] == pytest.approx(s * h[sp.problem[on]] / h.sum())
    assert prop.mu[:P] == pytest.approx((1 - s) / P) and prop.mu.sum() == pytest.approx(1.0)
    capped = ALLOCATIONS["prefix_sampling"].proposal(probe, AllocationParams(rho=0.05), 8)
    assert capped.prefix_share == pytest.approx(0.05)
    none_hard = ALLOCATIONS["prefix_sampling"].proposal(_probe(np.array([0, 16]), {0.25: 2, 0.5: 4, 0.75: 6}, n=16),
                                                        AllocationParams(), 8)
    assert none_hard.prefix_share == 0.0 and not none_hard.biased  # never a hard group: PS is GRPO


def test_pros_draws_the_nodes_nearest_one_half_of_the_prompts_nearest_it():
    # 8 prompts: prompt 0's nodes 0/8 | 1/8, 4/8, 8/8 -> its α 0.5 state; prompt 1 itself at 4/8; the others 0/8
    # with prefixes 1/8, 2/8, 8/8 (their best node, 2/8, is farther from 0.5). PROS_POOL_SHARE x 8 = 2 prompts.
    k_prompt = np.array([0, 4, 0, 0, 0, 0, 0, 0])
    probe = _probe(k_prompt, {0.25: 1, 0.5: 4, 0.75: 8})
    sp = probe.space
    P = sp.n_prompts
    probe.k[P:] = np.where(sp.problem[P:] < 2, probe.k[P:], np.select([sp.alpha[P:] == 0.5], [2], probe.k[P:]))
    prop = ALLOCATIONS["pros"].proposal(probe, AllocationParams(rho=0.5), 8)
    d = np.where(sp.is_prefix, 0.0, 1.0 / P)
    chosen = np.flatnonzero(prop.mu - 0.5 * d > 1e-12)  # the candidates carry the ρ share on top of (1 − ρ) d
    assert PROS_POOL_SHARE * P == 2
    assert {(int(sp.problem[s]), float(sp.alpha[s])) for s in chosen} == {(0, 0.5), (1, 0.0)}
    assert prop.mu.sum() == pytest.approx(1.0) and prop.biased
    assert prop.mu[1] == pytest.approx(0.5 / P + 0.5 / 2)  # prompt 1: its d share plus half the ρ share


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
