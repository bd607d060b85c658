"""bf16 mode's rollout correction: unbiased on a tabular softmax policy (exactly, and by Monte Carlo), the
fallback where bf16 is not native, and a bf16 training run that measures its train/sample gap."""

from __future__ import annotations

import math
import warnings
from dataclasses import replace

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from llm_harness.trainer import precision
from llm_harness.trainer.losses import policy_loss
from llm_harness.trainer.precision import rollout_is_weights

K = 6


def _grad(theta0: np.ndarray, actions: torch.Tensor, adv: torch.Tensor, row_w: torch.Tensor,
          behaviour_lp: torch.Tensor | None, threshold: float) -> np.ndarray:
    """d/dθ of the PPO loss at θ = θ_old over rows ``actions`` (one token each), rows weighted by ``row_w`` and,
    with ``behaviour_lp``, by the rollout-correction weights."""
    theta = torch.tensor(theta0, dtype=torch.float64, requires_grad=True)
    logp = torch.log_softmax(theta, 0)[actions][:, None]
    old = logp.detach()
    mask = torch.ones_like(logp)
    w = row_w[:, None].to(torch.float64)
    if behaviour_lp is not None:
        tis, _ = rollout_is_weights(old, behaviour_lp[:, None], mask, threshold)
        w = w * tis.to(torch.float64)
    out = policy_loss(logp, old, adv.to(torch.float64), mask, weights=w, dual_clip=None)
    out.loss.backward()
    return theta.grad.numpy()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(-3, 3), min_size=K, max_size=K), st.lists(st.floats(-1.5, 1.5), min_size=K, max_size=K),
       st.lists(st.floats(-2, 2), min_size=K, max_size=K))
def test_untruncated_correction_is_exactly_the_on_policy_gradient(theta, noise, adv) -> None:
    """Σ_a μ(a) w(a) ∇ℓ(a) = Σ_a π(a) ∇ℓ(a) with w = π/μ (C above every ratio); rows = every action, weighted by
    its probability (times K: token_mean divides by the K rows)."""
    theta = np.asarray(theta)
    pi = torch.softmax(torch.tensor(theta), 0)
    log_mu = torch.log_softmax(torch.tensor(theta) + torch.tensor(noise), 0)
    mu = log_mu.exp()
    a = torch.arange(K)
    A = torch.tensor(adv)
    ratio_max = float((pi / mu).max())
    g_is = _grad(theta, a, A, K * mu, log_mu, threshold=max(2.0, 2 * ratio_max))
    g_on = _grad(theta, a, A, K * pi, None, threshold=2.0)
    np.testing.assert_allclose(g_is, g_on, rtol=1e-9, atol=1e-12)
    ratios = (pi / mu).numpy()
    c = 1.0 + 0.5 * (ratio_max - 1.0)
    cut = np.flatnonzero(ratios > c)
    if ratio_max > 1.5 and len(cut) == 1 and abs(adv[cut[0]]) > 0.1:
        # truncating one action's ratio changes the estimate (biased by design): by μ(a)(C - π/μ)(-A) ∇log π(a)
        g_tr = _grad(theta, a, A, K * mu, log_mu, threshold=c)
        assert not np.allclose(g_tr, g_on, rtol=1e-6, atol=1e-9)


def test_monte_carlo_of_sampled_actions_is_unbiased() -> None:
    """Actions drawn from μ, weighted by the correction: the sample mean of the gradient is within 5.3 standard
    errors (two-sided p ≈ 1e-7 per coordinate) of the on-policy gradient."""
    rng = np.random.default_rng(0)
    theta = rng.normal(size=K)
    log_mu = torch.log_softmax(torch.tensor(theta + rng.normal(scale=0.7, size=K)), 0)
    pi = torch.softmax(torch.tensor(theta), 0)
    A = torch.tensor(rng.normal(size=K))
    thr = 2 * float((pi / log_mu.exp()).max())
    g_on = _grad(theta, torch.arange(K), A, K * pi, None, 2.0)
    n, batches = 4000, 40
    gs = []
    gen = torch.Generator().manual_seed(1)
    for _ in range(batches):
        acts = torch.multinomial(log_mu.exp(), n, replacement=True, generator=gen)
        gs.append(_grad(theta, acts, A[acts], torch.ones(n), log_mu[acts], thr))
    gs = np.array(gs)
    se = gs.std(axis=0, ddof=1) / math.sqrt(batches)
    assert np.all(np.abs(gs.mean(axis=0) - g_on) < 5.3 * se + 1e-12), (gs.mean(axis=0), g_on, se)


