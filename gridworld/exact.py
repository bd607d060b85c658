"""Exact finite-horizon quantities of a policy on a :class:`~gridworld.mdp.TabularMDP`.

Pipeline ("factor once, reuse"): the MDP's :class:`StateGraph` (policy-independent sparsity of
``P_π`` and its transpose) is built once and cached on the MDP; :func:`contract` turns a policy
into a :class:`PolicyKernel` (``P_π`` per stage, plus ``P_π^T``); one forward sweep gives the
stage occupancies ``d[t, s]``, one backward sweep the continuation success ``p[t, s]``, both
from the same kernel.  :func:`solve` bundles everything in an :class:`ExactSolution`.

Formulas (VSR §2.1–2.3, eq. (2), (9); App. B.1, C.1, D.1):

* ``d[t+1, s'] = Σ_s d[t, s] P_π_t(s' | s)`` on non-terminal ``s'``; inflow to terminals ends
  the episode (``absorbed``), ``Σ_s d[t, s] + absorbed[t] = 1``;
* ``p[t, s] = Σ_s' P_π_t(s' | s) p[t+1, s']``, ``p[H, s] = 0``, ``p[t, g] = reward(g)``;
* ``Q[t, s, a] = Σ_s' P(s' | s, a) p[t+1, s']``, ``A = Q - p``; on a terminal state ``Q`` is
  its reward and ``A = 0`` (terminal rows of the transition table are never used);
* ``J(π) = Σ_s init(s) p[0, s]`` = ``reached[H]`` of the forward sweep;
* on the time-augmented space ``(t, s)``, ``t < H``: ``d^π(t, s) = d[t, s] / Σ d[:H]``,
  ``σ = sqrt(p(1-p))``, ``μ_var ∝ d σ``, ``μ_ε = (1-ε) μ_var + ε d^π``.

Exact solvers are registry entries with one signature (:data:`SOLVERS`, selected by the
``solver=`` argument of every function here): ``numba_parallel`` (default), ``numba_serial``,
``numpy`` (reference) and ``scipy``.  The state graph lives in :mod:`gridworld.graph`.

Rows: the sweeps return ``d``, ``p`` with ``H + 1`` rows (``t = 0..H``; row ``H`` is where the
unfinished episodes stand after the last decision, not a decision state), ``Q``/``A`` and the
VSR fields have ``H`` rows (decision stages ``t < H``): ``fields.mu_var[t, s]`` goes with
``d[t, s]`` for ``t < H``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable

import numpy as np

from gridworld import kernels as K
from gridworld.graph import StateGraph, state_graph
from gridworld.mdp import TabularMDP
from gridworld.policies import as_policy
from theory._validate import as_array, check_probability, check_simplex
from vsr_util.registry import Registry

# =============================================================================================
# Policy kernel
# =============================================================================================


@dataclass(frozen=True, eq=False)
class PolicyKernel:
    """``P_π`` of one policy on the MDP's :class:`StateGraph`: the factor every sweep reuses."""

    graph: StateGraph
    """Shared sparsity (:func:`gridworld.graph.state_graph` of the MDP)."""
    data: np.ndarray
    """``float64[n_pi, nnz]``: ``P_π_t`` values; ``n_pi`` = 1 (stationary) or ``H``."""
    t_data: np.ndarray
    """``float64[n_pi, nnz]``: ``P_π_t^T`` values on the transposed structure."""

    @property
    def n_stages(self) -> int:
        """``n_pi``: number of distinct policy stages stored."""
        return int(self.data.shape[0])

    def matrix(self, t: int = 0):
        """``scipy.sparse.csr_matrix`` ``P_π_t[s, s']`` (stage ``t``; shares the arrays)."""
        import scipy.sparse as sp

        g = self.graph
        S = g.indptr.size - 1
        return sp.csr_matrix((self.data[min(t, self.n_stages - 1)], g.indices, g.indptr), shape=(S, S), copy=False)

    def matrix_T(self, t: int = 0):
        """``scipy.sparse.csr_matrix`` of ``P_π_t^T`` (stage ``t``; shares the arrays)."""
        import scipy.sparse as sp

        g = self.graph
        S = g.indptr.size - 1
        return sp.csr_matrix((self.t_data[min(t, self.n_stages - 1)], g.t_indices, g.t_indptr), shape=(S, S), copy=False)


