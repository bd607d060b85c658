"""Statistics of a stochastic gradient estimator from independent draws, without storing the draws.

An allocation's estimator ``ĝ`` is realised as ``N`` independent mini-batch gradients ``g_1 … g_N``
(vectors of the model's trainable parameters). What the lab reports are trace statistics:

* ``tr Var(ĝ) = E‖g‖² − ‖E g‖²``, estimated without bias by ``(Q − ‖S‖²/N)/(N − 1)``;
* ``‖E g‖²``, estimated without bias by the U-statistic ``Σ_{n≠m} ⟨g_n, g_m⟩ / (N(N − 1)) = (‖S‖² − Q)/(N(N − 1))``
  (``‖ḡ‖²`` itself is biased upward by ``tr Var / N``);
* ``SNR = ‖E g‖² / tr Var`` (McCandlish et al. 2018, "An empirical model of large-batch training": the
  inverse of their simple noise scale at batch 1), and SNR per generated token: the SNR of an average of
  independent batches grows linearly with their number, so ``SNR / tokens`` compares allocations whose
  batches cost different numbers of tokens;
* ``⟨E g, r⟩`` for fixed reference vectors ``r`` (a large-batch policy gradient on the training pool, one
  on held-out problems), unbiased from ``Σ_n ⟨g_n, r⟩ / N``, and ``⟨E g, r⟩²`` unbiased from the U-statistic
  of the ``⟨g_n, r⟩``. The *aligned* SNR ``⟨E g, r⟩² / tr Var`` is the headline: ``‖E g‖²`` is a difference of
  two numbers of size ``tr Var`` and needs ``N ≫ 1/SNR`` draws to resolve, while a projection on one
  direction is resolved once ``N · d_eff ≫ 1/SNR`` (``d_eff`` the effective dimension of the noise), and a
  noisy reference ``r = ∇J + e`` (``e`` independent, mean 0) leaves ``⟨E g, r⟩`` unbiased for ``⟨E g, ∇J⟩``.

Storage (why not a random sketch): every statistic above is a function of the Gram matrix of a few
*block sums* ``S_b = Σ_{n ∈ b} g_n`` (batch ``n`` goes to block ``n mod B``), the per-block ``Q_b = Σ ‖g_n‖²``
and the per-block dot products with the references. Holding ``B`` block sums costs ``B × P`` floats
(B = 8: 32 bytes per parameter), gives exact inner products (a Johnson–Lindenstrauss sketch of ``k``
coordinates would add a relative error of about ``sqrt(2/k)`` to every cross term, which swamps ``‖E g‖²``
when the SNR per batch is small, the usual case), and gives intervals for free: the delete-one-block
jackknife recomputes every statistic from the scalars alone. After realisation only those scalars are
kept (:class:`MomentRecord`, plain data), so a report can be rebuilt and intervals recomputed from JSON.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

__all__ = ["BlockMoments", "Estimate", "MomentRecord", "RESOLVE_FACTOR", "STATISTICS", "batches_to_resolve",
           "difference_interval", "estimate", "jackknife", "log_ratio_interval", "ratio_label", "sign_label", "statistic"]


@dataclass(frozen=True)
class MomentRecord:
    """Sufficient scalars of ``N`` draws split into ``B`` blocks (module doc); plain data (JSON-able)."""

    counts: tuple[int, ...]
    """Draws per block."""
    sq_norms: tuple[float, ...]
    """``Q_b = Σ_{n∈b} ‖g_n‖²``."""
    gram: tuple[tuple[float, ...], ...]
    """``⟨S_b, S_c⟩`` of the block sums."""
    tokens: tuple[float, ...]
    """Generated tokens of the block's batches (summed)."""
    dots: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    """``⟨S_b, r⟩`` per reference name."""
    dot_sq: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    """``Σ_{n∈b} ⟨g_n, r⟩²`` per reference name (for the unbiased ``⟨E g, r⟩²``)."""

    def __post_init__(self) -> None:
        B = len(self.counts)
        if B < 2:
            raise ValueError(f"counts: need >= 2 blocks for the jackknife, got {B}")
        if len(self.sq_norms) != B or len(self.tokens) != B or len(self.gram) != B or any(len(r) != B for r in self.gram):
            raise ValueError(f"MomentRecord: {B} blocks but sq_norms/tokens/gram have other lengths")
        for what, table in (("dots", self.dots), ("dot_sq", self.dot_sq)):
            for name, d in table.items():
                if len(d) != B:
                    raise ValueError(f"{what}[{name!r}]: {len(d)} entries for {B} blocks")
        if set(self.dot_sq) - set(self.dots):
            raise ValueError("dot_sq: names a reference that dots does not")
        if min(self.counts) < 1:
            raise ValueError(f"counts: every block needs >= 1 draw, got {list(self.counts)}")

    @property
    def n(self) -> int:
        """Number of draws ``N``."""
        return int(sum(self.counts))

    def to_plain(self) -> dict[str, Any]:
        return {"counts": list(self.counts), "sq_norms": list(self.sq_norms), "gram": [list(r) for r in self.gram],
                "tokens": list(self.tokens), "dots": {k: list(v) for k, v in self.dots.items()},
                "dot_sq": {k: list(v) for k, v in self.dot_sq.items()}}

    @classmethod
    def from_plain(cls, d: Mapping[str, Any]) -> "MomentRecord":
        return cls(tuple(int(x) for x in d["counts"]), tuple(float(x) for x in d["sq_norms"]),
                   tuple(tuple(float(x) for x in r) for r in d["gram"]), tuple(float(x) for x in d["tokens"]),
                   {k: tuple(float(x) for x in v) for k, v in d.get("dots", {}).items()},
                   {k: tuple(float(x) for x in v) for k, v in d.get("dot_sq", {}).items()})


