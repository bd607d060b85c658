"""The probe: Monte-Carlo pass rates of every pool prompt and of prefix states of its reference solution.

The state space of the lab is the training pool's prompts (``α = 0``, the training distribution ``d`` is
uniform over them) and, for every prompt with a reference solution, the prompt followed by the first
``round(α L)`` tokens of that solution for ``α`` in a grid (VSR Fig. 7's hint ratios; the states VSR's
expert cold start replays). Per state the probe draws ``n`` samples and keeps

* ``k`` successes, the Jeffreys-shrunk pass rate ``(k + 1/2)/(n + 1)`` (the allocations' scores: never 0 or 1,
  so every proposal keeps full support) and its Jeffreys interval;
* the unbiased ``p(1 − p)`` estimate ``k (n − k)/(n (n − 1))`` (the predictions' σ²: sums of it are unbiased);
* the mean generated tokens per sample;
* optionally ``‖∇ log π(y|s)‖²`` of the first ``score_samples`` samples (the score norm ``G(s)`` of
  Assumption B.3; one backward pass per sample), with those samples' rewards (B.3 says the norm does not
  depend on the reward: :meth:`ProbeResult.score_by_outcome` checks it);
* ``dup_success`` / ``dup_failure``: the share of ordered pairs of a state's samples that are the *same*
  continuation, token for token, with both succeeding / both failing. Near-deterministic states (late expert
  prefixes, confident prompts) repeat continuations, and two identical samples in a group have identical
  score vectors: the group's G samples are then fewer than G independent draws
  (:func:`llm_harness.lab.predict.duplicate_second_moment`).
* ``k_split``: the successes among the first half of the samples. Allocations are built from one half
  (:meth:`ProbeResult.selection`) and predicted from the other (:meth:`ProbeResult.evaluation`): a proposal
  chosen from the same samples that estimate its variance would be judged on its own noise (a prompt with no
  success in the probe gets little weight *and* a predicted variance of 0, though its true rate is not 0).

Results are plain arrays (:class:`ProbeResult`), saved as JSON beside the lab's report.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from llm_harness.lab.predict import unbiased_bernoulli_variance

__all__ = ["ProbeResult", "StateSpace", "build_state_space", "duplicate_shares", "jeffreys", "pool_state_space", "run_probe",
           "state_for"]


def jeffreys(k, n) -> np.ndarray:
    """``(k + 1/2)/(n + 1)``: the posterior mean under the Jeffreys prior Beta(1/2, 1/2)."""
    k = np.asarray(k, dtype=np.float64)
    n = np.asarray(n, dtype=np.float64)
    return (k + 0.5) / (n + 1.0)


@dataclass(frozen=True)
class StateSpace:
    """The lab's states: ``problem[s]`` (index into the pool), ``alpha[s]`` (0 for the bare prompt), ``cut[s]``
    (prefix tokens of the reference solution). Prompts come first, in pool order."""

    problem: np.ndarray
    alpha: np.ndarray
    cut: np.ndarray
    n_prompts: int

    @property
    def size(self) -> int:
        return int(self.problem.shape[0])

    @property
    def is_prefix(self) -> np.ndarray:
        return self.alpha > 0

    def prompt_of(self) -> np.ndarray:
        """Index of each state's bare-prompt state."""
        return self.problem.copy()


def build_state_space(solution_lengths: Sequence[int | None], alphas: Sequence[float], budget: int) -> StateSpace:
    """Prompts ``0..P-1`` then their prefix states; a prefix needs a reference solution and must leave at least one
    token of the response ``budget`` to generate (as VSR's buffer requires); duplicate cuts of one prompt kept once."""
    from theory.prefix_scores import alpha_cut

    for a in alphas:
        if not 0.0 < float(a) < 1.0:
            raise ValueError(f"alphas: every hint ratio must be in (0, 1), got {a!r}")
    P = len(solution_lengths)
    prob, alpha, cut = list(range(P)), [0.0] * P, [0] * P
    for i, L in enumerate(solution_lengths):
        if not L:
            continue
        seen = set()
        for a in alphas:
            c = alpha_cut(float(a), int(L))
            if c < 1 or c >= budget or c in seen:
                continue
            seen.add(c)
            prob.append(i)
            alpha.append(float(a))
            cut.append(c)
    return StateSpace(np.asarray(prob, dtype=np.int64), np.asarray(alpha, dtype=np.float64), np.asarray(cut, dtype=np.int64), P)


