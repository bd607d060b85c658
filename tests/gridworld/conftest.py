"""Shared MDP cases for the gridworld tests (small, built once per session)."""

from __future__ import annotations

import os

# torch ships its own OpenMP runtime; when it is loaded in the same process, Numba's OpenMP
# workers spin-wait against it and every parallel region costs ~one scheduler tick on a busy
# 2-core machine.  Passive waiting avoids that (only effective if set before torch loads).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import pytest  # noqa: E402

from gridworld import kernels
from gridworld.grid import build_gridworld
from gridworld.random_mdp import random_mdp

TRAP_LAYOUT = """
S..X
.#..
...G
"""


def _cases():
    return {
        "grid7": build_gridworld().mdp,
        "grid7-slip": build_gridworld(slip=0.3, horizon=15).mdp,
        "grid-trap": build_gridworld(TRAP_LAYOUT, slip=0.1, horizon=9).mdp,
        "random-point": random_mdp(40, 3, 3, seed=0, horizon=10, n_goals=2),
        "random-uniform-local": random_mdp(60, 2, 4, seed=1, horizon=8, init="uniform", locality=6),
        "random-K1": random_mdp(30, 4, 1, seed=2, horizon=15),
    }


_CACHE: dict = {}


def mdp_case(name: str):
    if not _CACHE:
        _CACHE.update(_cases())
    return _CACHE[name]


CASE_NAMES = ["grid7", "grid7-slip", "grid-trap", "random-point", "random-uniform-local", "random-K1"]


@pytest.fixture(params=CASE_NAMES)
def mdp(request):
    return mdp_case(request.param)


@pytest.fixture
def force_parallel(monkeypatch):
    """Run the ``prange`` branches of the parallel kernels even on these small MDPs."""
    monkeypatch.setattr(kernels, "PARALLEL_MIN_WORK", 0)
