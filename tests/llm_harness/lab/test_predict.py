"""The lab's predictions: Lemma B.1 on an exact tabular policy, the closed forms of the prompt-level Neyman gain and
of DAPO's per-token neutrality, and a calibrated Monte-Carlo check of the predicted variance of the lab's own
estimator (groups, leave-one-out advantages) on a simulated pool."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llm_harness.lab.moments import BlockMoments, estimate
from llm_harness.lab.predict import Prediction, leave_one_out_inflation, predict, unbiased_bernoulli_variance
from theory import vsr_variance as vv
from theory.instances import clean_problem


@settings(max_examples=50, deadline=None)
@given(seed=st.integers(0, 100_000), het=st.floats(0, 1.5), eps=st.floats(0.01, 1.0))
def test_prediction_is_lemma_b1_on_a_tabular_policy(seed, het, eps):
    """Binary rewards independent of the action given the state (Assumption B.3): M(s) = σ² E[H|s], and the
    prediction's per-sample second moment with weights d/μ equals Lemma B.1's V(μ; r̄) computed exactly from the
    tabular softmax policy (its ‖∇J‖² is 0 here, the term the prediction drops)."""
    rng = np.random.default_rng(seed)
    prob = clean_problem(rng, 1.0, heterogeneity=het)
    mu = vv.smoothed_proposal(vv.variance_proposal(prob.d, prob.sigma), prob.d, eps)
    EH = np.einsum("sa,sa->s", prob.pi, prob.H)
    pr = predict(mu, prob.d / mu, prob.sigma**2 * EH, np.ones_like(mu))
    assert pr.second_moment == pytest.approx(prob.V(mu, prob.rbar), rel=1e-9, abs=1e-12)
    assert float(prob.grad @ prob.grad) == pytest.approx(0.0, abs=1e-20)


@settings(max_examples=50, deadline=None)
@given(p=st.lists(st.floats(0.01, 0.99), min_size=2, max_size=20), G=st.integers(2, 16))
def test_prompt_neyman_gain_is_the_cauchy_schwarz_ratio(p, G):
    """Constant score norm and length: μ ∝ d σ with d/μ weights gains E_d[σ²]/(E_d σ)² (VSR eq. 9, Thm B.5)."""
    p = np.asarray(p)
    d = np.full(p.size, 1.0 / p.size)
    sig = np.sqrt(p * (1 - p))
    M = sig**2 * leave_one_out_inflation(G)
    mu = d * sig / np.sum(d * sig)
    gain = predict(mu, d / mu, M, np.ones_like(p)).gain_over(predict(d, np.ones_like(d), M, np.ones_like(p)))
    assert gain == pytest.approx(np.mean(sig**2) / np.mean(sig) ** 2, rel=1e-9)
    assert gain >= 1 - 1e-12


@settings(max_examples=50, deadline=None)
@given(p=st.lists(st.floats(0.0, 1.0), min_size=2, max_size=20), G=st.integers(2, 16), seed=st.integers(0, 1000))
def test_dapo_filtering_neither_gains_nor_loses_per_generated_token(p, G, seed):
    """Dropping all-equal groups (whose leave-one-out advantages are 0) and paying for them: per generated token the
    SNR is unchanged (the signal scale 1/P(kept) cancels the variance and token factors)."""
    p = np.asarray(p)
    p[0] = 0.5  # at least one state whose groups can be mixed
    rng = np.random.default_rng(seed)
    d = np.full(p.size, 1.0 / p.size)
    M = p * (1 - p) * rng.uniform(0.5, 2, size=p.size)
    T = rng.uniform(10, 100, size=p.size)
    keep = 1 - p**G - (1 - p) ** G
    uni = predict(d, np.ones_like(d), M, T)
    dapo = predict(d, np.ones_like(d), M, T, keep=keep)
    assert dapo.gain_over(uni) == pytest.approx(1.0, rel=1e-9)
    assert dapo.signal_scale >= 1.0


def test_predicted_variance_of_the_lab_estimator_is_calibrated():
    """A simulated pool: prompt s has pass rate p_s, a sample's score vector has norm² G_s independent of its reward
    (B.3). The lab's estimator (K groups of G, leave-one-out advantages) realised over many batches has the tr Var
    the prediction gives; and over 40 repetitions its 95 % intervals cover the prediction ~95 % of the time."""
    rng = np.random.default_rng(11)
    S, P, K, G, N = 24, 6, 4, 6, 64
    p = rng.uniform(0.05, 0.95, size=S)
    gs = rng.uniform(0.5, 3.0, size=S)
    d = np.full(S, 1.0 / S)
    M = p * (1 - p) * gs * leave_one_out_inflation(G)
    pred = predict(d, np.ones(S), M, np.ones(S)).second_moment / (K * G)

    def batch() -> np.ndarray:
        s = rng.choice(S, size=K, p=d)
        out = np.zeros(P)
        for j in s:
            r = (rng.random(G) < p[j]).astype(float)
            a = r - (r.sum() - r) / (G - 1)
            z = rng.normal(size=(G, P))
            z *= np.sqrt(gs[j] / P)  # E‖z‖² = G_s, independent of r
            out += (a[:, None] * z).sum(0)
        return out / (K * G)

    covered, vals = 0, []
    for _ in range(40):
        acc = BlockMoments(P, blocks=8)
        for _ in range(N):
            acc.add(batch())
        e = estimate(acc.record(), "trvar")
        vals.append(e.value)
        covered += e.lo <= pred <= e.hi
    assert abs(np.mean(vals) / pred - 1) < 0.05
    assert covered >= 33


def test_errors_name_the_problem():
    with pytest.raises(ValueError, match="group_size"):
        leave_one_out_inflation(1)
    with pytest.raises(ValueError, match="mu: must be a distribution"):
        predict([0.5, 0.6], [1, 1], [1, 1], [1, 1])
    with pytest.raises(ValueError, match="one shape"):
        predict([0.5, 0.5], [1, 1, 1], [1, 1], [1, 1])
    with pytest.raises(ValueError, match="no state is ever kept"):
        predict([0.5, 0.5], [1, 1], [1, 1], [1, 1], keep=[0, 0])
    with pytest.raises(ValueError, match="n >= 2"):
        unbiased_bernoulli_variance([1], [1])
    assert unbiased_bernoulli_variance([3], [4])[0] == pytest.approx(3 * 1 / 12)
    assert Prediction(2.0, 1.0).gain_over(Prediction(1.0, 1.0)) == pytest.approx(0.5)


def test_assumption_s_prediction_of_a_biased_allocation_is_calibrated():
    """A simulated pool where Assumption S holds by construction: a sample's score is z + c (r − p_s)/σ_s √G_s u, so
    each state's expected gradient is c σ_s √G_s along one direction u. Restarting ∝ σ without weights (biased,
    like VSR's restarts) against uniform states: the realised gain in SNR along u per sample matches the prediction."""
    from llm_harness.lab.moments import log_ratio_interval

    rng = np.random.default_rng(5)
    S, P, K, G, N, c = 16, 8, 4, 8, 400, 0.15
    p = np.concatenate([np.full(S // 2, 0.002), rng.uniform(0.2, 0.8, size=S - S // 2)])
    gs = rng.uniform(0.5, 2.0, size=S)
    sig = np.sqrt(p * (1 - p))
    u = np.zeros(P)
    u[0] = 1.0
    d = np.full(S, 1.0 / S)
    mu_b = d * sig / np.sum(d * sig)

    def realise(mu: np.ndarray):
        acc = BlockMoments(P, blocks=8, references={"u": u})
        for _ in range(N):
            out = np.zeros(P)
            for j in rng.choice(S, size=K, p=mu):
                r = (rng.random(G) < p[j]).astype(float)
                a = r - (r.sum() - r) / (G - 1)
                z = rng.normal(size=(G, P)) * np.sqrt(gs[j] / P)
                z += (c * (r - p[j]) / sig[j] * np.sqrt(gs[j]))[:, None] * u
                out += (a[:, None] * z).sum(0)
            acc.add(out / (K * G), tokens=float(K * G))
        return acc.record()

    M = sig**2 * gs * leave_one_out_inflation(G)
    signal = sig * np.sqrt(gs)
    pred = predict(mu_b, np.ones(S), M, np.ones(S), signal=signal, d=d).gain_over(
        predict(d, np.ones(S), M, np.ones(S), signal=signal, d=d))
    real = log_ratio_interval(realise(mu_b), realise(d), "aligned_snr_per_ktok:u")
    assert pred > 1.2  # half the states carry almost no signal: restarting where σ is large pays
    assert real.lo * 0.9 <= pred <= real.hi * 1.1, (pred, real)
    assert real.hi / real.lo < 2.5  # resolved, not a vacuous interval


def test_mixed_probability_is_unbiased_where_the_plug_in_is_not():
    """E over k ~ Bin(n, p) of the estimate equals 1 − p^G − (1 − p)^G exactly; the plug-in (k/n)^G misses."""
    from scipy import stats

    from llm_harness.lab.allocations import mixed_probability

    n, G = 16, 8
    ks = np.arange(n + 1)
    for p in (0.01, 0.05, 0.3, 0.9):
        w = stats.binom.pmf(ks, n, p)
        truth = 1 - p**G - (1 - p) ** G
        assert float(w @ mixed_probability(ks, np.full(n + 1, n), G)) == pytest.approx(truth, abs=1e-9)
        q = ks / n
        plug = float(w @ (1 - q**G - (1 - q) ** G))
        if p in (0.01, 0.05):
            assert plug < truth * 0.9
    assert mixed_probability([0], [4], 8)[0] > 0  # n < G: Jeffreys plug-in, never exactly 0


def test_duplicate_continuations_prediction_is_calibrated():
    """States whose continuations come from a few strings (successes from m1, failures from m0), each string with its
    own score vector of norm² G_s on its own axis: identical samples share a score. The lab estimator's realised
    tr Var matches B.3 plus the duplicate term (D_1 = p²/m1, D_0 = (1 − p)²/m0), and B.3 alone underpredicts it."""
    from llm_harness.lab.predict import duplicate_second_moment
    from llm_harness.lab.probe import duplicate_shares

    rng = np.random.default_rng(9)
    S, K, G, N = 12, 4, 8, 400
    p = rng.uniform(0.2, 0.9, size=S)
    gs = rng.uniform(0.5, 2.0, size=S)
    m1, m0 = 2, 3
    P = S * (m1 + m0)

    def batch() -> np.ndarray:
        out = np.zeros(P)
        for j in rng.choice(S, size=K):
            r = (rng.random(G) < p[j]).astype(float)
            a = r - (r.sum() - r) / (G - 1)
            which = np.where(r > 0, rng.integers(0, m1, size=G), m1 + rng.integers(0, m0, size=G))
            for ai, w in zip(a, which):
                out[j * (m1 + m0) + w] += ai * np.sqrt(gs[j])
        return out / (K * G)

    acc = BlockMoments(P, blocks=8)
    for _ in range(N):
        acc.add(batch())
    real = estimate(acc.record(), "trvar", confidence=0.99)
    d = np.full(S, 1.0 / S)
    M = p * (1 - p) * gs * leave_one_out_inflation(G)
    dup = duplicate_second_moment(G, gs, p, p**2 / m1, (1 - p) ** 2 / m0)
    with_dup = predict(d, np.ones(S), M + dup, np.ones(S)).second_moment / (K * G)
    b3 = predict(d, np.ones(S), M, np.ones(S)).second_moment / (K * G)
    assert real.lo <= with_dup <= real.hi, (b3, with_dup, real)
    assert b3 < real.lo
    # the probe's estimate of the shares from samples
    d1, d0 = duplicate_shares([(1,), (1,), (2,), (3,), (3,), (3,)], [1, 1, 0, 0, 0, 0])
    assert (d1, d0) == (2 / 30, 6 / 30)
    with pytest.raises(ValueError, match="shares of pairs"):
        duplicate_second_moment(G, [1.0], [0.5], [0.8], [0.4])
