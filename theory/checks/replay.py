"""Checks of Replay Appendix E: closed forms of |A| and sigma_g for binary +/-1 rewards."""

from __future__ import annotations

import numpy as np

from theory.checks._registry import Comparison, register_check
from theory.extra import grpo_advantages
from theory.replay import binary_group_stats, pm1_rewards


@register_check("replay_e_closed_forms", "Replay App. E, eqs. 5-8")
def _closed(rng):
    """mu_g, sigma_g and both |A| values equal those computed directly from the +/-1 reward vector."""
    G = int(rng.integers(2, 65))
    k = int(rng.integers(1, G))
    st = binary_group_stats(k, G)
    r = pm1_rewards(k, G)
    A = grpo_advantages(r, eps=0.0, ddof=0)
    return [
        Comparison(st.mean, float(r.mean())),
        Comparison(st.std, float(r.std())),
        Comparison(st.abs_adv_correct, float(np.abs(A[:k]).max())),
        Comparison(st.abs_adv_incorrect, float(np.abs(A[k:]).max())),
        Comparison(st.ratio, float(np.abs(A[0]) / np.abs(A[-1]))),
    ]


@register_check("replay_e_minority_dominance", "Replay App. E, eq. 11")
def _minority(rng):
    """The minority side carries strictly the larger |A| (equal only when k = G/2)."""
    G = int(rng.integers(2, 65))
    k = int(rng.integers(1, G))
    st = binary_group_stats(k, G)
    if 2 * k == G:
        return Comparison(st.abs_adv_correct, st.abs_adv_incorrect)
    big, small = (st.abs_adv_correct, st.abs_adv_incorrect) if k < G - k else (st.abs_adv_incorrect, st.abs_adv_correct)
    return Comparison(small, big, "<", scale=1e-9)
