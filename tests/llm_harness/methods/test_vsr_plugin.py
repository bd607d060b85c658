"""VSR plug-in mechanics: σ̂ on a hand-built trajectory, buffer policy, sampling ∝ σ̂, ablations, faults."""

from __future__ import annotations

import math

import numpy as np
import pytest

from llm_harness.methods.common import step_end_positions
from llm_harness.methods.vsr import (
    VSRConfig,
    VSRPlugin,
    prefix_positions,
    weighted_sample_without_replacement,
)
from llm_harness.tasks.step_arith import StepArithTask, make_problem
from llm_harness.trainer.data import Origin
from llm_harness.trainer.step import Step
from trainer_support import fake_group, make_trainer
from concentration import hoeffding_radius
from theory.prefix_scores import std_hat


def _vsr(tr, **params) -> VSRPlugin:
    return VSRPlugin(VSRConfig(**params), tr.ctx)


def _record(step, groups):
    groups = tuple(groups)
    return Step(index=step, groups=groups, kept=groups, fresh=groups)


def test_vsr_score_on_a_hand_built_trajectory(tmp_path):
    tr = make_trainer(tmp_path)
    prob = tr.fresh.problems[0]
    prompt = tr.fresh.encode(prob)
    resp = (5, 6, 7, 8)  # |τ| = 4: prefixes of 1, 2, 3 tokens
    g = fake_group(prob, prompt, [(1, 2), resp, (3,), (4,)], [0, 1, 0, 0], step=0)
    v = _vsr(tr, window=3)
    v.after_step(_record(0, [g]), tr.ctx)
    t = v.buffer[prob.id]
    assert t.response_ids == resp and t.birth == 0 and t.source == "policy"
    np.testing.assert_array_equal(t.positions, [1, 2, 3])
    p0 = 0.25
    want = [(1 - a) * p0 + a * 1.0 for a in (0.25, 0.5, 0.75)]  # 0.4375, 0.625, 0.8125
    np.testing.assert_allclose(t.scores, [p * (1 - p) for p in want], rtol=0, atol=1e-15)
    np.testing.assert_allclose(std_hat(np.array([0.5]), p0, 1.0), [math.sqrt(0.625 * 0.375)])
    # a later success of the same prompt replaces it (most recent trajectory per prompt)
    g2 = fake_group(prob, prompt, [(9, 9, 9)], [1], step=1)
    g2.rewards[:] = 1
    v.after_step(_record(1, [g2]), tr.ctx)
    assert v.buffer[prob.id].response_ids == (9, 9, 9) and v.buffer[prob.id].birth == 1
    np.testing.assert_allclose(v.buffer[prob.id].scores, [0.0, 0.0])  # p0 = R = 1: no residual signal


def test_only_successful_fresh_prompt_groups_are_inserted(tmp_path):
    tr = make_trainer(tmp_path)
    a, b, c = tr.fresh.problems[:3]
    fail = fake_group(a, tr.fresh.encode(a), [(1, 2, 3)] * 2, [0, 0], step=0)
    pre = fake_group(b, tr.fresh.encode(b), [(1, 2, 3)] * 2, [1, 0], step=0, origin=Origin.REPLAYED_PREFIX, prefix=(4,))
    old = fake_group(c, tr.fresh.encode(c), [(1, 2, 3)] * 2, [1, 0], step=-1)
    v = _vsr(tr)
    out = v.after_step(_record(0, [fail, pre, old]), tr.ctx).metrics
    assert v.buffer == {} and out["vsr_inserted"] == 0


def test_recency_eviction_ages(tmp_path):
    tr = make_trainer(tmp_path)
    prob = tr.fresh.problems[0]
    g = fake_group(prob, tr.fresh.encode(prob), [(1, 2, 3, 4)] * 2, [1, 0], step=0)
    v = _vsr(tr, window=2)
    v.after_step(_record(0, [g]), tr.ctx)
    present = []
    for step in (1, 2, 3):
        present.append(prob.id in v.buffer)  # usable at this step?
        v.after_step(_record(step, []), tr.ctx)
    assert present == [True, True, False]  # inserted at 0, usable at steps 1..W


def test_prefix_positions_options_and_budget(tmp_path):
    assert prefix_positions(5, VSRConfig()).tolist() == [1, 2, 3, 4]
    assert prefix_positions(10, VSRConfig(positions="stride", stride=3)).tolist() == [3, 6, 9]
    assert prefix_positions(10, VSRConfig(positions="steps"), [0, 4, 7, 10, 12]).tolist() == [4, 7]
    tr = make_trainer(tmp_path)  # max_new_tokens 8: a prefix must leave room for one new token
    prob = tr.fresh.problems[0]
    g = fake_group(prob, tr.fresh.encode(prob), [tuple(range(1, 13))] * 2, [1, 0], step=0)
    v = _vsr(tr)
    v.after_step(_record(0, [g]), tr.ctx)
    assert v.buffer[prob.id].positions.max() == 7


