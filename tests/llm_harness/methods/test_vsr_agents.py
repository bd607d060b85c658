"""VSR over interaction states on real multi-turn episodes: replayed agent
states restore the exact environment and history, loss masks cover exactly the new actions, buffer
insertion / eviction / scoring on multi-turn episodes, GiGPO groups of replayed states, and resume
with the buffer's environment snapshots.

The episodes are real Sokoban episodes played through the collector by a *scripted* backend: the
episode at batch position ``j == 1 (mod G)`` of the first call plays the expert's solution (also from
a restored mid-episode state), every other episode replies an invalid word until its budget runs out -- so each fresh group holds exactly
one genuine success (``p0 = 1/G``) with genuine snapshots, and no success is faked by editing flags.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from llm_harness.backends.protocol import Sample
from llm_harness.methods.vsr import VSRConfig, VSRPlugin
from llm_harness.tasks import get_task
from llm_harness.trainer.config import AgentConfig, AlgoConfig, ModelConfig, RolloutConfig, RunConfig
from llm_harness.trainer.data import Origin, build_batch
from llm_harness.trainer.multiturn import multiturn_groups, turn_prompt
from llm_harness.trainer.step import Step
from trainer_support import check_resume_is_bit_identical, make_trainer
from theory.prefix_scores import variance_hat

G = 3


class ScriptedBackend:
    """Replies the expert's move to every prompt on an expert path, except that in the first call only
    the episodes at positions ``j % G == 1`` do (the others reply an invalid word and never get back on
    the path); every other prompt gets an invalid word."""

    def __init__(self, task, codec, seeds, max_context=2048):
        self.codec, self.max_context = codec, max_context
        self.expert: dict[tuple[int, ...], str] = {}
        for seed in seeds:
            env = task.make_env()
            obs, turns = env.reset(seed), []
            from llm_harness.envs.prompt import Turn

            for word in env.expert_actions(seed):
                self.expert[tuple(codec.encode(turn_prompt(task, env.instruction, turns, obs, codec.tokenizer)))] = word
                turns.append(Turn(obs, word))
                obs = env.step(word)[0]
        self.calls = 0

    def _sample(self, text):
        ids = tuple(self.codec.encode(text)) + (self.codec.tokenizer.eos_token_id,)
        return [Sample(ids, tuple([-0.25] * len(ids)), "stop")]

    def generate(self, prompts, n, sampling):
        out = []
        for j, p in enumerate(prompts):
            p = tuple(p)
            word = self.expert.get(p)
            if self.calls == 0 and j % G != 1:
                word = None  # the other episodes of each group go astray on their first turn
            out.append(self._sample(word or "jump"))
        self.calls += 1
        return out


def _filled(tr, g, **cfg):
    """A VSR plug-in (``VSRConfig(**cfg)``) whose buffer holds the step-0 episodes of group ``g``."""
    v = VSRPlugin(VSRConfig(**cfg), tr.ctx)
    v.after_step(Step(index=0, groups=(g,), kept=(g,), fresh=(g,)), tr.ctx)
    return v


def _trainer(d, window=None, **over):
    task = get_task("env", env="sokoban", n_train=40, window=window)
    return make_trainer(
        str(d), task=task, steps=over.pop("steps", 1),
        model=ModelConfig(random_init=True, alphabet="text", hidden_size=16, num_layers=1, num_heads=2, max_context=2048),
        rollout=RolloutConfig(prompts_per_step=2, group_size=G, max_new_tokens=8, verify_timeout_s=0.0),
        algo=AlgoConfig(collector="multiturn", advantage="gigpo", filter_zero_variance=False), agent=AgentConfig(turn_tokens=6),
        **over,
    )


def _collect(tr, states, step=0):
    backend = ScriptedBackend(tr.task, tr.codec, [tr.task.seed_of(s.problem) for s in states])
    return multiturn_groups(states, step=step, round=0, ctx=dataclasses.replace(tr.ctx, backend=backend))[0]


@pytest.fixture(scope="module")
def played(tmp_path_factory):
    """A trainer and one fresh step's groups with one genuine success each."""
    tr = _trainer(tmp_path_factory.mktemp("vsr_agents"))
    groups = _collect(tr, tr.fresh.draw(2))
    yield tr, groups
    tr.close()


