"""Sokoban: reproducible rooms with BFS certificates, verl-agent's rendering, rules and rewards."""

from __future__ import annotations

import itertools
import random
import re

import pytest

from llm_harness.envs import SokobanConfig, SokobanEnv, generate_room, make_env, parse_room, render_room, solve
from llm_harness.envs.sokoban import MOVES, Room

SEEDS = range(300)


def test_golden_room_of_seed_0():
    """Pins the generator's stream: a change here changes every map seed's room."""
    room, plan = generate_room(0)
    assert render_room(room) == "\n".join(
        ["# # # # # #", "# # # # # #", "# _ _ # # #", "# P X _ _ #", "# _ O _ _ #", "# # # # # #"]
    )
    assert plan == ("up", "right", "down")


def _play_moves(room: Room, words) -> Room:
    for w in words:
        room = room.move(w)[0]
    return room


def test_every_room_is_certified_solvable_within_the_budget():
    for seed in SEEDS:
        room, plan = generate_room(seed)
        assert 1 <= len(plan) <= 15
        assert _play_moves(room, plan).solved
        assert not any(_play_moves(room, plan[:k]).solved for k in range(len(plan)))
        assert len(room.boxes) == len(room.targets) == 1 and room.size == 6


def test_bfs_plans_are_shortest_against_exhaustive_search():
    checked = 0
    for seed in SEEDS:
        room, plan = generate_room(seed)
        if len(plan) > 5:
            continue
        shorter = itertools.chain.from_iterable(itertools.product(MOVES, repeat=k) for k in range(len(plan)))
        assert not any(_play_moves(room, seq).solved for seq in shorter), seed
        checked += 1
    assert checked > 100


def test_solver_reports_unsolvable_and_budget_limited_rooms():
    walls = frozenset((r, c) for r in range(5) for c in range(5) if r in (0, 4) or c in (0, 4))
    corner = Room(5, walls, targets=((2, 2),), boxes=((1, 1),), player=(3, 3))  # box stuck in a corner
    assert solve(corner, 50) is None
    room, plan = generate_room(1)
    assert solve(room, len(plan) - 1) is None and solve(room, len(plan)) == plan
    assert solve(_play_moves(room, plan), 5) == ()


def test_rendering_round_trips_and_uses_verl_agent_symbols():
    rng = random.Random(0)
    seen = set()
    for seed in range(40):
        room = generate_room(seed)[0]
        for _ in range(12):
            assert parse_room(render_room(room)) == room
            seen |= set(render_room(room).split())
            room = room.move(rng.choice(list(MOVES)))[0]
    assert seen == {"#", "_", "O", "X", "√", "P", "S"}
    for bad in ("", "# #\n# #", "# # #\n# P #\n# # #", "# # # #\n# P X #\n# O ? #\n# # # #"):
        with pytest.raises(ValueError, match="grid"):
            parse_room(bad)


def _room(rows):
    return parse_room("\n".join(rows))


def test_rules_push_block_and_walls():
    with pytest.raises(ValueError, match="as many boxes"):
        _room(["# # # # # #", "# P X _ O #", "# _ _ _ _ #", "# _ _ X _ #", "# _ _ _ _ #", "# # # # # #"])
    room = _room(["# # # # # #", "# P X _ O #", "# _ _ _ _ #", "# _ _ _ _ #", "# _ _ _ _ #", "# # # # # #"])
    after, moved = room.move("right")
    assert moved and after.player == (1, 2) and after.boxes == ((1, 3),)
    assert room.move("up") == (room, False)  # wall
    blocked = _room(["# # # # # #", "# _ P X # #", "# _ _ _ O #", "# _ _ _ _ #", "# _ _ _ _ #", "# # # # # #"])
    assert blocked.move("right") == (blocked, False)  # box against a wall


def test_gym_sokoban_rewards_and_success():
    env = SokobanEnv()
    seed = next(s for s in SEEDS if len(generate_room(s)[1]) >= 3)
    plan = env.expert_actions(seed)
    env.reset(seed)
    rewards = [env.step(w)[1] for w in plan]
    # one box: it reaches its target only on the solving turn, so every earlier turn costs 0.1
    assert rewards[:-1] == [-0.1] * (len(plan) - 1)
    assert rewards[-1] == pytest.approx(-0.1 + 1.0 + 10.0)
    assert env.success and env.done


def test_box_off_target_costs_one():
    env = SokobanEnv()
    env.reset(0)
    env._room = _room(["# # # # # #", "# _ _ _ _ #", "# P √ _ _ #", "# _ _ _ _ #", "# _ _ _ _ #", "# # # # # #"])
    obs, reward, done, info = env.step("right")  # pushes the box off its target
    assert reward == pytest.approx(-0.1 - 1.0) and info["pushed"] and info["boxes_on_target"] == 0 and not done
    assert env.step("left")[1] == pytest.approx(-0.1)  # walking back does not move the box


