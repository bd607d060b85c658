"""VSR Appendix B on real policies of the exact gridworld solver (issue 3, item 3)."""

from __future__ import annotations

import numpy as np
import pytest

from gridworld.exact import solve
from gridworld.grid import build_gridworld
from gridworld.policies import encode_states, make_mlp_policy, policy_table
from gridworld.real_policy_theory import mlp_score_vectors, real_policy_problem, tabular_score_vectors, theory_report
from gridworld.score_norms import torch_sq_norm_func
from theory import vsr_variance as vv


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