@dataclass(frozen=True)
class ProbeResult:
    """Per-state Monte-Carlo results (module doc); arrays indexed like the :class:`StateSpace`."""

    space: StateSpace
    n: np.ndarray
    k: np.ndarray
    tokens: np.ndarray
    score_sq: np.ndarray
    """Mean ``‖∇ log π‖²`` of the measured samples; NaN where none was measured."""
    wall_s: dict[str, float] = field(default_factory=dict)
    k_split: np.ndarray | None = None
    """Successes among the first ``n // 2`` samples of each state (``None``: no split)."""
    score_each: np.ndarray | None = None
    """``[S, m]``: ``‖∇ log π‖²`` of each measured sample (NaN where none)."""
    score_reward: np.ndarray | None = None
    """``[S, m]``: the rewards of those samples."""
    dup_success: np.ndarray | None = None
    """Share of ordered sample pairs that are identical successful continuations (``None``: not measured)."""
    dup_failure: np.ndarray | None = None
    """Share of ordered sample pairs that are identical failed continuations."""

    def _part(self, k: np.ndarray, n: np.ndarray) -> "ProbeResult":
        return ProbeResult(self.space, n, k, self.tokens, self.score_sq, self.wall_s)

    def selection(self) -> "ProbeResult":
        """The first half of every state's samples (what allocations are built from); the whole probe without a split."""
        if self.k_split is None:
            return self
        return self._part(self.k_split, self.n // 2)

    def evaluation(self) -> "ProbeResult":
        """The second half (what predictions estimate σ² and P(mixed) from); the whole probe without a split."""
        if self.k_split is None:
            return self
        return self._part(self.k - self.k_split, self.n - self.n // 2)

    def score_by_outcome(self) -> dict[str, float | None]:
        """Mean ``‖∇ log π‖²`` of successful and failed measured samples, for prompts and for prefix states, and
        their ratio (1 under Assumption B.3; a ratio far from 1 makes B.3's ``M = G σ²`` miss)."""
        out: dict[str, float | None] = {}
        if self.score_each is None or self.score_reward is None:
            return out
        for kind, sel in (("prompt", ~self.space.is_prefix), ("prefix", self.space.is_prefix)):
            sq, r = self.score_each[sel], self.score_reward[sel]
            ok = np.isfinite(sq)
            s1 = sq[ok & (r >= 0.5)]
            s0 = sq[ok & (r < 0.5)]
            out[f"{kind}_success"] = float(s1.mean()) if s1.size else None
            out[f"{kind}_failure"] = float(s0.mean()) if s0.size else None
            out[f"{kind}_success_n"] = int(s1.size)
            out[f"{kind}_ratio"] = float(s1.mean() / s0.mean()) if s1.size and s0.size and s0.mean() > 0 else None
        return out

    @property
    def p(self) -> np.ndarray:
        """Jeffreys-shrunk pass rates."""
        return jeffreys(self.k, self.n)

    @property
    def var(self) -> np.ndarray:
        """Unbiased ``p(1 − p)``."""
        return unbiased_bernoulli_variance(self.k, self.n)

    def interval(self, confidence: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
        """Jeffreys intervals of the pass rates."""
        from scipy import stats

        a, b = self.k + 0.5, self.n - self.k + 0.5
        lo = np.where(self.k > 0, stats.beta.ppf((1 - confidence) / 2, a, b), 0.0)
        hi = np.where(self.k < self.n, stats.beta.ppf((1 + confidence) / 2, a, b), 1.0)
        return lo, hi

    def score_sq_filled(self) -> np.ndarray:
        """``G(s)``: measured where measured, else the mean over measured states of the same kind (prompt / prefix),
        else the overall mean; all ones when nothing was measured (Assumption B.4)."""
        g = self.score_sq.astype(np.float64).copy()
        if not np.isfinite(g).any():
            return np.ones_like(g)
        pre = self.space.is_prefix
        overall = float(np.nanmean(g))
        for sel in (pre, ~pre):
            vals = g[sel]
            fill = float(np.nanmean(vals)) if np.isfinite(vals).any() else overall
            g[sel & ~np.isfinite(g)] = fill
        return g

    def to_plain(self) -> dict[str, Any]:
        s = self.space
        return {"problem": s.problem.tolist(), "alpha": s.alpha.tolist(), "cut": s.cut.tolist(), "n_prompts": s.n_prompts,
                "n": self.n.tolist(), "k": self.k.tolist(), "tokens": self.tokens.tolist(),
                "score_sq": [None if not np.isfinite(x) else float(x) for x in self.score_sq], "wall_s": dict(self.wall_s),
                "k_split": None if self.k_split is None else self.k_split.tolist(),
                "score_each": None if self.score_each is None else [[None if not np.isfinite(x) else float(x) for x in row]
                                                                    for row in self.score_each],
                "score_reward": None if self.score_reward is None else self.score_reward.tolist(),
                "dup_success": None if self.dup_success is None else self.dup_success.tolist(),
                "dup_failure": None if self.dup_failure is None else self.dup_failure.tolist()}

    @classmethod
    def from_plain(cls, d: dict[str, Any]) -> "ProbeResult":
        space = StateSpace(np.asarray(d["problem"], dtype=np.int64), np.asarray(d["alpha"], dtype=np.float64),
                           np.asarray(d["cut"], dtype=np.int64), int(d["n_prompts"]))
        sq = np.asarray([np.nan if x is None else x for x in d["score_sq"]], dtype=np.float64)
        each = d.get("score_each")
        each = None if each is None else np.asarray([[np.nan if x is None else x for x in row] for row in each],
                                                    dtype=np.float64).reshape(len(sq), -1)
        rew = d.get("score_reward")
        rew = None if rew is None else np.asarray(rew, dtype=np.float64).reshape(len(sq), -1)
        ks = d.get("k_split")
        return cls(space, np.asarray(d["n"], dtype=np.int64), np.asarray(d["k"], dtype=np.int64),
                   np.asarray(d["tokens"], dtype=np.float64), sq, dict(d.get("wall_s", {})),
                   None if ks is None else np.asarray(ks, dtype=np.int64), each, rew,
                   *(None if d.get(k) is None else np.asarray(d[k], dtype=np.float64) for k in ("dup_success", "dup_failure")))


def run_probe(engine: Any, space: StateSpace, *, samples: int, score_samples: int, seed: int, chunk: int = 64,
              progress: bool = False) -> ProbeResult:
    """Sample ``samples`` continuations of every state of ``space`` (``chunk`` states per backend call) and measure
    the score norm of ``score_samples`` of them (module doc)."""
    import time

    from tqdm.auto import tqdm

    if samples < 4:
        raise ValueError(f"probe samples: need >= 4 per state (two halves, each with an unbiased variance), got {samples}")
    S = space.size
    n = np.full(S, samples, dtype=np.int64)
    k = np.zeros(S, dtype=np.int64)
    tok = np.zeros(S, dtype=np.float64)
    sq = np.full(S, np.nan)
    k_split = np.zeros(S, dtype=np.int64)
    each = np.full((S, max(score_samples, 0)), np.nan)
    rew = np.full((S, max(score_samples, 0)), np.nan)
    dup1 = np.zeros(S)
    dup0 = np.zeros(S)
    t_sample = t_score = 0.0
    bar = tqdm(total=S, desc="probe", disable=not progress, unit="state")
    for start in range(0, S, chunk):
        idx = range(start, min(S, start + chunk))
        states = [state_for(engine, space, s, samples) for s in idx]
        t0 = time.perf_counter()
        groups = engine.sample(states, seed=seed + start)
        t_sample += time.perf_counter() - t0
        t0 = time.perf_counter()
        for s, g in zip(idx, groups):
            k[s] = int(np.sum(g.rewards >= 1.0 - 1e-12))
            k_split[s] = int(np.sum(g.rewards[: samples // 2] >= 1.0 - 1e-12))
            dup1[s], dup0[s] = duplicate_shares(g.response_ids, g.rewards)
            if np.any((g.rewards > 1e-12) & (g.rewards < 1.0 - 1e-12)):
                raise ValueError("the lab's probe needs binary rewards (0 or 1); this task gives partial credit")
            tok[s] = float(np.mean([len(r) for r in g.response_ids]))
            if score_samples > 0:
                norms = engine.score_sq_norms(g, score_samples)
                each[s, : len(norms)] = norms
                rew[s, : len(norms)] = g.rewards[: len(norms)]
                sq[s] = float(np.mean(norms))
        t_score += time.perf_counter() - t0
        bar.update(len(idx))
    bar.close()
    return ProbeResult(space, n, k, tok, sq, {"sampling": t_sample, "score_norms": t_score}, k_split,
                       each if score_samples > 0 else None, rew if score_samples > 0 else None, dup1, dup0)


def duplicate_shares(responses: Sequence[Sequence[int]], rewards) -> tuple[float, float]:
    """``(share of ordered pairs i ≠ j with y_i = y_j and both successes, the same with both failures)``."""
    from collections import Counter

    n = len(responses)
    if n < 2:
        return 0.0, 0.0
    r = np.asarray(rewards, dtype=np.float64)
    c1 = Counter(tuple(y) for y, x in zip(responses, r) if x >= 0.5)
    c0 = Counter(tuple(y) for y, x in zip(responses, r) if x < 0.5)
    pairs = float(n * (n - 1))
    return sum(m * (m - 1) for m in c1.values()) / pairs, sum(m * (m - 1) for m in c0.values()) / pairs


def pool_state_space(engine: Any, prompts: int, alphas: Sequence[float]) -> StateSpace:
    """Restrict ``engine.problems`` to its first ``prompts`` and build their :class:`StateSpace` (prefixes must leave
    a token of the rollout budget)."""
    problems = engine.problems[:prompts]
    if len(problems) < 2:
        raise ValueError(f"prompts: the pool has {len(problems)} problems; the lab needs >= 2")
    engine.problems = problems
    return build_state_space([len(engine.solution_ids(p)) if p.solution else None for p in problems], alphas,
                             engine.cfg.rollout.max_new_tokens)


def state_for(engine: Any, space: StateSpace, s: int, n: int) -> Any:
    """The start state of state ``s`` (a bare prompt or a reference-solution prefix) with ``n`` samples."""
    p = engine.problems[int(space.problem[s])]
    if space.alpha[s] == 0:
        return engine.prompt_state(p, n)
    return engine.prefix_state(p, int(space.cut[s]), float(space.alpha[s]), n)