def test_binary_reward_scheme():
    env = make_env("sokoban", reward="binary")
    plan = env.expert_actions(3)
    env.reset(3)
    rewards = [env.step(w)[1] for w in plan]
    assert rewards == [0.0] * (len(plan) - 1) + [1.0]
    env.reset(3)
    assert env.step("jump")[1] == pytest.approx(-0.1)


def test_moves_into_walls_are_legal_but_ineffective():
    env = SokobanEnv()
    env.reset(0)
    blocked = next(w for w in MOVES if not env.room.move(w)[1])
    obs = env.render()
    obs2, reward, done, info = env.step(blocked)
    assert obs2 == obs and info["valid"] and not info["moved"] and reward == pytest.approx(-0.1)
    assert env.invalid_actions == 0


def test_config_errors_name_the_field():
    for kwargs, field in (({"reward": "dense"}, "reward"), ({"size": 3}, "size"), ({"num_boxes": 0}, "num_boxes"),
                          ({"max_steps": 0}, "max_steps")):
        with pytest.raises(ValueError, match=field):
            SokobanConfig(**kwargs)


def test_two_box_rooms_are_certified_too():
    for seed in range(20):
        room, plan = generate_room(seed, 7, 2, 30)
        assert len(room.boxes) == 2 and _play_moves(room, plan).solved


def _resealed(payload: dict) -> dict:
    """A snapshot with a valid checksum over edited content (a forged one)."""
    from llm_harness.envs.base import _checksum

    body = {k: v for k, v in payload.items() if k != "checksum"}
    return {**body, "checksum": _checksum(body)}


def _mid_episode(seed: int = 3, turns: int = 2) -> SokobanEnv:
    env = SokobanEnv()
    env.reset(seed)
    for word in env.expert_actions(seed)[:turns]:
        env.step(word)
    return env


def test_restore_refuses_a_player_the_history_does_not_put_there():
    """A grid whose player is moved to another free cell (walls, targets, boxes and flags unchanged, the
    checksum resealed) is refused: re-playing the history from the seed puts the player elsewhere."""
    env = _mid_episode()
    room = env.room
    free = next(p for p in itertools.product(range(room.size), repeat=2)
                if p not in room.walls and p not in room.boxes and p not in room.targets and p != room.player)
    forged = _resealed({**env.snapshot(), "world": {"grid": render_room(Room(room.size, room.walls, room.targets, room.boxes, free))}})
    with pytest.raises(ValueError, match=re.escape(f"snapshot.world.player: the grid has player {free}, but re-playing the "
                                                   f"snapshot's 2 actions from seed 3 gives {room.player}; refusing to restore")):
        SokobanEnv().restore(forged)


def test_restore_refuses_boxes_the_history_does_not_put_there():
    env = _mid_episode()
    room = env.room
    free = next(p for p in itertools.product(range(room.size), repeat=2)
                if p not in room.walls and p not in room.boxes and p not in room.targets and p != room.player)
    forged = _resealed({**env.snapshot(), "world": {"grid": render_room(Room(room.size, room.walls, room.targets, (free,), room.player))}})
    with pytest.raises(ValueError, match=r"snapshot.world.boxes: the grid has boxes \(\(.*re-playing the snapshot's 2 actions"):
        SokobanEnv().restore(forged)


def test_restore_refuses_a_history_that_does_not_lead_to_the_grid_or_ends_early():
    env = _mid_episode()
    snap = env.snapshot()
    with pytest.raises(ValueError, match="snapshot.world.player"):  # same length, other moves
        SokobanEnv().restore(_resealed({**snap, "history": [None, None]}))
    solved = _mid_episode(turns=len(SokobanEnv().expert_actions(3)))
    assert solved.success
    late = solved.snapshot()
    n = len(late["history"])
    with pytest.raises(ValueError, match=rf"snapshot.history: the room is solved after {n} of the {n + 1} actions; "
                                         rf"the episode ends there \(seed 3\)"):
        SokobanEnv().restore(_resealed({**late, "history": late["history"] + [None]}))  # a turn played after the end


def test_an_intact_snapshot_restores_bit_identically_at_every_turn():
    """Invalid turns and wall bumps in the history, every turn of a solved episode: restore gives the same
    snapshot, observation and future."""
    seed = 5
    plan = ["jump", *SokobanEnv().expert_actions(seed)]
    env = SokobanEnv()
    env.reset(seed)
    for k, word in enumerate(plan):
        snap = env.snapshot()
        other = SokobanEnv()
        assert other.restore(snap) == env.render() and other.snapshot() == snap
        if not env.done:
            assert other.step(word) == env.step(word)
    assert env.success
    assert SokobanEnv().restore(env.snapshot()) == env.render()