# =============================================================================================
# Solver registry
# =============================================================================================


@dataclass(frozen=True)
class ExactSolver:
    """One implementation of every exact kernel, with uniform signatures (an entry of :data:`SOLVERS`).

    * ``contract(mdp, pi3) -> data[n_pi, nnz]``
    * ``forward(kernel, init, term_idx, term_rew, H, out=None) -> (d[H+1, S], absorbed[H+1], reached[H+1])``
    * ``backward(kernel, term_idx, term_rew, H, out=None) -> p[H+1, S]``
    * ``pair_backup(mdp, p) -> q[H, S*A]``
    * ``vsr(d, p, eps) -> (dvis, sigma, mu_var, mu_eps, z_d, z_mu)`` (``[H, S]`` fields from
      ``[H+1, S]`` sweeps)

    ``out`` (optional) is a preallocated ``(d, absorbed, reached)`` or ``p`` to fill and return,
    for loops that solve the same MDP many times.
    """

    contract: Callable
    forward: Callable
    backward: Callable
    pair_backup: Callable
    vsr: Callable
    description: str = ""


#: name -> :class:`ExactSolver`; add entries with ``SOLVERS.add(name, solver)``; the ``solver=``
#: argument of every function below is looked up here.
SOLVERS: Registry[ExactSolver] = Registry("exact solver")


def _numba_solver(parallel: bool) -> ExactSolver:
    contract_fn = K.contract_values_parallel if parallel else K.contract_values_serial
    fwd = K.forward_sweep_parallel if parallel else K.forward_sweep_serial
    bwd = K.backward_sweep_parallel if parallel else K.backward_sweep_serial
    pb = K.pair_backup_parallel if parallel else K.pair_backup_serial
    vsr = K.vsr_fields_parallel if parallel else K.vsr_fields_serial
    g = state_graph
    return ExactSolver(
        contract=lambda mdp, pi3: contract_fn(mdp.indptr, mdp.probs, g(mdp).pos, g(mdp).indptr, pi3),
        forward=lambda k, init, ti, tr, H, out=None: fwd(
            k.graph.t_indptr, k.graph.t_indices, k.t_data, init, ti, tr, H, dist=k.graph.prefetch, out=out
        ),
        backward=lambda k, ti, tr, H, out=None: bwd(
            k.graph.indptr, k.graph.indices, k.data, ti, tr, H, dist=k.graph.prefetch, out=out
        ),
        pair_backup=lambda mdp, p: pb(mdp.indptr, mdp.indices, mdp.probs, p, dist=g(mdp).prefetch),
        vsr=lambda d, p, eps: vsr(d, p, float(eps)),
        description=f"Numba @njit{'(parallel=True), prange over rows' if parallel else ', serial'}"
        ", software prefetch of the gathers on non-local graphs",
    )


