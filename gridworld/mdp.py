"""Tabular finite-horizon MDP with a binary terminal reward, stored as sparse state-action rows.

Model (VSR §2.3 and Appendix C.1)
---------------------------------
* ``S`` states, ``A`` actions, horizon ``H`` (number of decisions per episode).
* Transitions are stored in *state-action-pair CSR* form: the pair ``(s, a)`` is row
  ``r = s * A + a``; its successors are ``indices[indptr[r]:indptr[r+1]]`` with probabilities
  ``probs[indptr[r]:indptr[r+1]]`` (each row sums to 1, entries are >= 0).
* Some states are *terminal* (``terminal[s]``): arriving in one ends the episode and pays
  ``terminal_reward[s]`` in {0, 1} (goals pay 1, traps pay 0).  Nothing else pays.  Terminal
  states keep self-loop rows only so that every pair row is a distribution; the solvers never
  act in them.
* ``init[s]`` is the distribution of the first state; it puts no mass on terminal states.

The Markov state of the finite-horizon problem
-----------------------------------------------
Continuation success depends on the time left, so the exact Markov state is the pair
``(s, t)`` (cell, stage), ``t = 0..H-1`` decisions taken so far.  Every solver works on
stage-indexed arrays over the base states:

* ``d[t, s] = Pr(s_t = s, episode not yet ended)``  for ``t = 0..H`` (``d[H]`` is where the
  unfinished episodes stand after the last decision; it is not a decision state),
* ``p[t, s]`` = probability of reaching a goal within the ``H - t`` remaining decisions from
  ``s`` at stage ``t`` (``p[H] = 0`` off the terminals; ``p[t, g] = terminal_reward[g]``),

and the VSR quantities (``d^π``, ``σ``, ``μ_var``, ``μ_ε``) are defined on the time-augmented
space ``(s, t)``, ``t < H``; :func:`gridworld.curriculum.cell_marginals` gives their
marginals over cells (``σ`` ``d``-weighted) used by heatmaps.  Policies may be stationary ``pi[s, a]``
or stage-dependent ``pi[t, s, a]`` (SVMD, VSR Algorithm 2).

Index arrays are ``int32`` (so the same arrays can be handed to ``scipy.sparse`` without a copy
and every kernel streams 4-byte indices); probabilities are ``float64``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, TypeVar

import numpy as np

from theory._validate import as_array, check_nonnegative, check_simplex

#: Tolerance for "each transition row sums to one".
ROW_SUM_ATOL = 1e-9

#: Index dtype of every sparse structure in this package.
INDEX_DTYPE = np.int32

_MAX_INDEX = np.iinfo(INDEX_DTYPE).max

#: Fields that define the transitions; :meth:`TabularMDP.replace` drops the derived cache if one changes.
_TRANSITION_FIELDS = frozenset({"indptr", "indices", "probs", "n_actions"})

#: Instance attribute holding the :meth:`TabularMDP.derived` cache.
_DERIVED = "_derived_cache"

T = TypeVar("T")


@dataclass(frozen=True, eq=False)
class TabularMDP:
    """Finite-horizon MDP, sparse pair-CSR transitions, binary terminal reward (module docstring).

    Construct directly or through a builder (:func:`gridworld.grid.build_gridworld`,
    :func:`gridworld.random_mdp.random_mdp`).  All arrays are validated and made read-only in
    ``__post_init__``; every invalid input raises ``ValueError`` naming the argument.
    """

    indptr: np.ndarray
    """``int32[S*A + 1]``: row pointers of the pair rows ``r = s*A + a``."""
    indices: np.ndarray
    """``int32[nnz]``: successor states of every pair row."""
    probs: np.ndarray
    """``float64[nnz]``: transition probabilities ``P(s' | s, a)`` (rows sum to 1)."""
    n_actions: int
    """``A``: number of actions (the same in every state)."""
    terminal: np.ndarray
    """``bool[S]``: arriving in a terminal state ends the episode."""
    terminal_reward: np.ndarray
    """``float64[S]``: reward paid on arrival, 1 (goal) or 0 (trap) on terminals, 0 elsewhere."""
    init: np.ndarray
    """``float64[S]``: initial-state distribution (no mass on terminal states)."""
    horizon: int
    """``H``: number of decisions per episode (> 0)."""
    name: str = "mdp"
    """Label used in tables and file names."""

    def __post_init__(self) -> None:
        A = self.n_actions
        if isinstance(A, bool) or not isinstance(A, (int, np.integer)) or A <= 0:
            raise ValueError(f"n_actions: must be a positive integer, got {A!r}")
        H = self.horizon
        if isinstance(H, bool) or not isinstance(H, (int, np.integer)) or H <= 0:
            raise ValueError(f"horizon: must be a positive integer, got {H!r}")
        object.__setattr__(self, "n_actions", int(A))
        object.__setattr__(self, "horizon", int(H))

        terminal = np.asarray(self.terminal)
        if terminal.ndim != 1 or terminal.size == 0:
            raise ValueError(f"terminal: expected a non-empty 1-D mask over states, got shape {terminal.shape}")
        if terminal.dtype != np.bool_:
            vals = as_array(terminal, "terminal", ndim=1)
            if not np.all((vals == 0) | (vals == 1)):
                raise ValueError("terminal: entries must be booleans (0/1)")
            terminal = vals.astype(bool)
        S = terminal.size
        if S > _MAX_INDEX or S * A + 1 > _MAX_INDEX:
            raise ValueError(f"terminal: {S} states x {A} actions exceeds the int32 index range")

        indptr = as_array(self.indptr, "indptr", ndim=1, dtype=np.int64)
        if indptr.size != S * A + 1:
            raise ValueError(f"indptr: expected length S*A+1 = {S * A + 1}, got {indptr.size}")
        if indptr[0] != 0:
            raise ValueError(f"indptr: must start at 0, got {indptr[0]}")
        steps = np.diff(indptr)
        if np.any(steps <= 0):
            r = int(np.argmax(steps <= 0))
            raise ValueError(
                "indptr: every pair row needs at least one successor "
                f"(row {r} = (s={r // A}, a={r % A}) is empty or indptr decreases)"
            )
        nnz = int(indptr[-1])
        if nnz > _MAX_INDEX:
            raise ValueError(f"indptr: {nnz} transitions exceed the int32 index range")
        indices = as_array(self.indices, "indices", shape=(nnz,), dtype=np.int64)
        if indices.min() < 0 or indices.max() >= S:
            bad = int(np.argmax((indices < 0) | (indices >= S)))
            raise ValueError(f"indices: successor states must lie in [0, {S}) (entry {bad} is {indices[bad]})")
        probs = as_array(self.probs, "probs", shape=(nnz,))
        check_nonnegative(probs, "probs")
        row_sums = np.add.reduceat(probs, indptr[:-1])
        err = np.abs(row_sums - 1.0)
        if np.any(err > ROW_SUM_ATOL):
            r = int(np.argmax(err))
            raise ValueError(
                f"probs: transition rows must sum to 1 within {ROW_SUM_ATOL:g} "
                f"(row {r} = (s={r // A}, a={r % A}) sums to {row_sums[r]:.12g})"
            )

        reward = as_array(self.terminal_reward, "terminal_reward", shape=(S,))
        if not np.all((reward == 0.0) | (reward == 1.0)):
            raise ValueError("terminal_reward: entries must be 0 or 1 (binary terminal reward)")
        if np.any(reward[~terminal] != 0.0):
            s = int(np.argmax((reward != 0.0) & ~terminal))
            raise ValueError(f"terminal_reward: must be 0 on non-terminal states (state {s} pays {reward[s]})")
        if not np.any(terminal):
            raise ValueError("terminal: at least one terminal state is required")

        init = as_array(self.init, "init", shape=(S,))
        check_simplex(init, "init")
        if np.any(init[terminal] > 0):
            s = int(np.flatnonzero(terminal & (init > 0))[0])
            raise ValueError(f"init: must put no mass on terminal states (state {s} has {init[s]:.6g})")

        for name, arr in (
            ("indptr", indptr.astype(INDEX_DTYPE)),
            ("indices", indices.astype(INDEX_DTYPE)),
            ("probs", np.ascontiguousarray(probs)),
            ("terminal", np.ascontiguousarray(terminal)),
            ("terminal_reward", np.ascontiguousarray(reward)),
            ("init", np.ascontiguousarray(init)),
        ):
            arr = arr.copy() if arr is getattr(self, name) else arr
            arr.setflags(write=False)
            object.__setattr__(self, name, arr)

    # ------------------------------------------------------------------ sizes
    @property
    def n_states(self) -> int:
        """``S``: number of states (terminal ones included)."""
        return int(self.terminal.size)

    @property
    def n_pairs(self) -> int:
        """``S * A``: number of state-action rows."""
        return self.n_states * self.n_actions

    @property
    def nnz(self) -> int:
        """Number of stored transitions."""
        return int(self.indptr[-1])

    @property
    def terminal_states(self) -> np.ndarray:
        """``int32[n_terminal]``: indices of the terminal states."""
        return np.flatnonzero(self.terminal).astype(INDEX_DTYPE)

    @property
    def goal_states(self) -> np.ndarray:
        """``int32[n_goal]``: terminal states paying 1."""
        return np.flatnonzero(self.terminal & (self.terminal_reward == 1.0)).astype(INDEX_DTYPE)

    def pair(self, s: int, a: int) -> int:
        """Row index ``s * A + a`` of the pair ``(s, a)``."""
        return int(s) * self.n_actions + int(a)

    def successors(self, s: int, a: int) -> tuple[np.ndarray, np.ndarray]:
        """``(next_states, probs)`` of the pair ``(s, a)``."""
        r = self.pair(s, a)
        lo, hi = self.indptr[r], self.indptr[r + 1]
        return self.indices[lo:hi], self.probs[lo:hi]

    # ------------------------------------------------------------- variants
    def replace(self, **changes) -> "TabularMDP":
        """Copy with fields changed (validated again), e.g. ``mdp.replace(horizon=64)``.

        When the transitions are unchanged the copy shares the :meth:`derived` cache (so the state
        graph of :func:`gridworld.graph.state_graph` is built once for both, and a
        :class:`~gridworld.exact.PolicyKernel` contracted on one works on the other).
        """
        new = dataclasses.replace(self, **changes)
        if not changes.keys() & _TRANSITION_FIELDS:
            new.__dict__[_DERIVED] = self.__dict__.setdefault(_DERIVED, {})
        return new

    def with_init(self, init) -> "TabularMDP":
        """Copy with another initial distribution ``init[s]``."""
        return self.replace(init=init)

    # ------------------------------------------------------------ exports
    def pair_matrix(self):
        """``scipy.sparse.csr_matrix`` of shape ``(S*A, S)`` sharing this MDP's arrays."""
        import scipy.sparse as sp

        return sp.csr_matrix((self.probs, self.indices, self.indptr), shape=(self.n_pairs, self.n_states), copy=False)

    def dense(self, max_entries: int = 20_000_000) -> np.ndarray:
        """Dense ``P[s, a, s']`` (small MDPs only; raises ``ValueError`` above ``max_entries``)."""
        S, A = self.n_states, self.n_actions
        if S * A * S > max_entries:
            raise ValueError(f"max_entries: dense P would have {S * A * S} entries (> {max_entries})")
        P = np.zeros((S * A, S))
        rows = np.repeat(np.arange(S * A), np.diff(self.indptr))
        np.add.at(P, (rows, self.indices), self.probs)
        return P.reshape(S, A, S)

    # ------------------------------------------------------------ derived structures
    def derived(self, key: str, build: Callable[["TabularMDP"], T]) -> T:
        """``build(self)``, computed once and cached under ``key``, for structures that depend on the
        transitions only (``indptr``, ``indices``, ``probs``, ``n_actions``).

        The MDP does not know what is stored: modules that derive structures own their keys (e.g.
        :func:`gridworld.graph.state_graph` stores the state graph of the exact sweeps under
        ``"state_graph"``), so this data module imports no solver.  Copies from :meth:`replace`
        that keep the transitions share the cache.
        """
        cache = self.__dict__.setdefault(_DERIVED, {})
        if key not in cache:
            cache[key] = build(self)
        return cache[key]

    def __repr__(self) -> str:
        return (
            f"TabularMDP(name={self.name!r}, S={self.n_states}, A={self.n_actions}, H={self.horizon}, "
            f"nnz={self.nnz}, terminals={int(self.terminal.sum())})"
        )


def mdp_from_dense(P, terminal, terminal_reward, init, horizon: int, *, name: str = "dense") -> TabularMDP:
    """Build a :class:`TabularMDP` from a dense ``P[s, a, s']`` (entries > 0 become stored transitions).

    Convenience for tests and small examples; the dense array is validated the same way.
    """
    P = as_array(P, "P", ndim=3)
    S, A, S2 = P.shape
    if S != S2:
        raise ValueError(f"P: expected shape (S, A, S), got {P.shape}")
    check_nonnegative(P, "P")
    flat = P.reshape(S * A, S)
    nz = flat > 0
    counts = nz.sum(axis=1)
    indptr = np.concatenate([[0], np.cumsum(counts)])
    rows, cols = np.nonzero(nz)
    return TabularMDP(
        indptr=indptr,
        indices=cols,
        probs=flat[rows, cols],
        n_actions=A,
        terminal=np.asarray(terminal, dtype=bool),
        terminal_reward=terminal_reward,
        init=init,
        horizon=horizon,
        name=name,
    )
