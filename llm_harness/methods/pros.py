"""PROS as a trainer plug-in: prefix-augmented queries chosen by a Bayesian pass-rate model (PROS, ICLR 2026,
OpenReview lz1SRTcnUb; the released sampler's details as read from its supplementary code).

**Tree.** Every original query the trainer samples from its bare prompt is a *root*; a *child* is the root's
prompt followed by a prefix of one of its correct responses (token ids verbatim). Children never spawn
children (depth 1). A root keeps its ``max_children`` newest children (ours: 16; the released code never evicts).

**Children** (``after_step``). For each root with at least one correct bare-prompt rollout this step, one cut
per root per step (PROS): over all its correct rows, the token of highest entropy inside ``[⌊L/4⌋, ⌊3L/4⌋)``
of each row's length ``L`` (the verified completion, without the stop token), counting only rows whose window
is longer than ``min(min_window, min_window_frac × max_new_tokens)`` tokens (PROS: longer than 1,000 tokens;
the fraction is ours, so short-budget runs cut too). The prefix is the row's tokens *before* that position, so
the child's first generated token is drawn from the high-entropy distribution. Entropies are the policy's
full-vocabulary token entropies at the rollout temperature (PROS reads them from the rollout's pass), here from
one ``backend.score_batch`` call over the candidate rows, each cut after its window (later tokens cannot
change earlier entropies): an extra scoring pass, as ExTra's regeneration has.

**Pass-rate model** (:mod:`theory.pros_posterior`). Each node ``j`` has log-odds ``ψ_j``:
``ψ_root ~ N(μ0 = 0, τ0² = 1.5²)``, ``ψ_child ~ N(ψ_root, σ²)``; a child's σ is set when it is born from its
parent's current draw so that its pass rate lies within ``± δ`` (0.1) of the parent's with prior probability
≈ 0.95 (``theory.pros_posterior.child_sigma``, floor 0.02) — δ is a half-width on the probability scale, not
σ itself. Each node's binary outcomes (every sample of every group started from it) are counted as successes
``s`` and trials ``n``; every step first multiplies all counts by γ = 0.99, then adds the step's outcomes, so
counts are real numbers (the Pólya–Gamma sampler takes real ``n``). Then ``sweeps`` (100) Gibbs sweeps with
Pólya–Gamma augmentation over the whole tree, continuing the chain from the last state; the state after the
last sweep is the *current draw* of every ``ψ``. A new root starts from a prior draw (before the sweeps, so its
first counts update it); new children are grown *after* the sweeps (PROS's released sampler: decay → count →
sweeps → children), each from ``N(ψ_parent, σ²)`` with σ from the parent's updated draw, and keep that draw
until the next step's sweeps; all seeded by the run seed and the step.

**Selection** (``claim``). ``B = ⌊share × open slots⌋`` nodes (ours: share 0.5 — PROS selects the whole batch
from the tree, unseen queries included through their prior draws; here the fresh prompt stream plays the unseen
queries and fills the other slots): the nodes whose current ``sigmoid(ψ)`` is nearest 0.5 (ties: lower node id),
at most one per original query among PROS's picks (ours: the fresh stream, drawn after the claim, may hold the same
query), skipping queries used in the last ``diversity_window`` (3) steps — relaxed 3 → 2 → 1 → 0 while fewer than
``B`` queries qualify (PROS; ours: the count of qualifying queries uses the same rule as the skip, where the released
code relaxes one step earlier). A query is *used* at a step when a group started
from one of its nodes is generated. A root competes with its children (PROS): with ``claim_roots`` (ours,
default) a chosen root claims its bare prompt (origin ``fresh``: it is the original query, re-drawn by the
model; PS and VSR treat it as any bare prompt); without, a chosen root's slot is left to the fresh stream.
A child is claimed as a prefix state (origin ``replayed_prefix``, ``meta`` ``{pros_node, pros_theta,
pros_birth}``). Prefix positions are context (masked by the trainer), the verifier reads prefix +
continuation, the prefix counts against the response budget, and the loss is GRPO within each node's group
with no correction (PROS).

**Agents** are refused: a multi-turn episode has no token-entropy cut over one response; PROS on agents would
need a per-turn cut rule and restored interaction states (as VSR's), which the paper does not define.

**Metrics**: ``pros_claimed_{children,roots}``, ``pros_roots_to_fresh``, ``pros_diversity_window``,
``pros_selected_theta_mean``; ``pros_{roots,children,children_new,evicted}``, ``pros_cut_frac_mean`` (cut / L of
this step's new children), ``pros_scored_rows`` / ``pros_scored_tokens`` (the extra scoring pass),
``pros_window_short`` (correct rows whose window is too short to cut), ``pros_theta_{root,child}_mean``,
``pros_pass_error`` (mean ``|observed pass rate − sigmoid ψ|`` over the nodes observed this step, after the
sweeps) and the wall times ``time_pros_score_s`` / ``time_pros_gibbs_s`` (the sweeps cost ``O(sweeps × nodes ×
pg_terms)`` gamma draws a step).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from llm_harness.methods.common import check_number, plugin_config
from llm_harness.trainer.data import Origin, RolloutGroup, StartState, completion_ids, problem_by_id, problem_index
from llm_harness.trainer.plugins import Plugin, PluginSmoke, StartStateSource, StepHook, TrainContext, register_plugin
from llm_harness.trainer.rollout import derive_seed
from llm_harness.trainer.step import Claim, Result, Step
from theory.pros_posterior import PG_TERMS, child_sigma, gibbs_sweeps, sigmoid

__all__ = ["PROSConfig", "PROSPlugin", "entropy_window", "select_nearest_half"]


@dataclass(frozen=True)
class PROSConfig:
    """Parameters of the ``pros`` plug-in (source per field: "PROS" = ICLR 2026 paper and its released code; "ours")."""

    share: float = 0.5
    """Nodes claimed per step: ``⌊share × open slots⌋``; fresh prompts fill the rest (ours; PROS selects the
    whole batch from the tree)."""
    claim_roots: bool = True
    """A chosen root claims its bare prompt (ours); False leaves its slot to the fresh stream."""
    window_lo: float = 0.25
    """Start of the cut window as a fraction of the row's length (PROS)."""
    window_hi: float = 0.75
    """End (exclusive) of the cut window as a fraction of the row's length (PROS)."""
    min_window: int = 1000
    """Rows cut only when their window is longer than ``min(min_window, min_window_frac × max_new_tokens)``
    tokens (PROS: 1,000)."""
    min_window_frac: float = 0.15
    """The window threshold's share of the response budget (ours)."""
    max_children: int = 16
    """Children kept per root, newest first (ours; the released code never evicts)."""
    mu0: float = 0.0
    """Prior mean of a root's log-odds μ0 (PROS)."""
    tau0: float = 1.5
    """Prior standard deviation of a root's log-odds τ0 (PROS)."""
    delta: float = 0.1
    """Half-width on the probability scale of a child's 95 % prior interval around its parent (PROS)."""
    sigma_floor: float = 0.02
    """Lower bound of a child's prior σ (PROS)."""
    gamma: float = 0.99
    """Per-step decay of every node's success and trial counts (PROS)."""
    sweeps: int = 100
    """Gibbs sweeps per step (PROS run script)."""
    pg_terms: int = PG_TERMS
    """Explicit gamma terms of the Pólya–Gamma series; the tail enters by its mean (ours)."""
    diversity_window: int = 3
    """Skip queries used in the last this-many steps, relaxed toward 0 when too few qualify (PROS)."""
    entropy_temperature: float | None = None
    """Temperature of the scored entropies (``None``: the rollout temperature; ours)."""

    def __post_init__(self) -> None:
        check_number("share", self.share, 0, 1)
        check_number("window_lo", self.window_lo, 0, 1, hi_open=True)
        check_number("window_hi", self.window_hi, self.window_lo, 1, lo_open=True)
        check_number("min_window", self.min_window, 0, integer=True)
        check_number("min_window_frac", self.min_window_frac, 0, 1)
        check_number("max_children", self.max_children, 1, integer=True)
        check_number("mu0", self.mu0)
        check_number("tau0", self.tau0, 0, lo_open=True)
        check_number("delta", self.delta, 0, 0.5, lo_open=True, hi_open=True)
        check_number("sigma_floor", self.sigma_floor, 0, lo_open=True)
        check_number("gamma", self.gamma, 0, 1, lo_open=True)
        check_number("sweeps", self.sweeps, 1, integer=True)
        check_number("pg_terms", self.pg_terms, 1, integer=True)
        check_number("diversity_window", self.diversity_window, 0, integer=True)
        if self.entropy_temperature is not None:
            check_number("entropy_temperature", self.entropy_temperature, 0, lo_open=True)
        if not isinstance(self.claim_roots, bool):
            raise ValueError(f"claim_roots: must be a bool, got {self.claim_roots!r}")