def test_scripted_groups_hold_one_genuine_success(played):
    tr, groups = played
    for g in groups:
        assert g.info["episode_success"].tolist() == [False, True, False]
        expert = tr.task.make_env().expert_actions(tr.task.seed_of(g.start.problem))
        assert np.sum(g.info["episode"] == 1) == len(expert) >= 2


def test_insertion_scores_every_turn_boundary_of_the_successful_episode(played):
    tr, groups = played
    v = VSRPlugin(VSRConfig(rho=0.5, window=5), tr.ctx)
    res = v.after_step(Step(index=0, groups=tuple(groups), kept=tuple(groups), fresh=tuple(groups)), tr.ctx)
    assert res.metrics["vsr_inserted"] == 2.0
    for g in groups:
        t = v.buffer[g.start.problem.id]
        L = int(np.sum(g.info["episode"] == 1))
        np.testing.assert_array_equal(t.positions, np.arange(1, L))
        np.testing.assert_allclose(t.alphas, np.arange(1, L) / L)
        np.testing.assert_allclose(t.scores, variance_hat(np.arange(1, L) / L, 1.0 / G, 1.0))
        assert t.birth == 0 and t.source == "policy" and len(t.states) == L


def test_a_replayed_state_restores_the_exact_environment_and_history(played):
    """Restarting from state i: the restored environment replays the rest of the successful episode
    with bit-identical observations, rewards and end; the first prompt of the restart is token for
    token the original episode's prompt at turn i (whole history, window None); the restarts are one
    episode group of their own whose turns count on from i."""
    tr, groups = played
    g = groups[0]
    v = _filled(tr, g, rho=1.0, window=5)
    rows = np.flatnonzero(g.info["episode"] == 1)
    L = rows.size
    t = v.buffer[g.start.problem.id]
    for k in range(t.positions.size):
        s = v._state(g.start.problem.id, k, 0.0)
        i = int(t.positions[k])
        assert s.origin is Origin.REPLAYED_PREFIX and len(s.history) == i
        assert [h["action"] for h in s.history] == [g.info["action"][r] for r in rows[:i]]
        assert [h["observation"] for h in s.history] == [g.info["anchor"][r] for r in rows[:i]]
        env = tr.task.make_env()
        assert env.restore(s.snapshot) == g.info["anchor"][rows[i]]
        for r in rows[i:]:  # the rest of the original episode, replayed on the restored environment
            assert env.snapshot() == g.info["snapshot"][r]
            obs, reward, done, _ = env.step(g.info["action"][r])
            assert reward == g.info["step_reward"][r] - g.info["penalty"][r]
            assert done == (r == rows[-1])
        assert env.success
    s = v._state(g.start.problem.id, 1, 0.0)  # the state before turn 2
    (rg,) = _collect(tr, [s], step=1)
    assert rg.context(0) == g.context(int(rows[2]))  # same history, same prompt, token for token
    assert rg.info["turn"].tolist()[0] == 2 and set(rg.info["episode"].tolist()) == set(range(G))
    assert rg.info["episode_success"].tolist() == [False, True, False]  # the scripted expert finishes from there
    assert int(np.sum(rg.info["episode"] == 1)) == L - 2


def test_masks_cover_exactly_the_new_actions_of_a_replayed_group(played):
    tr, groups = played
    g = groups[1]
    v = _filled(tr, g, rho=1.0, window=5)
    t = v.buffer[g.start.problem.id]
    s = v._state(g.start.problem.id, t.positions.size - 1, 0.0)  # the last state: one expert move left
    (rg,) = _collect(tr, [s], step=1)
    assert rg.size == len(rg.response_ids) == rg.info["turn"].size  # one row per new turn, none for the history
    assert rg.n_new_tokens == sum(len(r) for r in rg.response_ids)
    from llm_harness.envs.prompt import Turn, render_agent_prompt

    env = tr.task.make_env()
    obs = env.restore(s.snapshot)
    history = [Turn(h["observation"], h["action"]) for h in s.history]
    assert tr.codec.decode(rg.context(0)) == render_agent_prompt(env.instruction, history, obs, window=None)  # history = context
    batch = build_batch([rg.with_advantages(np.ones(rg.size))], tr.codec.pad_token_id)
    for k in range(rg.size):
        ctx_ids, resp = rg.context(k), rg.response_ids[k]
        mask = batch.loss_mask[k].numpy()
        # exactly the reply's tokens are in the loss (labels shifted by one), no context token
        np.testing.assert_array_equal(np.flatnonzero(mask), np.arange(len(ctx_ids) - 1, len(ctx_ids) - 1 + len(resp)))
        np.testing.assert_array_equal(batch.input_ids[k, len(ctx_ids) : len(ctx_ids) + len(resp)].numpy(), resp)


