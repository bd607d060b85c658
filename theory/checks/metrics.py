"""Random-instance checks of the shared metrics (:mod:`theory.metrics`) for ``vsr theory check``.

Each check draws one instance from the generator and returns the identities / inequalities
that must hold on it; oracles are independent formulas (exact binomial enumeration, SciPy,
eigenvalues, brute-force n-gram counting), never the function under test itself.
"""

from __future__ import annotations

import inspect
from collections import Counter
from fractions import Fraction
from math import comb, exp, log

import numpy as np
from scipy import stats

from theory.checks._registry import Comparison, register_check
from theory.metrics import (
    aes,
    aes_terms,
    avg_at_k,
    bleu,
    correlation,
    distinct_n,
    fisher_z_interval,
    logdet_diversity,
    pass_at_k,
    pass_at_k_table,
    pearson,
    self_bleu,
    spearman,
    within_group_correlation,
)

_PASSK = "Chen et al. 2021 eq. 1"
_AES = "Replay §6.1 eq. 4"
_CORR = "ExTra App. C.1"
_DIV = "ExTra §5.4"


# ---------------------------------------------------------------------------------------------
# pass@k
# ---------------------------------------------------------------------------------------------


def _nck(rng: np.random.Generator, n_max: int = 40) -> tuple[int, int, int]:
    n = int(rng.integers(1, n_max + 1))
    k = int(rng.integers(1, n + 1))
    c = int(rng.integers(0, n + 1))
    return n, c, k


@register_check("pass_at_k_unbiased_binomial", _PASSK)
def _pass_at_k_unbiased(rng: np.random.Generator):
    """E_{c~Bin(n,p)}[pass@k(n,c,k)] = 1-(1-p)^k, by exact enumeration over c."""
    n, _, k = _nck(rng)
    p = float(rng.uniform(0.01, 0.99))
    c = np.arange(n + 1)
    expectation = float(np.sum(stats.binom.pmf(c, n, p) * pass_at_k(n, c, k)))
    return Comparison(expectation, 1.0 - (1.0 - p) ** k)


@register_check("pass_at_k_exact_binomial_ratio", _PASSK)
def _pass_at_k_exact(rng: np.random.Generator):
    """pass@k equals 1 - C(n-c,k)/C(n,k) computed in exact rational arithmetic."""
    n = int(rng.integers(1, 300))
    k = int(rng.integers(1, n + 1))
    c = int(rng.integers(0, n + 1))
    exact = 1 - Fraction(comb(n - c, k), comb(n, k))
    return Comparison(pass_at_k(n, c, k), float(exact))


@register_check("pass_at_1_is_fraction_correct", _PASSK)
def _pass_at_1(rng: np.random.Generator):
    """pass@1(n, c) = c / n, pass@n(n, c) = 1[c > 0], and avg@k = table pass@1 = mean correctness."""
    n, c, _ = _nck(rng)
    correct = rng.random((int(rng.integers(1, 20)), n)) < rng.random()
    table = pass_at_k_table(correct, sorted({1, n}))
    return [
        Comparison(pass_at_k(n, c, 1), c / n),
        Comparison(pass_at_k(n, c, n), float(c > 0)),
        Comparison(avg_at_k(correct), float(correct.mean())),
        Comparison(table[1], float(correct.mean())),
        Comparison(table[n], float(correct.any(axis=1).mean())),
    ]


@register_check("pass_at_k_monotone_in_k", _PASSK)
def _pass_at_k_monotone(rng: np.random.Generator):
    """pass@k <= pass@(k+1) <= 1 for every k < n, and pass@k >= pass@1."""
    n = int(rng.integers(2, 21))
    c = int(rng.integers(0, n + 1))
    vals = [pass_at_k(n, c, k) for k in range(1, n + 1)]
    out = [Comparison(a, b, "<=") for a, b in zip(vals[:-1], vals[1:])]
    out.append(Comparison(vals[-1], 1.0, "<="))
    out.append(Comparison(vals[0], 0.0, ">="))
    return out


# ---------------------------------------------------------------------------------------------
# AES
# ---------------------------------------------------------------------------------------------


def _run(rng: np.random.Generator) -> tuple[float, float]:
    return float(rng.uniform(100, 10_000)), float(rng.uniform(0.01, 1.0))


@register_check("aes_reference_scores_zero", _AES)
def _aes_self(rng: np.random.Generator):
    """A run scored against itself has AES = 0 (dL = dAcc = 0, beta = 3)."""
    L, A = _run(rng)
    t = aes_terms(L, A, L, A)
    return [Comparison(t.score, 0.0), Comparison(t.beta, 3.0)]


