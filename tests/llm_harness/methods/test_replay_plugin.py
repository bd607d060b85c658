"""Rollout-level |A| replay: PER frequencies, age eviction, warmup, compositions, levels, faults."""

from __future__ import annotations

import numpy as np
import pytest

from llm_harness.methods.replay import ReplayConfig, ReplayPlugin, split_rollouts, unit_priority
from llm_harness.trainer.advantages import estimate_advantages, informative
from llm_harness.trainer.data import Origin
from llm_harness.trainer.step import Step
from trainer_support import fake_group, make_trainer
from concentration import hoeffding_radius


def _groups(tr, step, rewards_list, start=0):
    out = []
    for j, rw in enumerate(rewards_list):
        p = tr.fresh.problems[start + j]
        out.append(fake_group(p, tr.fresh.encode(p), [(1 + k, 2, 3) for k in range(len(rw))], rw, step))
    return estimate_advantages("grpo", out, 1e-6)


def _plugin(tr, **params):
    return ReplayPlugin(ReplayConfig(**params), tr.ctx)


def _store(rp, tr, step, groups):
    """A finished step whose kept groups are the trainer's zero-variance survivors of ``groups``."""
    kept = tuple(g for g in groups if informative(g))
    rp.after_step(Step(index=step, groups=tuple(groups), kept=kept, fresh=kept), tr.ctx)


def _composition(rp, tr, step, fresh):
    return rp.compose(Step(index=step, kept=tuple(fresh), fresh=tuple(fresh)), tr.ctx)


def _compose(rp, tr, step, fresh):
    """The trained list (this step's groups, then the replayed ones) of a step whose kept groups are ``fresh``."""
    c = _composition(rp, tr, step, fresh)
    return list(c.fresh) + list(c.replayed)


def test_survivors_are_stored_per_rollout_with_birth_advantages(tmp_path):
    tr = make_trainer(tmp_path)
    rp = _plugin(tr, warmup=0)
    gs = _groups(tr, 0, [[1, 0, 0, 0], [1, 1, 1, 1]])  # the second is zero-variance: filtered
    _store(rp, tr, 0, gs)
    assert len(rp.buffer) == 4 and all(u.size == 1 for u in rp.buffer)
    np.testing.assert_allclose([u.advantages[0] for u in rp.buffer], gs[0].advantages)
    assert all(u.info["replay_sigma_g"] == pytest.approx(np.std([1, 0, 0, 0])) for u in rp.buffer)
    # replayed copies keep birth advantage and behaviour log-probs, tagged replayed_rollout
    fresh = _groups(tr, 1, [[0, 1, 1, 1]], start=5)
    out = _compose(rp, tr, 1, fresh)
    rep = out[1:]
    assert out[0] is fresh[0] and len(rep) == 2  # round(0.5 * 4)
    for u in rep:
        assert u.start.origin is Origin.REPLAYED_ROLLOUT and u.birth_step == 0
        assert u.behaviour_logprobs[0].tolist() == [-0.5] * 3
        assert u.advantages[0] in set(gs[0].advantages.tolist())


def test_priority_sampling_frequencies_match_abs_adv_power_alpha(tmp_path):
    tr = make_trainer(tmp_path)
    rp = _plugin(tr, warmup=0, alpha=0.5, ratio=0.25, max_age=10**6)
    gs = _groups(tr, 0, [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0]])  # |A| = sqrt(3), 1/sqrt(3), 1 ...
    _store(rp, tr, 0, gs)
    w = unit_priority(rp.buffer, "abs_adv", 1e-6, 0.5)
    np.testing.assert_allclose(w, (np.abs(np.concatenate([g.advantages for g in gs])) + 1e-6) ** 0.5)
    probs = w / w.sum()
    fresh = _groups(tr, 1, [[0, 1, 1, 1]], start=5)  # 4 fresh rollouts, ratio 0.25 -> one draw per step
    n = 6000
    counts = np.zeros(len(rp.buffer))
    ids = {id(u.response_ids[0]) for u in rp.buffer}
    key = {(u.start.problem.id, u.response_ids[0]): i for i, u in enumerate(rp.buffer)}
    assert len(key) == len(rp.buffer) and ids
    for step in range(1, n + 1):
        out = _compose(rp, tr, step, fresh)
        (u,) = out[1:]
        counts[key[(u.start.problem.id, u.response_ids[0])]] += 1
    rad = hoeffding_radius(n, 1.0, 1e-6 / len(probs))
    assert np.all(np.abs(counts / n - probs) <= rad)
    # minority rollouts (large |A|) are drawn more often than majority ones
    assert counts[0] > counts[1]


def test_age_eviction_and_warmup(tmp_path):
    tr = make_trainer(tmp_path)
    rp = _plugin(tr, warmup=3, max_age=2, ratio=1.0)
    _store(rp, tr, 0, _groups(tr, 0, [[1, 0]]))
    fresh = _groups(tr, 1, [[0, 1]], start=3)
    c = _composition(rp, tr, 1, fresh)
    assert list(c.fresh) + list(c.replayed) == fresh and c.metrics["replay_active"] == 0  # warmup
    _store(rp, tr, 1, [])
    _store(rp, tr, 2, [])  # births >= 3 - 2 = 1 survive to step 3: the step-0 rollouts are evicted
    assert rp.buffer == []
    _store(rp, tr, 3, _groups(tr, 3, [[1, 0]], start=1))
    out = _compose(rp, tr, 4, fresh)  # age 1 <= 2: replayed
    assert len(out) == 3 and {u.birth_step for u in out[1:]} == {3}
    out = _compose(rp, tr, 5, fresh)  # age 2 = max_age: still replayed
    assert len(out) == 3
    out = _compose(rp, tr, 6, fresh)  # age 3 > 2: gone
    assert out == fresh


