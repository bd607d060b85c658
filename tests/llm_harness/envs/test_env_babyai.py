"""BabyAI through minigrid: the paper's levels, a faithful text view, binary success, the bot as
expert, exact restore by re-execution (skipped cleanly without minigrid)."""

from __future__ import annotations

import random

import numpy as np
import pytest

pytest.importorskip("minigrid", reason="minigrid is not installed (pip install 'vsr-toolkit[agents]')")

from llm_harness.envs import BABYAI_LEVELS, BabyAIConfig, describe_view, make_env, parse_view  # noqa: E402
from llm_harness.envs.babyai import ACTION_WORDS, DIRECTIONS  # noqa: E402

LEVELS = tuple(BABYAI_LEVELS)


def test_levels_are_the_papers_and_exist_in_minigrid():
    import gymnasium

    assert dict(BABYAI_LEVELS) == {
        "SynthLoc": "BabyAI-SynthLoc-v0",
        "OneRoomS8": "BabyAI-OneRoomS8-v0",
        "MiniBoss": "BabyAI-MiniBossLevel-v0",
    }
    for env_id in BABYAI_LEVELS.values():
        gymnasium.spec(env_id)  # raises if minigrid does not register it


def _view_cells(obs: dict) -> tuple[int, tuple | None, dict]:
    """(direction, carried cell, visible non-empty cells) read from minigrid's own observation."""
    image = obs["image"]
    carried = tuple(int(v) for v in image[3, 6])
    cells = {}
    for x in range(7):
        for y in range(7):
            t = int(image[x, y, 0])
            if t > 1 and (x, y) != (3, 6):
                cells[(6 - y, x - 3)] = tuple(int(v) for v in image[x, y])
    return int(obs["direction"]), (carried if carried[0] > 1 else None), cells


@pytest.mark.parametrize("level", LEVELS)
def test_text_view_is_faithful_to_minigrids_observation(level):
    """The description parses back to exactly the visible cells, direction and carried object of
    ``gen_obs()``, along expert trajectories (which pick up, open doors, drop) and random play."""
    env = make_env("babyai", level=level)
    rng = random.Random(1)
    kinds = set()
    for seed in range(4):
        plan = env.expert_actions(seed)
        env.reset(seed)
        actions = plan if seed % 2 == 0 else [rng.choice(ACTION_WORDS) for _ in range(30)]
        for word in [None, *actions]:
            if word is not None:
                if env.done:
                    break
                env.step(word)
            text = env.render()
            raw = env._env.gen_obs()
            assert text == describe_view(raw["image"], raw["direction"])
            direction, carried, cells = _view_cells(raw)
            assert parse_view(text) == (direction, carried, cells)
            assert text.startswith(f"You are facing {DIRECTIONS[direction]},")
            kinds |= {c[0] for c in cells.values()}
    assert {2, 4} <= kinds or level == "OneRoomS8"  # walls and doors were described


def test_view_phrases():
    image = np.zeros((7, 7, 3), dtype=np.uint8)  # everything unseen
    image[3, 6] = (5, 0, 0)  # carrying a red key
    image[3, 5] = (4, 2, 2)  # a locked blue door straight ahead
    image[1, 4] = (6, 4, 0)  # a yellow ball 2 forward, 2 left
    image[0:7, 0] = (2, 5, 0)  # a wall row 6 steps forward
    text = describe_view(image, 3)
    assert text.split("\n") == [
        "You are facing north, carrying a red key.",
        "In front of you: a locked blue door.",
        "You see:",
        "- a locked blue door 1 step forward",
        "- a yellow ball 2 steps forward and 2 steps left",
        "- walls from 6 steps forward and 3 steps left to 6 steps forward and 3 steps right",
    ]
    empty = np.zeros((7, 7, 3), dtype=np.uint8)
    empty[:, :, 0] = 1
    assert describe_view(empty, 0).endswith("In front of you: empty floor.\nYou see nothing else.")
    with pytest.raises(ValueError, match="image"):
        describe_view(np.zeros((5, 5, 3)), 0)


@pytest.mark.parametrize("level", LEVELS)
def test_mission_is_the_instruction_and_success_pays_one(level):
    env = make_env("babyai", level=level)
    for seed in (3, 4):
        plan = env.expert_actions(seed)
        env.reset(seed)
        assert env.instruction == env._env.mission and env.instruction
        rewards = []
        for word in plan:
            obs, reward, done, info = env.step(word)
            rewards.append(reward)
        assert rewards == [0.0] * (len(plan) - 1) + [1.0]
        assert info["success"] and 0.0 < info["level_reward"] <= 1.0 and not info["truncated"]