# ------------------------------------------------------------------------------ pure pieces


def entropy_window(length: int, lo: float, hi: float) -> tuple[int, int]:
    """``[⌊lo · L⌋, ⌊hi · L⌋)``: the positions of a row of ``length`` tokens where a cut may fall (PROS)."""
    return int(math.floor(lo * length + 1e-9)), int(math.floor(hi * length + 1e-9))


def select_nearest_half(theta: np.ndarray, query: Sequence[str], last_used: Mapping[str, int], step: int, k: int,
                        window: int) -> tuple[list[int], int]:
    """Indices of at most ``k`` nodes whose ``theta[N]`` is nearest 0.5 (ties: lower index), at most one per
    ``query[N]``, skipping queries with ``step − last_used[q] <= w`` (used in the last ``w`` steps), where ``w``
    starts at ``window`` and drops by one while fewer than ``k`` queries qualify (PROS). Returns the indices
    in selection order and the ``w`` used."""
    theta = np.asarray(theta, dtype=np.float64)
    if theta.shape != (len(query),):
        raise ValueError(f"theta: expected shape ({len(query)},), got {theta.shape}")
    queries = sorted(set(query))
    w = int(window)
    while w > 0 and sum(step - last_used.get(q, -(10**9)) > w for q in queries) < k:
        w -= 1
    out: list[int] = []
    taken: set[str] = set()
    for j in np.argsort(np.abs(theta - 0.5), kind="stable"):
        q = query[int(j)]
        if len(out) >= k:
            break
        if q in taken or step - last_used.get(q, -(10**9)) <= w:
            continue
        taken.add(q)
        out.append(int(j))
    return out, w


