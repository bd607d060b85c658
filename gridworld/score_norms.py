"""Exact squared score norms ``H(s, a) = ||∇_θ log π(a|s)||²`` (VSR §2.2, eq. (5); Lemma B.1).

Three routes that must agree (tests run all of them):

* tabular softmax ``π(·|s) = softmax(θ_s)``: ``∇_{θ_s} log π(a|s) = e_a - π(·|s)`` and the other
  states' logits get zero gradient, so ``H(s, a) = 1 - 2 π(a|s) + ||π(·|s)||²``
  (:func:`tabular_softmax_sq_norm`; works on ``pi[..., A]``, e.g. stage-dependent tables);
* the VSR D.1 MLP ``logits = W2 tanh(W1 x + b1) + b2`` in closed form
  (:func:`mlp_sq_norm_analytic`): with ``u = e_a - π``, ``h = tanh(W1 x + b1)`` and
  ``δ = (W2ᵀ u) ⊙ (1 - h²)``,  ``H = ||u||² (1 + ||h||²) + ||δ||² (1 + ||x||²)``;
* any torch policy via per-sample gradients: :func:`torch_sq_norm_func` (``torch.func``:
  ``vmap`` over ``grad``) and :func:`torch_sq_norm_loop` (one ``backward`` per sample, the
  plain reference).
"""

from __future__ import annotations

import numpy as np

from theory._validate import as_array, check_simplex


def tabular_softmax_sq_norm(pi) -> np.ndarray:
    """``H[..., a] = 1 - 2 π_a + ||π||²`` for a tabular softmax policy ``pi[..., A]``."""
    pi = as_array(pi, "pi", ndim=(1, 2, 3))
    check_simplex(pi, "pi")
    return 1.0 - 2.0 * pi + (pi**2).sum(axis=-1, keepdims=True)


def mlp_sq_norm_analytic(params: dict, x) -> np.ndarray:
    """Closed-form ``H[s, a]`` of the tanh MLP with ``params`` = ``{W1[Hd,F], b1[Hd], W2[A,Hd], b2[A]}``.

    ``x[s, F]`` are the input features (see :meth:`MLPPolicy.numpy_params`).
    """
    W1 = as_array(params["W1"], "W1", ndim=2)
    b1 = as_array(params["b1"], "b1", shape=(W1.shape[0],))
    W2 = as_array(params["W2"], "W2", shape=(None, W1.shape[0]))
    b2 = as_array(params["b2"], "b2", shape=(W2.shape[0],))
    x = as_array(x, "x", shape=(None, W1.shape[1]))
    h = np.tanh(x @ W1.T + b1)  # [s, Hd]
    logits = h @ W2.T + b2
    logits -= logits.max(axis=1, keepdims=True)
    pi = np.exp(logits)
    pi /= pi.sum(axis=1, keepdims=True)  # [s, A]
    A = pi.shape[1]
    u = np.eye(A)[None, :, :] - pi[:, None, :]  # [s, a, A]
    delta = (u @ W2) * (1.0 - h**2)[:, None, :]  # [s, a, Hd]
    u2 = (u**2).sum(axis=2)
    d2 = (delta**2).sum(axis=2)
    return u2 * (1.0 + (h**2).sum(axis=1))[:, None] + d2 * (1.0 + (x**2).sum(axis=1))[:, None]


def torch_sq_norm_func(model, x, *, chunk: int = 4096) -> np.ndarray:
    """``H[s, a]`` of any torch policy (``model(x) -> logits``) via ``torch.func.vmap(grad(...))``.

    Per-sample gradients are formed for ``chunk`` (state, action) pairs at a time.
    """
    import torch
    from torch.func import functional_call, grad, vmap

    dtype = next(model.parameters()).dtype
    xt = torch.as_tensor(as_array(x, "x", ndim=2), dtype=dtype)
    S = xt.shape[0]
    with torch.no_grad():
        A = model(xt[:1]).shape[-1]
    params = {k: v.detach() for k, v in model.named_parameters()}

    def logp(prm, xi, ei):
        # ei is the one-hot action vector (vmap cannot index with a batched integer).
        out = functional_call(model, prm, (xi[None],))[0]
        return (torch.log_softmax(out, dim=-1) * ei).sum()

    per_sample = vmap(grad(logp), in_dims=(None, 0, 0))
    xs = xt.repeat_interleave(A, dim=0)
    acts = torch.eye(A, dtype=dtype).repeat(S, 1)
    out = torch.empty(S * A, dtype=dtype)
    for lo in range(0, S * A, chunk):
        g = per_sample(params, xs[lo : lo + chunk], acts[lo : lo + chunk])
        out[lo : lo + chunk] = sum(v.reshape(v.shape[0], -1).pow(2).sum(dim=1) for v in g.values())
    return out.reshape(S, A).double().numpy()


def torch_sq_norm_loop(model, x) -> np.ndarray:
    """Reference for :func:`torch_sq_norm_func`: one ``autograd`` backward per (state, action)."""
    import torch

    dtype = next(model.parameters()).dtype
    xt = torch.as_tensor(as_array(x, "x", ndim=2), dtype=dtype)
    params = [p for p in model.parameters() if p.requires_grad]
    with torch.no_grad():
        A = model(xt[:1]).shape[-1]
    out = np.empty((xt.shape[0], A))
    for s in range(xt.shape[0]):
        for a in range(A):
            lp = torch.log_softmax(model(xt[s : s + 1])[0], dim=-1)[a]
            grads = torch.autograd.grad(lp, params)
            out[s, a] = float(sum(g.pow(2).sum() for g in grads))
    return out