def test_gigpo_on_a_replayed_group_is_its_own_episode_group(played):
    """The G restarts of a replayed state are the episode group (their first turns are one anchor group); their advantages are those of the same turns started at turn 0 (the offset is a label)."""
    from llm_harness.trainer.gigpo import GiGPOParams, gigpo_advantages
    from llm_harness.trainer.multiturn import episode_group_advantages

    tr, groups = played
    g = groups[0]
    v = _filled(tr, g, rho=1.0, window=5)
    (rg,) = _collect(tr, [v._state(g.start.problem.id, 0, 0.0)], step=1)
    info = rg.info
    res = gigpo_advantages(np.zeros(rg.size, dtype=np.int64), info["episode"], info["turn"], info["step_reward"], info["anchor"],
                           GiGPOParams(), penalty=info["penalty"])
    first = info["turn"] == info["turn"].min()
    # the G first turns share one anchor group (joined by the failing episodes' no-op revisits of that observation)
    assert first.sum() == G and len(set(res.step_group[first].tolist())) == 1
    assert res.step_group_size[first][0] == sum(a == info["anchor"][int(np.flatnonzero(first)[0])] for a in info["anchor"])
    shifted = gigpo_advantages(np.zeros(rg.size, dtype=np.int64), info["episode"], info["turn"] - info["turn"].min(),
                               info["step_reward"], info["anchor"], GiGPOParams(), penalty=info["penalty"])
    np.testing.assert_array_equal(res.advantage, shifted.advantage)
    np.testing.assert_array_equal(episode_group_advantages("gigpo", rg, 1e-6, 1, {}), res.advantage)
    # the successful restart's turns are favoured over the failing ones'
    ep = info["episode"]
    assert res.episode_advantage[ep == 1].min() > res.episode_advantage[ep != 1].max()


def test_eviction_replacement_and_what_is_never_inserted(played):
    tr, groups = played
    g0, g1 = groups
    v = VSRPlugin(VSRConfig(rho=0.5, window=2), tr.ctx)
    v.after_step(Step(index=0, groups=(g0,), kept=(g0,), fresh=(g0,)), tr.ctx)
    key = g0.start.problem.id
    # a later success of the same initial state replaces the entry (most recent episode per state)
    later = dataclasses.replace(g0, birth_step=1)
    m = v.after_step(Step(index=1, groups=(later,), kept=(later,), fresh=(later,)), tr.ctx).metrics
    assert v.buffer[key].birth == 1 and m["vsr_buffer_trajectories"] == 1.0
    # usable while step + 1 - birth <= W: kept after step 2, evicted after step 3
    assert v.after_step(Step(index=2), tr.ctx).metrics["vsr_evicted"] == 0.0 and key in v.buffer
    assert v.after_step(Step(index=3), tr.ctx).metrics["vsr_evicted"] == 1.0 and key not in v.buffer
    # a replayed group never inserts, even when it succeeds; neither does an all-fail fresh group
    s = dataclasses.replace(g1.start, origin=Origin.REPLAYED_PREFIX)
    replayed = dataclasses.replace(g1, start=s, birth_step=4)
    fails = dataclasses.replace(g1, birth_step=4, info={**g1.info, "episode_success": np.zeros(G, dtype=bool)})
    m = v.after_step(Step(index=4, groups=(replayed, fails), kept=(replayed, fails), fresh=(replayed, fails)), tr.ctx).metrics
    assert m["vsr_inserted"] == 0.0 and not v.buffer
    # without recency: inserted only before freeze_after, never evicted
    w = VSRPlugin(VSRConfig(rho=0.5, window=1, recency=False, freeze_after=1), tr.ctx)
    w.after_step(Step(index=0, groups=(g0,), kept=(g0,), fresh=(g0,)), tr.ctx)
    late = dataclasses.replace(g1, birth_step=5)
    w.after_step(Step(index=5, groups=(late,), kept=(late,), fresh=(late,)), tr.ctx)
    assert list(w.buffer) == [key] and w.buffer[key].birth == 0


