"""SVMD experiment (VSR Appendix C, Thm C.5): exact-critic bound, sampled critic, dense gridworld, driver."""

from __future__ import annotations

import csv
import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest

from gridworld import exact
from gridworld import svmd_experiment as se
from gridworld.grid import build_gridworld
from theory import svmd as sv
from theory.instances import random_dense_mdp, random_policy

TRAP_LAYOUT = """
S..X
.#..
...G
"""


@pytest.mark.parametrize("seed", range(6))
def test_exact_critic_satisfies_theorem_c5(seed):
    """J(mu) - J(pi_bar_T) <= D/(eta T) + eta H^3 / 2 with the exact critic (beta = 0), for several eta."""
    rng = np.random.default_rng(seed)
    m = random_dense_mdp(rng, S=5, A=3, H=4)
    H, S, A = m.horizon, m.n_states, m.n_actions
    mu = se.optimal_policy(m.P, m.r)
    pi1 = np.full((H, S, A), 1.0 / A)
    D = sv.comparator_divergence(m.P, m.rho, mu, pi1)
    J_mu = sv.expected_return(m.P, m.r, m.rho, mu)
    for T in (3, 30):
        for scale in (0.1, 1.0, 10.0):
            eta = scale * sv.optimal_step_size(D, H, T)
            _, J = sv.svmd_exact(m.P, m.r, m.rho, pi1, eta, T)
            gap = J_mu - J.mean()
            b = sv.svmd_bound(D, eta, H, T)
            assert -1e-12 <= gap <= b.optimization + b.drift


def test_optimal_policy_beats_random_policies():
    rng = np.random.default_rng(1)
    m = random_dense_mdp(rng, S=5, A=3, H=4)
    mu = se.optimal_policy(m.P, m.r)
    Q, V = sv.evaluate_policy(m.P, m.r, mu)
    np.testing.assert_allclose(V[:-1], Q.max(axis=2), atol=1e-12)  # greedy in its own Q: optimal
    J_mu = sv.expected_return(m.P, m.r, m.rho, mu)
    for _ in range(20):
        pi = random_policy(rng, m.horizon, m.n_states, m.n_actions)
        assert sv.expected_return(m.P, m.r, m.rho, pi) <= J_mu + 1e-12


def test_sampled_critic_matches_exact_within_hoeffding():
    """With many samples, every visited Q_hat(s, a) is within a Hoeffding radius (Bonferroni, 1e-6)."""
    rng = np.random.default_rng(3)
    m = random_dense_mdp(rng, S=4, A=2, H=3)
    pi = random_policy(rng, m.horizon, m.n_states, m.n_actions)
    grid_m = 10**6
    Q_hat, n = se.sampled_critic(m.P, m.r, m.rho, pi, N=20_000, eps=0.1, m=grid_m, rng=np.random.default_rng(0))
    Q, _ = sv.evaluate_policy(m.P, m.r, pi)
    d = sv.stage_occupancy(m.P, m.rho, pi)
    assert n.sum() == 20_000 * m.horizon
    visited = n > 0
    K = int(visited.sum())
    delta = 1e-6
    span = (m.horizon - np.arange(m.horizon))[:, None, None]  # G in [0, H - h]
    radius = span * np.sqrt(np.log(2 * K / delta) / (2 * np.maximum(n, 1))) + 0.5 / grid_m
    assert np.all(np.abs(Q_hat - Q)[visited] <= radius[visited])
    # a pair of sampling probability q = mu_h(s) pi_h(a|s) is missed with prob (1-q)^N <= exp(-qN):
    # every pair with qN >= log(#pairs / 1e-6) must be visited (Bonferroni over pairs)
    q = np.stack([se.vsr_proposal(d[h], Q[h], pi[h], 0.1)[:, None] * pi[h] for h in range(m.horizon)])
    must = q * 20_000 >= np.log(q.size / delta)
    assert must.sum() > K // 2 and np.all(visited[must])


def test_sampled_critic_unvisited_pairs_get_state_mean():
    rng = np.random.default_rng(4)
    m = random_dense_mdp(rng, S=6, A=3, H=3)
    pi = random_policy(rng, m.horizon, m.n_states, m.n_actions)
    Q_hat, n = se.sampled_critic(m.P, m.r, m.rho, pi, N=4, eps=0.5, m=10**6, rng=np.random.default_rng(1))
    for h in range(m.horizon):
        for s in range(m.n_states):
            seen = n[h, s] > 0
            if not seen.any():
                assert np.all(Q_hat[h, s] == 0.0)
            elif not seen.all():
                np.testing.assert_allclose(Q_hat[h, s, ~seen], Q_hat[h, s, seen].mean(), atol=1e-6)


def test_vsr_proposal():
    rng = np.random.default_rng(5)
    d = rng.dirichlet(np.ones(5))
    pi = rng.dirichlet(np.ones(3), size=5)
    Q = rng.uniform(0, 2, size=(5, 3))
    eps = 0.2
    mu = se.vsr_proposal(d, Q, pi, eps)
    assert mu.sum() == pytest.approx(1.0)
    mean = (pi * Q).sum(1)
    sigma = np.sqrt((pi * (Q - mean[:, None]) ** 2).sum(1))
    np.testing.assert_allclose((mu - eps * d) / (1 - eps), d * sigma / (d * sigma).sum(), atol=1e-12)
    # sigma = 0 everywhere: falls back to d
    np.testing.assert_allclose(se.vsr_proposal(d, np.ones((5, 3)), pi, eps), d, atol=1e-15)
    with pytest.raises(ValueError, match="^eps"):
        se.vsr_proposal(d, Q, pi, 0.0)


