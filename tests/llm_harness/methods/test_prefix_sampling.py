"""Prefix Sampling plug-in: triage of scripted groups, the cut and its line snapping, the adaptive controller on
scripted pass rates (EMA by hand, moves of exactly one step toward 0.5, the cool-down, the dead zone), the
next-step claim, agent episodes, composition with DAPO and ExTra, and bit-identical resume."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from llm_harness.methods.prefix_sampling import (
    PrefixSamplingConfig,
    PrefixSamplingPlugin,
    RatioController,
    cut_length,
    line_ends,
    triage,
)
from llm_harness.trainer.config import AlgoConfig, RolloutConfig, RunConfig
from llm_harness.trainer.data import Origin, RolloutGroup, StartState
from llm_harness.trainer.plugins import StepRecorder
from llm_harness.trainer.step import Step
from trainer_support import assert_fresh_stream_is_grpos, ToyTask, check_resume_is_bit_identical, fake_group, make_trainer


@pytest.fixture(scope="module")
def tr(tmp_path_factory):
    t = make_trainer(str(tmp_path_factory.mktemp("ps")),
                     rollout=RolloutConfig(prompts_per_step=4, group_size=4, max_new_tokens=32, verify_timeout_s=0.0))
    yield t
    t.close()


def _ps(tr, **params) -> PrefixSamplingPlugin:
    return PrefixSamplingPlugin(PrefixSamplingConfig(**params), tr.ctx)


def _step(index, groups):
    groups = tuple(groups)
    return Step(index=index, groups=groups, kept=groups, fresh=groups)


def _resp(tr, text):
    return tuple(tr.codec.encode(text)) + (tr.codec.tokenizer.eos_token_id,)


# ------------------------------------------------------------------------------ pure pieces


@pytest.mark.parametrize("k, n, want", [(0, 10, None), (10, 10, None), (1, 10, "hard"), (2, 10, "hard"), (3, 10, None),
                                        (5, 10, None), (7, 10, None), (8, 10, "easy"), (9, 10, "easy"), (1, 4, "hard"),
                                        (3, 4, "easy"), (2, 4, None)])
def test_triage_buckets(k, n, want):
    assert triage(k, n, 0.3, 0.7) == want  # 0.3 and 0.7 themselves are trained as is


def test_cut_length_floor_budget_and_line_snapping():
    assert cut_length(8, 0.75, 100) == 6
    assert cut_length(10, 0.55, 100) == 5
    assert cut_length(10, 0.3, 100) == 3  # 0.3 · 10 = 3.0000000000000004 in floating point: still 3
    assert cut_length(8, 0.75, 100, line_ends=[2, 5, 7]) == 5  # back to the last line end at or before 6
    assert cut_length(8, 0.75, 100, line_ends=[6]) == 6  # a line ending exactly at the cut keeps it
    assert cut_length(8, 0.75, 100, line_ends=[7]) == 6  # no line end before the cut: unchanged
    assert cut_length(20, 0.75, 8) == 7  # the prefix leaves at least one token of the response budget
    assert cut_length(1, 0.75, 100) == 0  # nothing to keep
    assert cut_length(3, 0.25, 100) == 0


def test_line_ends_are_the_tokens_that_contain_a_break(tr):
    ids = tr.codec.encode("12\n3\n45")
    assert line_ends(tr.codec, ids) == [3, 5]


def test_controller_moves_exactly_one_step_up_then_cools_down():
    """Pass rate 1.0 on the hard bucket: EMA by hand, a move of +0.05 once it leaves the dead zone, then five
    steps without a move, then the next move."""
    cfg = PrefixSamplingConfig(controller="adaptive")
    c = RatioController(cfg.start_hard, cfg.ema_start)
    ema, ratio, moves = 0.5, 0.45, []
    for t in range(14):
        m = c.observe(1.0, cfg)
        ema = 0.95 * ema + 0.05 * 1.0
        assert c.ema == pytest.approx(ema, abs=1e-15)
        moves.append(m)
        ratio += 0.05 * m
        assert c.ratio == pytest.approx(ratio, abs=1e-12)
    # EMA 0.525 (inside 0.5 ± 0.03), 0.54875 (outside: move at t = 1), cool-down t = 2..6, move at t = 7, ...
    assert moves == [0, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1]
    assert c.ratio == pytest.approx(0.6, abs=1e-12)


def test_controller_moves_down_below_the_dead_zone_and_clips():
    cfg = PrefixSamplingConfig(controller="adaptive", cooldown=0)
    c = RatioController(0.15, 0.5)
    moves = [c.observe(0.0, cfg) for _ in range(6)]
    assert moves[0] == 0 and c.ema == pytest.approx(0.5 * 0.95**6)
    assert c.ratio == pytest.approx(0.05)  # 0.15 → 0.10 → 0.05, then held at the clip (no move counted)
    assert moves[1:] == [-1, -1, 0, 0, 0]


def test_inside_the_dead_zone_nothing_moves():
    cfg = PrefixSamplingConfig(controller="adaptive")
    for p in (0.47, 0.5, 0.53, 0.52, 0.48):
        c = RatioController(0.55, 0.5)
        assert [c.observe(p, cfg) for _ in range(200)] == [0] * 200  # the EMA tends to p, never beyond the zone
        assert c.ratio == 0.55


def test_fixed_controller_tracks_the_ema_and_never_moves():
    cfg = PrefixSamplingConfig()
    c = RatioController(cfg.start_ratio("hard"), 0.5)
    assert c.ratio == 0.25 and [c.observe(1.0, cfg) for _ in range(20)] == [0] * 20
    assert c.ratio == 0.25 and c.ema == pytest.approx(1 - 0.5 * 0.95**20)


# ------------------------------------------------------------------------------ triage on a scripted step


def _scripted_step(tr, index=0):
    """Groups of 10 with pass rates 0, 1, 0.2 (hard), 0.5, 0.3 (edge), 0.8 (easy), 0.7 (edge), 0.1 (hard); every
    successful row of a hard group and every failed row of an easy group has 12 tokens before its stop token, with
    line breaks after tokens 3, 6 and 9."""
    probs = tr.fresh.problems[:8]
    ks = [0, 10, 2, 5, 3, 8, 7, 1]
    groups = []
    for j, (p, k) in enumerate(zip(probs, ks)):
        rows = [_resp(tr, f"{j}{i}\n{i}{i}\n{i}{j}\n{i}{i}") for i in range(10)]
        groups.append(fake_group(p, tr.fresh.encode(p), rows, [1.0] * k + [0.0] * (10 - k), index))
    return groups


def test_triage_keeps_one_trajectory_of_each_hard_and_easy_group_cut_at_a_line_break(tr):
    groups = _scripted_step(tr)
    assert all(len(r) == 12 for g in groups for r in g.response_ids)  # 11 characters + the stop token
    ps = _ps(tr, ratio_hard=0.25, ratio_easy=0.55)
    res = ps.after_step(_step(0, groups), tr.ctx)
    assert res.metrics["ps_kept_hard"] == 2 and res.metrics["ps_kept_easy"] == 1 and res.metrics["ps_uncut"] == 0
    assert res.metrics["ps_solve_partial"] == 6  # every group but 0/10 and 10/10
    by_problem = {s.problem.id: s for s in ps.pending}
    assert set(by_problem) == {groups[2].start.problem.id, groups[5].start.problem.id, groups[7].start.problem.id}
    for j, bucket in ((2, "hard"), (7, "hard"), (5, "easy")):
        g, s = groups[j], by_problem[groups[j].start.problem.id]
        # hard: ⌊0.75 · 11⌋ = 8 → back to the line end after token 6; easy: ⌊0.55 · 11⌋ = 6, a line end itself
        want = 6
        assert s.origin is Origin.REPLAYED_PREFIX and s.prompt_ids == g.start.prompt_ids and len(s.prefix_ids) == want
        src = [i for i, r in enumerate(g.response_ids) if r[:want] == s.prefix_ids]
        assert src and all((g.rewards[i] > 0) == (bucket == "hard") for i in src)  # a success for hard, a failure for easy
        assert s.meta == {"ps_bucket": bucket, "ps_ratio": 0.25 if bucket == "hard" else 0.55, "ps_birth": 0,
                          "ps_source_pass_rate": float(np.mean(g.rewards > 0)), "ps_cut": want, "ps_length": 11}
        assert tr.codec.decode(s.prefix_ids).endswith("\n")


def test_without_snapping_the_cut_is_the_floor(tr):
    ps = _ps(tr, ratio_hard=0.25, snap_to_line=False, hard_only=True)
    ps.after_step(_step(0, _scripted_step(tr)), tr.ctx)
    assert sorted(len(s.prefix_ids) for s in ps.pending) == [8, 8]  # ⌊0.75 · 11⌋; no easy task with hard_only
    assert all(s.meta["ps_bucket"] == "hard" for s in ps.pending)


def test_the_pick_is_uniform_over_qualifying_rows_and_seeded(tr):
    """Different steps pick different successful rows (seeded by step); the same step picks the same row."""
    g = _scripted_step(tr)[7:8]  # one success: always row 0
    picks = set()
    for t in range(12):
        groups = _scripted_step(tr, index=t)[2:3]  # two successes (rows 0, 1)
        ps = _ps(tr)
        ps.after_step(_step(t, groups), tr.ctx)
        picks.add(ps.pending[0].prefix_ids)
        again = _ps(tr)
        again.after_step(_step(t, groups), tr.ctx)
        assert again.pending[0].prefix_ids == ps.pending[0].prefix_ids
    assert len(picks) == 2
    ps = _ps(tr)
    ps.after_step(_step(0, g), tr.ctx)
    assert ps.pending[0].prefix_ids == g[0].response_ids[0][: len(ps.pending[0].prefix_ids)]


def test_only_this_steps_bare_fresh_groups_are_triaged(tr):
    """Prefix tasks never spawn prefix tasks (depth 1); groups born earlier and other origins are skipped."""
    g = _scripted_step(tr, index=1)[2]
    old = _scripted_step(tr, index=0)[7]
    prefixed = RolloutGroup(StartState(g.start.prompt_ids, g.start.problem, (3, 4), Origin.REPLAYED_PREFIX,
                                       meta={"ps_bucket": "hard"}), g.response_ids, g.behaviour_logprobs, g.rewards, 1,
                            finish_reasons=g.finish_reasons)
    guided = RolloutGroup(StartState(g.start.prompt_ids, g.start.problem, (3, 4), Origin.GUIDED), g.response_ids,
                          g.behaviour_logprobs, g.rewards, 1, finish_reasons=g.finish_reasons)
    ps = _ps(tr)
    res = ps.after_step(_step(1, [prefixed, guided, old]), tr.ctx)
    assert ps.pending == [] and res.metrics["ps_kept_hard"] == 0
    assert res.metrics["ps_pass_rate_hard"] == 0.2  # the prefix group fed the hard bucket's EMA
    assert res.metrics["ps_ema_hard"] == pytest.approx(0.95 * 0.5 + 0.05 * 0.2)


def test_prefixes_count_against_the_response_budget(tr):
    """With a budget of 8 tokens a prefix keeps at most 7, so the continuation has one."""
    ctx = replace(tr.ctx, config=replace(tr.cfg, rollout=replace(tr.cfg.rollout, max_new_tokens=8)))
    ps = PrefixSamplingPlugin(PrefixSamplingConfig(ratio_hard=0.05, snap_to_line=False), ctx)
    ps.after_step(_step(0, _scripted_step(tr)[2:3]), ctx)
    assert len(ps.pending[0].prefix_ids) == 7


def test_claim_takes_at_most_max_share_of_the_open_slots_and_drops_the_rest(tr):
    ps = _ps(tr)
    ps.after_step(_step(0, _scripted_step(tr)), tr.ctx)
    pending = list(ps.pending)
    assert len(pending) == 3
    c = ps.claim(Step(index=1), 4, tr.ctx)  # ⌊0.5 · 4⌋ = 2
    assert len(c.states) == 2 and all(s in pending for s in c.states)
    assert c.metrics["ps_dropped"] == 1
    assert c.metrics["ps_claimed_hard"] + c.metrics["ps_claimed_easy"] == 2
    assert ps.pending == [] and ps.claim(Step(index=2), 4, tr.ctx).states == ()  # one step only
    ps.after_step(_step(2, _scripted_step(tr, index=2)), tr.ctx)
    assert len(ps.claim(Step(index=3), 8, tr.ctx).states) == 3


def test_the_controller_moves_the_cut_toward_half(tr):
    """Prefix tasks of the hard bucket that always pass raise ratio_hard (a shorter successful prefix); easy-bucket
    tasks that always pass raise ratio_easy (a longer failing prefix): both lower the pass rate."""
    ps = _ps(tr, controller="adaptive", cooldown=0, snap_to_line=False)
    g = _scripted_step(tr)
    before = {}
    ps.after_step(_step(0, g), tr.ctx)
    for s in ps.pending:
        before[s.meta["ps_bucket"]] = len(s.prefix_ids)
    hard, easy = ps.pending[0], next(s for s in ps.pending if s.meta["ps_bucket"] == "easy")
    for t in range(1, 4):  # prefix groups that all succeed
        grps = [RolloutGroup(s, [(5, 1)] * 4, [np.zeros(2)] * 4, np.ones(4), t, finish_reasons=["stop"] * 4) for s in (hard, easy)]
        ps.after_step(_step(t, grps), tr.ctx)
    # EMA 0.525 (no move), 0.54875 (+0.05), 0.5713 (+0.05): hard 0.45 → 0.55, easy 0.55 → 0.65
    assert ps.ctrl["hard"].ratio == pytest.approx(0.55) and ps.ctrl["easy"].ratio == pytest.approx(0.65)
    ps.after_step(_step(9, _scripted_step(tr, index=9)), tr.ctx)
    after = {s.meta["ps_bucket"]: len(s.prefix_ids) for s in ps.pending}
    assert (before["hard"], after["hard"]) == (6, 4)  # successful prefix ⌊0.55 · 11⌋ → ⌊0.45 · 11⌋: shorter
    assert (before["easy"], after["easy"]) == (6, 7)  # failing prefix ⌊0.55 · 11⌋ → ⌊0.65 · 11⌋: longer


# ------------------------------------------------------------------------------ agents


def _episode_group(successes, turns, step=0):
    """A hand-built multi-turn group: episode ``e`` has ``turns[e]`` rows; row contexts, anchors, actions and
    snapshots are labelled by (episode, turn)."""
    from llm_harness.tasks import Problem

    prob = Problem(id="env/0", prompt="p", answer="")
    rows = [(e, k) for e in range(len(turns)) for k in range(turns[e])]
    info = {"episode": np.array([e for e, _ in rows]), "turn": np.array([k for _, k in rows]),
            "anchor": [f"obs{e}.{k}" for e, k in rows], "action": [f"act{e}.{k}" for e, k in rows],
            "snapshot": [{"label": f"{e}.{k}"} for e, k in rows], "episode_success": np.array(successes, dtype=bool)}
    return RolloutGroup(StartState((7, 8), prob), [(5, 1)] * len(rows), [np.zeros(2)] * len(rows),
                        np.array([float(successes[e]) for e, _ in rows]), step, finish_reasons=["stop"] * len(rows),
                        info=info, contexts=[(7, 8, 10 + e, k) for e, k in rows])


def test_agent_episodes_are_cut_in_turns_and_restored_from_their_snapshot(tr):
    hard = _episode_group([True, False, False, False], [4, 2, 2, 2])  # 1/4: keep episode 0
    easy = _episode_group([True, False, True, True], [2, 3, 2, 2], step=1)  # 3/4: keep episode 1
    ps = _ps(tr, ratio_hard=0.25, ratio_easy=0.55)
    ps.after_step(_step(0, [hard]), tr.ctx)
    (s,) = ps.pending
    assert s.origin is Origin.REPLAYED_PREFIX and s.prefix_ids == ()
    assert s.history == tuple({"observation": f"obs0.{k}", "action": f"act0.{k}"} for k in range(3))  # ⌊0.75 · 4⌋ turns
    assert s.snapshot == {"label": "0.3"} and s.context_ids == (7, 8, 10, 3)
    assert s.meta["ps_cut"] == 3 and s.meta["ps_length"] == 4 and s.meta["ps_bucket"] == "hard"
    ps.after_step(_step(1, [easy]), tr.ctx)
    (s,) = ps.pending
    assert s.history == ({"observation": "obs1.0", "action": "act1.0"},) and s.snapshot == {"label": "1.1"}  # ⌊0.55 · 3⌋
    one_turn = _episode_group([True, False, False, False], [1, 2, 2, 2], step=2)
    ps.after_step(_step(2, [one_turn]), tr.ctx)
    assert ps.pending == []  # a one-turn success has no state inside it


# ------------------------------------------------------------------------------ in the trainer


@pytest.mark.parametrize("other", [{"dapo": {}}, {"extra": {"warmup_steps": 0, "embedder": "ngram4"}}])
def test_composes_with_dapo_and_extra(tmp_path, other):
    spec = {"prefix_sampling": {"controller": "adaptive"}, **other}
    rec = StepRecorder()
    t = make_trainer(str(tmp_path), task=ToyTask(good="01234"), extra_plugins=[rec], steps=2, plugins=spec,
                     algo=AlgoConfig(max_gen_rounds=2))
    rows = t.fit()
    t.close()
    assert_fresh_stream_is_grpos(rec, t)
    assert len(rows) == 2 and rows[1]["ps_claimed_hard"] + rows[1]["ps_claimed_easy"] > 0
    assert rows[1]["groups_replayed_prefix"] == rows[1]["ps_claimed_hard"] + rows[1]["ps_claimed_easy"]
    assert all(r["slots_fresh"] + r.get("slots_prefix_sampling", 0) + r.get("slots_extra", 0) == 4 for r in rows)


def test_resume_with_prefix_sampling_is_bit_identical(tmp_path):
    def make(d, **run_kw):
        return make_trainer(str(d), task=ToyTask(good="01234"), steps=6, plugins={"prefix_sampling": {"controller": "adaptive"}},
                            run=RunConfig(run_dir=str(d), checkpoint_every=3, progress=False, **run_kw))

    full, resumed, rows = check_resume_is_bit_identical(make, tmp_path, stop_after=4, checkpoint_step=3)
    assert sum(r["ps_claimed_hard"] + r["ps_claimed_easy"] for r in rows[3:]) > 0  # prefix tasks after the resume point
    assert full.plugins[0].state_dict()["controller"] == resumed.plugins[0].state_dict()["controller"]


def test_agent_prefix_state_restores_the_episode_exactly(tmp_path):
    """On real Sokoban episodes (the scripted backend of the VSR agent tests: one expert episode per group of 3),
    the hard group's successful episode is cut in turns; restarting from the prefix state gives, token for token,
    the original episode's prompt at the cut, and the scripted expert finishes from the restored environment."""
    from test_vsr_agents import G, _collect, _trainer

    t = _trainer(tmp_path)
    try:
        groups = _collect(t, t.fresh.draw(2))
        ps = PrefixSamplingPlugin(PrefixSamplingConfig(low=0.4, ratio_hard=0.5), t.ctx)  # 1/3 < 0.4: hard
        ps.after_step(_step(0, groups), t.ctx)
        assert len(ps.pending) == 2
        for g, s in zip(groups, ps.pending):
            rows = np.flatnonzero(g.info["episode"] == 1)  # the expert episode
            c = int(math.floor(0.5 * rows.size))
            assert s.meta["ps_cut"] == c >= 1 and len(s.history) == c and s.snapshot == g.info["snapshot"][int(rows[c])]
            (rg,) = _collect(t, [s], step=1)
            assert rg.context(0) == g.context(int(rows[c]))
            assert rg.info["turn"].tolist()[0] == c and rg.info["episode_success"].tolist() == [False, True, False]
            assert int(np.sum(rg.info["episode"] == 1)) == rows.size - c and len(set(rg.info["episode"].tolist())) == G
    finally:
        t.close()
