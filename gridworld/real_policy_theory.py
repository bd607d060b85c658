"""VSR Appendix B evaluated exactly on a real policy in a tabular MDP (issue 3, item 3).

The finite problem of :mod:`theory.vsr_variance` is built from exact solver output:

* states are the time-augmented decision states ``(t, s)``, ``t < H``, with ``d > 0``;
  ``d^π(t, s) = d[t, s] / Σ d[:H]`` (VSR eq. 2 for a finite horizon);
* the "reward" of ``(t, s, a)`` is the binary return-to-go, ``Bernoulli(Q[t, s, a])``, so
  ``r_bar = p[t, s]`` and ``σ = sqrt(p (1 - p))`` exactly as in SPEC §0;
* score vectors ``g(t, s, a) = ∇_θ log π(a | s)`` are the exact per-sample gradients of the
  policy (a stationary policy: the same for every ``t``), from ``torch.func`` for the MLP or in
  closed form for a tabular softmax.

With these, ``E_{s~d^π, a~π}[r g] = ∇J / Σ d[:H]`` (the finite-horizon policy gradient up to
the expected episode length), so every identity of Appendix B holds for the real policy and
can be checked against the synthetic-instance versions in ``theory/``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from theory import vsr_variance as vv
from theory.instances import FiniteProblem


def mlp_score_vectors(model, x) -> np.ndarray:
    """Exact ``g[s, a, P]`` = ∇_θ log π(a | x_s) of a torch policy (float64), via ``torch.func``."""
    import torch
    from torch.func import functional_call, jacrev

    dtype = next(model.parameters()).dtype
    xt = torch.as_tensor(np.asarray(x, dtype=np.float64), dtype=dtype)
    params = {k: v.detach() for k, v in model.named_parameters()}

    def logp(prm):
        return torch.log_softmax(functional_call(model, prm, (xt,)), dim=-1)  # [S, A]

    jac = jacrev(logp)(params)  # each [S, A, *param_shape]
    S, A = xt.shape[0], next(iter(jac.values())).shape[1]
    return torch.cat([v.reshape(S, A, -1) for v in jac.values()], dim=2).double().numpy()


def tabular_score_vectors(pi) -> np.ndarray:
    """Score vectors of a stationary tabular softmax policy ``pi[s, a]`` w.r.t. its logits."""
    return vv.tabular_softmax_scores(pi)


@dataclass(frozen=True)
class RealPolicyProblem:
    """The finite problem on reachable decision states plus the bookkeeping to map back."""

    problem: FiniteProblem
    t_index: np.ndarray  #: stage of each augmented state
    s_index: np.ndarray  #: MDP state of each augmented state
    z_d: float  #: Σ d[:H] (expected number of decisions)


def real_policy_problem(d, p, q, pi, g) -> RealPolicyProblem:
    """Assemble the Appendix B problem from exact arrays.

    ``d[H+1, S]``, ``p[H+1, S]`` (sweeps), ``q[H, S, A]`` (``Q``), stationary ``pi[S, A]`` and
    ``g[S, A, P]`` (score vectors per MDP state).
    """
    d = np.asarray(d, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    H = q.shape[0]
    live = d[:H] > 0
    t_idx, s_idx = np.nonzero(live)
    z = float(d[:H][live].sum())
    dv = d[:H][live] / z
    qa = np.clip(q[t_idx, s_idx], 0.0, 1.0)
    r_probs = np.stack([1.0 - qa, qa], axis=2)
    prob = FiniteProblem(
        d=dv,
        pi=np.asarray(pi, dtype=np.float64)[s_idx],
        g=np.asarray(g, dtype=np.float64)[s_idx],
        r_values=np.array([0.0, 1.0]),
        r_probs=r_probs,
    )
    return RealPolicyProblem(prob, t_idx, s_idx, z)


@dataclass(frozen=True)
class TheoryReport:
    """Every Appendix B quantity of one real policy (one row of the theory table)."""

    J: float
    n_states: int
    V_on_policy: float  #: V(d^π; r_bar)
    V_mu_var: float  #: V(μ_var; r_bar)
    V_mu_eps: float  #: V(μ_ε; r_bar)
    V_optimal: float  #: V(μ*, b*_w) (Thm B.2)
    exact_gap: float  #: V(d) - V(μ_var)
    clean_gap: float  #: G0 Var_d(σ) with G0 = E_d[E[H|s]] (what Thm B.5 would predict)
    b8_gap: float  #: -(Lemma B.8 decomposition) = V(d) - V(μ_var) from the moments
    jensen: float
    coupling: float
    b3_max_deviation: float  #: max |E[H|s,r] - E[H|s]| (0 under Assumption B.3)
    b4_cv: float  #: coefficient of variation of E[H|s] under d (0 under Assumption B.4)
    b6_lhs: float
    b6_rhs: float
    b6_holds: bool
    b7_coupling_bound: float  #: (3/2) sqrt(Var σ Var K)
    grad_norm_sq: float  #: ||E_{d}[r g]||^2


def theory_report(rp: RealPolicyProblem, J: float, *, eps: float = 0.1) -> TheoryReport:
    """Evaluate Lemma B.1, Thm B.2/B.5, Lemma B.8 and Assumption B.6/Thm B.7 on ``rp``."""
    P = rp.problem
    sig = P.sigma
    rbar = P.rbar
    muvar = vv.variance_proposal(P.d, sig)
    mue = vv.smoothed_proposal(muvar, P.d, eps)
    V_d = P.V(P.d, rbar)
    V_var = P.V(muvar, rbar)
    V_eps = P.V(mue, rbar)
    bstar = vv.optimal_baseline(P.pi, P.H, P.m1)
    V_opt = P.V(vv.optimal_proposal(P.d, P.pi, P.H, P.m1, P.m2), bstar)
    rep = vv.gradient_scale_report(P.d, P.pi, P.H, P.r_probs)
    G_state = rep.G_state
    G0 = float(P.d @ G_state)
    b4_cv = float(np.sqrt(max(P.d @ (G_state - G0) ** 2, 0.0)) / G0) if G0 > 0 else float("nan")
    M = P.M(rbar)
    K, _ = vv.gradient_ratio_K(M, sig)
    dec = vv.variance_gap_decomposition(P.d, sig, K)
    b6 = vv.assumption_b6(P.d, sig, K)
    chain = vv.theorem_b7_chain(P.d, sig, K)
    grad = P.grad
    return TheoryReport(
        J=float(J),
        n_states=int(P.d.size),
        V_on_policy=V_d,
        V_mu_var=V_var,
        V_mu_eps=V_eps,
        V_optimal=V_opt,
        exact_gap=V_d - V_var,
        clean_gap=vv.clean_variance_gap(P.d, sig, G0) if G0 > 0 else float("nan"),
        b8_gap=-dec.gap,
        jensen=dec.jensen,
        coupling=dec.coupling,
        b3_max_deviation=rep.b3_max_deviation,
        b4_cv=b4_cv,
        b6_lhs=b6.lhs,
        b6_rhs=b6.rhs,
        b6_holds=b6.holds,
        b7_coupling_bound=chain.coupling_bound[1],
        grad_norm_sq=float(grad @ grad),
    )