def test_step_boundaries_map_to_token_positions(tmp_path):
    tr = make_trainer(tmp_path)
    task = StepArithTask()
    text = "97-53=44,44-5=39\nA:39"
    ids = tr.codec.encode(text)
    ends = step_end_positions(tr.codec, task, ids)
    assert [tr.codec.decode(ids[:i]) for i in ends] == ["97-53=44,", "97-53=44,44-5=39\n"]


def test_weighted_draws_follow_the_weights_within_calibrated_bounds():
    w = np.array([0.0, 0.05, 0.1, 0.2, 0.25, 0.4])
    n = 20000
    rng = np.random.default_rng(7)
    counts = np.zeros(w.size)
    for _ in range(n):
        counts[weighted_sample_without_replacement(w, 1, rng)[0]] += 1
    rad = hoeffding_radius(n, 1.0, 1e-6 / w.size)  # Bonferroni over the items
    assert counts[0] == 0  # zero score is never drawn
    assert np.all(np.abs(counts / n - w / w.sum()) <= rad)
    idx = weighted_sample_without_replacement(w, 10, rng)
    assert sorted(idx.tolist()) == [1, 2, 3, 4, 5]  # distinct, only positive weights


def test_claims_rho_of_the_slots_and_leaves_the_fresh_stream_untouched(tmp_path):
    tr = make_trainer(tmp_path)  # 4 prompts per step
    v = _vsr(tr, rho=0.5)
    for p in tr.fresh.problems[:5]:
        v.after_step(_record(0, [fake_group(p, tr.fresh.encode(p), [(1, 2, 3, 4)] * 2, [1, 0], step=0)]), tr.ctx)
    stream = [p.id for p in tr.fresh.peek(tr.fresh.cursor, 4)]  # what GRPO would draw now
    c = v.claim(Step(index=1), 4, tr.ctx)
    rep = list(c.states)
    fresh = tr.fresh.draw(4 - len(rep))  # the trainer fills the open slots
    assert all(s.origin is Origin.REPLAYED_PREFIX for s in rep)
    assert len(fresh) == 2 and len(rep) == 2 and c.metrics["vsr_replayed"] == 2
    assert [s.problem.id for s in fresh] == stream[:2]
    assert [s.problem.id for s in tr.fresh.draw(2)] == stream[2:]  # never drawn, so next in line
    for s in rep:
        t = v.buffer[s.problem.id]
        assert s.prompt_ids == t.prompt_ids and s.prefix_ids == t.response_ids[: len(s.prefix_ids)]
        assert 0 < len(s.prefix_ids) < 4 and s.meta["vsr_score"] > 0


def test_empty_buffer_falls_back_to_fresh_and_warns(tmp_path):
    tr = make_trainer(tmp_path)
    v = _vsr(tr)
    c = v.claim(Step(index=0), 4, tr.ctx)
    assert c.states == ()
    assert c.metrics["vsr_fallback"] == 1.0 and any("vsr" in w for w in tr.ctx.warnings)


def test_without_recency_the_buffer_freezes(tmp_path):
    tr = make_trainer(tmp_path)
    v = _vsr(tr, recency=False, freeze_after=2, window=1)
    probs = tr.fresh.problems[:4]
    for step, p in enumerate(probs):
        v.after_step(_record(step, [fake_group(p, tr.fresh.encode(p), [(1, 2, 3)] * 2, [1, 0], step=step)]), tr.ctx)
    assert sorted(v.buffer) == sorted(p.id for p in probs[:2])  # filled during steps 0, 1; never evicted


def test_cold_start_and_static_expert_resets(tmp_path):
    tr = make_trainer(tmp_path)
    v = _vsr(tr, cold_start=True, cold_start_problems=6, insert_policy=False, recency=False, score="uniform")
    assert len(v.buffer) == 6 and all(t.source == "expert" and t.birth == -1 for t in v.buffer.values())
    p = tr.fresh.problems[10]
    before = {k: t.response_ids for k, t in v.buffer.items()}
    v.after_step(_record(5, [fake_group(p, tr.fresh.encode(p), [(1, 2, 3)] * 2, [1, 0], step=5)]), tr.ctx)
    assert {k: t.response_ids for k, t in v.buffer.items()} == before  # never changes
    t = next(iter(v.buffer.values()))
    text = tr.codec.decode(t.response_ids[:-1])
    assert text == t.problem.solution  # expert solution (then EOS)
    np.testing.assert_allclose(t.scores, t.alphas * (1 - t.alphas))  # p0 = 0, R = 1


