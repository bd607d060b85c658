"""The gridworld policy-gradient learners and the Figure 2 / compare drivers."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gridworld.exact import solve
from gridworld.figures import CompareConfig, Figure2Config, compare, figure2
from gridworld.pg_experiment import ESTIMATORS, Estimator, PGConfig, make_grid, register_estimator, run_comparison
from gridworld.policies import encode_states, make_mlp_policy, policy_table
from gridworld.real_policy_theory import mlp_score_vectors, real_policy_problem
from concentration import hoeffding_radius


def test_config_validation():
    with pytest.raises(ValueError, match=r"^methods: unknown estimator"):
        PGConfig(methods=("nope",))
    with pytest.raises(ValueError, match=r"^states_per_update: must be >= 1"):
        PGConfig(states_per_update=0)
    with pytest.raises(ValueError, match=r"^optimizer"):
        PGConfig(optimizer="rmsprop")
    with pytest.raises(ValueError, match="already registered"):
        register_estimator(Estimator("on_policy", ESTIMATORS["on_policy"].proposal, ESTIMATORS["on_policy"].weight, ""))


def test_learners_are_deterministic_and_share_the_init():
    cfg = PGConfig(methods=("on_policy", "mu_var_grpo"), seeds=(3,), updates=6, exact_every=3)
    a, b = run_comparison(cfg, progress=False), run_comparison(cfg, progress=False)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x.J, y.J)
        assert x.measured_V == y.measured_V
    assert a[0].J[0] == a[1].J[0]  # same initial network for every method
    assert set(a[0].exact_V) == {0, 3}


def _real_policy(horizon: int, seed: int):
    """Default map, an MLP at init: (pi, exact solution, exact score vectors g[s, a, P])."""
    cfg = PGConfig(horizon=horizon)
    mdp = make_grid(cfg).mdp
    x = encode_states(mdp.n_states, "onehot")
    model = make_mlp_policy(x.shape[1], 4, seed=seed)
    pi = policy_table(model, x)
    return pi, solve(mdp, pi, eps=cfg.eps, solver="numba_serial"), mlp_score_vectors(model, x)


@pytest.mark.parametrize("method", ["on_policy", "mu_var_is", "mu_eps_is"])
def test_estimators_are_unbiased_on_the_real_policy(method):
    """Project the per-sample estimates on grad J: the mean over n draws matches ||grad J|| / z_d
    within a Hoeffding radius (false-failure 1e-6) built from the exact range of the projection."""
    pi, sol, g = _real_policy(horizon=24, seed=0)
    rp = real_policy_problem(sol.d, sol.p, sol.q, pi, g)
    grad = rp.problem.grad
    u = grad / np.linalg.norm(grad)
    est = ESTIMATORS[method]
    mu = est.proposal(sol)
    H, S = mu.shape
    live = mu > 0
    t_all, s_all = np.nonzero(live)
    w_all = est.weight(sol, t_all, s_all, mu)
    gu = g @ u  # [S, A]
    rng_vals = np.abs(w_all[:, None] * gu[s_all]) * np.maximum(sol.p[t_all, s_all], 1 - sol.p[t_all, s_all])[:, None]
    bound = float(rng_vals.max())
    n = 200_000
    rng = np.random.default_rng(5)
    flat = rng.choice(H * S, size=n, p=mu.ravel() / mu.sum())
    t, s = np.divmod(flat, S)
    a = (rng.random(n)[:, None] > np.cumsum(pi[s], axis=1)).sum(axis=1).clip(max=3)
    r = (rng.random(n) < sol.q[t, s, a]).astype(float)
    X = est.weight(sol, t, s, mu) * (r - sol.p[t, s]) * gu[s, a]
    assert abs(X.mean() - float(grad @ u)) < hoeffding_radius(n, 2 * bound, 1e-6)


def test_figure2_and_compare_quick(tmp_path):
    rc = figure2(Figure2Config(out=tmp_path / "f2", seeds=(0,), updates=10, snapshots=(0, 10), progress=False))
    assert rc == 0
    for name in ("figure2.png", "figure2_regimes.png", "curves.csv", "curriculum.csv", "heatmaps.csv", "variance.csv", "config.yaml"):
        assert (tmp_path / "f2" / name).stat().st_size > 0
    assert list((tmp_path / "f2").glob("*.pdf")) == []  # PNG only by default
    curr = pd.read_csv(tmp_path / "f2" / "curriculum.csv")
    assert list(curr.regime.unique()) == ["default", *Figure2Config().regimes]
    assert (curr.groupby("regime")["update"].max() == 10).all()
    assert set(pd.read_csv(tmp_path / "f2" / "heatmaps.csv")["update"]) == {0, 10}
    pg = dataclasses.replace(PGConfig(), seeds=(0, 1), updates=5, exact_every=5)
    assert compare(CompareConfig(out=tmp_path / "cmp", pg=pg, progress=False)) == 0
    text = (tmp_path / "cmp" / "summary.md").read_text()
    assert all(m in text for m in pg.methods)
    with pytest.raises(ValueError, match=r"^regimes: unknown Figure 2 regime"):
        Figure2Config(regimes=("nowhere",))
    with pytest.raises(ValueError, match=r"^snapshots"):
        figure2(Figure2Config(out=Path(tmp_path / "bad"), updates=5, snapshots=(0, 10), progress=False))


@pytest.mark.parametrize("method", ["on_policy", "mu_var_is"])
def test_measured_variance_matches_exact_lemma_b1_on_the_real_policy(method):
    """Mean of ||x_i - E x||^2 over n sampled per-sample gradients equals the exact V(mu; r_bar)
    (Lemma B.1 on the real MLP policy); Bernstein radius from the exact law of that statistic,
    enumerated over every (t, s, a, r) outcome, at false-failure 1e-6."""
    from gridworld.pg_experiment import _exact_variance
    from concentration import bernstein_radius

    pi, sol, g = _real_policy(horizon=16, seed=2)
    est = ESTIMATORS[method]
    mu = est.proposal(sol)
    H, S = mu.shape
    t_all, s_all = np.nonzero(mu > 0)
    w_all = est.weight(sol, t_all, s_all, mu)
    # exact law of the per-sample vector: outcomes (t, s, a, r)
    probs, vecs = [], []
    for t, s, w in zip(t_all, s_all, w_all):
        for a in range(4):
            for r in (0.0, 1.0):
                pr = mu[t, s] * pi[s, a] * (sol.q[t, s, a] if r else 1 - sol.q[t, s, a])
                if pr > 0:
                    probs.append(pr)
                    vecs.append(w * (r - sol.p[t, s]) * g[s, a])
    probs, vecs = np.array(probs), np.array(vecs)
    mean = probs @ vecs
    X = np.sum((vecs - mean) ** 2, axis=1)
    V = float(probs @ X)
    assert V == pytest.approx(_exact_variance(sol, pi, g, method), rel=1e-9)
    n = 300_000
    t_rad = bernstein_radius(n, float(probs @ (X - V) ** 2), float(np.max(np.abs(X - V))), 1e-6)
    rng = np.random.default_rng(11)
    flat = rng.choice(H * S, size=n, p=mu.ravel() / mu.sum())
    t, s = np.divmod(flat, S)
    a = (rng.random(n)[:, None] > np.cumsum(pi[s], axis=1)).sum(axis=1).clip(max=3)
    r = (rng.random(n) < sol.q[t, s, a]).astype(float)
    c = est.weight(sol, t, s, mu) * (r - sol.p[t, s])
    # ||c g - m||^2 = c^2 ||g||^2 - 2 c g.m + ||m||^2, without materialising n x P vectors
    Hn, gm = (g**2).sum(axis=2), g @ mean
    stat = c**2 * Hn[s, a] - 2 * c * gm[s, a] + float(mean @ mean)
    assert abs(stat.mean() - V) < t_rad
