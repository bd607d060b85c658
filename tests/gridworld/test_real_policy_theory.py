"""VSR Appendix B on real policies of the exact gridworld solver."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from gridworld.exact import solve
from gridworld.grid import build_gridworld
from gridworld.policies import encode_states, make_mlp_policy, policy_table, random_softmax_policy, softmax
from gridworld.real_policy_theory import (
    RealPolicyProblem,
    appendix_b_report,
    mlp_score_vectors,
    real_policy_problem,
    tabular_score_vectors,
    tabular_softmax_gradient,
    theory_report,
)
from gridworld.score_norms import tabular_softmax_sq_norm, torch_sq_norm_func
from gw_oracle import random_mdps
from theory import vsr_variance as vv
from theory.instances import FiniteProblem
from theory.svmd import mirror_step


@pytest.fixture(scope="module")
def grid():
    return build_gridworld(horizon=24)


@pytest.fixture(scope="module")
def mlp_case(grid):
    mdp = grid.mdp
    x = encode_states(mdp.n_states, "onehot")
    model = make_mlp_policy(x.shape[1], 4, seed=1)
    with __import__("torch").no_grad():  # sharpen the init so the policy actually reaches G sometimes
        model.fc2.weight.mul_(4.0)
    pi = policy_table(model, x)
    return mdp, x, model, pi, solve(mdp, pi)


def test_mlp_score_vectors_are_exact(mlp_case):
    mdp, x, model, pi, _ = mlp_case
    g = mlp_score_vectors(model, x)
    np.testing.assert_allclose((g**2).sum(axis=2), torch_sq_norm_func(model, x), rtol=1e-12, atol=1e-14)
    vv.check_score_vectors(pi, g)  # sum_a pi g = 0: genuine score functions


def _J_of_params(mdp, model, x, flat):
    import torch

    with torch.no_grad():
        offset = 0
        for prm in model.parameters():
            n = prm.numel()
            prm.copy_(torch.as_tensor(flat[offset : offset + n]).reshape(prm.shape))
            offset += n
    return solve(mdp, policy_table(model, x)).J


def test_policy_gradient_theorem_on_the_real_mdp(mlp_case):
    """z_d * E_{d^π, π}[Q g] equals dJ/dθ of the exact solver (central differences along random directions)."""
    mdp, x, model, pi, sol = mlp_case
    rp = real_policy_problem(sol.d, sol.p, sol.q, pi, mlp_score_vectors(model, x))
    grad = rp.z_d * rp.problem.grad
    import copy

    m2 = copy.deepcopy(model)
    theta = np.concatenate([p.detach().numpy().ravel() for p in m2.parameters()])
    rng = np.random.default_rng(0)
    for _ in range(3):
        v = rng.normal(size=theta.size)
        v /= np.linalg.norm(v)
        h = 1e-5
        fd = (_J_of_params(mdp, m2, x, theta + h * v) - _J_of_params(mdp, m2, x, theta - h * v)) / (2 * h)
        assert fd == pytest.approx(float(grad @ v), rel=1e-5, abs=1e-10)


def test_appendix_b_identities_on_the_mlp(mlp_case):
    mdp, x, model, pi, sol = mlp_case
    rp = real_policy_problem(sol.d, sol.p, sol.q, pi, mlp_score_vectors(model, x))
    rep = theory_report(rp, sol.J)
    assert rep.J > 0.0 and rep.exact_gap > 0
    # Lemma B.8 decomposition equals the Lemma B.1 difference on the real policy
    assert rep.b8_gap == pytest.approx(rep.exact_gap, rel=1e-9, abs=1e-15)
    # Thm B.2: the joint optimum is best; smoothing stays between mu_var and d (convexity)
    assert rep.V_optimal <= min(rep.V_mu_var, rep.V_on_policy) + 1e-15
    assert rep.V_mu_var <= rep.V_mu_eps <= 0.9 * rep.V_mu_var + 0.1 * rep.V_on_policy + 1e-15
    # the real MLP violates B.3 (H depends on the action, and so on the outcome) ...
    assert rep.b3_max_deviation > 1e-3
    # ... yet the Thm B.7 chain holds on it
    P = rp.problem
    K, _ = vv.gradient_ratio_K(P.M(P.rbar), P.sigma)
    for name, (lhs, rhs) in vv.theorem_b7_chain(P.d, P.sigma, K).pairs().items():
        assert lhs <= rhs + 1e-12 * (1 + abs(rhs)), name


def test_thm_b5_exact_on_uniform_tabular_policy(grid):
    """Uniform tabular softmax: H(s, a) = 1 - 1/A for every (s, a), so B.3 and B.4 hold exactly and
    the exact gap V(d) - V(mu_var) must equal G0 Var_d(sigma) on the real MDP."""
    mdp = grid.mdp
    pi = np.full((mdp.n_states, 4), 0.25)
    sol = solve(mdp, pi)
    rp = real_policy_problem(sol.d, sol.p, sol.q, pi, tabular_score_vectors(pi))
    rep = theory_report(rp, sol.J)
    assert rep.b3_max_deviation < 1e-12 and rep.b4_cv < 1e-12
    assert rep.exact_gap > 0
    assert rep.exact_gap == pytest.approx(rep.clean_gap, rel=1e-9)
    P = rp.problem
    np.testing.assert_allclose(vv.optimal_proposal(P.d, P.pi, P.H, P.m1, P.m2), vv.variance_proposal(P.d, P.sigma), atol=1e-12)


# ------------------------------------------------------------------------------------------
# The one-call path: appendix_b_report(mdp, pi), tabular softmax scores in closed form
# ------------------------------------------------------------------------------------------

#: rtol = 4 sqrt(eps) (the project's tolerance convention); absolute floors are scaled to each field's magnitude below.
RTOL = 4.0 * float(np.sqrt(np.finfo(np.float64).eps))
#: Fields on the scale of the variance V (floored by V(d) + ||grad||^2), the rest are O(1).
_V_FIELDS = {"V_on_policy", "V_mu_var", "V_mu_eps", "V_optimal", "exact_gap", "clean_gap", "b8_gap", "jensen", "coupling"}


def assert_reports_close(new, old):
    """Every field of two TheoryReports agrees up to rounding (closed form vs dense score vectors)."""
    v_scale = abs(old.V_on_policy) + old.grad_norm_sq
    for f in dataclasses.fields(old):
        a, b = getattr(new, f.name), getattr(old, f.name)
        if f.name == "b6_holds":
            assert a == b or abs(old.b6_lhs - old.b6_rhs) <= RTOL * abs(old.b6_rhs), f.name
        elif isinstance(b, (int, np.integer)):
            assert a == b, f.name
        elif not np.isfinite(b):
            assert a == b or (np.isnan(a) and np.isnan(b)), f.name
        else:
            scale = v_scale if f.name in _V_FIELDS else (old.grad_norm_sq if f.name == "grad_norm_sq" else 1.0)
            assert abs(a - b) <= RTOL * max(scale, abs(b)), (f.name, a, b)


def _dense_report(mdp, pi, *, eps=0.1):
    """The old four-call path with the dense S x A x (S*A) tabular score array."""
    sol = solve(mdp, pi, eps=eps, solver="numpy")
    return theory_report(real_policy_problem(sol.d, sol.p, sol.q, pi, tabular_score_vectors(pi)), sol.J, eps=eps)


def _both_or_neither(new_fn, old_fn):
    """Run both paths; either both raise ValueError (sigma = 0 wherever d > 0) or both return."""
    try:
        old = old_fn()
    except ValueError:
        with pytest.raises(ValueError):
            new_fn()
        return None, None
    return new_fn(), old


def _real_policies(mdp):
    """Policies the project's solvers produce on ``mdp``: uniform, random softmax, an MLP table, and
    one exact SVMD mirror step from the random one (VSR Algorithm 2 with the exact critic)."""
    x = encode_states(mdp.n_states, "onehot")
    model = make_mlp_policy(x.shape[1], mdp.n_actions, seed=2)
    pi = random_softmax_policy(mdp, seed=5, scale=1.5)
    q = solve(mdp, pi).q
    return {
        "uniform": np.full((mdp.n_states, mdp.n_actions), 1.0 / mdp.n_actions),
        "softmax": pi,
        "mlp": policy_table(model, x),
        "svmd_step": mirror_step(pi, q.mean(axis=0), 3.0),
    }


def test_one_call_equals_dense_on_real_policies(mdp):
    for name, pi in _real_policies(mdp).items():
        new, old = _both_or_neither(lambda: appendix_b_report(mdp, pi, solver="numba_serial"), lambda: _dense_report(mdp, pi))
        if old is not None:
            assert_reports_close(new, old)


def test_one_call_on_stage_dependent_svmd_policy():
    """pi[t, s, a] with logits per stage (two exact SVMD mirror steps) against a dense score array
    over the H*S*A stage logits, assembled by hand."""
    mdp = build_gridworld("S..X\n.#..\n...G", slip=0.1, horizon=9).mdp
    pi = np.full((mdp.horizon, mdp.n_states, mdp.n_actions), 1.0 / mdp.n_actions)
    for _ in range(2):
        pi = mirror_step(pi, solve(mdp, pi).q, 2.0)
    new = appendix_b_report(mdp, pi)
    sol = solve(mdp, pi, solver="numpy")
    H, S, A = pi.shape
    t, s = np.nonzero(sol.d[:H] > 0)
    z = sol.d[:H][t, s].sum()
    qa = np.clip(sol.q[t, s], 0.0, 1.0)
    g = vv.tabular_softmax_scores(pi.reshape(H * S, A))[t * S + s]
    prob = FiniteProblem(sol.d[:H][t, s] / z, pi[t, s], g, np.array([0.0, 1.0]), np.stack([1 - qa, qa], axis=2))
    old = theory_report(RealPolicyProblem(prob, t, s, z), sol.J)
    assert_reports_close(new, old)
    assert new.n_states == t.size and new.J == pytest.approx(sol.J, rel=1e-12)


def test_one_call_with_mlp_score_vectors_is_the_dense_path(mlp_case):
    mdp, x, model, pi, sol = mlp_case
    g = mlp_score_vectors(model, x)
    new = appendix_b_report(mdp, pi, g=g)
    assert new == theory_report(real_policy_problem(sol.d, sol.p, sol.q, pi, g), sol.J)
    with pytest.raises(ValueError, match="pi: score vectors g"):
        appendix_b_report(mdp, np.broadcast_to(pi, (mdp.horizon, *pi.shape)), g=g)


def test_clean_gap_uses_g0_ed_EH(grid):
    """clean_gap = g0_ed_EH Var_d(sigma) over all of d; under B.3 + B.4 (uniform tabular) both G0s are 1 - 1/A."""
    mdp = grid.mdp
    pi = random_softmax_policy(mdp, seed=1)
    rep = appendix_b_report(mdp, pi)
    f = solve(mdp, pi).fields  # [H, S] fields: the report's states are the (t, s) with d^π > 0
    live = f.dvis > 0
    var_all = vv.clean_variance_gap(f.dvis[live], f.sigma[live], 1.0)
    assert rep.n_states == int(live.sum())
    assert rep.clean_gap == pytest.approx(rep.g0_ed_EH * var_all, rel=1e-9)
    assert rep.g0_ed_EH != pytest.approx(rep.g0_ed_K)  # a non-uniform policy violates B.4
    uni = appendix_b_report(mdp, np.full((mdp.n_states, 4), 0.25))
    assert uni.g0_ed_EH == pytest.approx(0.75, rel=1e-12) and uni.g0_ed_K == pytest.approx(0.75, rel=1e-12)
    assert uni.exact_gap == pytest.approx(uni.clean_gap, rel=1e-9) and uni.b8_gap == pytest.approx(uni.exact_gap, rel=1e-9)


@settings(max_examples=30, deadline=None)
@given(case=random_mdps(max_states=12, min_actions=2, max_horizon=8), scale=st.floats(0.0, 4.0))
def test_property_one_call_equals_dense_on_random_mdps(case, scale):
    mdp, seed = case
    pi = random_softmax_policy(mdp, seed=seed + 1, scale=scale)
    new, old = _both_or_neither(lambda: appendix_b_report(mdp, pi, solver="numpy"), lambda: _dense_report(mdp, pi))
    if old is not None:
        assert_reports_close(new, old)


@given(
    n=st.integers(1, 8),
    A=st.integers(2, 4),
    n_params=st.integers(1, 4),
    data=st.data(),
)
def test_property_tabular_softmax_closed_forms(n, A, n_params, data):
    """H and E_d[r g] in closed form equal the dense score-vector versions; states may share logits."""
    logits = data.draw(hnp.arrays(np.float64, (n_params, A), elements=st.floats(-6, 6)))
    param = data.draw(hnp.arrays(np.int64, n, elements=st.integers(0, n_params - 1)))
    d = data.draw(hnp.arrays(np.float64, n, elements=st.floats(0.01, 1.0)))
    m1 = data.draw(hnp.arrays(np.float64, (n, A), elements=st.floats(0.0, 1.0)))
    d = d / d.sum()
    theta_pi = softmax(logits)
    pi = theta_pi[param]
    g = vv.tabular_softmax_scores(theta_pi)[param]  # [n, A, n_params * A]
    dense = vv.policy_gradient(d, pi, g, m1)
    closed = tabular_softmax_gradient(d, pi, m1, param)
    full = np.zeros((n_params, A))
    full[: closed.shape[0]] = closed
    np.testing.assert_allclose(full.ravel(), dense, rtol=0, atol=RTOL * (1.0 + np.abs(dense).max()))
    assert abs(float(np.sum(closed**2)) - float(dense @ dense)) <= RTOL * (float(dense @ dense) + 1e-300) + 1e-15
    np.testing.assert_allclose(tabular_softmax_sq_norm(pi), vv.score_norms(g), rtol=0, atol=RTOL)


def test_tabular_softmax_gradient_validates_param():
    with pytest.raises(ValueError, match="param: expected non-negative integers"):
        tabular_softmax_gradient([1.0], [[0.5, 0.5]], [[0.0, 1.0]], [0.5])
    with pytest.raises(ValueError, match="param: expected non-negative integers"):
        tabular_softmax_gradient([1.0], [[0.5, 0.5]], [[0.0, 1.0]], [-1])
