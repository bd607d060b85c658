"""The episode runner (llm_harness/envs/episodes.py; the only one: the multiturn collector, vsr eval --env and
the test-bed cards call it) against an episode-at-a-time loop, its starts and its per-turn records."""

from __future__ import annotations

import hashlib

import pytest

from llm_harness.backends.protocol import Sample
from llm_harness.envs import make_env
from llm_harness.envs.episodes import EpisodeStart, prepare_episode, run_episodes, turn_seed
from llm_harness.envs.prompt import Turn, render_agent_prompt
from llm_harness.testbed.tokenizer import build_tokenizer
from llm_harness.trainer.modeling import Codec

ALPHABET = "\n" + "".join(chr(c) for c in range(32, 127)) + "√"
TOK = build_tokenizer(ALPHABET, model_max_length=1024)
CODEC = Codec(TOK)
REPLIES = ("up", "down", "left", "right", "jump", "<action>left</action>")


class StubBackend:
    """Replies are a hash of (prompt ids, seed): independent of which other prompts share the call.
    Records the number of prompts of every ``generate`` call."""

    max_context = 1024

    def __init__(self):
        self.calls: list[int] = []

    def reply(self, ids, seed) -> str:
        h = hashlib.sha256(f"{seed}:{list(ids)}".encode()).digest()
        return REPLIES[h[0] % len(REPLIES)]

    def generate(self, prompt_ids, n, sampling):
        assert n == 1
        self.calls.append(len(prompt_ids))
        out = []
        for ids in prompt_ids:
            toks = list(CODEC.encode(self.reply(ids, sampling.seed))) + [TOK.eos_token_id]
            out.append([Sample(tuple(toks), tuple([-0.5] * len(toks)), "stop")])
        return out


def one_at_a_time(env, start, backend, window, seed):
    """The reference: one episode, one prompt per turn, the same turn seeds as the batched runner."""
    turns, obs = prepare_episode(env, start)
    replies, t = [], 0
    while True:
        prompt = render_agent_prompt(env.instruction, turns, obs, window=window)
        reply = backend.reply(CODEC.encode(prompt), turn_seed(seed, t))
        nxt, _, done, _ = env.step(reply)
        replies.append(reply)
        turns.append(Turn(obs, reply))
        obs, t = nxt, t + 1
        if done:
            return tuple(replies), env.success


@pytest.mark.parametrize("window", [0, 2])
def test_one_generate_call_per_turn_and_equal_to_the_plain_loop(window):
    env = make_env("sokoban")
    starts = [EpisodeStart(s) for s in range(12)] + [EpisodeStart(3, tuple(env.expert_actions(3)[:2])), EpisodeStart(5)]
    backend = StubBackend()
    active_seen = []
    res = run_episodes(lambda: make_env("sokoban"), starts, backend, CODEC, window=window, seed=7,
                       on_turn=lambda t, n: active_seen.append(n))
    lengths = [r.length for r in res]
    assert len(backend.calls) == max(lengths)  # one call per turn
    # each call holds exactly the episodes still running at that turn (finished ones dropped out)
    assert backend.calls == active_seen == [sum(1 for n in lengths if n > t) for t in range(max(lengths))]
    assert any(n < max(lengths) for n in lengths)  # some episodes ended early
    for start, r in zip(starts, res):
        replies, success = one_at_a_time(make_env("sokoban"), start, backend, window, seed=7)
        assert r.actions == replies and r.success == success
        assert r.invalid_actions == sum(1 for a in replies if a == "jump")
        assert all(t.valid == (t.reply != "jump") for t in r.turns)