class BlockMoments:
    """Accumulates draws ``g_n`` (1-D torch tensors or numpy arrays of one length) into ``blocks`` block sums.

    ``references`` are fixed vectors (same length); ``add(g, tokens)`` costs one pass over ``g`` per block sum
    and per reference. Memory: ``blocks`` float32 vectors (the sums) — check it before constructing
    (:func:`llm_harness.lab.config.check_memory`).
    """

    def __init__(self, size: int, *, blocks: int = 8, references: Mapping[str, Any] | None = None):
        import torch

        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"size: must be an int >= 1, got {size!r}")
        if isinstance(blocks, bool) or not isinstance(blocks, int) or blocks < 2:
            raise ValueError(f"blocks: must be an int >= 2 (the jackknife deletes one block), got {blocks!r}")
        self.size, self.blocks = size, blocks
        self._sums = torch.zeros(blocks, size, dtype=torch.float32)
        self._counts = [0] * blocks
        self._sq = [0.0] * blocks
        self._tokens = [0.0] * blocks
        self._refs = {}
        for name, r in (references or {}).items():
            t = torch.as_tensor(np.asarray(r) if not isinstance(r, torch.Tensor) else r).to(torch.float32).reshape(-1)
            if t.numel() != size:
                raise ValueError(f"references[{name!r}]: length {t.numel()}, draws have {size}")
            self._refs[name] = t
        self._dots = {name: [0.0] * blocks for name in self._refs}
        self._dot_sq = {name: [0.0] * blocks for name in self._refs}
        self.n = 0

    def add(self, g: Any, tokens: float = 0.0) -> None:
        """Add draw number ``self.n`` (to block ``n mod blocks``)."""
        import torch

        t = torch.as_tensor(g).reshape(-1)
        if t.numel() != self.size:
            raise ValueError(f"draw {self.n}: length {t.numel()}, expected {self.size}")
        if not bool(torch.isfinite(t).all()):
            raise ValueError(f"draw {self.n}: gradient has non-finite entries")
        b = self.n % self.blocks
        self._sums[b] += t.to(torch.float32)
        self._counts[b] += 1
        self._sq[b] += _dot64(t, t)
        self._tokens[b] += float(tokens)
        for name, r in self._refs.items():
            x = _dot64(t, r)
            self._dots[name][b] += x
            self._dot_sq[name][b] += x * x
        self.n += 1

    def mean(self) -> Any:
        """``ḡ = S / N`` (float32 tensor)."""
        if self.n == 0:
            raise ValueError("mean: no draws yet")
        return self._sums.sum(0) / self.n

    def record(self) -> MomentRecord:
        """The sufficient scalars (:class:`MomentRecord`); needs a draw in every block."""
        if min(self._counts) < 1:
            raise ValueError(f"record: {self.n} draws do not fill {self.blocks} blocks; draw at least {self.blocks}")
        B = self.blocks
        gram = [[_dot64(self._sums[i], self._sums[j]) for j in range(B)] for i in range(B)]
        return MomentRecord(tuple(self._counts), tuple(self._sq), tuple(tuple(r) for r in gram), tuple(self._tokens),
                            {k: tuple(v) for k, v in self._dots.items()}, {k: tuple(v) for k, v in self._dot_sq.items()})


