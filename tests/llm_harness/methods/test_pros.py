"""PROS plug-in: the highest-entropy cut from hand-built entropies, the tree (depth 1, newest children kept), the
decayed counts, the nearest-0.5 selection with its diversity window, claims of roots and children, agents
refused, composition with DAPO and ExTra, and bit-identical resume."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from llm_harness.backends.protocol import ScoreResult
from llm_harness.methods.pros import PROSConfig, PROSPlugin, entropy_window, select_nearest_half
from llm_harness.trainer.config import AlgoConfig, RolloutConfig, RunConfig
from llm_harness.trainer.data import Origin, RolloutGroup, StartState
from llm_harness.trainer.plugins import StepRecorder
from llm_harness.trainer.step import Step
from theory.pros_posterior import sigmoid
from trainer_support import assert_fresh_stream_is_grpos, ToyTask, check_resume_is_bit_identical, fake_group, make_trainer


class FakeScorer:
    """``score_batch`` returning preset entropies per completion (default 0.1 per token); records its calls."""

    def __init__(self, table=None):
        self.table = dict(table or {})
        self.calls = []

    def score_batch(self, contexts, completions, *, temperature=1.0, with_entropy=True, **kw):
        self.calls.append(([tuple(c) for c in contexts], [tuple(c) for c in completions]))
        out = []
        for comp in completions:
            ent = np.asarray(self.table.get(tuple(comp), [0.1] * len(comp)), dtype=np.float64)[: len(comp)]
            out.append(ScoreResult(np.zeros(len(comp)), ent))
        return out


@pytest.fixture(scope="module")
def tr(tmp_path_factory):
    t = make_trainer(str(tmp_path_factory.mktemp("pros")),
                     rollout=RolloutConfig(prompts_per_step=4, group_size=4, max_new_tokens=32, verify_timeout_s=0.0))
    yield t
    t.close()


def _pros(tr, scorer=None, **params):
    ctx = tr.ctx if scorer is None else replace(tr.ctx, backend=scorer)
    return PROSPlugin(PROSConfig(**params), ctx), ctx


def _step(index, groups):
    groups = tuple(groups)
    return Step(index=index, groups=groups, kept=groups, fresh=groups)


def _row(j, length=12):
    """A response of ``length`` tokens + the stop token (id 1), distinct per ``j``."""
    return tuple(2 + (j + k) % 15 for k in range(length)) + (1,)


# ------------------------------------------------------------------------------ pure pieces


def test_entropy_window():
    assert entropy_window(12, 0.25, 0.75) == (3, 9)
    assert entropy_window(2001, 0.25, 0.75) == (500, 1500)  # 1,000 tokens: not longer than 1,000 (PROS)


def test_selection_is_nearest_half_one_per_query_with_a_relaxing_diversity_window():
    theta = np.array([0.5, 0.49, 0.9, 0.45, 0.55, 0.1])
    query = ["a", "a", "b", "c", "d", "e"]
    last = {"a": 10, "b": 5, "c": 9, "d": 7, "e": 2}
    # step 10, window 3: a (used now), c (1 step ago), d (3 ago) are skipped; b and e qualify
    assert select_nearest_half(theta, query, last, 10, 2, 3) == ([2, 5], 3)
    # 3 wanted: only 2 queries qualify at w = 3; w = 2 lets d in (used 3 steps ago)
    assert select_nearest_half(theta, query, last, 10, 3, 3) == ([4, 2, 5], 2)
    # at w = 0 every query used before this step qualifies; one node per query (a's 0.5, not its 0.49)
    assert select_nearest_half(theta, query, last, 11, 5, 3) == ([0, 3, 4, 2, 5], 0)
    assert select_nearest_half(theta, query, {}, 0, 9, 3)[0] == [0, 3, 4, 2, 5]  # never used: always eligible


# ------------------------------------------------------------------------------ tree and counts


def _root_group(tr, i, rows, rewards, step, **kw):
    p = tr.fresh.problems[i]
    return fake_group(p, tr.fresh.encode(p), rows, rewards, step, **kw)


def test_one_cut_per_root_at_the_highest_entropy_of_its_correct_rows(tr):
    a, b, wrong = _row(0), _row(1), _row(2)
    ent_a = [0.0] * 12
    ent_a[5] = 2.0
    ent_b = [0.0] * 12
    ent_b[7] = 3.0  # the root's peak: row b, position 7
    ent_wrong = [9.0] * 12  # an incorrect row never counts
    scorer = FakeScorer({a[:9]: ent_a[:9], b[:9]: ent_b[:9], wrong[:9]: ent_wrong[:9]})
    pros, ctx = _pros(tr, scorer, sweeps=5)
    g = _root_group(tr, 0, [a, wrong, b, wrong], [1, 0, 1, 0], 0)
    res = pros.after_step(_step(0, [g]), ctx)
    (contexts, completions), = scorer.calls
    assert completions == [a[:9], b[:9]] and contexts == [g.start.prompt_ids] * 2  # rows cut after their window
    (child,) = pros.children(g.start.problem.id)
    assert child.prefix == b[:7] and child.birth == 0 and child.s == child.n == 0
    assert res.metrics["pros_children_new"] == 1 and res.metrics["pros_cut_frac_mean"] == pytest.approx(7 / 12)
    root = pros.nodes[pros.roots[g.start.problem.id]]
    assert (root.s, root.n) == (2.0, 4.0)


def test_short_windows_are_not_cut(tr):
    pros, ctx = _pros(tr, FakeScorer(), sweeps=5)  # threshold min(1000, 0.15 · 32) = 4.8 tokens
    g = _root_group(tr, 0, [_row(0, 8), _row(1, 10)], [1, 1], 0)  # windows [2, 6) and [2, 7): 4 and 5 tokens
    res = pros.after_step(_step(0, [g]), ctx)
    assert res.metrics["pros_window_short"] == 1 and res.metrics["pros_scored_rows"] == 1
    assert len(pros.children(g.start.problem.id)) == 1


def test_children_never_spawn_children_and_counts_decay(tr):
    pros, ctx = _pros(tr, FakeScorer(), sweeps=5, gamma=0.9)
    g0 = _root_group(tr, 0, [_row(0), _row(1)], [1, 0], 0)
    pros.after_step(_step(0, [g0]), ctx)
    (child,) = pros.children(g0.start.problem.id)
    # step 1: the child's group (all correct: no grandchild) and the bare prompt again
    cs = StartState(g0.start.prompt_ids, g0.start.problem, child.prefix, Origin.REPLAYED_PREFIX, meta={"pros_node": child.id})
    cg = RolloutGroup(cs, [_row(3)] * 3, [np.zeros(13)] * 3, np.array([1.0, 1.0, 0.0]), 1, finish_reasons=["stop"] * 3)
    g1 = _root_group(tr, 0, [_row(4), _row(5)], [0, 0], 1)
    pros.after_step(_step(1, [cg, g1]), ctx)
    assert [k.id for k in pros.children(g0.start.problem.id)] == [child.id]  # no correct bare row at step 1
    assert all(n.parent == -1 or pros.nodes[n.parent].parent == -1 for n in pros.nodes.values())
    assert (child.s, child.n) == (2.0, 3.0)
    root = pros.nodes[pros.roots[g0.start.problem.id]]
    assert root.s == pytest.approx(0.9 * 1) and root.n == pytest.approx(0.9 * 2 + 2)
    pros.after_step(_step(2, []), ctx)
    assert (child.s, child.n) == (pytest.approx(0.9 * 2), pytest.approx(0.9 * 3))


def test_a_root_keeps_its_newest_children(tr):
    pros, ctx = _pros(tr, FakeScorer(), sweeps=2, max_children=2)
    born = []
    for t in range(4):
        g = _root_group(tr, 0, [_row(t)], [1], t)
        pros.after_step(_step(t, [g]), ctx)
        born.append(t)
        kids = pros.children(g.start.problem.id)
        assert [k.birth for k in kids] == born[-2:]
    assert len(pros.nodes) == 3


def test_the_same_prefix_is_one_child(tr):
    pros, ctx = _pros(tr, FakeScorer(), sweeps=2)
    for t in range(2):
        pros.after_step(_step(t, [_root_group(tr, 0, [_row(0)], [1], t)]), ctx)
    assert len(pros.children(tr.fresh.problems[0].id)) == 1


# ------------------------------------------------------------------------------ claims


def _grown(tr, **params):
    """Two roots with one child each, after one step."""
    pros, ctx = _pros(tr, FakeScorer(), sweeps=5, **params)
    groups = [_root_group(tr, i, [_row(i), _row(i + 5)], [1, 0], 0) for i in range(2)]
    pros.after_step(_step(0, groups), ctx)
    return pros, ctx


def test_claim_takes_the_nodes_nearest_half_one_per_query(tr):
    pros, ctx = _grown(tr, diversity_window=0)
    ids = {pid: (pros.roots[pid], pros.children(pid)[0].id) for pid in pros.roots}
    (p0, p1) = (tr.fresh.problems[0].id, tr.fresh.problems[1].id)
    pros.nodes[ids[p0][0]].psi, pros.nodes[ids[p0][1]].psi = 0.1, 3.0  # query 0: its root is nearest 0.5
    pros.nodes[ids[p1][0]].psi, pros.nodes[ids[p1][1]].psi = -2.0, -0.2  # query 1: its child is
    c = pros.claim(Step(index=1), 4, ctx)  # ⌊0.5 · 4⌋ = 2
    root, child = c.states
    assert root.origin is Origin.FRESH and root.prefix_ids == () and root.problem.id == p0
    assert root.meta == {"pros_node": ids[p0][0], "pros_theta": pytest.approx(float(sigmoid([0.1])[0])), "pros_birth": -1}
    assert child.origin is Origin.REPLAYED_PREFIX and child.problem.id == p1
    assert child.prefix_ids == pros.nodes[ids[p1][1]].prefix and child.prompt_ids == tr.fresh.encode(tr.fresh.problems[1])
    assert c.metrics["pros_claimed_roots"] == 1 and c.metrics["pros_claimed_children"] == 1
    pros2, ctx2 = _grown(tr, diversity_window=0, claim_roots=False)
    for pid, (r, k) in ids.items():
        pros2.nodes[r].psi, pros2.nodes[k].psi = pros.nodes[r].psi, pros.nodes[k].psi
    c2 = pros2.claim(Step(index=1), 4, ctx2)
    assert [s.problem.id for s in c2.states] == [p1] and c2.metrics["pros_roots_to_fresh"] == 1


def test_claimed_groups_update_their_own_nodes(tr):
    pros, ctx = _grown(tr, diversity_window=0)
    states = pros.claim(Step(index=1), 8, ctx).states
    groups = [RolloutGroup(s, [_row(9, 3)] * 2, [np.zeros(4)] * 2, np.array([1.0, 0.0]), 1, finish_reasons=["stop"] * 2)
              for s in states]
    before = {s.meta["pros_node"]: pros.nodes[s.meta["pros_node"]].n for s in states}
    pros.after_step(_step(1, groups), ctx)
    for s in states:
        assert pros.nodes[s.meta["pros_node"]].n == pytest.approx(0.99 * before[s.meta["pros_node"]] + 2)
        assert pros.last_used[s.problem.id] == 1


def test_agents_are_refused_with_the_reason(tr):
    class EnvTask:
        def make_env(self):
            raise AssertionError

    with pytest.raises(ValueError, match="plugins.pros: agent tasks are not supported"):
        PROSPlugin(PROSConfig(), replace(tr.ctx, task=EnvTask()))


def test_bad_parameters_name_the_field(tmp_path):
    with pytest.raises(ValueError, match="plugins.pros.*gamma"):
        make_trainer(str(tmp_path), plugins={"pros": {"gamma": 1.5}})


# ------------------------------------------------------------------------------ in the trainer


@pytest.mark.parametrize("other", [{"dapo": {}}, {"extra": {"warmup_steps": 0, "embedder": "ngram4"}}])
def test_composes_with_dapo_and_extra(tmp_path, other):
    spec = {"pros": {"sweeps": 10}, **other}
    rec = StepRecorder()
    t = make_trainer(str(tmp_path), task=ToyTask(good="01234"), extra_plugins=[rec], steps=2, plugins=spec,
                     algo=AlgoConfig(max_gen_rounds=2))
    rows = t.fit()
    t.close()
    assert_fresh_stream_is_grpos(rec, t)
    assert len(rows) == 2 and rows[0]["pros_roots"] > 0 and rows[1]["pros_claimed_roots"] + rows[1]["pros_claimed_children"] > 0
    assert all(r["slots_fresh"] + r.get("slots_pros", 0) + r.get("slots_extra", 0) == 4 for r in rows)


def test_resume_with_pros_is_bit_identical(tmp_path):
    def make(d, **run_kw):
        return make_trainer(str(d), task=ToyTask(good="01234"), steps=6, plugins={"pros": {"sweeps": 10}},
                            run=RunConfig(run_dir=str(d), checkpoint_every=3, progress=False, **run_kw))

    full, resumed, rows = check_resume_is_bit_identical(make, tmp_path, stop_after=4, checkpoint_step=3)
    assert sum(r["pros_claimed_children"] for r in rows[3:]) > 0
    a, b = full.plugins[0].state_dict(), resumed.plugins[0].state_dict()
    assert np.array_equal(a["nodes"]["psi"], b["nodes"]["psi"]) and a["prompts"] == b["prompts"]


def test_the_posterior_follows_each_nodes_own_outcomes_and_a_child_is_born_from_the_updated_root(tr):
    """A root that always passes and its child that always fails: after a few steps the root's draw is high and the
    child's low (swapping successes and trials, or a wrong parent map, would fail this); and a child's prior scale is
    child_sigma of its root's draw *after* that step's sweeps (the released sampler's order)."""
    from theory.pros_posterior import child_sigma

    pros, ctx = _pros(tr, FakeScorer(), sweeps=30, delta=0.45)  # a wide child prior, so the child can leave its root
    g0 = _root_group(tr, 0, [_row(0), _row(1), _row(2), _row(3)], [1, 1, 1, 1], 0)
    pros.after_step(_step(0, [g0]), ctx)
    (child,) = pros.children(g0.start.problem.id)
    root = pros.nodes[pros.roots[g0.start.problem.id]]
    assert child.sigma2 == pytest.approx(float(child_sigma(np.array([root.psi]), 0.45, pros.cfg.sigma_floor)[0]) ** 2)
    cs = StartState(g0.start.prompt_ids, g0.start.problem, child.prefix, Origin.REPLAYED_PREFIX, meta={"pros_node": child.id})
    for t in range(1, 7):
        cg = RolloutGroup(cs, [_row(7)] * 8, [np.zeros(13)] * 8, np.zeros(8), t, finish_reasons=["stop"] * 8)
        rg = _root_group(tr, 0, [_row(4)] * 8, [1] * 8, t)
        pros.after_step(_step(t, [cg, rg]), ctx)
    theta_root, theta_child = sigmoid(np.array([root.psi, child.psi]))
    assert theta_root > 0.8 and theta_child < theta_root - 0.2
