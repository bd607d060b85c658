"""Checks of ExTra's theory: Lemma A.1, App. E.2 ordering, Prop. A.2 and Prop. 1."""

from __future__ import annotations

import numpy as np

from theory import extra as ex
from theory.checks._registry import Comparison, register_check


@register_check("extra_lemma_a1_degenerate_group", "ExTra Lemma A.1")
def _a1(rng):
    """All-equal rewards give zero advantages, zero surrogate and zero surrogate gradient for any ratio."""
    G = int(rng.integers(2, 17))
    c = float(rng.choice([0.0, 1.0, rng.uniform(-3, 3)]))
    A = ex.grpo_advantages(np.full(G, c))
    ratio = np.exp(rng.normal(scale=0.5, size=G))
    surr = ex.clipped_surrogate(ratio, A)
    grad = ex.clipped_surrogate_grad_logratio(ratio, A)
    return [Comparison(float(np.abs(A).max()), 0.0), Comparison(float(np.abs(surr).max()), 0.0), Comparison(float(np.abs(grad).max()), 0.0)]


@register_check("extra_surrogate_gradient", "ExTra App. B.1 / DAPO clip-higher (derivative used by Lemma A.1)")
def _surr_grad(rng):
    """The analytic d/dlog(rho) of the clipped surrogate matches a central finite difference."""
    G = 8
    adv = rng.normal(size=G)
    ratio = np.exp(rng.normal(scale=0.4, size=G))
    # keep away from the kinks at 1-eps_low and 1+eps_high where the derivative jumps
    ratio = np.where(np.abs(ratio - 0.8) < 1e-3, 0.75, ratio)
    ratio = np.where(np.abs(ratio - 1.28) < 1e-3, 1.35, ratio)
    h = 1e-6
    fd = (ex.clipped_surrogate(ratio * np.exp(h), adv) - ex.clipped_surrogate(ratio * np.exp(-h), adv)) / (2 * h)
    an = ex.clipped_surrogate_grad_logratio(ratio, adv)
    return [Comparison(float(a), float(f), "==", scale=1e2) for a, f in zip(an, fd)]


def _group(rng, kind: str | None = None):
    G = int(rng.integers(2, 17))
    kind = kind or str(rng.choice(["mixed", "all_correct", "all_incorrect"]))
    if kind == "mixed":
        k = int(rng.integers(1, G))
        r = np.array([1.0] * k + [0.0] * (G - k))
        rng.shuffle(r)
    else:
        r = np.full(G, 1.0 if kind == "all_correct" else 0.0)
    b = rng.uniform(0, 1, size=G) * (r == 1)
    if rng.random() < 0.2:
        b[r == 1] = 1.0  # extreme novelty
    return r, b


@register_check("extra_e2_post_normalization", "ExTra App. E.2")
def _e2(rng):
    """Post-normalisation novelty: correct above incorrect (mixed), novelty-only (all-correct), zero (all-incorrect)."""
    r, b = _group(rng)
    gamma = float(rng.choice([0.0, 0.1, 1.0, 10.0, 1e3]))
    rep = ex.e2_ordering(r, b, gamma)
    out = [
        Comparison(float(rep.correct_above_incorrect), 1.0),
        Comparison(float(rep.novelty_only), 1.0),
        Comparison(float(rep.all_zero), 1.0),
    ]
    if rep.kind == "mixed":
        out.append(Comparison(rep.max_incorrect, rep.min_correct, "<", scale=1e-6))
    # the task-reward part is untouched by novelty (what pre-normalisation breaks)
    A0 = ex.grpo_advantages(r)
    out += [Comparison(float(x - gamma * bi), float(y), "==", scale=1 + gamma) for x, bi, y in zip(ex.post_normalization_advantages(r, b, gamma), b, A0)]
    return out