#: elements per float64 chunk of a dot product (32 MiB of float64 transient, whatever the model's size)
DOT_CHUNK = 1 << 22


def _dot64(a: Any, b: Any) -> float:
    """``⟨a, b⟩`` accumulated in float64, chunk by chunk (a full float64 copy of a 135M-parameter gradient is 1 GiB)."""
    import torch

    total = 0.0
    for i in range(0, a.numel(), DOT_CHUNK):
        total += float(torch.dot(a[i:i + DOT_CHUNK].to(torch.float64), b[i:i + DOT_CHUNK].to(torch.float64)))
    return total


# ---------------------------------------------------------------------- statistics from the scalars


def _parts(rec: MomentRecord, drop: int | None = None) -> tuple[float, float, float, float, dict[str, float]]:
    """``(N, Q, ‖S‖², tokens, {name: ⟨S, r⟩, name + '²': Σ ⟨g_n, r⟩²})`` of every block, or of every block but ``drop``."""
    c = np.asarray(rec.counts, dtype=np.float64)
    q = np.asarray(rec.sq_norms, dtype=np.float64)
    g = np.asarray(rec.gram, dtype=np.float64)
    t = np.asarray(rec.tokens, dtype=np.float64)
    keep = np.ones(len(c), dtype=bool)
    if drop is not None:
        keep[drop] = False
    dots = {k: float(np.asarray(v, dtype=np.float64)[keep].sum()) for k, v in rec.dots.items()}
    dots.update({k + "²": float(np.asarray(v, dtype=np.float64)[keep].sum()) for k, v in rec.dot_sq.items()})
    return float(c[keep].sum()), float(q[keep].sum()), float(g[np.ix_(keep, keep)].sum()), float(t[keep].sum()), dots


def _trvar(N: float, Q: float, SS: float) -> float:
    return (Q - SS / N) / (N - 1) if N > 1 else math.nan


def _mean2(N: float, Q: float, SS: float) -> float:
    return (SS - Q) / (N * (N - 1)) if N > 1 else math.nan


def _stat_trvar(N, Q, SS, T, dots, ctx):
    return _trvar(N, Q, SS)


def _stat_mean2(N, Q, SS, T, dots, ctx):
    return _mean2(N, Q, SS)


def _stat_snr(N, Q, SS, T, dots, ctx):
    v = _trvar(N, Q, SS)
    return _mean2(N, Q, SS) / v if v > 0 else math.nan


def _stat_tokens(N, Q, SS, T, dots, ctx):
    return T / N


def _stat_snr_per_ktok(N, Q, SS, T, dots, ctx):
    tok = T / N
    return _stat_snr(N, Q, SS, T, dots, ctx) / (tok / 1000.0) if tok > 0 else math.nan


def _stat_noise_per_ktok(N, Q, SS, T, dots, ctx):
    return _trvar(N, Q, SS) * (T / N) / 1000.0


def _dot(name: str) -> Callable[..., float]:
    def f(N, Q, SS, T, dots, ctx):
        return dots[name] / N
    return f


def _aligned_sq(N: float, dots: Mapping[str, float], name: str) -> float:
    """Unbiased ``⟨E g, r⟩²``: ``Σ_{n≠m} d_n d_m / (N (N − 1))`` with ``d_n = ⟨g_n, r⟩``."""
    if name + "²" not in dots:
        raise ValueError(f"statistic: the record has no squared dot products with {name!r}")
    D, D2 = dots[name], dots[name + "²"]
    return (D * D - D2) / (N * (N - 1)) if N > 1 else math.nan


def _aligned(name: str) -> Callable[..., float]:
    def f(N, Q, SS, T, dots, ctx):
        return _aligned_sq(N, dots, name)
    return f


