"""The environment protocol on every registered environment: exact restore by snapshot and by
re-execution, plain-data snapshots, refusal of corrupted snapshots, invalid actions, bad input."""

from __future__ import annotations

import copy
import json
import os
import random
import subprocess
import sys

import pytest

from llm_harness.envs import ENVS, SNAPSHOT_FORMAT, make_env, parse_action, seed_range
from llm_harness.envs.base import canonical_json

try:
    import minigrid  # noqa: F401

    HAS_MINIGRID = True
except ImportError:
    HAS_MINIGRID = False
needs_minigrid = pytest.mark.skipif(not HAS_MINIGRID, reason="minigrid is not installed (pip install 'vsr-toolkit[agents]')")

#: (name, params) of every environment configuration under test
CASES = [
    pytest.param("sokoban", {}, id="sokoban"),
    pytest.param("sokoban", {"reward": "binary", "max_steps": 10}, id="sokoban-binary"),
    pytest.param("babyai", {"level": "OneRoomS8"}, id="babyai-OneRoomS8", marks=needs_minigrid),
    pytest.param("babyai", {"level": "SynthLoc", "max_steps": 40}, id="babyai-SynthLoc", marks=needs_minigrid),
    pytest.param("babyai", {"level": "MiniBoss", "max_steps": 40}, id="babyai-MiniBoss", marks=needs_minigrid),
]


def _random_texts(env, rng: random.Random, n: int) -> list[str]:
    """Mostly legal words in assorted formats, some invalid replies."""
    out = []
    for _ in range(n):
        w = rng.choice(env.action_words)
        out.append(rng.choice([w, w.upper(), f"<think>hm</think><action> {w} </action>", "jump", "<action>"]))
    return out


def _play(env, actions):
    """Observations, rewards, dones and infos of ``actions`` until the episode ends."""
    trace = []
    for a in actions:
        if env.done:
            break
        trace.append(env.step(a))
    return trace


def test_every_registered_environment_is_covered():
    assert set(ENVS) == {"sokoban", "babyai"}


@pytest.mark.parametrize("name,params", CASES)
def test_snapshot_restore_and_replay_are_bit_identical(name, params):
    env = make_env(name, **params)
    rng = random.Random(7)
    for seed in (0, 5):
        env.reset(seed)
        k = rng.randrange(1, 8)
        prefix = _random_texts(env, rng, k)
        _play(env, prefix)
        if env.done:
            continue
        snap = env.snapshot()
        obs_at = env.render()
        future = _random_texts(env, rng, 25)

        restored = make_env(name, **params)
        assert restored.restore(json.loads(json.dumps(snap))) == obs_at  # through JSON, as a checkpoint would
        replayed = make_env(name, **params)
        assert replayed.replay(seed, env.history) == obs_at
        for other in (restored, replayed):
            assert other.snapshot() == snap
            assert other.instruction == env.instruction

        expected = _play(env, future)
        assert _play(restored, future) == expected
        assert _play(replayed, future) == expected
        assert restored.snapshot() == replayed.snapshot() == env.snapshot()

        # restore also rewinds an instance that has moved on
        assert env.restore(snap) == obs_at and _play(env, future) == expected


@pytest.mark.parametrize("name,params", CASES)
def test_reset_is_a_function_of_the_seed(name, params):
    a, b = make_env(name, **params), make_env(name, **params)
    assert a.reset(3) == b.reset(3) and a.snapshot() == b.snapshot()
    a.reset(4)
    assert a.reset(3) == b.render()  # no state leaks from the previous episode


def test_reset_does_not_depend_on_the_process():
    """Same snapshots of seed 11 in a process with another hash seed (no set/dict-order luck)."""
    names = ["sokoban"] + (["babyai"] if HAS_MINIGRID else [])
    code = (
        "import json; from llm_harness.envs import make_env\n"
        f"out = {{}}\nfor n in {names!r}:\n    e = make_env(n); e.reset(11); out[n] = e.snapshot()['checksum']\n"
        "print(json.dumps(out))"
    )
    env_vars = {**os.environ, "PYTHONHASHSEED": "12345", "PYTHONPATH": os.pathsep.join(sys.path)}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env_vars, timeout=120, check=True)
    theirs = json.loads(res.stdout.strip().splitlines()[-1])
    for n in names:
        e = make_env(n)
        e.reset(11)
        assert theirs[n] == e.snapshot()["checksum"], n


@pytest.mark.parametrize("name,params", CASES)
def test_snapshot_is_plain_json_data(name, params):
    env = make_env(name, **params)
    env.reset(2)
    env.step(env.action_words[0])
    env.step("not an action")
    snap = env.snapshot()
    assert snap["format"] == SNAPSHOT_FORMAT and snap["env"] == name
    assert json.loads(json.dumps(snap)) == snap
    canonical_json(snap)  # raises on anything that is not plain data
    assert snap["history"] == [env.action_words[0], None]