@register_check("aes_sign_conventions", _AES)
def _aes_signs(rng: np.random.Generator):
    """Shorter at equal accuracy scores dL > 0; an accuracy drop at equal length scores 5 dAcc < 0."""
    L_ref, A_ref = _run(rng)
    shorter = float(rng.uniform(0.1, 0.99)) * L_ref
    worse = float(rng.uniform(0.1, 0.99)) * A_ref
    better = float(rng.uniform(1.01, 2.0)) * A_ref
    return [
        Comparison(aes(shorter, A_ref, L_ref, A_ref), (L_ref - shorter) / L_ref),
        Comparison(aes(shorter, A_ref, L_ref, A_ref), 0.0, ">"),
        Comparison(aes(L_ref, worse, L_ref, A_ref), 5.0 * (worse - A_ref) / A_ref),
        Comparison(aes(L_ref, worse, L_ref, A_ref), 0.0, "<"),
        Comparison(aes(L_ref, better, L_ref, A_ref), 3.0 * (better - A_ref) / A_ref),
    ]


@register_check("aes_monotone", _AES)
def _aes_monotone(rng: np.random.Generator):
    """AES falls as the run gets longer and rises as it gets more accurate (across beta's switch)."""
    L_ref, A_ref = _run(rng)
    L1, L2 = np.sort(rng.uniform(0, 2 * L_ref, 2))
    A1, A2 = np.sort(rng.uniform(0, 2 * A_ref, 2))
    A = float(rng.uniform(0, 2 * A_ref))
    L = float(rng.uniform(0, 2 * L_ref))
    return [
        Comparison(aes(L2, A, L_ref, A_ref), aes(L1, A, L_ref, A_ref), "<=", scale=10.0),
        Comparison(aes(L, A1, L_ref, A_ref), aes(L, A2, L_ref, A_ref), "<=", scale=10.0),
    ]


# ---------------------------------------------------------------------------------------------
# Correlations
# ---------------------------------------------------------------------------------------------


def _bivariate(rng: np.random.Generator, n_min: int = 5, n_max: int = 60, rho_max: float = 0.95):
    n = int(rng.integers(n_min, n_max + 1))
    rho = float(rng.uniform(-rho_max, rho_max))
    x = rng.normal(size=n)
    y = rho * x + np.sqrt(1 - rho**2) * rng.normal(size=n)
    return x, y


@register_check("fisher_ci_brackets_estimate", _CORR)
def _fisher_brackets(rng: np.random.Generator):
    """-1 <= lo <= r <= hi <= 1 for the Pearson and Spearman Fisher-z intervals."""
    x, y = _bivariate(rng)
    out = []
    for res in (pearson(x, y), spearman(x, y)):
        out += [
            Comparison(-1.0, res.lo, "<="),
            Comparison(res.lo, res.estimate, "<="),
            Comparison(res.estimate, res.hi, "<="),
            Comparison(res.hi, 1.0, "<="),
        ]
    return out


@register_check("pearson_matches_scipy", _CORR)
def _pearson_scipy(rng: np.random.Generator):
    """Pearson r, p-value and Fisher CI equal scipy.stats.pearsonr and its confidence_interval()."""
    x, y = _bivariate(rng)
    res = pearson(x, y)
    ref = stats.pearsonr(x, y)
    ci = ref.confidence_interval(0.95)
    return [
        Comparison(res.estimate, float(ref.statistic)),
        Comparison(res.lo, float(ci.low)),
        Comparison(res.hi, float(ci.high)),
        Comparison(res.p_value, float(ref.pvalue)),
    ]


@register_check("spearman_fisher_interval", _CORR + " / Fieller et al. 1957")
def _spearman_fisher(rng: np.random.Generator):
    """Spearman rho = scipy's; its interval is tanh(atanh(rho) -/+ 1.96 sqrt(1.06/(n-3)))."""
    x, y = _bivariate(rng, 10, 60, 0.8)
    res = spearman(x, y)
    rho = float(stats.spearmanr(x, y).statistic)
    half = stats.norm.ppf(0.975) * np.sqrt(1.06 / (len(x) - 3))  # Fieller et al.'s constant
    return [
        Comparison(res.estimate, rho),
        Comparison(res.lo, np.tanh(np.arctanh(rho) - half)),
        Comparison(res.hi, np.tanh(np.arctanh(rho) + half)),
    ]


@register_check("within_group_single_group_is_its_r", _CORR)
def _within_single(rng: np.random.Generator):
    """With one group, the Fisher-z average is that group's r and its CI that group's Fisher CI."""
    x, y = _bivariate(rng, 5, 60, 0.9)
    method = "pearson" if rng.random() < 0.5 else "spearman"
    res = within_group_correlation(x, y, np.zeros(len(x), dtype=int), method)
    single = pearson(x, y) if method == "pearson" else spearman(x, y)
    if abs(single.estimate) > 0.9999:  # |r| = 1 is clipped to the documented max_abs_r
        r = float(np.sign(single.estimate) * 0.9999)
        var = 1.0 if method == "pearson" else 1.06
        lo, hi = fisher_z_interval(r, len(x), variance=var)
        return [Comparison(res.estimate, r), Comparison(res.lo, lo), Comparison(res.hi, hi)]
    return [
        Comparison(res.estimate, single.estimate),
        Comparison(res.lo, single.lo),
        Comparison(res.hi, single.hi),
    ]