SOLVERS.add("numba_parallel", _numba_solver(True))
SOLVERS.add("numba_serial", _numba_solver(False))
SOLVERS.add(
    "numpy",
    ExactSolver(
        contract=lambda mdp, pi3: K.contract_values_numpy(
            mdp.indptr, mdp.probs, state_graph(mdp).pos, state_graph(mdp).indptr, pi3
        ),
        forward=lambda k, init, ti, tr, H, out=None: K.forward_sweep_numpy(
            k.graph.t_indptr, k.graph.t_indices, k.t_data, init, ti, tr, H, out=out
        ),
        backward=lambda k, ti, tr, H, out=None: K.backward_sweep_numpy(
            k.graph.indptr, k.graph.indices, k.data, ti, tr, H, out=out
        ),
        pair_backup=lambda mdp, p: K.pair_backup_numpy(mdp.indptr, mdp.indices, mdp.probs, p),
        vsr=K.vsr_fields_numpy,
        description="pure NumPy reference (gather + np.add.reduceat)",
    ),
)
SOLVERS.add(
    "scipy",
    ExactSolver(
        contract=lambda mdp, pi3: K.contract_values_scipy(
            mdp.indptr, mdp.indices, mdp.probs, state_graph(mdp).indptr, state_graph(mdp).indices, pi3
        ),
        forward=lambda k, init, ti, tr, H, out=None: K.forward_sweep_scipy(
            [k.matrix_T(t) for t in range(k.n_stages)], init, ti, tr, H, out=out
        ),
        backward=lambda k, ti, tr, H, out=None: K.backward_sweep_scipy(
            [k.matrix(t) for t in range(k.n_stages)], ti, tr, H, out=out
        ),
        pair_backup=lambda mdp, p: K.pair_backup_scipy(mdp.pair_matrix(), p),
        vsr=K.vsr_fields_numpy,
        description="scipy.sparse CSR mat-vecs on the same arrays (VSR fields via NumPy)",
    ),
)


def _solver(name: str) -> ExactSolver:
    return SOLVERS.lookup(name, where="solver")


# =============================================================================================
# Public functions
# =============================================================================================


def contract(mdp: TabularMDP, pi, *, solver: str = "numba_parallel") -> PolicyKernel:
    """Policy contraction ``P_π_t[s, s'] = Σ_a π_t(a|s) P(s'|s, a)`` (VSR App. C.1).

    ``pi`` is ``pi[s, a]`` (stationary) or ``pi[t, s, a]`` with ``t < H`` (stage-dependent).
    The sparsity is the union over actions (entries with ``π = 0`` are kept as zeros).
    """
    impl = _solver(solver)
    pi3 = as_policy(pi, mdp)
    data = np.ascontiguousarray(impl.contract(mdp, pi3))
    graph = state_graph(mdp)
    return PolicyKernel(graph=graph, data=data, t_data=K.transpose_values(data, graph.t_perm))


def _terminal_args(mdp: TabularMDP) -> tuple[np.ndarray, np.ndarray]:
    idx = mdp.terminal_states
    return idx, np.ascontiguousarray(mdp.terminal_reward[idx])


def _as_kernel(mdp: TabularMDP, pi_or_kernel, solver: str) -> PolicyKernel:
    if isinstance(pi_or_kernel, PolicyKernel):
        if pi_or_kernel.graph is not state_graph(mdp):
            raise ValueError("pi: this PolicyKernel was contracted on a different MDP")
        return pi_or_kernel
    return contract(mdp, pi_or_kernel, solver=solver)


def _check_init(mdp: TabularMDP, init) -> np.ndarray:
    if init is None:
        return mdp.init
    init = as_array(init, "init", shape=(mdp.n_states,))
    check_simplex(init, "init")
    if np.any(init[mdp.terminal] > 0):
        raise ValueError("init: must put no mass on terminal states")
    return np.ascontiguousarray(init)


def stage_occupancy(mdp: TabularMDP, pi, *, init=None, solver: str = "numba_parallel"):
    """Stage occupancies ``d[t, s] = Pr(s_t = s, not ended)`` for ``t = 0..H`` (VSR §2.1, eq. (2)).

    ``pi`` is a policy table (see :func:`contract`) or a :class:`PolicyKernel`.  ``init``
    overrides ``mdp.init``.  Returns ``(d[H+1, S], absorbed[H+1], reached[H+1])`` with
    ``Σ_s d[t, s] + absorbed[t] = 1`` and ``reached[t]`` = Pr(goal reached by stage t).
    """
    kern = _as_kernel(mdp, pi, solver)
    ti, tr = _terminal_args(mdp)
    return _solver(solver).forward(kern, _check_init(mdp, init), ti, tr, mdp.horizon)