@register_check("extra_novelty_bonus", "ExTra eq. 1 / Alg. 1 line 12")
def _novelty(rng):
    """novelty_bonus equals a brute-force evaluation of 1[R>0](1 - max cos over memory and correct siblings)."""
    G, D, M = int(rng.integers(1, 9)), int(rng.integers(2, 6)), int(rng.integers(0, 4))
    z = np.abs(rng.normal(size=(G, D))) + 1e-3
    mem = np.abs(rng.normal(size=(M, D))) + 1e-3
    correct = rng.random(G) < 0.6
    got = ex.novelty_bonus(z, correct, mem if M else None)
    cos = lambda a, b: float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))  # noqa: E731
    out = []
    for i in range(G):
        pool = [cos(z[i], m) for m in mem] + [cos(z[i], z[j]) for j in range(G) if j != i and correct[j]]
        want = (1.0 - max(pool, default=0.0)) if correct[i] else 0.0
        out.append(Comparison(float(got[i]), want))
    return out


@register_check("extra_prop_a2_mode_coverage", "ExTra Prop. A.2")
def _a2(rng):
    """With ideally separated modes, raw novelty equals the increase in covered correct modes."""
    M = int(rng.integers(1, 8))
    D = M + int(rng.integers(0, 4))
    basis = np.linalg.qr(rng.normal(size=(D, D)))[0][:M]  # orthonormal mode directions
    covered = rng.random(M) < 0.5
    memory_modes = np.flatnonzero(covered)
    memory = basis[memory_modes] * rng.uniform(0.5, 2.0, size=(len(memory_modes), 1))  # one representative per mode
    mode = int(rng.integers(0, M))
    correct = bool(rng.random() < 0.7)
    y = basis[mode] * float(rng.uniform(0.5, 2.0))
    raw = ex.novelty_raw(y, correct, memory if len(memory_modes) else None)
    after = list(memory_modes) + ([mode] if correct else [])
    gain = ex.covered_modes(after) - ex.covered_modes(memory_modes)
    return Comparison(raw, float(gain), "==")


def _prefix_tree(rng):
    """A random two-stage generation: prefixes j with prob w_j, then suffixes with success flags."""
    J = int(rng.integers(1, 8))
    w = rng.dirichlet(np.full(J, 0.5))
    leaves = [rng.dirichlet(np.ones(int(rng.integers(1, 6)))) for _ in range(J)]
    success = [rng.random(len(l)) < rng.uniform(0, 1) for l in leaves]
    q = np.clip([float(l @ s) for l, s in zip(leaves, success)], 0.0, 1.0)
    # p0 by enumerating whole trajectories, independently of q
    p0_enum = float(sum(w[j] * leaves[j][i] * success[j][i] for j in range(J) for i in range(len(leaves[j]))))
    return w, q, p0_enum


@register_check("extra_prop1_total_probability", "ExTra Prop. 1 (p0 = E_p[q(p)])")
def _p1_total(rng):
    """p0 from enumerating full trajectories equals the prefix-weighted mean of q; max q >= p0."""
    w, q, p0_enum = _prefix_tree(rng)
    p0 = ex.scratch_success(w, q)
    return [Comparison(p0, p0_enum), Comparison(p0, float(q.max()), "<=")]


@register_check("extra_prop1_regeneration", "ExTra Prop. 1 (P_regen(K) > P_scratch(K), 1/p0 -> 1/q)")
def _p1_regen(rng):
    """For q* > p0: 1-(1-q*)^K > 1-(1-p0)^K for K = 1..64, and attempts fall from 1/p0 to 1/q*."""
    w, q, _ = _prefix_tree(rng)
    p0 = ex.scratch_success(w, q)
    qs = float(q.max())
    if not (0 < p0 and qs - p0 > 1e-9):
        # no strictly better prefix (q constant or p0 = 0): draw a fresh pair with q* > p0 > 0
        p0 = float(rng.uniform(0.01, 0.9))
        qs = float(rng.uniform(p0 + 1e-3, 1.0))
    K = np.arange(1, 65)
    regen, scratch = ex.success_within(qs, K), ex.success_within(p0, K)
    out = [Comparison(float(s), float(r), "<", scale=1e-12) for r, s in zip(regen, scratch) if s < 1 - 1e-12]
    out.append(Comparison(ex.expected_attempts(qs), ex.expected_attempts(p0), "<", scale=1e-12))
    out.append(Comparison(ex.expected_attempts_series(qs), 1.0 / qs, "==", scale=1.0 / qs))
    return out