def test_draws_follow_the_score_or_are_uniform(played):
    """Scored draws never pick a zero-score state; with ``score: uniform`` every state is drawn."""
    tr, groups = played
    g = groups[0]
    p = _filled(tr, g, rho=1.0, window=50)
    t = p.buffer[g.start.problem.id]
    t.scores = np.where(np.arange(t.scores.size) == 0, 1.0, 0.0)  # only the first state scores
    u = VSRPlugin(VSRConfig(rho=1.0, window=50, score="uniform"), tr.ctx)
    u.buffer = {g.start.problem.id: dataclasses.replace(t)}
    seen_p, seen_u = set(), set()
    for step in range(1, 30):
        seen_p |= {round(s.meta["vsr_alpha"], 9) for s in p.claim(Step(index=step), 1, tr.ctx).states}
        seen_u |= {round(s.meta["vsr_alpha"], 9) for s in u.claim(Step(index=step), 1, tr.ctx).states}
    assert seen_p == {round(float(t.alphas[0]), 9)}
    assert seen_u == {round(float(a), 9) for a in t.alphas}


def test_resume_with_buffered_environment_snapshots_is_bit_identical(tmp_path):
    """GiGPO + VSR with the buffer holding interaction states (expert cold start, so replayed states
    exist from step 0): stopping after step 2 and resuming from its checkpoint gives the same metrics
    and weights as the uninterrupted run; the checkpoint carries the snapshots."""
    def make(d, **run_kw):
        return _trainer(d, window=1, steps=3, plugins={"vsr": {"rho": 0.5, "window": 5, "cold_start": True,
                                                               "cold_start_problems": 6}},
                        run=RunConfig(run_dir=str(d), checkpoint_every=1, progress=False, **run_kw))

    _, _, rows = check_resume_is_bit_identical(make, tmp_path, stop_after=2, checkpoint_step=2)
    assert all(r["groups_replayed_prefix"] >= 1 for r in rows)
    from llm_harness.trainer.checkpoint import find_resumable

    _, ck, _ = find_resumable(tmp_path / "half" / "checkpoints")
    assert "llm_harness.envs.snapshot/1" in repr(ck)  # the buffer's interaction states travel with the checkpoint


def test_agent_metrics_count_new_actions_and_success_mixing_by_origin(played):
    from llm_harness.trainer.multiturn import agent_group_metrics

    tr, groups = played
    g = groups[0]
    v = _filled(tr, g, rho=1.0, window=5)
    s = v._state(g.start.problem.id, 1, 0.0)
    (rg,) = _collect(tr, [s], step=1)
    all_fail = dataclasses.replace(rg, info={**rg.info, "episode_success": np.zeros(G, dtype=bool)})
    m = agent_group_metrics([*groups, rg, all_fail], [groups[0], rg])
    assert m["gen_new_actions"] == sum(x.size for x in groups) + 2 * rg.size  # the history before a replayed state is not new
    assert m["trained_new_actions"] == groups[0].size + rg.size
    assert m["episodes"] == 4 * G and m["episode_turns_mean"] == m["gen_new_actions"] / (4 * G)
    assert m["episode_success_fresh"] == pytest.approx(1 / G) and m["success_mixed_frac_fresh"] == 1.0
    assert m["episode_success_replayed_prefix"] == pytest.approx(0.5 / G) and m["success_mixed_frac_replayed_prefix"] == 0.5
    c = v.claim(Step(index=1), 4, tr.ctx).metrics
    assert c["vsr_replayed_alpha_p10"] <= c["vsr_replayed_alpha_p50"] <= c["vsr_replayed_alpha_p90"] < 1.0
    assert agent_group_metrics([], []) == {}


# ----------------------------------------------------------------------------- damaged snapshots in a checkpoint


def _tampered_player(snap: dict) -> dict:
    """``snap`` with the player moved to another free cell of the grid and the checksum resealed (a forgery
    that passes the checksum: only the check against seed and history catches it)."""
    import itertools

    from llm_harness.envs.base import _checksum
    from llm_harness.envs.sokoban import Room, parse_room, render_room

    room = parse_room(snap["world"]["grid"])
    free = next(p for p in itertools.product(range(room.size), repeat=2)
                if p not in room.walls and p not in room.boxes and p not in room.targets and p != room.player)
    body = {k: v for k, v in snap.items() if k != "checksum"}
    body["world"] = {"grid": render_room(Room(room.size, room.walls, room.targets, room.boxes, free))}
    return {**body, "checksum": _checksum(body)}