def test_prefix_is_history_and_spends_budget():
    env = make_env("sokoban")
    expert = env.expert_actions(4)
    start = EpisodeStart(4, tuple(expert[:-1]))
    backend = StubBackend()
    r = run_episodes(lambda: make_env("sokoban"), [start], backend, CODEC, window=None, seed=0)[0]
    assert r.turns[0].prompt.count("\nA:") == len(expert)  # the replayed turns are in the prompt
    assert r.length <= 15 - (len(expert) - 1)
    with pytest.raises(ValueError, match="ended"):
        run_episodes(lambda: make_env("sokoban"), [EpisodeStart(4, tuple(expert))], backend, CODEC, window=0)


def test_prompt_that_does_not_fit_is_refused():
    backend = StubBackend()
    backend.max_context = 300
    with pytest.raises(ValueError, match="does not fit"):
        run_episodes(lambda: make_env("sokoban"), [EpisodeStart(0)], backend, CODEC, window=0)
    with pytest.raises(ValueError, match="starts"):
        run_episodes(lambda: make_env("sokoban"), [], backend, CODEC, window=0)


def test_hf_greedy_batched_equals_one_at_a_time():
    """With the project's HF backend and greedy decoding, batching (and prefix sharing) does not
    change an episode: every prompt's reply depends on that prompt alone."""
    import torch

    from llm_harness.backends import HFBackend, HFBackendConfig
    from llm_harness.testbed.model import TestbedModelConfig, make_model

    torch.manual_seed(0)
    model = make_model(TestbedModelConfig(hidden_size=32, num_hidden_layers=2, intermediate_size=64,
                                          max_position_embeddings=512), TOK, seed=0).eval()
    with torch.no_grad():  # a sharper random head so replies vary with the prompt
        model.lm_head.weight.mul_(30.0)
    backend = HFBackend(model, TOK, config=HFBackendConfig(pad_token_id=TOK.pad_token_id, share_prefix=True))
    starts = [EpisodeStart(s) for s in range(6)]
    batched = run_episodes(lambda: make_env("sokoban"), starts, backend, CODEC, window=1, temperature=0.0, seed=3)
    for s, b in zip(starts, batched):
        single = run_episodes(lambda: make_env("sokoban"), [s], backend, CODEC, window=1, temperature=0.0, seed=3)[0]
        assert single.actions == b.actions and single.success == b.success


def test_a_snapshot_start_equals_the_replayed_prefix_start():
    """The two ways to start mid-episode (replay a prefix; restore a snapshot with its history) give
    the same prompts, turn numbers, snapshots and outcomes."""
    env = make_env("sokoban")
    expert = env.expert_actions(6)
    prefix = tuple(expert[:3])
    turns, _ = prepare_episode(env, EpisodeStart(6, prefix))
    snap_start = EpisodeStart(6, snapshot=env.snapshot(), history=tuple(turns))
    backend = StubBackend()
    for window in (0, 2, 5):
        a, b = (run_episodes(lambda: make_env("sokoban"), [s], backend, CODEC, window=window, seed=11)[0]
                for s in (EpisodeStart(6, prefix), snap_start))
        assert a.history == b.history and len(a.history) == 3
        assert [(t.turn, t.prompt, t.observation, t.snapshot, t.reply) for t in a.turns] == \
               [(t.turn, t.prompt, t.observation, t.snapshot, t.reply) for t in b.turns]
        assert a.turns[0].turn == 3 and a.success == b.success