def continuation_success(mdp: TabularMDP, pi, *, solver: str = "numba_parallel") -> np.ndarray:
    """Continuation success ``p[t, s]`` with ``H - t`` decisions left, ``t = 0..H`` (VSR §2.3, App. D.1)."""
    kern = _as_kernel(mdp, pi, solver)
    ti, tr = _terminal_args(mdp)
    return _solver(solver).backward(kern, ti, tr, mdp.horizon)


def success_probability(mdp: TabularMDP, pi, *, init=None, solver: str = "numba_parallel") -> float:
    """``J(π) = Σ_s init(s) p[0, s]``: probability of reaching a goal within ``H`` decisions."""
    p = continuation_success(mdp, pi, solver=solver)
    return float(_check_init(mdp, init) @ p[0])


def q_values(mdp: TabularMDP, p, *, solver: str = "numba_parallel") -> np.ndarray:
    """``Q[t, s, a] = Σ_s' P(s'|s,a) p[t+1, s']`` for ``t < H`` from ``p[H+1, S]`` (VSR App. C.1)."""
    p = np.ascontiguousarray(as_array(p, "p", shape=(mdp.horizon + 1, mdp.n_states)))
    q = _solver(solver).pair_backup(mdp, p).reshape(mdp.horizon, mdp.n_states, mdp.n_actions)
    q[:, mdp.terminal, :] = mdp.terminal_reward[mdp.terminal][None, :, None]  # terminal rows are never used
    return q


def advantages(q, p) -> np.ndarray:
    """``A[t, s, a] = Q[t, s, a] - p[t, s]`` (``q[H, S, A]``, ``p[H+1, S]``; VSR App. C.1)."""
    q = as_array(q, "q", ndim=3)
    p = as_array(p, "p", shape=(q.shape[0] + 1, q.shape[1]))
    return q - p[:-1, :, None]


def vsr_quantities(d, p, *, eps: float = 0.1, solver: str = "numba_parallel") -> "VSRFields":
    """``d^π``, ``σ``, ``μ_var``, ``μ_ε`` on the time-augmented space (VSR Thm 2.1 (9), §2.3).

    ``d[H+1, S]`` and ``p[H+1, S]`` as returned by the sweeps.  Raises ``ValueError`` when
    ``Σ dσ = 0`` (every reachable state is deterministic, so ``μ_var`` is undefined).
    """
    d = np.ascontiguousarray(as_array(d, "d", ndim=2))
    p = np.ascontiguousarray(as_array(p, "p", ndim=2))
    if d.shape != p.shape or d.shape[0] < 2:
        raise ValueError(f"p: shape {p.shape} must equal d shape {d.shape} with at least 2 stages")
    eps = check_probability(eps, "eps")
    dvis, sigma, mu_var, mu_eps, z_d, z_mu = _solver(solver).vsr(d, p, eps)
    if not z_d > 0:
        raise ValueError("d: has no mass on decision stages (sum of d[:H] is 0)")
    if not z_mu > 0:
        raise ValueError("p: sigma = sqrt(p(1-p)) vanishes wherever d > 0, so mu_var ∝ d·sigma is undefined")
    return VSRFields(dvis=dvis, sigma=sigma, mu_var=mu_var, mu_eps=mu_eps, eps=eps, z_d=float(z_d), z_mu=float(z_mu))