def _aligned_snr_per_ktok(name: str) -> Callable[..., float]:
    def f(N, Q, SS, T, dots, ctx):
        v, tok = _trvar(N, Q, SS), T / N
        return _aligned_sq(N, dots, name) / v / (tok / 1000.0) if v > 0 and tok > 0 else math.nan
    return f


def _cos(name: str) -> Callable[..., float]:
    def f(N, Q, SS, T, dots, ctx):
        m2, r2 = _mean2(N, Q, SS), ctx.get(f"{name}_norm2", math.nan)
        if not (m2 > 0 and r2 > 0):
            return math.nan
        return dots[name] / N / math.sqrt(m2 * r2)
    return f


#: name -> statistic of ``(N, Q, ‖S‖², tokens, dots, ctx)``; ``ctx`` carries ``<ref>_norm2`` for cosines.
STATISTICS: dict[str, Callable[..., float]] = {
    "trvar": _stat_trvar,
    "mean_sq": _stat_mean2,
    "snr": _stat_snr,
    "tokens": _stat_tokens,
    "snr_per_ktok": _stat_snr_per_ktok,
    "noise_per_ktok": _stat_noise_per_ktok,
}


def statistic(name: str) -> Callable[..., float]:
    """A statistic by name: :data:`STATISTICS`, ``dot:<ref>`` (``⟨E g, r⟩``), ``cos:<ref>`` (cosine of ``E g`` with
    ``r``, from the unbiased ``‖E g‖²`` and ``ctx['<ref>_norm2']``), ``aligned_sq:<ref>`` (unbiased ``⟨E g, r⟩²``) or
    ``aligned_snr_per_ktok:<ref>`` (``⟨E g, r⟩² / tr Var`` per 1,000 tokens: the SNR of the signal along ``r``)."""
    if name in STATISTICS:
        return STATISTICS[name]
    kind, _, ref = name.partition(":")
    if kind == "dot" and ref:
        return _dot(ref)
    if kind == "cos" and ref:
        return _cos(ref)
    if kind == "aligned_sq" and ref:
        return _aligned(ref)
    if kind == "aligned_snr_per_ktok" and ref:
        return _aligned_snr_per_ktok(ref)
    raise ValueError(f"statistic: unknown {name!r}; choose from {sorted(STATISTICS)}, dot:<reference>, cos:<reference>, "
                     "aligned_sq:<reference>, aligned_snr_per_ktok:<reference>")


@dataclass(frozen=True)
class Estimate:
    """A statistic with its delete-one-block jackknife interval."""

    value: float
    lo: float
    hi: float
    se: float

    def to_plain(self) -> dict[str, float]:
        return {"value": self.value, "lo": self.lo, "hi": self.hi, "se": self.se}


def jackknife(rec: MomentRecord, f: Callable[..., float], ctx: Mapping[str, float] | None = None,
              transform: Callable[[float], float] | None = None) -> tuple[float, float, int]:
    """``(θ̂, jackknife standard error, degrees of freedom B − 1)`` of ``f`` (optionally of ``transform∘f``)."""
    ctx = dict(ctx or {})
    tr = transform or (lambda x: x)
    full = tr(f(*_parts(rec), ctx))
    B = len(rec.counts)
    loo = np.array([tr(f(*_parts(rec, b), ctx)) for b in range(B)], dtype=np.float64)
    if not np.all(np.isfinite(loo)) or not math.isfinite(full):
        return full, math.nan, B - 1
    se = math.sqrt((B - 1) / B * float(np.sum((loo - loo.mean()) ** 2)))
    return full, se, B - 1


def estimate(rec: MomentRecord, name: str, ctx: Mapping[str, float] | None = None, confidence: float = 0.95) -> Estimate:
    """Statistic ``name`` (:func:`statistic`) with a Student-t interval on ``B − 1`` degrees of freedom."""
    from scipy import stats

    v, se, df = jackknife(rec, statistic(name), ctx)
    if not math.isfinite(se):
        return Estimate(v, math.nan, math.nan, se)
    h = float(stats.t.ppf(0.5 + confidence / 2, df)) * se
    return Estimate(v, v - h, v + h, se)


