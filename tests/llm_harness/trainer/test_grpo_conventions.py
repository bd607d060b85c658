"""GRPO conventions pinned against transcriptions of verl 0.9.1's and TRL's formulas.

The transcriptions follow ``verl/trainer/ppo/core_algos.py::compute_grpo_outcome_advantage``
(per-uid ``torch.mean`` / ``torch.std`` — Bessel —, ``(r − mean)/(std + ε)`` with ε = 1e-6, a
single-sample group gets mean 0 and std 1; ``norm_adv_by_std_in_grpo=False`` skips the division),
``kl_penalty(..., "low_var_kl")`` (k3 clamped to [−10, 10]) and TRL's ``GRPOTrainer`` advantage
(``(r − mean)/(std + 1e-4)``, ``torch.std``). Our deliberate departure: a single-sample group gets
advantage 0 (verl: ``r/(1 + ε)``).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from llm_harness.trainer.advantages import group_advantages
from llm_harness.trainer.losses import k3_kl

groups_st = st.lists(
    st.lists(st.one_of(st.sampled_from([0.0, 1.0]), st.floats(0, 1, allow_subnormal=False)), min_size=2, max_size=16),
    min_size=1, max_size=8,
)


def verl_grpo(scores: torch.Tensor, index: list, eps: float = 1e-6, norm_by_std: bool = True) -> torch.Tensor:
    """Transcription of verl's ``compute_grpo_outcome_advantage`` on outcome scores ``scores[bs]``."""
    id2score: dict = {}
    for i in range(scores.shape[0]):
        id2score.setdefault(index[i], []).append(scores[i])
    id2mean, id2std = {}, {}
    for idx, vals in id2score.items():
        if len(vals) == 1:
            id2mean[idx], id2std[idx] = torch.tensor(0.0, dtype=scores.dtype), torch.tensor(1.0, dtype=scores.dtype)
        else:
            t = torch.stack(vals)
            id2mean[idx], id2std[idx] = torch.mean(t), torch.std(t)
    out = scores.clone()
    for i in range(scores.shape[0]):
        out[i] = (scores[i] - id2mean[index[i]]) / (id2std[index[i]] + eps) if norm_by_std else scores[i] - id2mean[index[i]]
    return out


def trl_grpo(rewards: torch.Tensor, g: int, eps: float = 1e-4) -> torch.Tensor:
    """Transcription of TRL's group advantage for equal group sizes ``rewards[n * g]``."""
    r = rewards.view(-1, g)
    mean = r.mean(dim=1).repeat_interleave(g)
    std = r.std(dim=1).repeat_interleave(g)
    return (rewards - mean) / (std + eps)


def _flat(groups):
    scores = torch.tensor([x for g in groups for x in g], dtype=torch.float64)
    index = [i for i, g in enumerate(groups) for _ in g]
    return scores, index


@given(groups_st)
def test_default_grpo_equals_verl(groups):
    scores, index = _flat(groups)
    want = verl_grpo(scores, index).numpy()
    got = np.concatenate(group_advantages("grpo", groups))  # default: Bessel, eps 1e-6
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@given(groups_st)
def test_drgrpo_equals_verl_without_std_normalisation(groups):
    scores, index = _flat(groups)
    want = verl_grpo(scores, index, norm_by_std=False).numpy()
    np.testing.assert_allclose(np.concatenate(group_advantages("drgrpo", groups)), want, rtol=1e-12, atol=1e-12)


@given(st.integers(2, 12), st.integers(1, 5), st.integers(0, 2**31 - 1))
def test_grpo_with_trl_epsilon_equals_trl(g, n, seed):
    r = np.random.default_rng(seed).integers(0, 2, size=(n, g)).astype(np.float64)
    want = trl_grpo(torch.from_numpy(r.reshape(-1)), g).numpy()
    got = np.concatenate(group_advantages("grpo", list(r), eps=1e-4))
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_population_std_is_one_flag_away_and_differs_by_sqrt_g_over_g_minus_1():
    r = [[1.0, 0, 0, 0, 0, 0, 0, 1]]
    bessel, pop = group_advantages("grpo", r, eps=0.0)[0], group_advantages("grpo", r, eps=0.0, ddof=0)[0]
    np.testing.assert_allclose(pop / bessel, np.sqrt(8 / 7), rtol=1e-12)  # ×1.069 at G = 8
    with pytest.raises(ValueError, match="ddof"):
        group_advantages("grpo", r, ddof=2)


def test_singleton_group_is_our_documented_departure():
    assert group_advantages("grpo", [[1.0]])[0].tolist() == [0.0]
    assert verl_grpo(torch.tensor([1.0], dtype=torch.float64), [0]).item() == pytest.approx(1 / (1 + 1e-6))


def test_k3_cap_matches_verl_low_var_kl():
    lp = torch.tensor([[-0.1, -15.0, -3.0]], dtype=torch.float64)
    ref = torch.tensor([[-0.2, -0.1, -3.5]], dtype=torch.float64)
    kl = ref - lp
    ratio = torch.exp(kl)
    want = torch.clamp(ratio - kl - 1, min=-10, max=10)  # verl kl_penalty low_var_kl
    torch.testing.assert_close(k3_kl(lp, ref, cap=10.0), want, rtol=1e-12, atol=1e-12)
    assert float(k3_kl(lp, ref)[0, 1]) > 10  # uncapped without the option