def test_weights_metrics_and_rows() -> None:
    train = torch.tensor([[0.0, -1.0, -2.0], [0.0, 0.0, 0.0]])
    beh = torch.tensor([[0.0, -2.0, -1.0], [-5.0, -5.0, -5.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    w, m = rollout_is_weights(train, beh, mask, 2.0, rows=torch.tensor([True, False]))
    assert torch.allclose(w, torch.tensor([[1.0, 2.0, 1.0], [1.0, 1.0, 1.0]]))  # e^1 cut at 2; padding and row 2: 1
    assert m["mismatch_logp_mean"] == pytest.approx(0.5) and m["tis_truncated_frac"] == pytest.approx(0.5)
    with pytest.raises(ValueError, match="shape"):
        rollout_is_weights(train, beh[:, :2], mask, 2.0)


def test_bf16_falls_back_where_not_native(tmp_path, monkeypatch) -> None:
    from trainer_support import make_trainer, tiny_config

    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)
    assert "neither AMX-BF16 nor AVX512-BF16" in precision.bf16_support("cpu")
    run = replace(tiny_config(str(tmp_path / "r")).run, precision="bf16")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tr = make_trainer(str(tmp_path / "r"), run=run)
    try:
        assert not tr.bf16 and not tr.backend.config.autocast_bf16
        assert any("falls back to float32" in str(w.message) for w in caught)
    finally:
        tr.close()


@pytest.mark.skipif(precision.bf16_support("cpu") is not None, reason="bf16 is not native on this CPU")
def test_a_bf16_run_measures_and_corrects_its_gap(tmp_path) -> None:
    from trainer_support import make_trainer, tiny_config

    torch.set_num_threads(1)
    run = replace(tiny_config(str(tmp_path / "r")).run, precision="bf16", group_prompt_once=True)
    tr = make_trainer(str(tmp_path / "r"), run=run)
    try:
        assert tr.bf16 and tr.backend.config.autocast_bf16
        rows = [tr.train_step() for _ in range(3)]
    finally:
        tr.close()
    trained = [r for r in rows if r["optimizer_steps"] > 0]
    assert trained
    for r in trained:
        assert math.isfinite(r["loss"]) and 0 <= r["mismatch_logp_mean"] <= r["mismatch_logp_p99"] + 1e-12
        assert r["mismatch_logp_mean"] > 0  # bf16 sampling and scoring do round differently
        assert 0 < r["tis_weight_mean"] <= 2.0
    assert all(p.dtype == torch.float32 for p in tr.model.parameters())  # master weights stay float32


def _steps(tmp_path, name, n=2, **run_over):
    from trainer_support import make_trainer, tiny_config

    torch.set_num_threads(1)
    base = tiny_config(str(tmp_path / name))
    run = replace(base.run, **run_over)
    tr = make_trainer(str(tmp_path / name), run=run, algo=replace(base.algo, old_logprobs="recompute"))
    try:
        rows = [tr.train_step() for _ in range(n)]
        params = [p.detach().clone() for p in tr.model.parameters()]
    finally:
        tr.close()
    return rows, params


def test_the_in_pass_anchor_gives_the_separate_passes_update_in_float32(tmp_path) -> None:
    """``run.anchor_in_pass``: π_old from the update's own forward (one epoch, one mini-batch) equals the separate
    no-grad pass's up to rounding, so the loss, the gradient norm and the updated weights agree; the pass is gone."""
    sep, p_sep = _steps(tmp_path, "sep")
    inp, p_inp = _steps(tmp_path, "inp", anchor_in_pass=True)
    assert [r["optimizer_steps"] for r in sep] == [r["optimizer_steps"] for r in inp]
    for a, b in zip(sep, inp):
        if a["optimizer_steps"]:
            assert a["loss"] == pytest.approx(b["loss"], rel=1e-4, abs=1e-6)
            assert a["grad_norm"] == pytest.approx(b["grad_norm"], rel=1e-4)
            assert b["time_score_s"] < a["time_score_s"]  # no no-grad pass before the update
    for x, y in zip(p_sep, p_inp):
        torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-6)


@pytest.mark.skipif(precision.bf16_support("cpu") is not None, reason="bf16 is not native on this CPU")
def test_the_in_pass_anchor_measures_and_corrects_the_bf16_gap(tmp_path) -> None:
    sep, _ = _steps(tmp_path, "sep", n=3, precision="bf16")
    inp, _ = _steps(tmp_path, "inp", n=3, precision="bf16", anchor_in_pass=True)
    first = next(i for i, r in enumerate(sep) if r["optimizer_steps"])
    a, b = sep[first], inp[first]  # the same samples (nothing was updated before this step's sampling)
    assert b["optimizer_steps"] and math.isfinite(b["loss"])
    # the gap of a tiny model is kernel rounding (1e-4), which depends on the pass's batch shape: the same order,
    # not the same value
    assert a["mismatch_logp_mean"] / 4 < b["mismatch_logp_mean"] < 4 * a["mismatch_logp_mean"]
    assert 0 < b["tis_weight_mean"] <= 2.0 and b["tis_weight_mean"] == pytest.approx(a["tis_weight_mean"], abs=0.02)


def test_the_in_pass_anchor_is_refused_for_several_mini_batches(tmp_path) -> None:
    from trainer_support import make_trainer, tiny_config

    base = tiny_config(str(tmp_path / "r"))
    tr = make_trainer(str(tmp_path / "r"), run=replace(base.run, anchor_in_pass=True),
                      algo=replace(base.algo, old_logprobs="recompute", mini_batches=2))
    try:
        assert not tr._anchor_in_pass(8)  # two mini-batches: the separate pass stays
        assert tr._anchor_in_pass(1)  # (one row cannot be split)
        r = tr.train_step()
        assert r["time_score_s"] > 0 or not r.get("optimizer_steps")
    finally:
        tr.close()
