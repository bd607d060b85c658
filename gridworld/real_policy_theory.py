"""VSR Appendix B evaluated exactly on a real policy in a tabular MDP.

One call: :func:`appendix_b_report` ``(mdp, pi) -> TheoryReport`` solves the MDP exactly and
evaluates every Appendix B quantity.  For a tabular softmax policy (the default, ``g=None``) the
score-function terms are in closed form, with no ``S x A x (S*A)`` score array: with logits
``θ[s, ·]`` and ``π(·|s) = softmax(θ[s])``, ``∇_θ log π(a|s) = e_s ⊗ (e_a - π(·|s))``, so

* ``H(s, a) = ||e_a - π(·|s)||² = 1 - 2 π(a|s) + ||π(·|s)||²`` (:func:`gridworld.score_norms.tabular_softmax_sq_norm`),
* ``E_{d, π}[r g]`` has block ``θ[s, ·]``: ``Σ_{(t, s)} d(t, s) π(·|s) ⊙ (Q(t, s, ·) - p(t, s))``
  (:func:`tabular_softmax_gradient`; inner products of score vectors of different states vanish).

For other parametrisations pass the score vectors ``g[S, A, P]`` (e.g. :func:`mlp_score_vectors`).
The lower-level path (:func:`real_policy_problem` + :func:`theory_report`) is kept for callers
that hold solver arrays and dense score vectors; both paths share one report implementation.

The finite problem of :mod:`theory.vsr_variance` is built from exact solver output:

* states are the time-augmented decision states ``(t, s)``, ``t < H``, with ``d > 0``;
  ``d^π(t, s) = d[t, s] / Σ d[:H]`` (VSR eq. 2 for a finite horizon);
* the "reward" of ``(t, s, a)`` is the binary return-to-go, ``Bernoulli(Q[t, s, a])``, so
  ``r_bar = p[t, s]`` and ``σ = sqrt(p (1 - p))`` exactly as in VSR §2.2 (eq. (9));
* score vectors ``g(t, s, a) = ∇_θ log π(a | s)`` are the exact per-sample gradients of the
  policy (a stationary policy: the same for every ``t``; a stage-dependent tabular policy
  ``pi[t, s, a]`` has its own logits per stage).

Rows: the solver's ``d[H+1, S]`` and ``p[H+1, S]`` have ``H + 1`` rows (``t = 0..H``) while
``Q[H, S, A]`` and every augmented state have ``t < H``; only ``d[:H]`` (the decision stages)
enters the problem, and row ``H`` (episodes still running after the last decision) is dropped.

With these, ``E_{s~d^π, a~π}[r g] = ∇J / Σ d[:H]`` (the finite-horizon policy gradient up to
the expected episode length), so every identity of Appendix B holds for the real policy and
can be checked against the synthetic-instance versions in ``theory/``.

Sign convention (as in :mod:`theory.vsr_variance`): every gap is ``V(d) - V(μ)``, ``>= 0``
when the proposal ``μ`` is better.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gridworld.score_norms import tabular_softmax_sq_norm
from theory import vsr_variance as vv
from theory._validate import as_array
from theory.instances import FiniteProblem

#: Support of the binary return-to-go.
_BINARY = np.array([0.0, 1.0])


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
    """Dense score vectors ``g[s, a, s'*A + a']`` of a stationary tabular softmax ``pi[s, a]`` w.r.t. its logits.

    ``S x A x (S*A)`` floats: small problems and tests only; :func:`appendix_b_report` uses the
    closed forms instead (module docstring).
    """
    return vv.tabular_softmax_scores(pi)


def tabular_softmax_gradient(d, pi, m1, param) -> np.ndarray:
    """Closed-form ``E_{i~d, a~π_i}[r g]`` of a tabular softmax, as ``grad[k, a]`` over logits ``θ[k, a]``.

    ``d[n]`` (weights of the states ``i``), ``pi[n, A]`` (``π_i = softmax(θ[param[i]])``),
    ``m1[n, A] = E[r | i, a]``, ``param[n]`` (int, the logit row of state ``i``; several states
    may share one, e.g. every stage of a stationary policy).  With ``g(i, a) = e_{param[i]} ⊗
    (e_a - π_i)``: ``grad[k] = Σ_{i: param[i] = k} d_i π_i ⊙ (m1_i - Σ_b π_i(b) m1_i(b))``;
    rows ``0 .. max(param)`` are returned (VSR §2.2 score function ``g``; Lemma B.1's ``∇J``).
    """
    d = as_array(d, "d", ndim=1)
    pi = as_array(pi, "pi", shape=(d.shape[0], None))
    m1 = as_array(m1, "m1", shape=pi.shape)
    param = np.asarray(param)
    if param.shape != d.shape or not np.issubdtype(param.dtype, np.integer) or (param.size and param.min() < 0):
        raise ValueError(f"param: expected non-negative integers of shape {d.shape}, got {param.dtype} {param.shape}")
    rbar = np.einsum("ia,ia->i", pi, m1)
    contrib = d[:, None] * pi * (m1 - rbar[:, None])
    grad = np.zeros((int(param.max()) + 1 if param.size else 0, pi.shape[1]))
    np.add.at(grad, param, contrib)
    return grad


@dataclass(frozen=True)
class RealPolicyProblem:
    """The finite problem on reachable decision states plus the bookkeeping to map back.

    The ``n`` augmented states are the ``(t, s)`` with ``t < H`` and ``d[t, s] > 0`` (the
    ``H``-row side of the solver's arrays; ``d[H]`` is not used).
    """

    problem: FiniteProblem
    t_index: np.ndarray  #: stage of each augmented state, ``[n]`` (``< H``)
    s_index: np.ndarray  #: MDP state of each augmented state, ``[n]``
    z_d: float  #: Σ d[:H] (expected number of decisions)


@dataclass(frozen=True)
class _Augmented:
    """Reachable decision states of ``d[H+1, S]`` and their binary return-to-go law."""

    t_index: np.ndarray
    s_index: np.ndarray
    z_d: float
    d: np.ndarray  #: d^π on the augmented states (sums to 1)
    r_probs: np.ndarray  #: [n, A, 2]: Pr(r = 0), Pr(r = 1) given (t, s, a)


def _augmented(d, q) -> _Augmented:
    d = np.asarray(d, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    H = q.shape[0]
    live = d[:H] > 0
    t_idx, s_idx = np.nonzero(live)
    z = float(d[:H][live].sum())
    qa = np.clip(q[t_idx, s_idx], 0.0, 1.0)
    return _Augmented(t_idx, s_idx, z, d[:H][live] / z, np.stack([1.0 - qa, qa], axis=2))


def real_policy_problem(d, p, q, pi, g) -> RealPolicyProblem:
    """Assemble the Appendix B problem from exact arrays, with dense score vectors.

    ``d[H+1, S]``, ``p[H+1, S]`` (sweeps; only rows ``t < H`` are used), ``q[H, S, A]`` (``Q``),
    stationary ``pi[S, A]`` and ``g[S, A, P]`` (score vectors per MDP state).  For a tabular
    softmax policy prefer :func:`appendix_b_report`, which needs no score array.
    """
    aug = _augmented(d, q)
    prob = FiniteProblem(
        d=aug.d,
        pi=np.asarray(pi, dtype=np.float64)[aug.s_index],
        g=np.asarray(g, dtype=np.float64)[aug.s_index],
        r_values=_BINARY,
        r_probs=aug.r_probs,
    )
    return RealPolicyProblem(prob, aug.t_index, aug.s_index, aug.z_d)


@dataclass(frozen=True)
class TheoryReport:
    """Every Appendix B quantity of one real policy (one row of the theory table).

    Distributions are over the ``n_states`` reachable decision states ``(t, s)``, ``t < H`` (the
    ``H``-row side: the solver's ``d[H+1, S]`` loses its row ``H``), with ``d = d^π`` normalised
    by ``Σ d[:H]``.  Gaps are ``V(d) - V(μ)`` (``>= 0`` when ``μ`` is better), ``V`` is the trace
    variance of Lemma B.1 with baseline ``r_bar = p``.
    """

    J: float  #: success probability of the policy from the MDP's initial distribution
    n_states: int  #: number of reachable decision states (t, s), t < H
    V_on_policy: float  #: V(d^π; r_bar)
    V_mu_var: float  #: V(μ_var; r_bar)
    V_mu_eps: float  #: V(μ_ε; r_bar)
    V_optimal: float  #: V(μ*, b*_w) (Thm B.2)
    exact_gap: float  #: V(d) - V(μ_var) from Lemma B.1
    clean_gap: float  #: g0_ed_EH · Var_d(σ) (Thm B.5's prediction, with G0 = g0_ed_EH and Var over all of d)
    g0_ed_EH: float  #: G0 = E_{s~d}[E[H|s]]: the one clean_gap uses
    g0_ed_K: float  #: G0 = E[K] under d restricted to σ > 0 (Lemma B.8's E[K]; equals g0_ed_EH under B.3 + B.4)
    b8_gap: float  #: V(d) - V(μ_var) from the Lemma B.8 decomposition (moments)
    jensen: float  #: Lemma B.8's -E[K] Var(σ) (paper sign: a term of V(μ_var) - V(d))
    coupling: float  #: Lemma B.8's Δ_coup (paper sign: a term of V(μ_var) - V(d))
    b3_max_deviation: float  #: max |E[H|s,r] - E[H|s]| (0 under Assumption B.3)
    b4_cv: float  #: coefficient of variation of E[H|s] under d (0 under Assumption B.4)
    b6_lhs: float
    b6_rhs: float
    b6_holds: bool
    b7_coupling_bound: float  #: (3/2) sqrt(Var σ Var K)
    grad_norm_sq: float  #: ||E_{d}[r g]||^2


def _report(d, pi, H, r_values, r_probs, grad_norm_sq: float, *, J: float, eps: float) -> TheoryReport:
    """The report from the moments only: ``d[n]``, ``pi[n, A]``, ``H[n, A]``, ``r_probs[n, A, K]``, ``||∇J||²``.

    Lemma B.1 needs the score vectors only through ``H`` and ``||E_d[r g]||²``, so the dense
    (:func:`theory_report`) and closed-form (:func:`appendix_b_report`) paths both end here.
    """
    m1, m2 = vv.reward_moments(r_values, r_probs)
    rbar = vv.state_reward_mean(pi, m1)
    sig = vv.state_reward_std(pi, m1, m2)

    def V(mu, b) -> float:
        return vv.trace_variance_from_M(d, mu, vv.signal_second_moment(pi, H, m1, m2, b), grad_norm_sq)

    muvar = vv.variance_proposal(d, sig)
    mue = vv.smoothed_proposal(muvar, d, eps)
    V_d = V(d, rbar)
    V_var = V(muvar, rbar)
    V_eps = V(mue, rbar)
    bstar = vv.optimal_baseline(pi, H, m1)
    V_opt = V(vv.optimal_proposal(d, pi, H, m1, m2), bstar)
    rep = vv.gradient_scale_report(d, pi, H, r_probs)
    G_state = rep.G_state
    G0 = float(d @ G_state)
    b4_cv = float(np.sqrt(max(d @ (G_state - G0) ** 2, 0.0)) / G0) if G0 > 0 else float("nan")
    K, _ = vv.gradient_ratio_K(vv.signal_second_moment(pi, H, m1, m2, rbar), sig)
    dec = vv.variance_gap_decomposition(d, sig, K)
    b6 = vv.assumption_b6(d, sig, K)
    chain = vv.theorem_b7_chain(d, sig, K)
    return TheoryReport(
        J=float(J),
        n_states=int(d.size),
        V_on_policy=V_d,
        V_mu_var=V_var,
        V_mu_eps=V_eps,
        V_optimal=V_opt,
        exact_gap=V_d - V_var,
        clean_gap=vv.clean_variance_gap(d, sig, G0) if G0 > 0 else float("nan"),
        g0_ed_EH=G0,
        g0_ed_K=dec.mean_K,
        b8_gap=dec.gap,
        jensen=dec.jensen,
        coupling=dec.coupling,
        b3_max_deviation=rep.b3_max_deviation,
        b4_cv=b4_cv,
        b6_lhs=b6.lhs,
        b6_rhs=b6.rhs,
        b6_holds=b6.holds,
        b7_coupling_bound=chain.coupling_bound[1],
        grad_norm_sq=float(grad_norm_sq),
    )


def theory_report(rp: RealPolicyProblem, J: float, *, eps: float = 0.1) -> TheoryReport:
    """Evaluate Lemma B.1, Thm B.2/B.5, Lemma B.8 and Assumption B.6/Thm B.7 on ``rp`` (dense scores).

    ``rp`` comes from :func:`real_policy_problem`; ``J`` is the policy's success probability.
    The documented one-call path is :func:`appendix_b_report`.
    """
    P = rp.problem
    grad = P.grad
    return _report(P.d, P.pi, P.H, P.r_values, P.r_probs, float(grad @ grad), J=J, eps=eps)


def appendix_b_report(mdp, pi, *, g=None, eps: float = 0.1, solver: str = "numba_parallel") -> TheoryReport:
    """VSR Appendix B (Lemma B.1 - Remark B.10) of policy ``pi`` on ``mdp`` in one call, exactly.

    ``pi`` is a tabular softmax policy ``pi[S, A]`` or ``pi[H, S, A]`` (logits per stage) and,
    with ``g=None``, ``H`` and ``||E_d[r g]||²`` are in closed form (module docstring; no score
    array).  Pass ``g[S, A, P]`` (score vectors of a stationary ``pi[S, A]`` under another
    parametrisation, e.g. :func:`mlp_score_vectors`) to use those instead.  ``solver`` names the
    exact solver (:data:`gridworld.exact.SOLVERS`); ``eps`` smooths ``μ_ε``.  The solver's
    ``d``/``p`` have ``H + 1`` rows; the report is over the decision states ``t < H``
    (:class:`TheoryReport`).
    """
    from gridworld.exact import solve
    from gridworld.policies import as_policy

    if g is not None and np.ndim(pi) != 2:
        raise ValueError(f"pi: score vectors g[S, A, P] need a stationary pi[S, A], got shape {np.shape(pi)}")
    sol = solve(mdp, pi, eps=eps, solver=solver)
    if g is not None:
        return theory_report(real_policy_problem(sol.d, sol.p, sol.q, pi, g), sol.J, eps=eps)
    pi3 = as_policy(pi, mdp)
    aug = _augmented(sol.d, sol.q)
    stage = aug.t_index if pi3.shape[0] > 1 else np.zeros_like(aug.t_index)
    pi_aug = pi3[stage, aug.s_index]
    grad = tabular_softmax_gradient(aug.d, pi_aug, aug.r_probs @ _BINARY, stage * mdp.n_states + aug.s_index)
    return _report(
        aug.d, pi_aug, tabular_softmax_sq_norm(pi_aug), _BINARY, aug.r_probs, float(np.sum(grad * grad)), J=sol.J, eps=eps
    )
