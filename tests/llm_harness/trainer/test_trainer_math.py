"""Losses, aggregations and advantage estimators against NumPy references and plain loops."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from llm_harness.tasks import Problem
from llm_harness.trainer.advantages import group_advantages, informative, register_advantage
from llm_harness.trainer.data import ORIGINS, Origin, RolloutGroup, StartState, build_batch
from llm_harness.trainer.losses import (
    AGGREGATIONS,
    aggregate,
    clip_fraction_by_origin,
    k3_kl,
    policy_loss,
    register_aggregation,
    sft_loss,
)
from theory.extra import clipped_surrogate, grpo_advantages

PROB = Problem(id="p0", prompt="Q:1+1=?", answer="2")

reward_groups = st.lists(
    st.lists(st.sampled_from([0.0, 1.0, 0.5]), min_size=2, max_size=9), min_size=1, max_size=6
)


@given(reward_groups)
def test_grpo_matches_numpy_reference_per_group(groups):
    advs = group_advantages("grpo", groups, ddof=0)  # theory's closed form uses the population std
    for g, a in zip(groups, advs):
        np.testing.assert_allclose(a, grpo_advantages(np.array(g)), rtol=1e-12, atol=1e-12)


@given(reward_groups)
def test_rloo_matches_leave_one_out_loop(groups):
    advs = group_advantages("rloo", groups)
    for g, a in zip(groups, advs):
        g = np.array(g)
        ref = np.array([g[i] - np.delete(g, i).mean() for i in range(len(g))])
        np.testing.assert_allclose(a, ref, rtol=1e-12, atol=1e-12)


def test_zero_variance_groups_give_zero_and_are_filtered():
    a = group_advantages("grpo", [[1, 1, 1], [0, 0, 0, 0], [0, 1]], ddof=0)
    assert np.all(a[0] == 0) and np.all(a[1] == 0)
    np.testing.assert_allclose(a[2], [-0.5 / (0.5 + 1e-6), 0.5 / (0.5 + 1e-6)], rtol=1e-12)
    st_ = StartState(prompt_ids=(1, 2), problem=PROB)
    g = RolloutGroup(st_, [(3,), (4,)], [[0.0], [0.0]], [1.0, 1.0], birth_step=0, advantages=[0.0, 0.0])
    assert not informative(g) and not g.mixed


def test_registries_reject_duplicates_and_unknown():
    with pytest.raises(ValueError, match="already registered"):
        register_advantage("grpo")(lambda r, m, e: r)
    with pytest.raises(ValueError, match="already registered"):
        register_aggregation("token_mean")(lambda l, m, n: l.sum())
    with pytest.raises(ValueError, match="advantage"):
        group_advantages("nope", [[0, 1]])
    with pytest.raises(ValueError, match="loss_agg"):
        aggregate("nope", torch.zeros(1, 1), torch.ones(1, 1))


def _rand_case(seed, b=5, t=7):
    g = torch.Generator().manual_seed(seed)
    lp = -torch.rand(b, t, generator=g, dtype=torch.float64) * 2
    old = lp + (torch.rand(b, t, generator=g, dtype=torch.float64) - 0.5) * 1.2
    adv = torch.randn(b, generator=g, dtype=torch.float64)
    mask = (torch.rand(b, t, generator=g) > 0.3).double()
    mask[:, 0] = 1
    return lp, old, adv, mask


@pytest.mark.parametrize("seed", range(5))
def test_policy_loss_matches_numpy_clipped_surrogate(seed):
    lp, old, adv, mask = _rand_case(seed)
    out = policy_loss(lp, old, adv, mask, dual_clip=None)
    ratio = torch.exp(lp - old).numpy()
    ref = -clipped_surrogate(ratio, np.broadcast_to(adv.numpy()[:, None], ratio.shape).copy())
    np.testing.assert_allclose(out.token_loss.detach().numpy(), ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(float(out.loss), (ref * mask.numpy()).sum() / mask.numpy().sum(), rtol=1e-12)


def test_dual_clip_bounds_negative_advantage_loss():
    lp = torch.tensor([[np.log(30.0), np.log(5.0), np.log(30.0)]], dtype=torch.float64)
    old = torch.zeros_like(lp)
    mask = torch.ones_like(lp)
    out = policy_loss(lp, old, torch.tensor([-1.0], dtype=torch.float64), mask, dual_clip=10.0)
    np.testing.assert_allclose(out.token_loss.detach().numpy()[0], [10.0, 5.0, 10.0])
    assert out.dual_clipped.tolist() == [[True, False, True]]
    # positive advantage: no dual clip, ratio clipped at 1 + eps_high
    out = policy_loss(lp, old, torch.tensor([1.0], dtype=torch.float64), mask, dual_clip=10.0)
    np.testing.assert_allclose(out.token_loss.detach().numpy()[0], [-1.28, -1.28, -1.28])
    assert out.clipped.all()


def test_clip_higher_asymmetry():
    old = torch.zeros(1, 2, dtype=torch.float64)
    lp = torch.log(torch.tensor([[0.75, 1.25]], dtype=torch.float64))
    m = torch.ones_like(lp)
    pos = policy_loss(lp, old, torch.tensor([1.0], dtype=torch.float64), m)
    neg = policy_loss(lp, old, torch.tensor([-1.0], dtype=torch.float64), m)
    # A>0: ratio 1.25 < 1.28 is inside; A<0: ratio 0.75 < 0.8 is clipped
    assert pos.clipped.tolist() == [[False, False]]
    assert neg.clipped.tolist() == [[True, False]]


@pytest.mark.parametrize("seed", range(3))
def test_aggregations_match_loops(seed):
    lp, old, adv, mask = _rand_case(seed)
    loss = policy_loss(lp, old, adv, mask).token_loss.detach()
    L, M = loss.numpy(), mask.numpy()
    tok = sum(L[b, t] * M[b, t] for b in range(L.shape[0]) for t in range(L.shape[1])) / M.sum()
    seq = np.mean([sum(L[b] * M[b]) / M[b].sum() for b in range(L.shape[0])])
    dr = sum((L[b] * M[b]).sum() for b in range(L.shape[0])) / (L.shape[0] * 16)
    np.testing.assert_allclose(float(aggregate("token_mean", loss, mask)), tok, rtol=1e-12)
    np.testing.assert_allclose(float(aggregate("seq_mean_token_mean", loss, mask)), seq, rtol=1e-12)
    np.testing.assert_allclose(float(aggregate("seq_mean_token_sum_norm", loss, mask, 16)), dr, rtol=1e-12)
    assert set(AGGREGATIONS) >= {"token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm"}


def test_policy_loss_gradient_matches_finite_differences():
    lp, old, adv, mask = _rand_case(7, b=3, t=4)
    lp = lp.clone().requires_grad_(True)
    w = torch.tensor([0.5, 1.0, 2.0], dtype=torch.float64)
    ref = lp.detach() - 0.1

    def f(x):
        return policy_loss(x, old, adv, mask, weights=w, ref_logprobs=ref, kl_coef=0.3).loss

    assert torch.autograd.gradcheck(f, (lp,), eps=1e-6, atol=1e-6)


def test_policy_gradient_direction_on_tiny_logits():
    """One step along −∇loss raises the log-prob of a positively advantaged token."""
    torch.manual_seed(0)
    logits = torch.randn(1, 3, 5, dtype=torch.float64, requires_grad=True)
    y = torch.tensor([[1, 2, 3]])
    lp = torch.log_softmax(logits, -1).gather(-1, y[..., None]).squeeze(-1)
    out = policy_loss(lp, lp.detach(), torch.tensor([1.0], dtype=torch.float64), torch.ones(1, 3, dtype=torch.float64))
    out.loss.backward()
    with torch.no_grad():
        new = torch.log_softmax(logits - 0.1 * logits.grad, -1).gather(-1, y[..., None]).squeeze(-1)
    assert torch.all(new > lp.detach())


def test_k3_nonnegative_and_zero_at_equality():
    x = torch.linspace(-3, 0, 11, dtype=torch.float64)
    assert torch.all(k3_kl(x, x) == 0)
    assert torch.all(k3_kl(x, x.flip(0)) >= 0)


def test_weights_and_sft_loss():
    lp, old, adv, mask = _rand_case(1)
    w = torch.full((lp.shape[0],), 2.0, dtype=torch.float64)
    a = policy_loss(lp, old, adv, mask).loss
    b = policy_loss(lp, old, adv, mask, weights=w).loss
    torch.testing.assert_close(b, 2 * a)
    np.testing.assert_allclose(float(sft_loss(lp, mask)), float(-(lp * mask).sum() / mask.sum()))


def test_clip_fraction_by_origin_counts():
    clipped = torch.tensor([[True, False, True], [True, True, False]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    c, t = clip_fraction_by_origin(clipped, mask, torch.tensor([0, 3]), len(ORIGINS))
    assert c.tolist()[:4] == [1.0, 0.0, 0.0, 2.0] and t.tolist()[:4] == [2.0, 0.0, 0.0, 3.0]


def test_build_batch_masks_prompt_and_prefix():
    s1 = StartState(prompt_ids=(5, 6), problem=PROB, prefix_ids=(7,), origin=Origin.REPLAYED_PREFIX)
    s2 = StartState(prompt_ids=(5,), problem=PROB)
    g1 = RolloutGroup(s1, [(8, 9), (10,)], [[-0.1, -0.2], [-0.3]], [1.0, 0.0], 0, advantages=[1.0, -1.0])
    g2 = RolloutGroup(s2, [(11, 12, 13)], [[-0.4, -0.5, -0.6]], [1.0], 0, advantages=[0.5], weights=[3.0])
    b = build_batch([g1, g2], pad_token_id=0)
    assert b.input_ids.tolist() == [[5, 6, 7, 8, 9], [5, 6, 7, 10, 0], [5, 11, 12, 13, 0]]
    assert b.loss_mask.tolist() == [[0, 0, 1, 1], [0, 0, 1, 0], [1, 1, 1, 0]]
    np.testing.assert_allclose(b.old_logprobs.numpy(), [[0, 0, -0.1, -0.2], [0, 0, -0.3, 0], [-0.4, -0.5, -0.6, 0]], rtol=1e-6)
    # targets at masked positions are the response tokens exactly
    tgt = b.input_ids[:, 1:][b.loss_mask > 0].tolist()
    assert tgt == [8, 9, 10, 11, 12, 13]
    assert b.origin.tolist() == [1, 1, 0] and b.weights.tolist() == [1.0, 1.0, 3.0] and b.group.tolist() == [0, 0, 1]
    sub = b.rows(torch.tensor([2]))
    assert sub.input_ids.tolist() == [[5, 11, 12, 13]]


def test_data_model_validation():
    with pytest.raises(ValueError, match="prompt_ids"):
        StartState(prompt_ids=(), problem=PROB)
    with pytest.raises(ValueError, match="n:"):
        StartState(prompt_ids=(1,), problem=PROB, n=0)
    s = StartState(prompt_ids=(1,), problem=PROB)
    with pytest.raises(ValueError, match="behaviour_logprobs"):
        RolloutGroup(s, [(1, 2)], [[0.0]], [1.0], 0)
    with pytest.raises(ValueError, match="advantages"):
        build_batch([RolloutGroup(s, [(1,)], [[0.0]], [1.0], 0)], 0)


def test_training_forward_gradient_matches_finite_difference_on_tiny_model():
    """d loss / d weight through ``sequence_logprobs`` + ``policy_loss`` equals a central difference.

    The head is evaluated in float32 (``chunked_logprobs_entropy``), so the step is 1e-3 and the
    tolerance is the float32 rounding of the difference quotient (~eps32·|loss|/h) plus O(h²)."""
    from llm_harness.trainer.config import ModelConfig
    from llm_harness.trainer.modeling import build_model, sequence_logprobs

    model, _ = build_model(ModelConfig(random_init=True, hidden_size=16, num_layers=1, num_heads=2, max_context=32), 3)
    model = model.double()
    s = StartState(prompt_ids=(5, 6, 7), problem=PROB, prefix_ids=(8,))
    g = RolloutGroup(s, [(9, 10, 11), (12, 1)], [[-3.0, -3.1, -2.9], [-3.2, -2.8]], [1.0, 0.0], 0, advantages=[1.0, -1.0])
    b = build_batch([g], pad_token_id=0)

    def loss_fn():
        lp, _ = sequence_logprobs(model, b.input_ids, b.attention_mask, b.loss_mask, with_entropy=False)
        return policy_loss(lp, b.old_logprobs.double(), b.advantages.double(), b.loss_mask.double()).loss

    w = model.get_output_embeddings().weight  # tied with the input embedding
    model.zero_grad()
    loss0 = loss_fn()
    loss0.backward()
    assert float(w.grad.abs().max()) > 1e-3
    for idx in [(9, 0), (10, 5), (12, 11), (1, 3)]:
        h = 1e-3
        with torch.no_grad():
            w[idx] += h
            up = float(loss_fn())
            w[idx] -= 2 * h
            down = float(loss_fn())
            w[idx] += h
        tol = 8 * np.finfo(np.float32).eps * (abs(float(loss0.detach())) + 1) / h
        np.testing.assert_allclose(float(w.grad[idx]), (up - down) / (2 * h), rtol=1e-3, atol=tol)


@given(st.integers(1, 9), st.integers(1, 7), st.integers(0, 2**31 - 1), st.sampled_from(sorted(["token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm"])))
def test_chunk_shares_recombine_every_aggregation(rows, width, seed, agg):
    """Σ_c share_c · agg(chunk c) = agg(batch) for any split of the rows (gradient accumulation is exact)."""
    from llm_harness.trainer.losses import chunk_share

    assert all(AGGREGATIONS[n].chunk_share is not None for n in ("token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm"))
    rng = np.random.default_rng(seed)
    loss = torch.tensor(rng.normal(size=(rows, width)), dtype=torch.float64)
    mask = torch.tensor(rng.random((rows, width)) < 0.6, dtype=torch.float64)
    perm = torch.tensor(rng.permutation(rows))
    cuts = sorted(rng.choice(np.arange(1, rows), size=min(rows - 1, int(rng.integers(0, rows))), replace=False).tolist()) if rows > 1 else []
    chunks = torch.tensor_split(perm, cuts)
    total = sum(chunk_share(agg, mask[c], mask) * aggregate(agg, loss[c], mask[c], 5.0) for c in chunks)
    assert float(total) == pytest.approx(float(aggregate(agg, loss, mask, 5.0)), rel=1e-12, abs=1e-12)


def test_an_aggregation_without_a_chunk_share_cannot_be_split(monkeypatch):
    from llm_harness.trainer import losses
    from llm_harness.trainer.losses import chunk_share, register_aggregation
    from vsr_util.registry import Registry

    monkeypatch.setattr(losses, "AGGREGATIONS", Registry("aggregation", dict(losses.AGGREGATIONS)))

    @register_aggregation("max_token")  # an aggregation registered without a share
    def _max(loss, mask, norm_len):
        return (loss * mask).max()

    with pytest.raises(ValueError, match=r"'max_token' has no chunk share .* set run.micro_batch_rows: 0"):
        chunk_share("max_token", torch.ones(2, 3), torch.ones(4, 3))
    with pytest.raises(ValueError, match="unknown aggregation"):
        chunk_share("no_such_aggregation", torch.ones(2, 3), torch.ones(4, 3))