def test_a_damaged_buffered_snapshot_is_refused_when_the_buffer_loads(played):
    """Loading a buffer whose interaction state holds a damaged snapshot raises the checkpoint module's
    CorruptCheckpointError naming the entry, the state and why -- at load, not when the state is drawn --
    and leaves the buffer as it was; the intact state loads and restores bit-identically."""
    import copy

    from llm_harness.trainer.checkpoint import CorruptCheckpointError, check_plain

    tr, groups = played
    v = _filled(tr, groups[0])
    saved = v.state_dict()
    check_plain(saved, "vsr")
    key = saved["buffer"][0]["key"]
    intact = VSRPlugin(VSRConfig(), tr.ctx)
    intact.load_state_dict(copy.deepcopy(saved))
    env = tr.task.make_env()
    for s, t in zip(intact.buffer[key].states, v.buffer[key].states):
        env.restore(s["snapshot"])
        assert env.snapshot() == t["snapshot"]

    cases = {
        "edited": (lambda s: {**s, "world": {"grid": s["world"]["grid"].replace("_", "#", 1)}},
                   r"snapshot: checksum mismatch -- the snapshot is corrupted or was edited"),
        "resealed": (_tampered_player, r"snapshot.world.player: the grid has player \(\d, \d\), but re-playing"),
    }
    for name, (damage, why) in cases.items():
        bad = copy.deepcopy(saved)
        bad["buffer"][0]["states"][1]["snapshot"] = damage(bad["buffer"][0]["states"][1]["snapshot"])
        before = {k: id(t) for k, t in intact.buffer.items()}
        with pytest.raises(CorruptCheckpointError, match=rf"checkpoint: a damaged replay-buffer state: vsr.buffer\[0\] "
                                                         rf"\(problem '{key}'\).states\[1\]: {why}"):
            intact.load_state_dict(bad)
        assert {k: id(t) for k, t in intact.buffer.items()} == before, name  # the buffer is left as it was

    bad = copy.deepcopy(saved)
    bad["buffer"][0]["positions"] = np.asarray(bad["buffer"][0]["positions"]) + 100  # states it does not hold
    with pytest.raises(CorruptCheckpointError, match=r"vsr.buffer\[0\] \(problem .*\).positions: index states 0\.\."):
        intact.load_state_dict(bad)


def test_a_checkpoint_with_a_damaged_buffered_snapshot_falls_back_at_resume(tmp_path):
    """A run whose newest checkpoint (step 2) was written with a damaged snapshot in VSR's buffer: the
    checkpoint's files are intact (their checksums were taken over the damaged state), so the file-level
    checks pass; loading the plug-in state refuses it with CorruptCheckpointError before any step runs.
    ``Trainer.resume`` loads the states inside ``find_resumable``'s fallback, so the resume warns, naming the
    state, and continues from the intact step-1 checkpoint."""
    import copy

    from llm_harness.trainer.checkpoint import find_resumable

    def make(d, **run_kw):
        return _trainer(d, window=1, steps=2, plugins={"vsr": {"rho": 0.5, "window": 5, "cold_start": True,
                                                               "cold_start_problems": 2}},
                        run=RunConfig(run_dir=str(d), checkpoint_every=1, progress=False, **run_kw))

    tr = make(tmp_path)
    vsr = tr.plugins[0]
    clean = vsr.state_dict

    def damaged_at_step_2():
        out = clean()
        if tr.step == 2:
            out = copy.deepcopy(out)
            snap = out["buffer"][0]["states"][1]["snapshot"]
            snap["world"]["grid"] = snap["world"]["grid"].replace("_", "#", 1)
        return out

    vsr.state_dict = damaged_at_step_2
    tr.fit()
    tr.close()
    path, _, skipped = find_resumable(tmp_path / "checkpoints")
    assert path.name == "step_000002" and not skipped  # the files are intact

    resumed = make(tmp_path, resume=True)
    try:
        with pytest.warns(UserWarning, match=r"skipped a damaged checkpoint \(step_000002: checkpoint: a damaged "
                                             r"replay-buffer state: vsr.buffer\[0\] \(problem '.*'\).states\[1\]: "
                                             r"snapshot: checksum mismatch.*resuming from step_000001"):
            assert resumed.resume() == 1
        assert resumed.plugins[0].buffer
    finally:
        resumed.close()
