"""Policies on tabular MDPs: validated tables, tabular softmax, and the MLP policy of VSR D.1.

* A *policy table* is ``pi[s, a]`` (stationary) or ``pi[t, s, a]`` with ``t < H``
  (stage-dependent, as in SVMD, VSR Algorithm 2); :func:`as_policy` validates either and
  returns the ``(n_pi, S, A)`` form every solver uses.
* :class:`MLPPolicy` is the VSR D.1 network: input features ``x[s]`` → ``Linear(F, 32)`` →
  ``tanh`` → ``Linear(32, A)`` → softmax.  It is stationary (the input is the state only; the
  stage is not an input).  Input encodings are registry entries (:data:`ENCODINGS`):
  ``onehot`` (default: ``x[s] = e_s`` over all ``S`` states, terminals included) and
  ``coords`` (gridworlds: ``(row, col)`` scaled to ``[-1, 1]``).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from theory._validate import as_array, check_simplex
from vsr_util.registry import Registry

# =============================================================================================
# Tables
# =============================================================================================


def as_policy(pi, mdp) -> np.ndarray:
    """Validate ``pi[s, a]`` or ``pi[t, s, a]`` (``t < H``) against ``mdp``; return ``pi3[n_pi, S, A]``.

    ``n_pi`` is 1 for a stationary policy and ``H`` for a stage-dependent one.
    """
    S, A, H = mdp.n_states, mdp.n_actions, mdp.horizon
    pi = as_array(pi, "pi", ndim=(2, 3))
    if pi.ndim == 2:
        pi = pi[None]
    if pi.shape[1:] != (S, A) or pi.shape[0] not in (1, H):
        raise ValueError(f"pi: expected shape (S, A) = ({S}, {A}) or (H, S, A) = ({H}, {S}, {A}), got {pi.shape}")
    check_simplex(pi, "pi")
    return np.ascontiguousarray(pi)


def uniform_policy(mdp) -> np.ndarray:
    """``pi[s, a] = 1/A``."""
    return np.full((mdp.n_states, mdp.n_actions), 1.0 / mdp.n_actions)


def softmax(logits, axis: int = -1) -> np.ndarray:
    """Numerically stable softmax of ``logits`` along ``axis`` (float64)."""
    z = as_array(logits, "logits")
    z = z - z.max(axis=axis, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=axis, keepdims=True)


def random_softmax_policy(mdp, *, seed: int, scale: float = 1.0, stage_dependent: bool = False) -> np.ndarray:
    """Tabular softmax policy with i.i.d. ``N(0, scale²)`` logits (``[t, s, a]`` if ``stage_dependent``)."""
    rng = np.random.default_rng(seed)
    shape = (mdp.horizon, mdp.n_states, mdp.n_actions) if stage_dependent else (mdp.n_states, mdp.n_actions)
    return softmax(scale * rng.standard_normal(shape))


# =============================================================================================
# Input encodings for the MLP
# =============================================================================================

#: name -> ``fn(n_states, coords) -> x[S, F]`` (``coords[s] = (row, col)`` or ``None``); add entries
#: with ``@ENCODINGS.register(name)``.
ENCODINGS: Registry[Callable[[int, "np.ndarray | None"], np.ndarray]] = Registry("encoding")


@ENCODINGS.register("onehot")
def onehot_encoding(n_states: int, coords=None) -> np.ndarray:
    """``x[s] = e_s`` (identity, ``F = S``)."""
    return np.eye(n_states)


@ENCODINGS.register("coords")
def coords_encoding(n_states: int, coords=None) -> np.ndarray:
    """``x[s] = (2 row/(R-1) - 1, 2 col/(C-1) - 1)`` (``F = 2``; gridworlds only)."""
    if coords is None:
        raise ValueError("coords: the 'coords' encoding needs cell coordinates (use a gridworld)")
    c = as_array(coords, "coords", shape=(n_states, 2))
    span = np.maximum(c.max(axis=0), 1.0)
    return 2.0 * c / span - 1.0


def encode_states(n_states: int, encoding: str = "onehot", coords=None) -> np.ndarray:
    """Features ``x[s, F]`` of every state under a registered encoding."""
    fn = ENCODINGS.lookup(encoding, where="encoding")
    return np.ascontiguousarray(fn(n_states, coords), dtype=np.float64)


# =============================================================================================
# MLP policy (torch)
# =============================================================================================


def make_mlp_policy(n_inputs: int, n_actions: int = 4, *, hidden: int = 32, seed: int = 0, temperature: float = 1.0, dtype=None):
    """VSR D.1 policy network ``softmax(W2 tanh(W1 x + b1) + b2)`` (float64 by default).

    Parameters are drawn from PyTorch's default ``nn.Linear`` law
    ``U(-1/sqrt(fan_in), 1/sqrt(fan_in))`` with a private generator seeded by ``seed`` (the
    global torch RNG is not touched), so the same seed gives the same initial policy.
    ``temperature`` τ divides the output layer ``(W2, b2)`` after the draw, so the initial
    logits are the default-init logits / τ (τ = 1 draws exactly the default network).
    """
    import torch

    if not temperature > 0:
        raise ValueError(f"temperature: must be > 0, got {temperature}")
    model = _get_mlp_class()(n_inputs, n_actions, hidden=hidden, seed=seed, dtype=dtype or torch.float64)
    if temperature != 1.0:
        with torch.no_grad():
            model.fc2.weight.div_(temperature)
            model.fc2.bias.div_(temperature)
    return model


def _mlp_class():
    import torch
    from torch import nn

    class _MLPPolicy(nn.Module):
        """One hidden layer of ``hidden`` tanh units, ``n_actions``-way softmax (VSR D.1)."""

        def __init__(self, n_inputs: int, n_actions: int = 4, *, hidden: int = 32, seed: int = 0, dtype=torch.float64):
            super().__init__()
            if n_inputs <= 0 or n_actions <= 1 or hidden <= 0:
                raise ValueError(
                    f"n_inputs/n_actions/hidden: need positive sizes and >= 2 actions, got {n_inputs}, {n_actions}, {hidden}"
                )
            self.fc1 = nn.Linear(n_inputs, hidden, dtype=dtype)
            self.fc2 = nn.Linear(hidden, n_actions, dtype=dtype)
            gen = torch.Generator().manual_seed(int(seed))
            with torch.no_grad():
                for layer in (self.fc1, self.fc2):
                    bound = 1.0 / float(np.sqrt(layer.in_features))
                    for prm in (layer.weight, layer.bias):
                        prm.copy_(torch.rand(prm.shape, generator=gen, dtype=dtype) * 2 * bound - bound)

        def forward(self, x):
            """Logits ``[..., A]``."""
            return self.fc2(torch.tanh(self.fc1(x)))

        def log_probs(self, x):
            """``log π(·|x)`` ``[..., A]``."""
            return torch.log_softmax(self.forward(x), dim=-1)

        def numpy_params(self) -> dict[str, np.ndarray]:
            """``W1[H, F]``, ``b1[H]``, ``W2[A, H]``, ``b2[A]`` as float64 NumPy arrays."""
            return {
                "W1": self.fc1.weight.detach().cpu().double().numpy(),
                "b1": self.fc1.bias.detach().cpu().double().numpy(),
                "W2": self.fc2.weight.detach().cpu().double().numpy(),
                "b2": self.fc2.bias.detach().cpu().double().numpy(),
            }

    return _MLPPolicy


_MLP_CLASS: list = []


def _get_mlp_class():
    if not _MLP_CLASS:
        cls = _mlp_class()
        cls.__name__ = cls.__qualname__ = "MLPPolicy"
        _MLP_CLASS.append(cls)
    return _MLP_CLASS[0]


def __getattr__(name):
    # ``MLPPolicy`` (a torch ``nn.Module``) is created lazily so importing gridworld does not import torch.
    if name == "MLPPolicy":
        return _get_mlp_class()
    raise AttributeError(name)


def policy_table(model, x) -> np.ndarray:
    """``pi[s, a]`` (float64 NumPy) of a torch policy ``model`` on features ``x[s, F]``."""
    import torch

    x = as_array(x, "x", ndim=2)
    with torch.no_grad():
        xt = torch.as_tensor(x, dtype=next(model.parameters()).dtype)
        pi = torch.softmax(model(xt), dim=-1).double().numpy()
    return pi