def test_cold_start_needs_expert_solutions(tmp_path):
    from dataclasses import replace as dc_replace

    tr = make_trainer(tmp_path)
    ctx = dc_replace(tr.ctx, train_problems=tuple(dc_replace(p, solution=None) for p in tr.fresh.problems))
    with pytest.raises(ValueError, match="plugins.vsr.cold_start: .*no expert solution"):
        VSRPlugin(VSRConfig(cold_start=True), ctx)


@pytest.mark.parametrize(
    "params, field",
    [({"rho": 1.5}, "rho"), ({"rho": -0.1}, "rho"), ({"window": 0}, "window"), ({"score": "x"}, "score"),
     ({"positions": "x"}, "positions"), ({"bogus": 1}, "unknown key"), ({"insert_policy": False}, "insert_policy")],
)
def test_bad_parameters_name_the_field(tmp_path, params, field):
    with pytest.raises(ValueError, match=f"plugins.vsr.*{field}"):
        make_trainer(tmp_path, plugins={"vsr": params})


def test_vsr_in_the_trainer_masks_prefixes_and_counts_only_new_tokens(tmp_path):
    tr = make_trainer(tmp_path, steps=3, plugins={"vsr": {"cold_start": True, "cold_start_problems": 20}})
    rows = tr.fit()
    tr.close()
    assert all(r["vsr_replayed"] == 2 for r in rows)
    assert all(r["groups_replayed_prefix"] == 2 and r["groups_fresh"] == 2 for r in rows)
    # new tokens are the responses only (prefixes are not regenerated)
    assert all(r["gen_new_tokens"] <= 4 * 4 * 8 for r in rows)


def test_oracle_scores_count_their_monte_carlo_tokens(tmp_path):
    tr = make_trainer(tmp_path, steps=2, plugins={"vsr": {"cold_start": True, "cold_start_problems": 8, "score": "oracle",
                                                           "oracle_candidates": 4, "oracle_samples": 4}})
    rows = tr.fit()
    tr.close()
    for r in rows:
        assert r["vsr_oracle_tokens"] > 0
        assert r["plugin_new_tokens"] == r["vsr_oracle_tokens"]
        for name in ("linear", "calibrated"):  # the zero-cost scores against the oracle, logged every step
            v = r[f"vsr_oracle_spearman_{name}"]
            assert v is None or (isinstance(v, float) and (math.isnan(v) or -1.0 <= v <= 1.0))


def test_calibrated_score_learns_the_interpolation_from_replayed_outcomes(tmp_path):
    """score: calibrated: outcomes of replayed prefixes at known alpha move f away from
    the linear assumption, the buffer is rescored, and a trainer run with it resumes from plain state."""
    from llm_harness.trainer.step import Step
    from theory.prefix_scores import variance_hat, variance_hat_calibrated

    tr = make_trainer(tmp_path)
    v = _vsr(tr, score="calibrated", calibration_bins=4, calibration_prior=1.0, calibration_decay=1.0)
    p = tr.fresh.problems[0]
    g = fake_group(p, tr.fresh.encode(p), [(1, 2, 3, 4, 5, 6, 7, 8)] * 2, [1, 0], step=0)
    v.after_step(_record(0, [g]), tr.ctx)
    t = v.buffer[p.id]
    np.testing.assert_allclose(t.scores, variance_hat(t.alphas, 0.5, 1.0))  # no evidence: linear
    # replayed groups at alpha ~ 0.6 all fail: the curve there drops to 0 (p-hat = p0)
    replays = []
    for k in range(5):
        s = v._state(p.id, 4, 0.1)  # alpha = 5/8
        replays.append(fake_group(p, s.prompt_ids, [(9,)] * 8, [0] * 8, step=1, origin=Origin.REPLAYED_PREFIX, prefix=s.prefix_ids))
        replays[-1].start.meta.update(s.meta)
    m = v.after_step(_record(1, replays), tr.ctx).metrics
    f = v.curve()
    assert m["vsr_calib_groups"] == 5 and f[2] < 0.625 / 2 and m["vsr_calib_gap"] > 0.05
    np.testing.assert_allclose(v.buffer[p.id].scores, variance_hat_calibrated(t.alphas, 0.5, 1.0, f))
    w = _vsr(tr, score="calibrated", calibration_bins=4, calibration_prior=1.0, calibration_decay=1.0)
    w.load_state_dict(v.state_dict())
    np.testing.assert_array_equal(w.curve(), f)
    rows = make_trainer(tmp_path / "run", steps=3, plugins={"vsr": {"cold_start": True, "cold_start_problems": 20,
                                                                      "score": "calibrated"}}).fit()
    assert sum(r["vsr_calib_groups"] for r in rows) > 0