def test_turn_records_and_bad_starts():
    env = make_env("sokoban")
    backend = StubBackend()
    (r,) = run_episodes(lambda: make_env("sokoban"), [EpisodeStart(2)], backend, CODEC, window=1, seed=5, max_turns=3)
    assert 1 <= r.length <= 3 and [t.turn for t in r.turns] == list(range(r.length))
    replay = make_env("sokoban")
    replay.reset(2)
    for t in r.turns:  # each turn's snapshot is the environment right before it; the reward is the env's
        assert t.snapshot == replay.snapshot() and t.observation == replay.render()
        assert t.prompt_ids == tuple(CODEC.encode(t.prompt))
        _, reward, _, info = replay.step(t.reply)
        assert t.reward == reward and t.valid == info["valid"] and t.penalty == (0.0 if t.valid else 0.1)
    assert r.ret == sum(t.reward for t in r.turns) and r.new_tokens == sum(len(t.token_ids) for t in r.turns)
    env.reset(3)
    with pytest.raises(ValueError, match="start.snapshot: taken in the episode of seed 3"):
        run_episodes(lambda: make_env("sokoban"), [EpisodeStart(4, snapshot=env.snapshot())], backend, CODEC, window=0)
    env.replay(3, env.expert_actions(3))
    with pytest.raises(ValueError, match="has ended in this snapshot"):
        run_episodes(lambda: make_env("sokoban"), [EpisodeStart(3, snapshot=env.snapshot())], backend, CODEC, window=0)
    with pytest.raises(ValueError, match="either a prefix"):
        EpisodeStart(3, ("up",), snapshot=env.snapshot())
    with pytest.raises(ValueError, match="needs the snapshot"):
        EpisodeStart(3, history=(Turn("x", "up"),))


def test_a_reply_with_a_newline_is_shown_on_one_line():
    from llm_harness.envs.episodes import shown_reply

    assert shown_reply("up\nA:down\x07 ") == "up A:down"
    prompt = render_agent_prompt("go", [Turn("#P#", shown_reply("le\nft"))], "#_#", window=1)
    assert prompt.splitlines() == ["go", "O:#P#", "A:le ft", "O:#_#", "A:"]


@pytest.mark.parametrize("name,params", [("sokoban", {}), ("babyai", {"level": "OneRoomS8"})])
def test_verify_episode_snapshots_checks_the_states_of_an_episode_in_one_pass(name, params, monkeypatch):
    """The states of one episode (an invalid turn among them) pass without a single restore; out of order
    they pass by restore; a damaged, ended or other-seed snapshot is refused naming its index and why."""
    from llm_harness.envs.base import _checksum
    from llm_harness.envs.episodes import verify_episode_snapshots

    if name == "babyai":
        pytest.importorskip("minigrid")
    env = make_env(name, **params)
    seed = 4
    env.reset(seed)
    snaps = []
    for word in ["jump", *env.expert_actions(seed)]:
        snaps.append(env.snapshot())
        env.step(word)
    assert env.done
    scratch = make_env(name, **params)
    restores = []
    monkeypatch.setattr(scratch, "restore", lambda s, real=scratch.restore: restores.append(1) or real(s))
    verify_episode_snapshots(scratch, seed, snaps)
    assert restores == []  # one pass: reset once, one step per action
    verify_episode_snapshots(scratch, seed, snaps[::-1])
    assert len(restores) == len(snaps) - 1  # the first of the reversed list is reached by playing on
    damaged = [dict(s) for s in snaps]
    damaged[2]["checksum"] = "0" * 64
    with pytest.raises(ValueError, match=r"^buffer\[2\]: snapshot: checksum mismatch"):
        verify_episode_snapshots(scratch, seed, damaged, "buffer")
    with pytest.raises(ValueError, match=rf"^snapshots\[{len(snaps)}\]: the episode of seed {seed} has ended in this snapshot"):
        verify_episode_snapshots(scratch, seed, [*snaps, env.snapshot()])
    with pytest.raises(ValueError, match=rf"^snapshots\[0\]: start.snapshot: taken in the episode of seed {seed}, not of "
                                         rf"start.seed {seed + 1}"):
        verify_episode_snapshots(scratch, seed + 1, snaps)
    body = {k: v for k, v in snaps[2].items() if k != "checksum"}
    body["history"] = [None, None]  # resealed: the world after the expert's first move, a history without it
    field = "world.player" if name == "sokoban" else "'world.step_count'"  # invalid turns do not count in minigrid
    with pytest.raises(ValueError, match=rf"^snapshots\[1\]: snapshot.*{field}"):
        verify_episode_snapshots(scratch, seed, [snaps[0], {**body, "checksum": _checksum(body)}])