def test_critic_radius_log_matches_theory():
    for S, A, H, m, T, N, eps in [(2, 2, 2, 1, 5, 10, 0.1), (3, 2, 4, 2, 20, 100, 0.5)]:
        size = (m * H + 1) ** (S * A)
        want = sv.critic_error_radius(1.0, H, T, size, 0.05, eps, N)
        got = se.critic_radius_log(1.0, H, T, se.log_class_size(S, A, H, m), 0.05, eps, N)
        assert got == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("layout,slip,horizon", [(se.SMALL_LAYOUT, 0.1, 8), (TRAP_LAYOUT, 0.2, 6)])
def test_gridworld_dense_matches_exact_solver(layout, slip, horizon):
    mdp = build_gridworld(layout, slip=slip, horizon=horizon).mdp
    m = se.gridworld_dense(mdp)
    rng = np.random.default_rng(7)
    pi = random_policy(rng, horizon, mdp.n_states, mdp.n_actions)
    sol = exact.solve(mdp, pi, solver="numpy")
    assert sv.expected_return(m.P, m.r, m.rho, pi) == pytest.approx(sol.J, abs=1e-12)
    Q, _ = sv.evaluate_policy(m.P, m.r, pi)
    live = ~mdp.terminal
    np.testing.assert_allclose(Q[:, live], np.asarray(sol.q)[:, live], atol=1e-12)


@pytest.mark.parametrize(
    "kwargs,name",
    [
        ({"settings": ("mars",)}, "settings"),
        ({"Ts": ()}, "Ts"),
        ({"Ts": (0,)}, "Ts"),
        ({"Ns": (3, -1)}, "Ns"),
        ({"eps": 0.0}, "eps"),
        ({"epsilons": (1.5,)}, "eps"),
        ({"T": 0}, "T"),
        ({"delta": 1.0}, "delta"),
        ({"eta_scale": -1.0}, "eta_scale"),
        ({"seeds": ()}, "seeds"),
        ({"slip": 2.0}, "slip"),
    ],
)
def test_config_validation(kwargs, name):
    with pytest.raises(ValueError, match=f"^{name}"):
        se.SVMDConfig(**kwargs)


def test_driver_writes_files(tmp_path: Path):
    cfg = se.SVMDConfig(
        out=tmp_path / "svmd", Ts=(2, 4), Ns=(5, 20), epsilons=(0.5, 1.0), T=3, N=10, seeds=(0, 1),
        random_S=4, random_A=2, random_H=3, grid_horizon=6, progress=False,
    )
    assert se.run(cfg) == 0
    out = cfg.out
    for f in ("svmd.csv", "svmd_bound.png", "config.yaml"):
        assert (out / f).stat().st_size > 0
    assert not (out / "svmd_bound.pdf").exists()  # PNG only by default
    rows = list(csv.DictReader((out / "svmd.csv").open()))
    assert len(rows) == len(se.plan(cfg))
    assert set(rows[0]) == set(se.FIELDS)
    for r in rows:
        assert r["holds"] == "True"
        parts = float(r["optimization"]) + float(r["drift"]) + float(r["critic_term"])
        assert float(r["bound"]) == pytest.approx(parts)
        if r["critic"] == "exact":
            assert math.isinf(float(r["N"])) and float(r["critic_term"]) == 0.0
    # the exact-critic row reproduces theory.svmd.svmd_exact
    st = se.build_setting(cfg, "random")
    row = next(r for r in rows if r["setting"] == "random" and r["critic"] == "exact" and r["T"] == "4")
    _, J = sv.svmd_exact(st.mdp.P, st.mdp.r, st.mdp.rho, st.pi1, float(row["eta"]), 4)
    assert float(row["gap"]) == pytest.approx(st.J_mu - J.mean(), abs=1e-12)
    assert dataclasses.asdict(cfg)  # frozen dataclass config


def test_rollout_returns_are_unbiased_for_stage_dependent_policies():
    """Mean Monte-Carlo return-to-go from every (s, a) at h = 0 is within Hoeffding of Q_0 (Bonferroni, 1e-6)."""
    rng = np.random.default_rng(8)
    m = random_dense_mdp(rng, S=3, A=2, H=3)
    r = np.zeros_like(m.r)
    r[:, :, 1] = 1.0  # reward only for action 1, so which stage's policy acts matters
    pi = np.empty((3, 3, 2))
    pi[0], pi[1], pi[2] = [0.9, 0.1], [0.05, 0.95], [0.5, 0.5]
    Q, _ = sv.evaluate_policy(m.P, r, pi)
    n, delta, K = 20_000, 1e-6, 6
    radius = 3 * np.sqrt(np.log(2 * K / delta) / (2 * n))
    gen = np.random.default_rng(0)
    for s in range(3):
        for a in range(2):
            G = se.rollout_returns(m.P, r, pi, 0, np.full(n, s), np.full(n, a), gen)
            assert abs(G.mean() - Q[0, s, a]) <= radius