@pytest.mark.parametrize("keep", [False, True])
def test_expert_entries_until_replaced_one_by_one(tmp_path, keep):
    """``expert_until_replaced``: cold-start entries outlive the window and leave one at a time, when
    the policy succeeds on their prompt; without it they all expire at step W − 1."""
    tr = make_trainer(tmp_path)
    v = _vsr(tr, cold_start=True, cold_start_problems=4, window=2, expert_until_replaced=keep)
    first = tr.fresh.problems[0]
    for step in range(4):
        groups = []
        if step == 2:  # the policy solves the first pool prompt
            groups = [fake_group(first, tr.fresh.encode(first), [(1, 2, 3, 4)] * 2, [1, 0], step=2)]
        v.after_step(_record(step, groups), tr.ctx)
    sources = {k: t.source for k, t in v.buffer.items()}
    if keep:
        assert len(sources) == 4 and sources[first.id] == "policy"
        assert sum(s == "expert" for s in sources.values()) == 3
    else:
        assert sources == {first.id: "policy"}  # experts gone at step W − 1 = 1; the policy entry lives


def test_curriculum_metrics_bin_the_replayed_groups_by_alpha(tmp_path):
    from llm_harness.methods.vsr import CURRICULUM_BINS, curriculum_metrics
    from llm_harness.trainer.data import StartState

    tr = make_trainer(tmp_path)
    p = tr.fresh.problems[0]
    prompt = tr.fresh.encode(p)

    def replayed(alpha, rewards, step=3):
        g = fake_group(p, prompt, [(1, 2)] * len(rewards), rewards, step=step, origin=Origin.REPLAYED_PREFIX, prefix=(7,))
        g.start = StartState(prompt, p, (7,), Origin.REPLAYED_PREFIX, meta={"vsr_alpha": alpha})
        return g

    groups = [replayed(0.05, [1, 0]), replayed(0.1, [0, 0]), replayed(0.95, [1, 1]), replayed(1.0, [1, 0]),
              replayed(0.5, [1, 0], step=2),  # an older step's group: not counted
              fake_group(p, prompt, [(1,)] * 2, [1, 0], step=3)]  # fresh: not counted
    m = curriculum_metrics(3, groups)
    last = CURRICULUM_BINS - 1
    assert m["vsr_alpha_b0_groups"] == 2 and m["vsr_alpha_b0_mixed"] == 1 and m["vsr_alpha_b0_success"] == 0.5
    assert m[f"vsr_alpha_b{last}_groups"] == 2 and m[f"vsr_alpha_b{last}_mixed"] == 1 and m[f"vsr_alpha_b{last}_success"] == 1.5
    assert sum(m[f"vsr_alpha_b{k}_groups"] for k in range(CURRICULUM_BINS)) == 4


def test_proxy_agreement_ranks_the_zero_cost_scores_against_the_oracle(tmp_path):
    tr = make_trainer(tmp_path)
    prob = tr.fresh.problems[0]
    g = fake_group(prob, tr.fresh.encode(prob), [(1, 2, 3, 4, 5, 6, 7, 8, 9)] * 4, [1, 0, 0, 0], step=0)
    v = _vsr(tr, score="oracle", window=5)
    v.after_step(_record(0, [g]), tr.ctx)
    keys, traj_idx, pos_idx, scores = v._flat()
    cand = np.arange(traj_idx.size)
    m = v._proxy_agreement(keys, traj_idx, pos_idx, cand, scores.copy())  # oracle == linear sigma-hat
    assert m["vsr_oracle_spearman_linear"] == pytest.approx(1.0)
    assert m["vsr_oracle_spearman_calibrated"] == pytest.approx(1.0)  # no evidence yet: the calibrated score is linear
    m = v._proxy_agreement(keys, traj_idx, pos_idx, cand, -scores)
    assert m["vsr_oracle_spearman_linear"] == pytest.approx(-1.0)
    assert math.isnan(v._proxy_agreement(keys, traj_idx, pos_idx, cand, np.zeros(cand.size))["vsr_oracle_spearman_linear"])


def test_prefix_scores_are_a_registry_the_config_checks():
    from llm_harness.methods.vsr import PREFIX_SCORES, VSRConfig

    assert set(PREFIX_SCORES) == {"p1mp", "sqrt", "uniform", "oracle", "calibrated"}
    assert PREFIX_SCORES["uniform"].draw == "uniform" and PREFIX_SCORES["oracle"].draw == "oracle"
    assert PREFIX_SCORES["calibrated"].rescores and not PREFIX_SCORES["oracle"].rescores
    with pytest.raises(ValueError, match=r"score: unknown VSR prefix score 'p2'"):
        VSRConfig(score="p2")
