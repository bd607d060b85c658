"""Allocations of rollouts: where one mini-batch's samples are spent. One registry entry each.

An allocation turns the probe (:class:`~llm_harness.lab.probe.ProbeResult`) into a :class:`Proposal` over the
lab's states: a distribution ``mu``, per-state weights of the estimator, optionally DAPO's keep probability,
and how many of a batch's ``K`` groups go to prefix states (VSR's ``ρ``: drawn stratified, exactly
``round(ρ K)`` groups, as the VSR plug-in fills its slots). The same proposal feeds the prediction
(:func:`llm_harness.lab.predict.predict`) and the realisation (:func:`draw_batch`).

Entries (the papers' allocations):

``uniform``            GRPO: prompts uniform over the pool (the training distribution ``d``).
``dapo``               DAPO's dynamic sampling: uniform prompts, groups whose rewards are all equal dropped and
                       redrawn until ``K`` mixed groups (every generated token is paid for).
``prompt_neyman``      Prompt-level Neyman allocation ``μ ∝ d σ̂`` (VSR eq. 9 at the prompt level; the optimal
                       allocation Reinforce-Ada and VIP approximate), ``σ̂`` the probe's Jeffreys-shrunk
                       ``sqrt(p(1 − p))``, mixed with ``ε`` of ``d`` for support, importance weights ``d/μ``.
``prompt_variance``    ``μ ∝ d p̂(1 − p̂)`` (variance-proportional, as VIP's allocation rule), with ``d/μ`` weights.
``vsr_linear``         VSR: ``ρ`` of the groups restart from reference-solution prefixes chosen ``∝ σ̂`` with the
                       paper's linear ``p̂ = (1 − α) p0 + α`` (VSR Alg. 1 l. 9; ``p0`` the prompt's probed rate,
                       ``R = 1``), the rest fresh uniform prompts; no weights (as VSR trains).
``vsr_calibrated``     The same with the calibrated σ̂: ``p̂ = p0 + (1 − p0) f(α)``, ``f`` fitted monotone to the
                       probe's prefix success (:func:`theory.prefix_scores.fit_interpolation`).
``prefix_uniform``     ``ρ`` of the groups from prefix states chosen uniformly (VSR's static-reset control).
``prefix_oracle``      ``ρ`` of the groups from prefix states chosen ``∝`` the probe's own σ (the best σ̂ can do).
``prefix_sampling``    Prefix Sampling's hard side (PS, arXiv 2605.05112): a prompt restarts from its reference prefix
                       nearest ``α = 0.75`` (PS's fixed ratio 0.25 left to generate) as often as its groups land in
                       the hard bucket (1 <= successes < 0.3 G); ``h/(1+h)`` of the groups (at most ``ρ``), no
                       weights. The easy side (failed prefixes) has no state here.
``pros``               PROS (ICLR 2026): each prompt's node — the prompt or one of its prefix states — whose probed
                       rate is nearest 0.5, for the quarter of prompts whose node is nearest; ``ρ`` of the groups
                       spread evenly over those nodes, no weights.
``extra``              Uniform prompts with ExTra's correctness-gated novelty bonus added to the advantages
                       (eq. 2, ``γ``; the per-prompt memory is empty at a single step, so novelty is measured
                       against the correct siblings); the theory predicts nothing for it (realised only).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from llm_harness.lab.probe import ProbeResult
from vsr_util.registry import Registry

__all__ = ["ALLOCATIONS", "Allocation", "AllocationParams", "Batch", "PROS_POOL_SHARE", "PS_LOW", "PS_RATIO_HARD",
           "Proposal", "draw_batch", "hard_probability", "mixed_probability", "register_allocation"]


@dataclass(frozen=True)
class AllocationParams:
    """Knobs shared by the allocations (the lab config's ``allocation`` section)."""

    rho: float = 0.5
    """Share of a batch's groups that restart from prefix states (VSR's ρ)."""
    eps: float = 0.05
    """Share of ``d`` mixed into the prompt-level proposals (``μ_ε``, VSR App. B), so importance weights stay bounded."""
    dapo_max_rounds: int = 8
    """DAPO: generation rounds before a batch is accepted with fewer than ``K`` mixed groups."""
    extra_gamma: float = 1.0
    """ExTra: bonus scale γ (eq. 2)."""
    extra_novelty: str = "policy_hidden"
    """ExTra: novelty signal (a registered name of :data:`llm_harness.methods.extra.NOVELTY_SIGNALS`)."""
    calibration_bins: int = 10
    """Calibrated σ̂: α bins of the monotone fit."""

    def __post_init__(self) -> None:
        from vsr_util.checks import check_number

        check_number("allocation.rho", self.rho, 0, 1)
        check_number("allocation.eps", self.eps, 0, 1)
        check_number("allocation.dapo_max_rounds", self.dapo_max_rounds, 1, integer=True)
        check_number("allocation.extra_gamma", self.extra_gamma, 0)
        check_number("allocation.calibration_bins", self.calibration_bins, 1, integer=True)


@dataclass(frozen=True)
class Proposal:
    """Where one batch's groups go (module doc). ``mu`` and ``weights`` have one entry per state."""

    mu: np.ndarray
    weights: np.ndarray
    prefix_share: float = 0.0
    """Share of the groups drawn from the prefix states (stratified); 0: one draw from ``mu``."""
    keep: np.ndarray | None = None
    """DAPO: probability that a group at the state is kept (mixed rewards)."""
    biased: bool = False
    """``E g`` is not a multiple of ``∇J`` (no importance weights for a changed distribution, or a shaped reward)."""
    shaped: bool = False
    """Advantages are changed after sampling (ExTra); the prediction does not cover it."""


@dataclass(frozen=True)
class Allocation:
    """A registered allocation: a proposal from the probe, and optionally its own batch drawing."""

    name: str
    summary: str
    proposal: Callable[[ProbeResult, AllocationParams, int], Proposal]
    """``(probe, params, group_size) -> Proposal``."""
    knob: tuple[str, tuple[float, ...]] | None = None
    """Its main knob, ``(AllocationParams field, grid)``, which ``vsr advise`` tunes on the prediction (None: none)."""
    prefixes: bool = False
    """It draws from prefix states (a pool without reference solutions cannot run it; ``vsr advise`` leaves it out)."""


ALLOCATIONS: Registry[Allocation] = Registry("allocation")


def register_allocation(name: str, summary: str, knob: tuple[str, tuple[float, ...]] | None = None,
                        prefixes: bool = False) -> Callable[[Callable[..., Proposal]], Callable[..., Proposal]]:
    """Decorator registering ``proposal(probe, params, group_size)`` under ``name`` with its main ``knob``
    (``(AllocationParams field, grid)``, tuned by ``vsr advise``) and whether it needs prefix states; duplicates and
    unknown fields are rejected."""
    if knob is not None:
        fields = {f.name for f in dataclasses.fields(AllocationParams)}
        if knob[0] not in fields or not knob[1]:
            raise ValueError(f"register_allocation({name!r}): knob {knob!r} needs an AllocationParams field "
                             f"({sorted(fields)}) and a non-empty grid")

    def deco(fn: Callable[..., Proposal]) -> Callable[..., Proposal]:
        ALLOCATIONS.register(name)(Allocation(name, summary, fn, None if knob is None else (knob[0], tuple(knob[1])),
                                              bool(prefixes)))
        return fn

    return deco


# ---------------------------------------------------------------------- helpers


def _d(probe: ProbeResult) -> np.ndarray:
    """The training distribution over the lab's states: uniform over the prompts, 0 on prefix states."""
    S, P = probe.space.size, probe.space.n_prompts
    d = np.zeros(S)
    d[:P] = 1.0 / P
    return d


def _normalise(x: np.ndarray, where: str) -> np.ndarray:
    s = float(x.sum())
    if not s > 0:
        raise ValueError(f"allocation {where}: every score is 0 (no state to draw)")
    return x / s


def _prefix_mix(probe: ProbeResult, params: AllocationParams, score: np.ndarray, where: str) -> Proposal:
    """``(1 − ρ) d ⊕ ρ (score-proportional over prefix states)``, weights 1 (VSR trains without them)."""
    pre = probe.space.is_prefix
    if not pre.any():
        raise ValueError(f"allocation {where}: no prefix state (the pool's problems need reference solutions)")
    s = np.where(pre, np.clip(score, 0.0, None), 0.0)
    mu = (1.0 - params.rho) * _d(probe) + params.rho * _normalise(s, where)
    return Proposal(mu, np.ones_like(mu), prefix_share=params.rho, biased=params.rho > 0)


def _prompt_weighted(probe: ProbeResult, params: AllocationParams, score: np.ndarray) -> Proposal:
    d = _d(probe)
    mu = (1.0 - params.eps) * _normalise(d * score, "prompt") + params.eps * d
    w = np.divide(d, mu, out=np.zeros_like(d), where=mu > 0)
    return Proposal(mu, w)


def mixed_probability(k, n, G: int) -> np.ndarray:
    """``1 − p^G − (1 − p)^G`` (a group of ``G`` has both outcomes), estimated without bias from ``k`` successes in
    ``n >= G`` draws: ``p^G`` by ``C(k, G)/C(n, G)`` (the chance that ``G`` of the ``n`` draws, taken without
    replacement, all succeeded). The plug-in ``(k/n)^G`` is biased (the function is convex): a prompt with no
    success in 16 probe samples still has mixed groups. With ``n < G``: the plug-in at the Jeffreys rate."""
    from scipy.special import comb

    k = np.asarray(k, dtype=np.int64)
    n = np.asarray(n, dtype=np.int64)
    out = np.empty(k.shape, dtype=np.float64)
    ok = n >= G
    if ok.any():
        tot = comb(n[ok], G, exact=False)
        out[ok] = 1.0 - comb(k[ok], G, exact=False) / tot - comb(n[ok] - k[ok], G, exact=False) / tot
    if (~ok).any():
        q = (k[~ok] + 0.5) / (n[~ok] + 1.0)
        out[~ok] = 1.0 - q ** G - (1.0 - q) ** G
    return np.clip(out, 0.0, 1.0)


def _p0(probe: ProbeResult) -> np.ndarray:
    """Each state's prompt's probed (shrunk) pass rate."""
    return probe.p[probe.space.problem]


# ---------------------------------------------------------------------- entries


@register_allocation("uniform", "GRPO: prompts uniform over the pool")
def _uniform(probe: ProbeResult, params: AllocationParams, G: int) -> Proposal:
    d = _d(probe)
    return Proposal(d, np.ones_like(d))


@register_allocation("dapo", "DAPO dynamic sampling: all-equal groups dropped and redrawn")
def _dapo(probe: ProbeResult, params: AllocationParams, G: int) -> Proposal:
    d = _d(probe)
    return Proposal(d, np.ones_like(d), keep=mixed_probability(probe.k, probe.n, G))


@register_allocation("prompt_neyman", "prompt-level Neyman mu ∝ d sigma-hat with d/mu weights (Reinforce-Ada, VIP)",
                     knob=("eps", (0.05, 0.2, 0.5)))
def _prompt_neyman(probe: ProbeResult, params: AllocationParams, G: int) -> Proposal:
    p = probe.p
    return _prompt_weighted(probe, params, np.sqrt(p * (1.0 - p)))


@register_allocation("prompt_variance", "prompt-level mu ∝ d p(1-p) with d/mu weights",
                     knob=("eps", (0.05, 0.2, 0.5)))
def _prompt_variance(probe: ProbeResult, params: AllocationParams, G: int) -> Proposal:
    p = probe.p
    return _prompt_weighted(probe, params, p * (1.0 - p))


@register_allocation("vsr_linear", "VSR: rho of the groups from reference prefixes ∝ linear sigma-hat",
                     knob=("rho", (0.25, 0.5, 0.75, 1.0)), prefixes=True)
def _vsr_linear(probe: ProbeResult, params: AllocationParams, G: int) -> Proposal:
    from theory.prefix_scores import variance_hat

    a = probe.space.alpha
    return _prefix_mix(probe, params, variance_hat(a, _p0(probe), np.ones_like(a)), "vsr_linear")


@register_allocation("vsr_calibrated", "VSR: rho of the groups from reference prefixes ∝ calibrated sigma-hat",
                     knob=("rho", (0.25, 0.5, 0.75, 1.0)), prefixes=True)
def _vsr_calibrated(probe: ProbeResult, params: AllocationParams, G: int) -> Proposal:
    from theory.prefix_scores import calibration_fraction, fit_interpolation, variance_hat_calibrated

    pre = probe.space.is_prefix
    a, p0 = probe.space.alpha, _p0(probe)
    frac = calibration_fraction(np.clip(probe.k / probe.n, 0, 1)[pre], p0[pre], np.ones(int(pre.sum())))
    ok = np.isfinite(frac)
    f = fit_interpolation(a[pre][ok], frac[ok], probe.n[pre][ok].astype(np.float64), bins=params.calibration_bins)
    return _prefix_mix(probe, params, variance_hat_calibrated(a, p0, np.ones_like(a), f), "vsr_calibrated")


@register_allocation("prefix_uniform", "rho of the groups from reference prefixes chosen uniformly (static resets)",
                     knob=("rho", (0.25, 0.5, 0.75, 1.0)), prefixes=True)
def _prefix_uniform(probe: ProbeResult, params: AllocationParams, G: int) -> Proposal:
    return _prefix_mix(probe, params, np.ones(probe.space.size), "prefix_uniform")


@register_allocation("prefix_oracle", "rho of the groups from reference prefixes ∝ the probe's own sigma",
                     knob=("rho", (0.25, 0.5, 0.75, 1.0)), prefixes=True)
def _prefix_oracle(probe: ProbeResult, params: AllocationParams, G: int) -> Proposal:
    p = probe.p
    return _prefix_mix(probe, params, np.sqrt(p * (1.0 - p)), "prefix_oracle")


#: Prefix Sampling's triage bound and fixed cut (PS, arXiv 2605.05112: a group below pass rate 0.3 with a success is
#: "too hard"; the 14B run's fixed ratio 0.25 leaves a quarter of the successful trajectory to generate)
PS_LOW, PS_RATIO_HARD = 0.3, 0.25
#: PROS's recency rule (no query twice within 3 steps) makes it cycle through about ``(3 + 1) B`` queries nearest 0.5
#: (``B`` its picks per step); as a share of the pool: 4 x 2 / 32 = 0.25 on the real bed's batches (4 groups, half to
#: PROS) — ours, a stationary stand-in for the per-step selection (0.12 in the paper's run: 4 x 512 / 17k)
PROS_POOL_SHARE = 0.25


def hard_probability(k, n, G: int, low: float = PS_LOW) -> np.ndarray:
    """Probability that a group of ``G`` lands in PS's hard bucket (``1 <= K < low G`` successes), estimated without
    bias from ``k`` successes in ``n >= G`` draws: ``Σ_j C(k, j) C(n − k, G − j) / C(n, G)`` (the chance that ``G``
    of the ``n`` draws, taken without replacement, hold ``j`` successes). With ``n < G``: the binomial at the
    Jeffreys rate, as :func:`mixed_probability`."""
    from scipy.special import comb
    from scipy.stats import binom

    k = np.asarray(k, dtype=np.int64)
    n = np.asarray(n, dtype=np.int64)
    js = [j for j in range(1, G + 1) if j < low * G]
    out = np.zeros(k.shape, dtype=np.float64)
    ok = n >= G
    if ok.any():
        tot = comb(n[ok], G, exact=False)
        for j in js:
            out[ok] += comb(k[ok], j, exact=False) * comb(n[ok] - k[ok], G - j, exact=False) / tot
    if (~ok).any():
        q = (k[~ok] + 0.5) / (n[~ok] + 1.0)
        for j in js:
            out[~ok] += binom.pmf(j, G, q)
    return np.clip(out, 0.0, 1.0)


@register_allocation("prefix_sampling", "PS hard side: groups from a long successful prefix of each prompt as often "
                     "as its groups are too hard", knob=("rho", (0.25, 0.5, 0.75, 1.0)), prefixes=True)
def _prefix_sampling(probe: ProbeResult, params: AllocationParams, G: int) -> Proposal:
    """Prefix Sampling's hard side in the lab's state space (module doc). PS triages each *group*: a group of ``G``
    lands in the hard bucket with probability ``h_q = P(1 <= K < 0.3 G)`` (:func:`hard_probability`, from the
    probe), and each such group makes one prefix task from its prompt's successful trajectory, cut to leave
    ``PS_RATIO_HARD`` to generate — here the prompt's reference-solution prefix nearest ``α = 1 − PS_RATIO_HARD``.
    Only fresh groups are triaged and prefix tasks take fresh slots, so the steady share of prefix tasks is
    ``s = h / (1 + h)`` (``h`` the mean of ``h_q``: ``s = (1 − s) h``), capped at ``ρ`` (PS's cap on prefix tasks,
    0.5 in our plug-in); the prefix states are drawn ``∝ h_q``, uniform prompts the rest; no weights (PS trains
    without them). PS's easy side cuts *failed* trajectories, which the lab's states (prefixes of reference
    solutions) do not hold: the allocation is PS hard-only."""
    sp = probe.space
    pre = sp.is_prefix
    if not pre.any():
        raise ValueError("allocation prefix_sampling: no prefix state (the pool's problems need reference solutions)")
    P = sp.n_prompts
    h = hard_probability(probe.k[:P], probe.n[:P], G)
    score = np.zeros(sp.size)
    target = 1.0 - PS_RATIO_HARD
    for q in np.flatnonzero(h > 0):
        states = np.flatnonzero(pre & (sp.problem == q))
        if states.size:
            score[states[np.argmin(np.abs(sp.alpha[states] - target))]] = h[q]
    hm = float(h.mean())
    s = min(params.rho, hm / (1.0 + hm)) if score.any() else 0.0
    d = _d(probe)
    mu = (1.0 - s) * d + (s * _normalise(score, "prefix_sampling") if s > 0 else 0.0)
    return Proposal(mu, np.ones_like(mu), prefix_share=s, biased=s > 0)


@register_allocation("pros", "PROS: rho of the groups from the nodes (prompt or prefix state) nearest pass rate 0.5, "
                     "one per prompt", knob=("rho", (0.25, 0.5, 0.75, 1.0)))
def _pros(probe: ProbeResult, params: AllocationParams, G: int) -> Proposal:
    """PROS's selection in the lab's state space (module doc): every prompt and its prefix states form one tree; the
    node whose (Jeffreys-shrunk) probed pass rate is nearest 0.5 is the prompt's candidate (PROS ranks nodes by a
    posterior draw of its hierarchical model; the lab by the probe's own rates). PROS takes the nodes nearest 0.5,
    at most one per query, and skips queries used in its last 3 steps, so it cycles through the candidates of the
    ``PROS_POOL_SHARE`` of prompts nearest 0.5 (at least one): ``ρ`` of the groups go to them evenly (PROS's share of
    the batch, 0.5 in our plug-in), uniform prompts the rest; no weights (PROS trains without them). Without prefix
    states the candidates are the prompts themselves."""
    sp = probe.space
    P = sp.n_prompts
    gap = np.abs(probe.p - 0.5)
    nodes = [np.flatnonzero(sp.problem == q) for q in range(P)]
    best = np.array([nd[np.argmin(gap[nd])] for nd in nodes])
    top = best[np.argsort(gap[best], kind="stable")[: max(1, int(round(PROS_POOL_SHARE * P)))]]
    cand = np.zeros(sp.size)
    cand[top] = 1.0
    d = _d(probe)
    mu = (1.0 - params.rho) * d + params.rho * _normalise(cand, "pros")
    return Proposal(mu, np.ones_like(mu), biased=bool(params.rho > 0))


@register_allocation("extra", "uniform prompts with ExTra's correctness-gated novelty bonus (gamma)")
def _extra(probe: ProbeResult, params: AllocationParams, G: int) -> Proposal:
    d = _d(probe)
    return Proposal(d, np.ones_like(d), biased=params.extra_gamma > 0, shaped=True)


# ---------------------------------------------------------------------- realisation


@dataclass(frozen=True)
class Batch:
    """One realised mini-batch: its groups, per-group weights and advantages, the normaliser and its cost."""

    groups: tuple[Any, ...]
    weights: tuple[float, ...]
    advantages: tuple[np.ndarray, ...] | None
    normaliser: int
    tokens: int
    generated_groups: int


def _draw_states(rng: np.random.Generator, prop: Proposal, probe: ProbeResult, K: int) -> np.ndarray:
    pre = probe.space.is_prefix
    if prop.prefix_share <= 0:
        return rng.choice(probe.space.size, size=K, p=prop.mu)
    k_pre = int(round(prop.prefix_share * K))
    parts = []
    for sel, k in ((pre, k_pre), (~pre, K - k_pre)):
        if k == 0:
            continue
        m = np.where(sel, prop.mu, 0.0)
        parts.append(rng.choice(probe.space.size, size=k, p=m / m.sum()))
    return np.concatenate(parts)


def draw_batch(name: str, prop: Proposal, probe: ProbeResult, params: AllocationParams, *, engine: Any,
               rng: np.random.Generator, K: int, G: int, seed: int, state_of: Callable[[int, int], Any],
               shaper: Callable[[list[Any]], list[np.ndarray]] | None = None) -> Batch:
    """Sample one mini-batch of ``K`` groups of ``G`` under ``prop`` (DAPO: until ``K`` mixed groups or the round cap)."""
    from llm_harness.lab.engine import leave_one_out_advantages

    if prop.keep is None:
        idx = _draw_states(rng, prop, probe, K)
        groups = engine.sample([state_of(int(s), G) for s in idx], seed=seed)
        adv = None
        if shaper is not None:
            bonus = shaper(groups)
            adv = tuple(leave_one_out_advantages(g.rewards) + params.extra_gamma * b for g, b in zip(groups, bonus))
        return Batch(tuple(groups), tuple(float(prop.weights[s]) for s in idx), adv, K * G,
                     sum(len(r) for g in groups for r in g.response_ids), K)
    kept, tokens, generated = [], 0, 0
    for rnd in range(params.dapo_max_rounds):
        need = K - len(kept)
        if need <= 0:
            break
        idx = rng.choice(probe.space.size, size=need if rnd == 0 else max(need, K // 2), p=prop.mu)
        groups = engine.sample([state_of(int(s), G) for s in idx], seed=seed * 31 + rnd)
        generated += len(groups)
        tokens += sum(len(r) for g in groups for r in g.response_ids)
        kept += [g for g in groups if np.ptp(g.rewards) > 0][:need]
    return Batch(tuple(kept), tuple(1.0 for _ in kept), None, max(1, len(kept)) * G, tokens, generated)


def allocation_names(names: Any = None) -> tuple[str, ...]:
    """The requested allocation names, checked against the registry (all registered when empty)."""
    if not names:
        return tuple(ALLOCATIONS.names())
    out = []
    for n in names:
        ALLOCATIONS.lookup(n, where="lab.allocations")
        if n in out:
            raise ValueError(f"lab.allocations: {n!r} listed twice")
        out.append(n)
    return tuple(out)