# ------------------------------------------------------------------------------ the plug-in


@dataclass
class _Node:
    """One node of the tree: a root (``parent = -1``, no prefix) or a child of root ``parent``."""

    id: int
    problem: str
    parent: int
    prefix: tuple[int, ...]
    s: float
    n: float
    psi: float
    sigma2: float
    birth: int


class PROSPlugin(StartStateSource, StepHook):
    """The ``pros`` plug-in (module doc)."""

    def __init__(self, cfg: PROSConfig, ctx: TrainContext):
        if hasattr(getattr(ctx, "task", None), "make_env") or ctx.config.algo.collector == "multiturn":
            raise ValueError("plugins.pros: agent tasks are not supported — PROS cuts one response at its highest-entropy "
                             "token, which a multi-turn episode does not have (module doc); use vsr or prefix_sampling")
        self.cfg = cfg
        self.seed = int(ctx.config.seed)
        self.budget = int(ctx.config.rollout.max_new_tokens)
        self.temperature = float(cfg.entropy_temperature or ctx.config.rollout.temperature)
        self.threshold = min(float(cfg.min_window), cfg.min_window_frac * self.budget)
        self.problems = problem_index(ctx.train_problems)
        self.nodes: dict[int, _Node] = {}
        self.roots: dict[str, int] = {}  # problem id -> root node id
        self.prompts: dict[str, tuple[int, ...]] = {}
        self.last_used: dict[str, int] = {}
        self.next_id = 0

    # ---------------------------------------------------------------- tree

    def _new_node(self, problem: str, parent: int, prefix: tuple[int, ...], psi: float, sigma2: float, birth: int) -> _Node:
        node = _Node(self.next_id, problem, parent, tuple(prefix), 0.0, 0.0, float(psi), float(sigma2), int(birth))
        self.nodes[node.id] = node
        self.next_id += 1
        return node

    def children(self, problem: str) -> list[_Node]:
        """The root's children, oldest first."""
        r = self.roots.get(problem)
        return [nd for nd in self.nodes.values() if nd.parent == r] if r is not None else []

    def _node_of(self, g: RolloutGroup, rng: np.random.Generator) -> _Node | None:
        nid = g.start.meta.get("pros_node")
        if nid is not None and int(nid) in self.nodes and self.nodes[int(nid)].problem == g.start.problem.id:
            return self.nodes[int(nid)]
        if g.start.origin is not Origin.FRESH or not g.start.bare:
            return None
        pid = g.start.problem.id
        if pid not in self.roots:
            c = self.cfg
            root = self._new_node(pid, -1, (), c.mu0 + c.tau0 * rng.standard_normal(), c.tau0**2, -1)
            self.roots[pid] = root.id
            self.prompts[pid] = g.start.prompt_ids
        return self.nodes[self.roots[pid]]

    def _cuts(self, roots: dict[str, list[tuple[RolloutGroup, int]]], ctx: TrainContext) -> tuple[dict[str, tuple[tuple[int, ...], float]], dict[str, float]]:
        """Per root: (prefix, cut / L) at the highest-entropy token of its correct rows' windows (module doc)."""
        rows: list[tuple[str, tuple[int, ...], tuple[int, ...], int, int]] = []  # (pid, context, ids, lo, hi)
        short = 0
        for pid, items in roots.items():
            for g, i in items:
                ids = completion_ids(g.response_ids[i], bool(g.finish_reasons) and g.finish_reasons[i] == "stop")
                lo, hi = entropy_window(len(ids), self.cfg.window_lo, self.cfg.window_hi)
                lo = max(lo, 1)  # a child has a non-empty prefix
                if hi - lo <= self.threshold or hi <= lo:
                    short += 1
                    continue
                rows.append((pid, g.start.context_ids, ids, lo, hi))
        out: dict[str, tuple[tuple[int, ...], float]] = {}
        m = {"pros_scored_rows": float(len(rows)), "pros_scored_tokens": float(sum(r[4] for r in rows)),
             "pros_window_short": float(short)}
        if not rows:
            return out, m
        scores = ctx.backend.score_batch([r[1] for r in rows], [r[2][: r[4]] for r in rows], temperature=self.temperature,
                                         with_entropy=True)
        best: dict[str, tuple[float, tuple[int, ...], float]] = {}
        for (pid, _, ids, lo, hi), sc in zip(rows, scores):
            ent = np.asarray(sc.entropies, dtype=np.float64)[lo:hi]
            j = int(np.argmax(ent))
            if pid not in best or ent[j] > best[pid][0]:  # first maximum over the root's rows in batch order
                best[pid] = (float(ent[j]), tuple(ids[: lo + j]), (lo + j) / len(ids))
        return {pid: (b[1], b[2]) for pid, b in best.items()}, m

    def _grow(self, cuts: Mapping[str, tuple[tuple[int, ...], float]], step: int, rng: np.random.Generator) -> dict[str, float]:
        new, evicted, fracs = 0, 0, []
        for pid, (prefix, frac) in cuts.items():
            kids = self.children(pid)
            if any(k.prefix == prefix for k in kids):
                continue  # the same prefix twice would be one state (ours: keep the older node and its counts)
            root = self.nodes[self.roots[pid]]
            sigma = float(child_sigma(np.array([root.psi]), self.cfg.delta, self.cfg.sigma_floor)[0])
            self._new_node(pid, root.id, prefix, root.psi + sigma * rng.standard_normal(), sigma**2, step)
            new += 1
            fracs.append(frac)
            kids = self.children(pid)
            for k in sorted(kids, key=lambda nd: (nd.birth, nd.id))[: max(0, len(kids) - self.cfg.max_children)]:
                del self.nodes[k.id]
                evicted += 1
        return {"pros_children_new": float(new), "pros_evicted": float(evicted),
                "pros_cut_frac_mean": float(np.mean(fracs)) if fracs else float("nan")}

    def _sweep(self, rng: np.random.Generator) -> None:
        ids = sorted(self.nodes)
        if not ids:
            return
        where = {nid: k for k, nid in enumerate(ids)}
        nd = [self.nodes[i] for i in ids]
        parent = np.array([-1 if x.parent < 0 else where[x.parent] for x in nd], dtype=np.int64)
        psi = gibbs_sweeps(np.array([x.psi for x in nd]), parent, np.array([x.sigma2 for x in nd]),
                           np.array([x.s for x in nd]), np.array([x.n for x in nd]), rng, mu0=self.cfg.mu0,
                           tau0=self.cfg.tau0, sweeps=self.cfg.sweeps, terms=self.cfg.pg_terms)
        for x, v in zip(nd, psi.tolist()):
            x.psi = float(v)

    # ---------------------------------------------------------------- plug-in points

    def claim(self, step: Step, open_slots: int, ctx: TrainContext) -> Claim:
        """The ``⌊share × open_slots⌋`` nodes nearest 0.5 (module doc)."""
        k = int(math.floor(self.cfg.share * open_slots + 1e-9))
        m = {"pros_claimed_children": 0.0, "pros_claimed_roots": 0.0, "pros_roots_to_fresh": 0.0}
        if k == 0 or not self.nodes:
            return Claim(metrics=m)
        ids = sorted(self.nodes)
        nd = [self.nodes[i] for i in ids]
        theta = sigmoid(np.array([x.psi for x in nd]))
        chosen, w = select_nearest_half(theta, [x.problem for x in nd], self.last_used, step.index, k, self.cfg.diversity_window)
        states = []
        for j in chosen:
            x = nd[j]
            meta = {"pros_node": int(x.id), "pros_theta": float(theta[j]), "pros_birth": int(x.birth)}
            problem = problem_by_id(x.problem, self.problems)
            if x.parent >= 0:
                states.append(StartState(self.prompts[x.problem], problem, x.prefix, Origin.REPLAYED_PREFIX, meta=meta))
                m["pros_claimed_children"] += 1
            elif self.cfg.claim_roots:
                states.append(StartState(self.prompts[x.problem], problem, (), Origin.FRESH, meta=meta))
                m["pros_claimed_roots"] += 1
            else:
                m["pros_roots_to_fresh"] += 1
        m["pros_diversity_window"] = float(w)
        m["pros_selected_theta_mean"] = float(np.mean(theta[chosen])) if chosen else float("nan")
        return Claim(states=tuple(states), metrics=m)

    def after_step(self, step: Step, ctx: TrainContext) -> Result:
        """Decay, count this step's outcomes, the Gibbs sweeps, then grow children from correct bare-prompt rows (a new
        child's σ and first draw come from its root's *updated* draw, as PROS's released sampler orders it)."""
        t, c = step.index, self.cfg
        rng = np.random.default_rng(derive_seed(self.seed, t, 0x9205))
        for x in self.nodes.values():
            x.s *= c.gamma
            x.n *= c.gamma
        observed: dict[int, list[float]] = {}
        correct: dict[str, list[tuple[RolloutGroup, int]]] = {}
        for g in step.groups:
            if g.birth_step != t:
                continue
            x = self._node_of(g, rng)
            if x is None:
                continue
            ok = g.rewards > 0
            x.s += float(ok.sum())
            x.n += float(ok.size)
            observed.setdefault(x.id, []).append(float(ok.mean()))
            self.last_used[x.problem] = t
            if x.parent < 0:
                correct.setdefault(x.problem, []).extend((g, int(i)) for i in np.flatnonzero(ok))
        t0 = time.perf_counter()
        self._sweep(rng)
        gibbs_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        cuts, m = self._cuts({p: v for p, v in correct.items() if v}, ctx)
        m["time_pros_score_s"] = time.perf_counter() - t0
        m["time_pros_gibbs_s"] = gibbs_s
        m.update(self._grow(cuts, t, rng))
        roots = [x for x in self.nodes.values() if x.parent < 0]
        kids = [x for x in self.nodes.values() if x.parent >= 0]
        m["pros_roots"], m["pros_children"] = float(len(roots)), float(len(kids))
        m["pros_theta_root_mean"] = float(np.mean(sigmoid([x.psi for x in roots]))) if roots else float("nan")
        m["pros_theta_child_mean"] = float(np.mean(sigmoid([x.psi for x in kids]))) if kids else float("nan")
        err = [abs(float(np.mean(v)) - float(sigmoid([self.nodes[i].psi])[0])) for i, v in observed.items() if i in self.nodes]
        m["pros_pass_error"] = float(np.mean(err)) if err else float("nan")
        return Result(metrics=m)

    # ---------------------------------------------------------------- checkpoints

    def state_dict(self) -> dict[str, Any]:
        """The tree (nodes as parallel arrays, prefixes as lists), the roots' prompts and the queries' last use."""
        nd = [self.nodes[i] for i in sorted(self.nodes)]
        return {
            "nodes": {
                "id": np.array([x.id for x in nd], dtype=np.int64),
                "problem": [x.problem for x in nd],
                "parent": np.array([x.parent for x in nd], dtype=np.int64),
                "prefix": [list(x.prefix) for x in nd],
                "s": np.array([x.s for x in nd], dtype=np.float64),
                "n": np.array([x.n for x in nd], dtype=np.float64),
                "psi": np.array([x.psi for x in nd], dtype=np.float64),
                "sigma2": np.array([x.sigma2 for x in nd], dtype=np.float64),
                "birth": np.array([x.birth for x in nd], dtype=np.int64),
            },
            "prompts": {k: list(v) for k, v in self.prompts.items()},
            "last_used": {k: int(v) for k, v in self.last_used.items()},
            "next_id": int(self.next_id),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        n = state["nodes"]
        self.nodes = {}
        for k in range(len(n["problem"])):
            problem_by_id(n["problem"][k], self.problems)  # the checkpoint's queries must be in the training split
            x = _Node(int(n["id"][k]), str(n["problem"][k]), int(n["parent"][k]), tuple(int(t) for t in n["prefix"][k]),
                      float(n["s"][k]), float(n["n"][k]), float(n["psi"][k]), float(n["sigma2"][k]), int(n["birth"][k]))
            self.nodes[x.id] = x
        self.roots = {x.problem: x.id for x in self.nodes.values() if x.parent < 0}
        self.prompts = {k: tuple(int(t) for t in v) for k, v in state["prompts"].items()}
        self.last_used = {k: int(v) for k, v in state["last_used"].items()}
        self.next_id = int(state["next_id"])


def pros_cost(params: Mapping[str, Any], cost: Mapping[str, float]) -> float:
    """Update cost over GRPO's for the suites' sizing: PROS generates no extra tokens but scores its correct rows'
    entropies in one extra pass (as ExTra's regeneration does): ``cost["plugin_factor"]``."""
    return cost["plugin_factor"]


@register_plugin("pros", config=PROSConfig, cost=pros_cost, smoke=PluginSmoke({"sweeps": 10}, state_key="prompts"),
                 summary="PROS: children from the highest-entropy cut of correct rollouts; nodes whose posterior pass "
                         "rate is nearest 0.5 are trained (PROS, ICLR 2026)")
def _make_pros(params: Mapping[str, Any], ctx: TrainContext) -> Plugin:
    """``plugins: {pros: {share: 0.5, sweeps: 100, ...}}`` (fields of :class:`PROSConfig`)."""
    return PROSPlugin(plugin_config(PROSConfig, params, "pros"), ctx)