@pytest.mark.parametrize("name,params", CASES)
def test_corrupted_snapshots_are_refused(name, params):
    env = make_env(name, **params)
    env.reset(1)
    env.step(env.action_words[-1])
    snap = env.snapshot()
    fresh = make_env(name, **params)

    edited = copy.deepcopy(snap)
    edited["history"].append(env.action_words[0])
    with pytest.raises(ValueError, match="checksum mismatch"):
        fresh.restore(edited)
    flipped = copy.deepcopy(snap)
    flipped["checksum"] = ("0" if snap["checksum"][0] != "0" else "1") + snap["checksum"][1:]
    with pytest.raises(ValueError, match="checksum mismatch"):
        fresh.restore(flipped)
    with pytest.raises(ValueError, match="missing keys"):
        fresh.restore({k: v for k, v in snap.items() if k != "world"})
    with pytest.raises(ValueError, match="must be a mapping"):
        fresh.restore("snapshot")
    with pytest.raises(ValueError, match="corrupted"):
        fresh.restore({**snap, "world": {"grid": object()}})
    other = next(n for n in ENVS if n != name)
    foreign = _resealed({**snap, "env": other})
    with pytest.raises(ValueError, match="taken by environment"):
        fresh.restore(foreign)
    with pytest.raises(ValueError, match="params"):
        make_env(name, **{**params, "invalid_penalty": 0.5}).restore(snap)
    # a failed restore leaves the environment usable
    assert fresh.restore(snap) == env.render()


def _resealed(payload: dict) -> dict:
    """A snapshot with a valid checksum over edited content (a forged or version-skewed one)."""
    from llm_harness.envs.base import _checksum

    body = {k: v for k, v in payload.items() if k != "checksum"}
    return {**body, "checksum": _checksum(body)}


@pytest.mark.parametrize("name,params", CASES)
def test_consistently_forged_world_is_refused(name, params):
    env = make_env(name, **params)
    env.reset(1)
    snap = env.snapshot()
    forged = _resealed({**snap, "success": True})
    with pytest.raises(ValueError, match="snapshot"):
        make_env(name, **params).restore(forged)


@pytest.mark.parametrize("name,params", CASES)
def test_invalid_actions_are_penalised_no_ops(name, params):
    env = make_env(name, **params)
    obs = env.reset(4)
    before = env.snapshot()["world"]
    budget = env.max_steps
    noop = env._noop_reward()
    for i, text in enumerate(["", "dance", None, "<action>up</action><action>up</action>", "<action>left", 17], start=1):
        obs2, reward, done, info = env.step(text)
        assert obs2 == obs and env.snapshot()["world"] == before
        assert reward == pytest.approx(noop - 0.1)
        assert info["valid"] is False and info["action"] is None and info["invalid_actions"] == i == env.invalid_actions
        assert info["steps"] == i and not info["success"]
        if done:  # the invalid turns used up a tiny budget
            assert budget <= i and info["truncated"]
            break


def test_invalid_turns_spend_the_budget():
    env = make_env("sokoban", max_steps=3, invalid_penalty=0.25)
    env.reset(0)
    results = [env.step("nope") for _ in range(3)]
    assert [r[2] for r in results] == [False, False, True]
    assert results[-1][3]["truncated"] and results[-1][1] == pytest.approx(-0.1 - 0.25)
    with pytest.raises(RuntimeError, match="episode has ended"):
        env.step("up")


@pytest.mark.parametrize("name,params", CASES)
def test_expert_succeeds_through_the_text_interface(name, params):
    if name == "babyai":  # the bot needs the level's own budget on some seeds (tests/.../test_env_babyai.py)
        params = {k: v for k, v in params.items() if k != "max_steps"}
    env = make_env(name, **params)
    for seed in (0, 1, 2):
        plan = env.expert_actions(seed)
        env.reset(seed)
        for i, word in enumerate(plan):
            obs, reward, done, info = env.step(f"<action>{word}</action>")
            assert done == (i == len(plan) - 1)
        assert info["success"] and env.success and env.invalid_actions == 0


def test_action_format():
    words = ("up", "down", "left", "right")
    assert parse_action("up", words) == "up"
    assert parse_action("  LEFT\n", words) == "left"
    assert parse_action("<think>the box is left</think>\n<action>Left</action>", words) == "left"
    assert parse_action("<ACTION> down </ACTION> because", words) == "down"
    for bad in ("", "go up", "up.", "<action>up</action><action>down</action>", "<action>up", "up</action>",
                "<action>jump</action>", "<action></action>", None, 3, "still"):
        assert parse_action(bad, words) is None, bad


def test_bad_input_names_the_problem():
    with pytest.raises(ValueError, match=r"env: unknown environment 'chess'; registered: \['babyai', 'sokoban'\]"):
        make_env("chess")
    with pytest.raises(ValueError, match="unknown parameter"):
        make_env("sokoban", levle="x")
    with pytest.raises(ValueError, match="max_steps: the action budget must be >= 1 turn, got 0"):
        make_env("sokoban", max_steps=0)
    with pytest.raises(ValueError, match="invalid_penalty"):
        make_env("sokoban", invalid_penalty=-1.0)
    with pytest.raises(ValueError, match="seed range is empty"):
        seed_range(0, 0)
    assert tuple(seed_range(5, 3)) == (5, 6, 7)
    assert len(seed_range(0, 10**12)) == 10**12  # lazy: nothing materialised
    env = make_env("sokoban")
    with pytest.raises(ValueError, match="seed: must be >= 0, got -1"):
        env.reset(-1)
    with pytest.raises(RuntimeError, match="call reset"):
        env.step("up")
    env.reset(0)
    with pytest.raises(ValueError, match="ended after"):
        env.replay(0, env.expert_actions(0) + ["up"])
