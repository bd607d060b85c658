"""Replay Appendix E closed forms: exhaustive check over small groups, properties, bad input."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from theory.extra import grpo_advantages
from theory.replay import binary_group_stats, pm1_rewards
from theory_strategies import assert_close


@pytest.mark.parametrize("G", [2, 3, 4, 5, 8, 16])
def test_closed_forms_exhaustive(G):
    for k in range(1, G):
        st_ = binary_group_stats(k, G)
        r = pm1_rewards(k, G)
        A = grpo_advantages(r, eps=0.0)
        assert_close(st_.mean, r.mean())
        assert_close(st_.std, r.std())
        np.testing.assert_allclose(np.abs(A[:k]), st_.abs_adv_correct, rtol=1e-12)
        np.testing.assert_allclose(np.abs(A[k:]), st_.abs_adv_incorrect, rtol=1e-12)
        # sigma_g is shared by the whole group; |A| separates the two sides
        assert_close(st_.ratio, (G - k) / k)


@given(G=st.integers(2, 512), data=st.data())
def test_minority_side_has_larger_abs_advantage(G, data):
    k = data.draw(st.integers(1, G - 1))
    s = binary_group_stats(k, G)
    if 2 * k == G:
        assert_close(s.abs_adv_correct, s.abs_adv_incorrect)
    elif k < G - k:
        assert s.minority_is_correct and s.abs_adv_correct > s.abs_adv_incorrect
    else:
        assert not s.minority_is_correct and s.abs_adv_incorrect > s.abs_adv_correct
    # the product of the two magnitudes is always 1
    assert_close(s.abs_adv_correct * s.abs_adv_incorrect, 1.0)


def test_negative_closed_forms_need_binary_rewards():
    """With partial credit the advantages take more than two values: App. E no longer applies."""
    r = np.array([1.0, 0.5, -1.0, -1.0])
    A = grpo_advantages(r, eps=0.0)
    assert len(np.unique(np.round(np.abs(A), 12))) > 2


def test_bad_inputs():
    for k, G in [(0, 4), (4, 4), (2, 1), (1.5, 4)]:
        with pytest.raises(ValueError, match=r"^(k|G): "):
            binary_group_stats(k, G)