def test_fresh_anchored_vs_pool_composition(tmp_path):
    tr = make_trainer(tmp_path)
    stored = _groups(tr, 0, [[1, 0, 0, 0], [0, 1, 1, 0]])
    fresh = _groups(tr, 1, [[1, 0, 1, 1], [0, 0, 0, 1]], start=4)
    anchored = _plugin(tr, warmup=0, ratio=0.5)
    _store(anchored, tr, 0, stored)
    out = _compose(anchored, tr, 1, fresh)
    assert out[:2] == fresh and sum(g.size for g in out[2:]) == 4  # all fresh + 0.5 * 8 replayed
    pool = _plugin(tr, warmup=0, ratio=0.5, composition="pool", priority="uniform", max_age=100)
    _store(pool, tr, 0, stored)
    n_fresh_trained = []
    for step in range(1, 40):
        out = _compose(pool, tr, step, fresh)
        assert sum(g.size for g in out) == 12  # (1 + r) * B'
        n_fresh_trained.append(sum(g.size for g in out if g.start.origin is Origin.FRESH))
    assert min(n_fresh_trained) < 8  # fresh rollouts compete with stored ones (not always all kept)


def test_query_level_stores_whole_groups_with_sigma_g_priority(tmp_path):
    tr = make_trainer(tmp_path)
    rp = _plugin(tr, warmup=0, level="query", priority="sigma_g", composition="pool", ratio=0.5)
    gs = _groups(tr, 0, [[1, 0, 0, 0], [1, 1, 0, 0]])
    _store(rp, tr, 0, gs)
    assert [u.size for u in rp.buffer] == [4, 4]
    np.testing.assert_allclose(unit_priority(rp.buffer, "sigma_g", 0.0, 1.0), [np.std([1, 0, 0, 0]), 0.5])
    out = _compose(rp, tr, 1, _groups(tr, 1, [[0, 1, 1, 1]], start=5))
    assert all(g.size == 4 for g in out) and sum(g.size for g in out) >= 6


def test_split_rollouts_requires_advantages(tmp_path):
    tr = make_trainer(tmp_path)
    p = tr.fresh.problems[0]
    with pytest.raises(ValueError, match="advantages"):
        split_rollouts(fake_group(p, tr.fresh.encode(p), [(1,)], [1], 0))


def test_split_rollouts_keeps_each_rows_context_and_per_sample_info(tmp_path):
    from dataclasses import replace

    from llm_harness.methods.replay import PER_SAMPLE

    tr = make_trainer(tmp_path)
    g = _groups(tr, 0, [[1, 0, 1]])[0]
    g = replace(g, contexts=[(5, 6), (7,), (8, 9, 10)], info={PER_SAMPLE: {"key": ["a", "b", "c"]}, "group_only": 1})
    units = split_rollouts(g)
    assert [u.contexts for u in units] == [[(5, 6)], [(7,)], [(8, 9, 10)]]
    assert [u.info[PER_SAMPLE]["key"] for u in units] == [["a"], ["b"], ["c"]]
    assert all("group_only" not in u.info for u in units)
    with pytest.raises(ValueError, match="2 entries for 3 samples"):
        split_rollouts(replace(g, info={PER_SAMPLE: {"key": ["a", "b"]}}))


def test_empty_buffer_when_due_warns_and_trains_fresh(tmp_path):
    tr = make_trainer(tmp_path)
    rp = _plugin(tr, warmup=0)
    fresh = _groups(tr, 0, [[1, 0]])
    assert _compose(rp, tr, 0, fresh) == fresh
    assert any("buffer empty" in w for w in tr.ctx.warnings)


@pytest.mark.parametrize(
    "params, field",
    [({"ratio": 1.5}, "ratio"), ({"ratio": -1}, "ratio"), ({"alpha": 2}, "alpha"), ({"max_age": 0}, "max_age"),
     ({"level": "query"}, "priority"), ({"composition": "x"}, "composition"), ({"nope": 1}, "unknown key")],
)
def test_bad_parameters_name_the_field(tmp_path, params, field):
    with pytest.raises(ValueError, match=f"plugins.replay.*{field}"):
        make_trainer(tmp_path, plugins={"replay": params})


def test_replay_in_the_trainer_logs_replay_clip_fraction(tmp_path):
    tr = make_trainer(tmp_path, steps=4, plugins={"replay": {"warmup": 1, "ratio": 1.0}})
    rows = tr.fit()
    tr.close()
    assert rows[0]["replay_active"] == 0 and rows[0]["groups_replayed"] == 0
    active = [r for r in rows[1:] if r["replay_drawn_rollouts"] > 0]
    assert active, "replay never drew a rollout"
    for r in active:
        assert r["groups_replayed"] == r["replay_drawn_rollouts"]
        assert np.isfinite(r["clip_frac_replayed_rollout"])


def test_levels_compositions_and_priorities_are_registries_the_config_checks():
    from llm_harness.methods.replay import COMPOSITIONS, LEVELS, PRIORITIES, ReplayConfig

    assert set(LEVELS) == {"rollout", "query"} and set(COMPOSITIONS) == {"fresh_anchored", "pool"}
    assert [n for n in PRIORITIES if getattr(PRIORITIES[n], "rollout_level_only", False)] == ["abs_adv"]
    with pytest.raises(ValueError, match="level: unknown replay level 'batch'"):
        ReplayConfig(level="batch")
    with pytest.raises(ValueError, match="composition: unknown replay composition 'mixed'"):
        ReplayConfig(composition="mixed")
    with pytest.raises(ValueError, match=r"priority: 'abs_adv' is a rollout-level signal; use level: rollout \(or sigma_g, uniform\)"):
        ReplayConfig(level="query", priority="abs_adv")