@register_check("within_group_ignores_group_offsets", _CORR)
def _within_offsets(rng: np.random.Generator):
    """Shifting x and y by a per-group constant leaves the within-group average unchanged."""
    G = int(rng.integers(2, 6))
    xs, ys, gs = [], [], []
    for g in range(G):
        x, y = _bivariate(rng, 5, 20)
        xs.append(x)
        ys.append(y)
        gs.append(np.full(len(x), g))
    x, y, g = np.concatenate(xs), np.concatenate(ys), np.concatenate(gs)
    shift_x, shift_y = rng.normal(0, 10, G), rng.normal(0, 10, G)
    out = []
    for method in ("pearson", "spearman"):
        a = within_group_correlation(x, y, g, method)
        b = within_group_correlation(x + shift_x[g], y + shift_y[g], g, method)
        out += [Comparison(a.estimate, b.estimate), Comparison(a.lo, b.lo), Comparison(a.hi, b.hi)]
    return out


@register_check("within_group_is_fisher_average", _CORR)
def _within_average(rng: np.random.Generator):
    """tanh of the (n_g - 3)-weighted mean of atanh(r_g) over groups, with se 1/sqrt(sum(n_g - 3))."""
    G = int(rng.integers(2, 6))
    sizes = rng.integers(5, 25, G)
    g = np.repeat(np.arange(G), sizes)
    x, y = _bivariate(rng, int(sizes.sum()), int(sizes.sum()))
    res = within_group_correlation(x, y, g, "pearson")
    z = np.array([np.arctanh(stats.pearsonr(x[g == j], y[g == j]).statistic) for j in range(G)])
    w = sizes - 3.0
    z_bar = float(np.sum(w * z) / np.sum(w))
    half = stats.norm.ppf(0.975) / np.sqrt(np.sum(w))
    return [
        Comparison(res.estimate, np.tanh(z_bar)),
        Comparison(res.lo, np.tanh(z_bar - half)),
        Comparison(res.hi, np.tanh(z_bar + half)),
    ]


def _scipy_statistic(method: str):
    if method == "pearson":
        return lambda a, b, axis: stats.pearsonr(a, b, axis=axis).statistic
    return lambda a, b, axis: stats.pearsonr(stats.rankdata(a, axis=axis), stats.rankdata(b, axis=axis), axis=axis).statistic


@register_check("bootstrap_ci_matches_scipy", _CORR + " / Efron & Tibshirani 1993 §13.3, §14.3")
def _bootstrap_scipy(rng: np.random.Generator):
    """Pearson percentile / BCa intervals equal scipy.stats.bootstrap(paired=True) with the same seed.

    Continuous data and n >= 20, so no resampled r ties with the estimate (where the two
    implementations deliberately differ, see ``BCA_TIE_ATOL``).
    """
    x, y = _bivariate(rng, 20, 40)
    ours, theirs = (("bootstrap_percentile", "percentile"), ("bootstrap_bca", "BCa"))[int(rng.integers(2))]
    seed = int(rng.integers(2**31))
    res = correlation(x, y, "pearson", ci_method=ours, n_resamples=200, seed=seed)
    seed_kw = "rng" if "rng" in inspect.signature(stats.bootstrap).parameters else "random_state"
    ref = stats.bootstrap(
        (x, y), lambda a, b, axis: stats.pearsonr(a, b, axis=axis).statistic, paired=True, vectorized=True,
        n_resamples=200, method=theirs, **{seed_kw: np.random.default_rng(seed)},
    ).confidence_interval
    return [Comparison(res.lo, float(ref.low)), Comparison(res.hi, float(ref.high))]


# ---------------------------------------------------------------------------------------------
# Diversity
# ---------------------------------------------------------------------------------------------


def _responses(rng: np.random.Generator, m_min: int = 1, m_max: int = 6):
    m = int(rng.integers(m_min, m_max + 1))
    vocab = int(rng.integers(2, 12))
    return [list(rng.integers(0, vocab, int(rng.integers(4, 30)))) for _ in range(m)]


