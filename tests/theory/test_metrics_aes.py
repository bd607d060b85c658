"""AES (Replay §6.1 eq. 4): the paper's published numbers, properties, bad input."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from theory.metrics import aes, aes_terms

RTOL = 4 * np.sqrt(np.finfo(float).eps)

# Replay Table 13 (1.7B vs the GRPO reference Acc 15.75 %, L 2174) and Table 5 vs Table 10:
# (acc, length, ref_acc, ref_length, printed AES).
PUBLISHED = [
    (16.58, 1938, 15.75, 2174, 0.266),
    (16.49, 1940, 15.75, 2174, 0.248),
    (15.99, 1788, 15.75, 2174, 0.224),
    (16.01, 1805, 15.75, 2174, 0.219),
    (16.19, 2121, 15.75, 2174, 0.107),
    (15.96, 2034, 15.75, 2174, 0.105),
    (15.94, 2065, 15.75, 2174, 0.087),
    (16.04, 2143, 15.75, 2174, 0.069),
    (15.28, 1745, 15.75, 2174, 0.047),  # accuracy drop: beta = 5
    (15.18, 1698, 15.75, 2174, 0.038),
    (15.43, 2001, 15.75, 2174, -0.022),
    (16.45, 2584, 15.75, 2174, -0.056),
    (16.58, 1938, 13.53, 2007, 0.710),  # Table 5: 1.7B Ours vs Base init
    (15.75, 2174, 13.53, 2007, 0.409),  # 1.7B GRPO vs Base init
    (11.20, 3890, 9.52, 2162, -0.269),  # 0.6B GRPO vs Base init
    (26.71, 7576, 17.36, 2452, -0.472),  # 4B GRPO vs Base init
]


@pytest.mark.parametrize("acc, length, ref_acc, ref_length, printed", PUBLISHED)
def test_aes_reproduces_published_values(acc, length, ref_acc, ref_length, printed):
    """The paper rounds Acc to 0.01, L to 1 token and AES to 0.001; AES is monotone in each input
    (away from dAcc = 0), so its exact range over the rounding box is attained at the corners."""
    corners = [
        aes(length + dl, acc + da, ref_length + dr, ref_acc + dra)
        for dl, da, dr, dra in itertools.product((-0.5, 0.5), (-0.005, 0.005), (-0.5, 0.5), (-0.005, 0.005))
    ]
    assert min(corners) <= printed + 0.0005 and max(corners) >= printed - 0.0005


def test_aes_uses_beta_5_for_drops_and_3_for_gains():
    t = aes_terms(2174, 15.28, 2174, 15.75)
    assert t.beta == 5.0 and t.score == pytest.approx(5 * (15.28 - 15.75) / 15.75, rel=RTOL)
    t = aes_terms(2174, 16.0, 2174, 15.75)
    assert t.beta == 3.0 and t.score == pytest.approx(3 * (16.0 - 15.75) / 15.75, rel=RTOL)
    assert aes_terms(1000, 0.5, 1000, 0.5).beta == 3.0  # dAcc = 0 counts as a gain
    assert aes(1000, 0.5, 1000, 0.5) == 0.0
    assert aes(500, 0.5, 1000, 0.5) == pytest.approx(0.5, rel=RTOL)  # half the length: dL = 0.5


positive = st.floats(1e-3, 1e4, allow_nan=False)


@given(positive, positive, positive, positive)
def test_aes_formula_and_invariances(L, A, L_ref, A_ref):
    t = aes_terms(L, A, L_ref, A_ref)
    d_len, d_acc = (L_ref - L) / L_ref, (A - A_ref) / A_ref
    beta = 3.0 if d_acc >= 0 else 5.0
    scale = abs(d_len) + beta * abs(d_acc) + 1.0
    assert t.delta_length == pytest.approx(d_len, rel=RTOL, abs=RTOL * scale)
    assert t.delta_acc == pytest.approx(d_acc, rel=RTOL, abs=RTOL * scale)
    assert t.score == pytest.approx(d_len + beta * d_acc, rel=RTOL, abs=RTOL * scale)
    # accuracy in percent or as a fraction, length in tokens or kilo-tokens: same AES
    assert aes(L / 1000, A / 100, L_ref / 1000, A_ref / 100) == pytest.approx(t.score, rel=RTOL, abs=RTOL * scale)
    assert aes(L, A, L, A) == 0.0


def test_aes_broadcasts_over_runs():
    out = aes([1938, 1745, 2584], [16.58, 15.28, 16.45], 2174, 15.75)
    assert out.shape == (3,)
    expected = [aes(L, A, 2174, 15.75) for L, A in [(1938, 16.58), (1745, 15.28), (2584, 16.45)]]
    np.testing.assert_allclose(out, expected, rtol=RTOL)
    t = aes_terms([1, 2], [1, 0.5], 2, 1)
    np.testing.assert_array_equal(t.beta, [3.0, 5.0])


@pytest.mark.parametrize(
    "kwargs, arg",
    [
        (dict(length=-1.0, acc=0.5, ref_length=10.0, ref_acc=0.5), "length"),
        (dict(length=1.0, acc=-0.5, ref_length=10.0, ref_acc=0.5), "acc"),
        (dict(length=1.0, acc=0.5, ref_length=0.0, ref_acc=0.5), "ref_length"),
        (dict(length=1.0, acc=0.5, ref_length=10.0, ref_acc=0.0), "ref_acc"),
        (dict(length=np.nan, acc=0.5, ref_length=10.0, ref_acc=0.5), "length"),
        (dict(length=1.0, acc=np.inf, ref_length=10.0, ref_acc=0.5), "acc"),
        (dict(length=[1.0, 2.0], acc=[0.5, 0.5, 0.5], ref_length=10.0, ref_acc=0.5), "length"),
        (dict(length=1.0, acc=0.5, ref_length=10.0, ref_acc=0.5, beta_gain=0.0), "beta_gain"),
        (dict(length=1.0, acc=0.5, ref_length=10.0, ref_acc=0.5, beta_loss=-5.0), "beta_loss"),
    ],
)
def test_aes_bad_input(kwargs, arg):
    with pytest.raises(ValueError, match=rf"^{arg}:"):
        aes(**kwargs)