def _two_records(a: MomentRecord, b: MomentRecord, name: str, ctx_a: Mapping[str, float] | None,
                 ctx_b: Mapping[str, float] | None, transform: Callable[[float], float] | None,
                 confidence: float) -> tuple[float, float, float, float]:
    """``(θ̂_a, θ̂_b, se, t half-width)`` of statistic ``name`` (optionally of ``transform∘name``) of two independently
    realised records: jackknife variances added, t on the smaller of the two degrees of freedom (NaN se and half-width
    when either jackknife is not finite)."""
    from scipy import stats

    f = statistic(name)
    va, sa, da = jackknife(a, f, ctx_a, transform)
    vb, sb, db = jackknife(b, f, ctx_b, transform)
    se = math.sqrt(sa * sa + sb * sb) if math.isfinite(sa) and math.isfinite(sb) else math.nan
    h = float(stats.t.ppf(0.5 + confidence / 2, min(da, db))) * se if math.isfinite(se) else math.nan
    return va, vb, se, h


def log_ratio_interval(a: MomentRecord, b: MomentRecord, name: str, ctx_a: Mapping[str, float] | None = None,
                       ctx_b: Mapping[str, float] | None = None, confidence: float = 0.95) -> Estimate:
    """``stat(a) / stat(b)`` for independently realised ``a`` and ``b``, interval from the jackknife variances of the
    logs (t on the smaller of the two degrees of freedom); NaN interval when either statistic is not positive."""
    log = lambda x: math.log(x) if x > 0 else math.nan  # noqa: E731
    va, vb, se, h = _two_records(a, b, name, ctx_a, ctx_b, log, confidence)
    ratio = math.exp(va - vb) if math.isfinite(va) and math.isfinite(vb) else math.nan
    if not (math.isfinite(ratio) and math.isfinite(se)):
        return Estimate(ratio, math.nan, math.nan, se)
    return Estimate(ratio, math.exp(va - vb - h), math.exp(va - vb + h), se)


def difference_interval(a: MomentRecord, b: MomentRecord, name: str, ctx_a: Mapping[str, float] | None = None,
                        ctx_b: Mapping[str, float] | None = None, confidence: float = 0.95) -> Estimate:
    """``stat(a) − stat(b)`` for independently realised ``a`` and ``b`` (different allocations draw their batches
    independently, so no block of one is paired with a block of the other): jackknife variances added, t on the
    smaller of the two degrees of freedom."""
    va, vb, se, h = _two_records(a, b, name, ctx_a, ctx_b, None, confidence)
    d = va - vb
    if not (math.isfinite(d) and math.isfinite(se)):
        return Estimate(d, math.nan, math.nan, se)
    return Estimate(d, d - h, d + h, se)


#: a ratio whose interval spans more than this factor (``hi / lo``) is reported as not resolved
RESOLVE_FACTOR = 2.0


def ratio_label(lo: float | None, hi: float | None, factor: float = RESOLVE_FACTOR) -> str:
    """``resolved`` when a ratio's interval ``[lo, hi]`` (both positive) spans at most ``factor``, else ``not resolved``
    (also for a missing or non-positive end: such an interval resolves nothing)."""
    if lo is None or hi is None or not (math.isfinite(lo) and math.isfinite(hi)) or lo <= 0 or hi <= 0:
        return "not resolved"
    return "resolved" if hi / lo <= factor else "not resolved"


def sign_label(lo: float | None, hi: float | None) -> str:
    """For a difference: ``> 0`` / ``< 0`` when its interval excludes 0, else ``not detected``."""
    if lo is None or hi is None or not (math.isfinite(lo) and math.isfinite(hi)):
        return "not detected"
    return "> 0" if lo > 0 else "< 0" if hi < 0 else "not detected"


def batches_to_resolve(log_se: float, batches: int, half_width: float = math.log(1.25), z: float = 1.96) -> float:
    """Batches per allocation that bring a log-ratio's 95 % half-width to ``half_width`` (±25 % by default), from a
    run of ``batches`` whose log-ratio has standard error ``log_se`` (the error falls as ``1/sqrt(batches)``)."""
    if not (math.isfinite(log_se) and log_se > 0 and batches > 0):
        return math.nan
    return float(batches * (z * log_se / half_width) ** 2)
