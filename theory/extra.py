"""ExTra theory (ExTra App. E): GRPO degeneracy, post-normalisation novelty, mode coverage,
and regeneration efficiency.

NumPy references; the trainer's torch implementations are tested against these.

Note on the pre- vs post-normalisation contrast (ExTra §4.1, App. D.1): with binary rewards and
a correctness-gated bonus in [0, 1], pre-normalisation is a monotone transform of
``R + gamma b`` and so cannot put an incorrect response above a correct one either: it does not
reorder responses. What it does change, and what :func:`pre_normalization_advantages` lets
tests show, is the coupling the paper describes (the task reward's contribution "shrunk or
distorted"): a novelty offset shared by the group is removed by mean subtraction (an
all-correct group of equally novel answers gets zero signal), novelty differences are rescaled
to unit variance, and the correct-vs-incorrect advantage gap of the task reward shrinks.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from theory._validate import (
    as_array,
    check_in_range,
    check_nonnegative,
    check_positive_scalar,
    check_probability,
    check_simplex,
)

#: Default epsilon in the GRPO denominator (Replay §3, Eq. 1; App. A, Table 7).
GRPO_EPS = 1e-6


def grpo_advantages(rewards, *, eps: float = GRPO_EPS, ddof: int = 0) -> np.ndarray:
    """Group-relative advantages ``(r - mean) / (std + eps)``; zero-variance groups give 0 (Replay §3, Eq. 1).

    ``rewards[..., G]``: the last axis is the group. ``ddof = 0`` is the population std used by
    the Replay closed forms; ``ddof = 1`` is the sample std some trainers use.
    """
    r = as_array(rewards, "rewards")
    if r.shape[-1] < 1 or (ddof and r.shape[-1] <= ddof):
        raise ValueError(f"rewards: group size {r.shape[-1]} too small for ddof={ddof}")
    eps = check_positive_scalar(eps, "eps", strict=False)
    mean = r.mean(axis=-1, keepdims=True)
    std = r.std(axis=-1, ddof=ddof, keepdims=True)
    centred = r - mean
    zero = np.all(np.abs(centred) <= 1e-12 * (1 + np.abs(mean)), axis=-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        adv = centred / (std + eps)
    return np.where(zero, 0.0, adv)


def clipped_surrogate(ratio, adv, eps_low: float = 0.2, eps_high: float = 0.28) -> np.ndarray:
    """Per-sample PPO surrogate ``min(rho A, clip(rho, 1-eps_low, 1+eps_high) A)`` (ExTra eq. B.1, DAPO clip-higher)."""
    ratio = check_nonnegative(as_array(ratio, "ratio"), "ratio")
    adv = as_array(adv, "adv", shape=ratio.shape)
    return np.minimum(ratio * adv, np.clip(ratio, 1 - eps_low, 1 + eps_high) * adv)


def clipped_surrogate_grad_logratio(ratio, adv, eps_low: float = 0.2, eps_high: float = 0.28) -> np.ndarray:
    """Derivative of :func:`clipped_surrogate` w.r.t. ``log rho``: ``rho A`` on the unclipped branch, else 0.

    The gradient w.r.t. the parameters is this times ``grad log pi``, so it vanishes whenever
    this does.
    """
    ratio = check_nonnegative(as_array(ratio, "ratio"), "ratio")
    adv = as_array(adv, "adv", shape=ratio.shape)
    inside = (ratio >= 1 - eps_low) & (ratio <= 1 + eps_high)
    # Outside the trust region the unclipped term is the minimum only when it is the pessimistic one.
    active = inside | ((ratio > 1 + eps_high) & (adv < 0)) | ((ratio < 1 - eps_low) & (adv > 0))
    return np.where(active, ratio * adv, 0.0)


def _unit_rows(z: np.ndarray, name: str) -> np.ndarray:
    n = np.linalg.norm(z, axis=-1, keepdims=True)
    if np.any(n <= 0):
        raise ValueError(f"{name}: embeddings must be non-zero to define cosine similarity")
    return z / n


def novelty_bonus(embeddings, correct, memory=None) -> np.ndarray:
    """Correctness-gated novelty ``1[R_i > 0] (1 - max_{z' in C_i} cos(z_i, z'))``, ``max over {} = 0`` (ExTra eq. 1, Alg. 1 l.12).

    ``embeddings[G, D]`` of the group's responses, ``correct[G]`` booleans, ``memory[M, D]`` the
    per-prompt memory of recent correct responses. ``C_i`` = memory plus the correct siblings
    other than ``i``. With non-negative cosines (the paper's regime) the bonus lies in [0, 1].
    """
    z = _unit_rows(as_array(embeddings, "embeddings", ndim=2), "embeddings")
    c = np.asarray(correct, dtype=bool)
    if c.shape != (z.shape[0],):
        raise ValueError(f"correct: expected shape ({z.shape[0]},), got {c.shape}")
    if memory is None or np.size(memory) == 0:
        mem = np.zeros((0, z.shape[1]))
    else:
        mem = _unit_rows(as_array(memory, "memory", ndim=2, shape=(None, z.shape[1])), "memory")
    sib = z @ z.T
    memsim = z @ mem.T if mem.shape[0] else np.zeros((z.shape[0], 0))
    out = np.zeros(z.shape[0])
    for i in np.flatnonzero(c):
        others = [sib[i, j] for j in np.flatnonzero(c) if j != i]
        sims = list(memsim[i]) + others
        out[i] = 1.0 - (max(sims) if sims else 0.0)
    return out


def post_normalization_advantages(rewards, bonus, gamma: float = 1.0, *, eps: float = GRPO_EPS) -> np.ndarray:
    """``A_i = A_i^GRPO + gamma b_i`` (ExTra eq. 2): novelty added after group normalisation."""
    r = as_array(rewards, "rewards", ndim=1)
    b = as_array(bonus, "bonus", ndim=1, shape=r.shape)
    gamma = check_positive_scalar(gamma, "gamma", strict=False)
    return grpo_advantages(r, eps=eps) + gamma * b


def pre_normalization_advantages(rewards, bonus, gamma: float = 1.0, *, eps: float = GRPO_EPS) -> np.ndarray:
    """``A_i = standardise(R + gamma b)_i`` (ExTra App. D.1): the variant ExTra argues against."""
    r = as_array(rewards, "rewards", ndim=1)
    b = as_array(bonus, "bonus", ndim=1, shape=r.shape)
    gamma = check_positive_scalar(gamma, "gamma", strict=False)
    return grpo_advantages(r + gamma * b, eps=eps)


@dataclass(frozen=True)
class OrderingReport:
    """The three properties of ExTra App. E.2 for one group."""

    kind: str  #: "mixed", "all_correct" or "all_incorrect"
    min_correct: float
    max_incorrect: float
    correct_above_incorrect: bool  #: mixed groups: every correct strictly above every incorrect
    novelty_only: bool  #: all-correct groups: advantages equal gamma * b exactly
    all_zero: bool  #: all-incorrect groups: every advantage is 0


def e2_ordering(rewards, bonus, gamma: float = 1.0, *, eps: float = GRPO_EPS) -> OrderingReport:
    """Evaluate App. E.2 for binary ``rewards`` in {0, 1} and gated ``bonus`` in [0, 1]."""
    r = as_array(rewards, "rewards", ndim=1)
    if not np.all((r == 0) | (r == 1)):
        raise ValueError("rewards: E.2 is stated for binary rewards in {0, 1}")
    b = check_in_range(as_array(bonus, "bonus", ndim=1, shape=r.shape), "bonus", 0.0, 1.0)
    if np.any((r == 0) & (b != 0)):
        raise ValueError("bonus: must be 0 for incorrect responses (correctness gate)")
    A = post_normalization_advantages(r, b, gamma, eps=eps)
    c = r == 1
    kind = "mixed" if c.any() and (~c).any() else ("all_correct" if c.all() else "all_incorrect")
    min_c = float(A[c].min()) if c.any() else float("nan")
    max_i = float(A[~c].max()) if (~c).any() else float("nan")
    return OrderingReport(
        kind=kind,
        min_correct=min_c,
        max_incorrect=max_i,
        correct_above_incorrect=bool(kind != "mixed" or min_c > max_i),
        novelty_only=bool(kind != "all_correct" or np.array_equal(A, gamma * b)),
        all_zero=bool(kind != "all_incorrect" or np.all(A == 0)),
    )


def covered_modes(memory_modes) -> int:
    """``C(Phi)``: number of distinct correct modes represented in the memory (Prop. A.2)."""
    return len(set(int(m) for m in np.asarray(memory_modes).ravel()))


def novelty_raw(embedding, is_correct: bool, memory) -> float:
    """Raw novelty against the memory only: ``1[R > 0] (1 - max_{z' in Phi} cos(h(y), z'))`` (Prop. A.2)."""
    if not is_correct:
        return 0.0
    z = _unit_rows(as_array(embedding, "embedding", ndim=1)[None, :], "embedding")[0]
    if memory is None or np.size(memory) == 0:
        return 1.0
    mem = _unit_rows(as_array(memory, "memory", ndim=2, shape=(None, z.shape[0])), "memory")
    return float(1.0 - np.max(mem @ z))


# ---------------------------------------------------------------------------------------------
# Proposition 1: regeneration efficiency
# ---------------------------------------------------------------------------------------------


def scratch_success(prefix_probs, q) -> float:
    """``p0 = E_{p ~ pi}[q(p)] = sum_j w_j q_j`` (law of total probability, Prop. 1)."""
    w = check_simplex(as_array(prefix_probs, "prefix_probs", ndim=1), "prefix_probs")
    q = check_in_range(as_array(q, "q", ndim=1, shape=w.shape), "q", 0.0, 1.0)
    return float(w @ q)


def success_within(p: float, K) -> np.ndarray:
    """``1 - (1 - p)^K``: probability of at least one success in K independent attempts."""
    p = check_probability(p, "p")
    K = np.asarray(K)
    if np.any(K < 0):
        raise ValueError("K: must be >= 0")
    return -np.expm1(K * np.log1p(-p)) if p < 1 else np.where(K > 0, 1.0, 0.0)


def expected_attempts(p: float) -> float:
    """``1/p``: mean of the geometric number of attempts until the first success."""
    p = check_probability(p, "p", open_low=True)
    return 1.0 / p


def expected_attempts_series(p: float, terms: int = 10_000) -> float:
    """``sum_k k p (1-p)^(k-1)`` truncated, with the tail added in closed form (independent check of 1/p)."""
    p = check_probability(p, "p", open_low=True)
    k = np.arange(1, terms + 1, dtype=np.float64)
    head = float(np.sum(k * p * np.exp((k - 1) * np.log1p(-p)))) if p < 1 else 1.0
    # tail sum_{k>n} k p (1-p)^(k-1) = (1-p)^n (n + 1/p)
    tail = float(np.exp(terms * np.log1p(-p)) * (terms + 1.0 / p)) if p < 1 else 0.0
    return head + tail