@pytest.mark.parametrize("level,seeds", [("SynthLoc", (0, 6)), ("MiniBoss", (1, 2, 4, 5))])
def test_restore_mid_mission_keeps_the_verifiers_progress(level, seeds):
    """Snapshots along the expert's path -- put-next missions and sequenced ones ("... after you
    ...", "..., then ...") whose verifier tracks finished sub-goals -- restore so that the rest of
    the path still succeeds, on the same turn."""
    env = make_env("babyai", level=level)
    for seed in seeds:
        plan = env.expert_actions(seed)
        env.reset(seed)
        cuts = {len(plan) // 4, len(plan) // 2, 3 * len(plan) // 4}
        for k, word in enumerate(plan[:-1], start=1):
            env.step(word)
            if k in cuts:
                other = make_env("babyai", level=level)
                other.restore(env.snapshot())
                outcome = [other.step(w) for w in plan[k:]]
                assert outcome[-1][2] and outcome[-1][3]["success"] and not any(o[2] for o in outcome[:-1])


def test_budget_override_and_its_limits():
    env = make_env("babyai", level="OneRoomS8", max_steps=3)
    env.reset(0)
    assert env.max_steps == 3 and env._env.max_steps == 3
    dones = [env.step("left")[2] for _ in range(3)]
    assert dones == [False, False, True]
    default = make_env("babyai", level="OneRoomS8")
    default.reset(0)
    assert default.max_steps == 64  # the level's own: room_size ** 2
    long_plan = next(s for s in range(50) if len(default.expert_actions(s)) > 3)
    with pytest.raises(RuntimeError, match="did not solve OneRoomS8 seed"):
        env.expert_actions(long_plan)


def test_restore_refuses_a_snapshot_that_does_not_re_execute():
    """A snapshot whose captured world differs from what its history re-executes to (another
    minigrid version, or a forgery with a valid checksum) is refused."""
    from llm_harness.envs.base import _checksum

    env = make_env("babyai", level="OneRoomS8")
    env.reset(2)
    env.step("forward")
    snap = env.snapshot()
    body = {k: v for k, v in snap.items() if k != "checksum"}
    body["world"] = {**body["world"], "agent_dir": (body["world"]["agent_dir"] + 1) % 4}
    with pytest.raises(ValueError, match="gives a different 'world.agent_dir' .*refusing to restore"):
        make_env("babyai", level="OneRoomS8").restore({**body, "checksum": _checksum(body)})


@pytest.mark.parametrize("field", ["agent_pos", "carrying"])
def test_restore_names_a_tampered_agent_position_or_carried_object(field):
    """The agent's position and carried object are checked against the seed and the history like the
    rest of the world (re-execution), and the refusal names the field; an intact snapshot restores exactly."""
    from llm_harness.envs.base import _checksum

    env = make_env("babyai", level="OneRoomS8")
    env.reset(2)
    env.step("forward")
    snap = env.snapshot()
    other = make_env("babyai", level="OneRoomS8")
    assert other.restore(snap) == env.render() and other.snapshot() == snap
    body = {k: v for k, v in snap.items() if k != "checksum"}
    world = dict(body["world"])
    world[field] = [world["agent_pos"][0] + 1, world["agent_pos"][1]] if field == "agent_pos" else [6, 0, 0]  # a red ball
    body["world"] = world
    with pytest.raises(ValueError, match=f"gives a different 'world.{field}'"):
        make_env("babyai", level="OneRoomS8").restore({**body, "checksum": _checksum(body)})


def test_bad_babyai_input():
    with pytest.raises(ValueError, match=r"level: unknown BabyAI level 'GoToRedBall'; registered: \["):
        make_env("babyai", level="GoToRedBall")
    with pytest.raises(ValueError, match="max_steps: the action budget must be >= 1 turn, got 0"):
        BabyAIConfig(max_steps=0)


def test_running_out_of_budget_is_truncation():
    env = make_env("babyai", level="OneRoomS8", max_steps=2)
    env.reset(0)
    env.step("left")
    obs, reward, done, info = env.step("left")  # minigrid truncates on the same turn
    assert done and info["truncated"] and not info["success"] and reward == 0.0


def test_left_right_and_forward_match_the_world():
    """An object put into the world beside and ahead of the agent is described where it is."""
    from minigrid.core.world_object import Ball, Key

    env = make_env("babyai", level="OneRoomS8")
    placed = 0
    for seed in range(12):
        env.reset(seed)
        world = env._env
        pos, fwd, right = np.array(world.agent_pos), world.dir_vec, world.right_vec
        spots = {"1 step right": pos + right, "1 step left": pos - right, "1 step forward and 1 step right": pos + fwd + right}
        free = {k: p for k, p in spots.items() if world.grid.get(*p) is None}
        for (phrase, p), obj in zip(free.items(), (Ball("red"), Key("blue"), Ball("green"))):
            world.grid.set(*p, obj)
            raw = world.gen_obs()
            assert f"- a {obj.color} {obj.type} {phrase}" in describe_view(raw["image"], raw["direction"]).split("\n")
            world.grid.set(*p, None)
            placed += 1
    assert placed >= 20