@dataclass(frozen=True, eq=False)
class VSRFields:
    """VSR quantities on the time-augmented space; arrays are ``[t, s]`` with ``t < H``.

    Rows: every array here has ``H`` rows (decision stages), one fewer than the ``d[H+1, S]`` and
    ``p[H+1, S]`` sweeps they come from (row ``H`` of those is not a decision state); row ``t``
    here goes with row ``t`` there.
    """

    dvis: np.ndarray
    """``d^π(t, s) = d[t, s] / z_d`` (sums to 1)."""
    sigma: np.ndarray
    """``σ(t, s) = sqrt(p[t, s] (1 - p[t, s]))``."""
    mu_var: np.ndarray
    """``μ_var(t, s) = d[t, s] σ(t, s) / z_mu`` (sums to 1)."""
    mu_eps: np.ndarray
    """``μ_ε = (1-ε) μ_var + ε d^π``."""
    eps: float
    """Smoothing weight ``ε`` used for ``mu_eps``."""
    z_d: float
    """``Σ_{t<H, s} d[t, s]``: expected number of decisions per episode."""
    z_mu: float
    """``Σ d σ`` (un-normalised mass of ``μ_var``)."""

    def weights(self, which: str = "mu_var") -> np.ndarray:
        """Importance weights ``d^π / μ`` on ``[t, s]`` (0 where ``d^π = 0``; ``inf`` off μ's support)."""
        mu = {"mu_var": self.mu_var, "mu_eps": self.mu_eps, "dvis": self.dvis}[which]
        with np.errstate(divide="ignore", invalid="ignore"):
            w = np.where(self.dvis > 0, self.dvis / mu, 0.0)
        return w


@dataclass(frozen=True, eq=False)
class ExactSolution:
    """Every exact quantity of one policy (all from one :class:`PolicyKernel`).

    Rows: ``d``, ``p`` (and ``absorbed``, ``reached``) have ``H + 1`` rows, ``t = 0..H``;
    ``q``, ``advantages`` and every array of ``fields`` have ``H`` rows, the decision stages
    ``t < H`` (use ``d[:H]`` / ``p[:H]`` next to them).
    """

    mdp: TabularMDP
    """The MDP solved."""
    kernel: PolicyKernel
    """``P_π`` per stage and its transpose (reusable)."""
    d: np.ndarray
    """``d[t, s]``, ``t = 0..H``: sub-probability stage occupancies."""
    absorbed: np.ndarray
    """``absorbed[t]``: probability that the episode ended by stage ``t``."""
    reached: np.ndarray
    """``reached[t]``: probability that a goal was reached by stage ``t``."""
    p: np.ndarray
    """``p[t, s]``, ``t = 0..H``: continuation success with ``H - t`` decisions left."""
    fields: VSRFields | None
    """VSR quantities (``None`` when ``μ_var`` is undefined because ``Σ dσ = 0``)."""
    solver: str = "numba_parallel"
    """Name of the :data:`SOLVERS` entry that produced the arrays."""

    @property
    def J(self) -> float:
        """Success probability from the initial distribution, ``Σ_s init(s) p[0, s]``."""
        return float(self.mdp.init @ self.p[0])

    @functools.cached_property
    def q(self) -> np.ndarray:
        """``Q[t, s, a]`` for ``t < H`` (computed on first access)."""
        return q_values(self.mdp, self.p, solver=self.solver)

    @functools.cached_property
    def advantages(self) -> np.ndarray:
        """``A[t, s, a] = Q[t, s, a] - p[t, s]``."""
        return advantages(self.q, self.p)


def solve(mdp: TabularMDP, pi, *, eps: float = 0.1, solver: str = "numba_parallel") -> ExactSolution:
    """Contract once, then ``d``, ``p``, ``σ``, ``μ_var``, ``μ_ε`` of ``pi`` on ``mdp`` (VSR §2.3, App. D.1)."""
    eps = check_probability(eps, "eps")
    kern = _as_kernel(mdp, pi, solver)
    d, absorbed, reached = stage_occupancy(mdp, kern, solver=solver)
    p = continuation_success(mdp, kern, solver=solver)
    dvis, sigma, mu_var, mu_eps, z_d, z_mu = _solver(solver).vsr(d, p, eps)
    fields = None
    if z_mu > 0:
        fields = VSRFields(dvis=dvis, sigma=sigma, mu_var=mu_var, mu_eps=mu_eps, eps=eps, z_d=float(z_d), z_mu=float(z_mu))
    return ExactSolution(mdp=mdp, kernel=kern, d=d, absorbed=absorbed, reached=reached, p=p, fields=fields, solver=solver)
