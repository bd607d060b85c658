"""Gridworld builder: layout parsing, validation, transitions, rendering."""

from __future__ import annotations

import numpy as np
import pytest

from gridworld.exact import solve
from gridworld.grid import DEFAULT_HORIZON, build_gridworld, parse_layout, random_layout
from gridworld.policies import uniform_policy


def test_default_layout_shape_and_distances():
    w = build_gridworld()
    assert w.layout.shape == (7, 7)
    assert w.mdp.horizon == DEFAULT_HORIZON
    assert w.mdp.n_states == int((~w.layout.walls).sum()) == 38
    dist = w.distance_to_goal
    assert dist[w.start_state] == 12  # S and G far apart: a 12-move detour
    assert dist[w.mdp.goal_states[0]] == 0
    assert w.render().splitlines()[0] == "S..#..."
    # Uniform random play rarely succeeds from S but often from cells next to G (curriculum room).
    sol = solve(w.mdp, uniform_policy(w.mdp))
    assert 0.005 < sol.J < 0.05
    near = np.flatnonzero(dist == 1)
    assert np.all(sol.p[0, near] > 0.5)


def test_deterministic_moves_and_walls():
    w = build_gridworld("S.#\n..G", horizon=5)
    m = w.mdp
    s = w.state_of
    # From S (0,0): up/left blocked (stay), right -> (0,1), down -> (1,0).
    for a, want in enumerate([s[0, 0], s[0, 1], s[1, 0], s[0, 0]]):
        nxt, pr = m.successors(s[0, 0], a)
        np.testing.assert_array_equal(nxt, [want])
        np.testing.assert_allclose(pr, [1.0])
    # (0,1) right is a wall -> stay.
    np.testing.assert_array_equal(m.successors(s[0, 1], 1)[0], [s[0, 1]])
    assert m.terminal[s[1, 2]] and m.terminal_reward[s[1, 2]] == 1.0
    assert m.init[s[0, 0]] == 1.0


def test_slip_probabilities():
    w = build_gridworld("...\n.S.\n..G", slip=0.3, horizon=4)
    m, s = w.mdp, w.state_of
    P = m.dense()
    c = s[1, 1]
    # Intended up: 0.7 up, 0.1 each for right/down/left.
    np.testing.assert_allclose(P[c, 0, s[0, 1]], 0.7)
    for cell in (s[1, 2], s[2, 1], s[1, 0]):
        np.testing.assert_allclose(P[c, 0, cell], 0.1)
    # Corner (0,0), intended up: blocked up (0.7) and blocked left (0.1) merge into staying (0.8).
    np.testing.assert_allclose(P[s[0, 0], 0, s[0, 0]], 0.8)
    np.testing.assert_allclose(P.sum(axis=2), 1.0, atol=1e-15)
    g = s[2, 2]
    np.testing.assert_array_equal(P[g, :, g], 1.0)  # exact absorbing self-loops


def test_traps_are_terminal_without_reward():
    w = build_gridworld("SX\n.G", horizon=3)
    x = w.state_of[0, 1]
    assert w.mdp.terminal[x] and w.mdp.terminal_reward[x] == 0.0
    sol = solve(w.mdp, uniform_policy(w.mdp))
    assert sol.reached[-1] < sol.absorbed[-1]


@pytest.mark.parametrize(
    "layout, match",
    [
        ("", "layout: is empty"),
        ("...\n..G", "exactly one start"),
        ("S.S\n..G", "exactly one start"),
        ("S..\n...", "at least one goal"),
        ("S..\n..G.", "ragged rows"),
        ("S.a\n..G", "unknown symbol 'a' at row 0, col 2"),
        ("S . \n..G", "unknown symbol"),
        ("S.#.\n..#G", "unreachable"),
        ("S.X.\n..XG", "unreachable"),
        ("S..#G", "unreachable"),
    ],
)
def test_bad_layouts(layout, match):
    with pytest.raises(ValueError, match=match):
        parse_layout(layout)


def test_bad_builder_args():
    with pytest.raises(ValueError, match="slip"):
        build_gridworld(slip=1.5)
    with pytest.raises(ValueError, match="horizon"):
        build_gridworld(horizon=0)
    with pytest.raises(ValueError, match="layout: rows must be strings"):
        parse_layout(["S.G", 3])


def test_layout_indentation_and_sequence_forms():
    a = parse_layout("""
        S.
        .G
    """)
    b = parse_layout(["S.", ".G"])
    assert a.rows == b.rows == ("S.", ".G")


def test_render_values_and_policy():
    w = build_gridworld("S.\n#G", horizon=3)
    txt = w.render(np.arange(3.0), fmt="{:4.1f}")
    assert txt.splitlines() == [" 0.0  1.0", "####  2.0"]
    img = w.to_grid([1.0, 2.0, 3.0])
    assert np.isnan(img[1, 0]) and img[1, 1] == 3.0
    pi = np.tile([0.0, 1.0, 0.0, 0.0], (3, 1))
    assert w.render_policy(pi).splitlines()[0] == "S>"


def test_random_layout_is_valid_and_seeded():
    a, b = random_layout(20, 30, wall_density=0.4, seed=3), random_layout(20, 30, wall_density=0.4, seed=3)
    assert a == b and a != random_layout(20, 30, wall_density=0.4, seed=4)
    w = build_gridworld(a, horizon=60)
    assert w.layout.shape == (20, 30)
    assert w.distance_to_goal[w.start_state] == 20 + 30 - 2  # the carved monotone corridor is shortest