@register_check("distinct_n_counts", _DIV)
def _distinct(rng: np.random.Generator):
    """Distinct-4 in (0, 1], equal to brute-force counting, and u / (m t) for m copies of one response."""
    resp = _responses(rng)
    d = distinct_n(resp, 4)
    grams = [tuple(r[i : i + 4]) for r in resp for i in range(len(r) - 3)]
    one = resp[0]
    g1 = [tuple(one[i : i + 4]) for i in range(len(one) - 3)]
    m = int(rng.integers(1, 6))
    return [
        Comparison(d, 0.0, ">"),
        Comparison(d, 1.0, "<="),
        Comparison(d, len(set(grams)) / len(grams)),
        Comparison(distinct_n([one] * m, 4), len(set(g1)) / (m * len(g1))),
    ]


@register_check("self_bleu_bounds_and_identity", _DIV)
def _self_bleu(rng: np.random.Generator):
    """Self-BLEU-4 is 1 for identical responses, lies in [0, 1], and "others" >= "pairwise" at equal lengths."""
    resp = _responses(rng, m_min=2)
    out = [Comparison(self_bleu([resp[0]] * len(resp)), 1.0)]
    for mode in ("others", "pairwise"):
        v = self_bleu(resp, mode=mode)
        out += [Comparison(v, 0.0, ">="), Comparison(v, 1.0, "<=")]
    # With equal lengths the brevity penalty is 1, and pooling references can only raise each
    # clipped count, so BLEU against all others dominates every single-reference BLEU.
    length, vocab = int(rng.integers(4, 20)), int(rng.integers(2, 6))
    same_len = [list(rng.integers(0, vocab, length)) for _ in range(len(resp))]
    out.append(Comparison(self_bleu(same_len, mode="pairwise"), self_bleu(same_len, mode="others"), "<="))
    return out


def _plain_bleu(hyp: list, refs: list[list], n: int = 4, eps: float = 0.1) -> float:
    """BLEU-n restated from Papineni et al. (2002) with zero counts replaced by eps (NLTK method1)."""
    if not hyp:
        return 0.0
    logp = 0.0
    for k in range(1, n + 1):
        h = Counter(tuple(hyp[i : i + k]) for i in range(len(hyp) - k + 1))
        best: Counter = Counter()
        for r in refs:
            for g, c in Counter(tuple(r[i : i + k]) for i in range(len(r) - k + 1)).items():
                best[g] = max(best[g], c)
        match = sum(min(c, best[g]) for g, c in h.items())
        if k == 1 and match == 0:
            return 0.0
        logp += log((match if match else eps) / max(sum(h.values()), 1)) / n
    r = min((len(x) for x in refs), key=lambda L: (abs(L - len(hyp)), L))
    return (1.0 if len(hyp) > r else exp(1 - r / len(hyp))) * exp(logp)


@register_check("self_bleu_is_mean_bleu_against_others", _DIV + " / Papineni et al. 2002")
def _self_bleu_definition(rng: np.random.Generator):
    """BLEU-4 matches its textbook definition; Self-BLEU = mean_i BLEU(r_i; others); disjoint -> 0."""
    resp = _responses(rng, m_min=2, m_max=4)
    per = [_plain_bleu(r, resp[:i] + resp[i + 1 :]) for i, r in enumerate(resp)]
    out = [Comparison(bleu(r, resp[:i] + resp[i + 1 :]), p) for i, (r, p) in enumerate(zip(resp, per))]
    out.append(Comparison(self_bleu(resp), float(np.mean(per))))
    pairs = [_plain_bleu(resp[i], [resp[j]]) for i in range(len(resp)) for j in range(len(resp)) if i != j]
    out.append(Comparison(self_bleu(resp, mode="pairwise"), float(np.mean(pairs))))
    disjoint = [[(i, t) for t in r] for i, r in enumerate(resp)]  # tokens tagged by response
    out.append(Comparison(self_bleu(disjoint), 0.0))
    return out


@register_check("logdet_eigen_identity_and_hadamard", _DIV)
def _logdet(rng: np.random.Generator):
    """log det(I + aK) = sum log(1 + a lambda_i(K)) and 0 <= it <= m log(1 + a) (Hadamard)."""
    m, d = int(rng.integers(1, 12)), int(rng.integers(1, 16))
    e = rng.normal(size=(m, d))
    alpha = float(np.exp(rng.uniform(np.log(0.05), np.log(20))))
    val = logdet_diversity(e, alpha)
    u = e / np.linalg.norm(e, axis=1, keepdims=True)
    lam = np.clip(np.linalg.eigvalsh(u @ u.T), 0.0, None)
    bound = m * np.log1p(alpha)
    out = [
        Comparison(val, float(np.sum(np.log1p(alpha * lam))), scale=bound),
        Comparison(val, 0.0, ">="),
        Comparison(val, bound, "<=", scale=bound),
    ]
    if m <= d:  # orthonormal rows attain the Hadamard bound
        q, _ = np.linalg.qr(rng.normal(size=(d, m)))
        out.append(Comparison(logdet_diversity(q.T * rng.uniform(0.5, 3, (m, 1)), alpha), bound, scale=bound))
    return out
