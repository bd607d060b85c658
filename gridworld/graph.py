"""The state graph of a :class:`~gridworld.mdp.TabularMDP`: the policy-independent sparsity of ``P_π``.

Every exact sweep of :mod:`gridworld.exact` runs on ``P_π[s, s'] = Σ_a π(a|s) P(s'|s, a)``.
Its sparsity (the union over actions of each state's successors, columns sorted) and that of
its transpose do not depend on the policy, so they are built once per MDP by
:func:`build_state_graph` and cached by :func:`state_graph` (through
:meth:`TabularMDP.derived <gridworld.mdp.TabularMDP.derived>`, a cache the MDP keeps for
structures that depend on its transitions only; :mod:`gridworld.mdp` itself imports nothing
from here).  Formulas: VSR §2.3; App. C.1 (policy contraction).

Implementations of the builder (serial Numba, NumPy reference) are entries of
:data:`GRAPH_BUILDERS`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from gridworld import kernels as K
from gridworld.mdp import TabularMDP
from vsr_util.registry import Registry

__all__ = ["GRAPH_BUILDERS", "StateGraph", "build_state_graph", "state_graph"]


@dataclass(frozen=True, eq=False)
class StateGraph:
    """Sparsity of ``P_π`` (union over actions, columns sorted) and of its transpose."""

    indptr: np.ndarray
    """``int32[S+1]``: row pointers of ``P_π``."""
    indices: np.ndarray
    """``int32[nnz]``: successor states (sorted within each row)."""
    pos: np.ndarray
    """``int32[mdp.nnz]``: position in ``indices`` of each pair-CSR entry."""
    t_indptr: np.ndarray
    """``int32[S+1]``: row pointers of ``P_π^T``."""
    t_indices: np.ndarray
    """``int32[nnz]``: predecessor states (sorted within each row)."""
    t_perm: np.ndarray
    """``int32[nnz]``: ``P_π^T`` values are ``data[t_perm]``."""
    far: float = 0.0
    """Fraction of entries more than ``kernels.LOCAL_WINDOW`` states off the diagonal (the same for
    the transpose); decides the software prefetch of the Numba mat-vecs (:func:`kernels.prefetch_distance`)."""

    @property
    def nnz(self) -> int:
        return int(self.indices.size)

    @property
    def prefetch(self) -> int:
        """Prefetch distance of the Numba mat-vecs on this graph (0 = none; decided at call time)."""
        return K.prefetch_distance(self.indptr.size - 1, self.far)


#: name -> ``(structure, transpose)`` kernels of :func:`build_state_graph`.
GRAPH_BUILDERS: Registry[tuple[Callable, Callable]] = Registry(
    "state-graph implementation",
    {
        "numba_serial": (K.graph_structure_serial, K.transpose_structure_serial),
        "numpy": (K.graph_structure_numpy, K.transpose_structure_numpy),
    },
)


def build_state_graph(mdp: TabularMDP, *, impl: str = "numba_serial") -> StateGraph:
    """Build the :class:`StateGraph` of ``mdp`` (uncached; ``impl`` names a :data:`GRAPH_BUILDERS` entry).

    ``mdp`` holds ``S`` states, ``A`` actions and pair-CSR transitions; the result has ``S + 1``
    row pointers and ``nnz`` (union over actions) entries for ``P_π`` and for ``P_π^T`` (module doc).
    """
    structure, transpose = GRAPH_BUILDERS.lookup(impl, where="impl")
    c_indptr, c_indices, pos = structure(mdp.indptr, mdp.indices, mdp.n_states, mdp.n_actions)
    t_indptr, t_indices, t_perm = transpose(c_indptr, c_indices, mdp.n_states)
    arrays = dict(indptr=c_indptr, indices=c_indices, pos=pos, t_indptr=t_indptr, t_indices=t_indices, t_perm=t_perm)
    for a in arrays.values():
        a.setflags(write=False)
    return StateGraph(**arrays, far=float(K.far_fraction(c_indptr, c_indices, K.LOCAL_WINDOW)))


def state_graph(mdp: TabularMDP) -> StateGraph:
    """The :class:`StateGraph` of ``mdp``, built on first use and cached on the MDP (module doc).

    Copies made by ``mdp.replace(...)`` that keep the transitions share the cached graph, so a
    :class:`~gridworld.exact.PolicyKernel` contracted on one works on the other.
    """
    return mdp.derived("state_graph", build_state_graph)
