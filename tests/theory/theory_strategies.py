"""Hypothesis strategies for the theory tests: raw arrays shaped into valid finite problems."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from theory.checks._registry import Comparison
from theory.instances import FiniteProblem, build_problem


def floats(lo: float, hi: float):
    # no subnormals: probabilities like 5e-324 lose all precision (p(1-p) underflows to 0 while
    # p itself does not), which breaks identities at rounding level and says nothing about the maths
    return st.floats(lo, hi, allow_nan=False, allow_infinity=False, allow_subnormal=False, width=64)


@st.composite
def problems(draw, *, max_states: int = 6, max_actions: int = 4, reward_levels: int | None = None, R: float = 1.0) -> FiniteProblem:
    """Arbitrary finite problem; allows near-zero visitation, near-deterministic policies and rewards."""
    S = draw(st.integers(1, max_states))
    A = draw(st.integers(2, max_actions))
    P = draw(st.integers(1, 4))
    K = reward_levels or draw(st.integers(2, 4))
    d_w = draw(hnp.arrays(np.float64, S, elements=floats(0.0, 1.0)))
    logits = draw(hnp.arrays(np.float64, (S, A), elements=floats(-5.0, 5.0)))
    feats = draw(hnp.arrays(np.float64, (S, A, P), elements=floats(-3.0, 3.0)))
    r_w = draw(hnp.arrays(np.float64, (S, A, K), elements=floats(0.0, 1.0)))
    return build_problem(d_w + 1e-3, logits, feats, np.linspace(0.0, R, K), r_w)


@st.composite
def proposals(draw, n_states: int):
    w = draw(hnp.arrays(np.float64, n_states, elements=floats(0.01, 1.0)))
    return w / w.sum()


@st.composite
def clean_problems(draw, *, homogeneous: bool = True, allow_zero_sigma: bool = True) -> tuple[FiniteProblem, float]:
    """Binary rewards independent of the action given s (Assumption B.3); B.4 too if homogeneous."""
    S = draw(st.integers(2, 6))
    A = draw(st.integers(2, 4))
    P = draw(st.integers(1, 4))
    p_elems = floats(0.0, 1.0) if allow_zero_sigma else floats(0.01, 0.99)
    p_state = draw(hnp.arrays(np.float64, S, elements=p_elems))
    d_w = draw(hnp.arrays(np.float64, S, elements=floats(0.01, 1.0)))
    logits = draw(hnp.arrays(np.float64, (S, A), elements=floats(-3.0, 3.0)))
    feats = draw(hnp.arrays(np.float64, (S, A, P), elements=floats(-3.0, 3.0)))
    G0 = draw(floats(0.1, 5.0))
    w = np.stack([1.0 - p_state, p_state], axis=1)[:, None, :].repeat(A, axis=1)
    feats[..., 0] += 10.0 * np.arange(A)  # distinct action features: the score never vanishes identically
    base = build_problem(d_w, logits, feats, [0.0, 1.0], w)
    EH = np.einsum("sa,sa->s", base.pi, base.H)
    target = np.full(S, G0)
    if not homogeneous:
        target = G0 * np.exp(draw(hnp.arrays(np.float64, S, elements=floats(-1.0, 1.0))))
    return build_problem(d_w, logits, feats, [0.0, 1.0], w, state_scales=np.sqrt(target / EH)), G0


#: Quantities below this magnitude are numerically zero for inputs of order one (hypothesis
#: happily builds score vectors that are pure rounding noise, ~1e-17).
ABS_FLOOR = 1e-6


def assert_close(a: float, b: float, scale: float = 1.0) -> None:
    """Identity up to rtol = 4 sqrt(eps) with an absolute floor scaled to ``scale``."""
    c = Comparison(float(a), float(b), "==", scale=max(scale, ABS_FLOOR))
    assert c.evaluate()[3], f"{a!r} != {b!r} (scale {scale:g}, tol {c.tolerance():.3g})"


def assert_le(a: float, b: float, scale: float = 1.0) -> None:
    """Inequality ``a <= b`` up to the same tolerance."""
    c = Comparison(float(a), float(b), "<=", scale=max(scale, ABS_FLOOR))
    assert c.evaluate()[3], f"{a!r} > {b!r} (scale {scale:g}, tol {c.tolerance():.3g})"
