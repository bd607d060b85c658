"""Gridworlds from ASCII layouts (VSR §2.3, Appendix D.1).

Layout symbols: ``#`` wall, ``.`` free, ``S`` start (exactly one), ``G`` goal (at least one;
terminal, reward 1), ``X`` trap (optional; terminal, reward 0).  Leading/trailing blank lines
and the indentation of each row are ignored; every row must then have the same length.  The
area outside the layout is wall.

States are the non-wall cells numbered row-major (:attr:`GridWorld.state_of`).  Actions are
``0 up, 1 right, 2 down, 3 left``.  A move into a wall or off the map leaves the agent in
place.  With slip probability ``slip`` the executed direction is replaced by one of the *other
three* directions chosen uniformly (``slip/3`` each, the reverse direction included), so the
intended direction has probability ``1 - slip``.  Reaching a goal ends the episode with
reward 1 (binary terminal reward); reaching a trap ends it with reward 0.  The initial state
is ``S``; the horizon ``H`` is the number of moves allowed.

The default layout (:data:`DEFAULT_LAYOUT`) is our choice — the paper does not print its map:
S and G sit in opposite corners, a wall in column 3 forces the agent through a gap in row 3,
and a second wall system forces a detour around column 5, so the shortest path is 12 moves.
The default horizon 40 gives the uniform random policy a success probability of about 1.4%
from S, while goal-adjacent cells are easy: this is what lets the high-σ frontier start near
G and recede toward S as the policy improves (the reverse curriculum of VSR Figure 2).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from gridworld.mdp import INDEX_DTYPE, TabularMDP
from theory._validate import as_array, check_probability
from vsr_util.registry import Registry

#: The default 7x7 map (see the module docstring).
DEFAULT_LAYOUT = """
S..#...
...#...
...#.#.
.....#.
.###.#.
...#...
...#..G
"""

#: Horizon used with :data:`DEFAULT_LAYOUT` (the paper does not state one).
DEFAULT_HORIZON = 40

#: Action names and ``(d_row, d_col)`` moves, in action order.
ACTIONS = ("up", "right", "down", "left")
MOVES = np.array([(-1, 0), (0, 1), (1, 0), (0, -1)], dtype=np.int64)
ARROWS = "^>v<"

_SYMBOLS = {"#": "wall", ".": "free", "S": "start", "G": "goal", "X": "trap"}


@dataclass(frozen=True, eq=False)
class GridLayout:
    """A parsed, validated ASCII layout."""

    rows: tuple[str, ...]
    """The layout rows (indentation removed)."""
    walls: np.ndarray
    """``bool[R, C]``: wall cells."""
    start: tuple[int, int]
    """``(row, col)`` of ``S``."""
    goals: tuple[tuple[int, int], ...]
    """``(row, col)`` of every ``G``."""
    traps: tuple[tuple[int, int], ...]
    """``(row, col)`` of every ``X``."""

    @property
    def shape(self) -> tuple[int, int]:
        return self.walls.shape

    def text(self) -> str:
        """The layout as one string (rows joined by newlines)."""
        return "\n".join(self.rows)


def parse_layout(layout: str | Sequence[str]) -> GridLayout:
    """Parse and validate an ASCII layout (symbols in the module docstring).

    Raises ``ValueError`` for: an empty layout, ragged rows, unknown symbols, no or several
    ``S``, no ``G``, or a goal that cannot be reached from ``S``.
    """
    if isinstance(layout, str):
        lines = layout.splitlines()
    else:
        lines = list(layout)
        if not all(isinstance(x, str) for x in lines):
            raise ValueError("layout: rows must be strings")
    rows = [ln.strip() for ln in lines]
    while rows and not rows[0]:
        rows.pop(0)
    while rows and not rows[-1]:
        rows.pop()
    if not rows:
        raise ValueError("layout: is empty")
    widths = {len(r) for r in rows}
    if len(widths) != 1:
        bad = next(i for i, r in enumerate(rows) if len(r) != len(rows[0]))
        raise ValueError(f"layout: ragged rows (row 0 has {len(rows[0])} cells, row {bad} has {len(rows[bad])})")
    R, C = len(rows), len(rows[0])
    grid = np.frombuffer("".join(rows).encode("utf-32-le"), dtype=np.uint32).reshape(R, C)
    known = np.array([ord(c) for c in _SYMBOLS], dtype=np.uint32)
    unknown = ~np.isin(grid, known)
    if unknown.any():
        r, c = (int(i) for i in np.argwhere(unknown)[0])
        raise ValueError(f"layout: unknown symbol {rows[r][c]!r} at row {r}, col {c} (allowed: {''.join(_SYMBOLS)})")
    starts = np.argwhere(grid == ord("S"))
    if len(starts) != 1:
        raise ValueError(f"layout: needs exactly one start 'S', found {len(starts)}")
    goals = np.argwhere(grid == ord("G"))
    if len(goals) == 0:
        raise ValueError("layout: needs at least one goal 'G'")
    traps = np.argwhere(grid == ord("X"))
    walls = grid == ord("#")
    out = GridLayout(
        rows=tuple(rows),
        walls=walls,
        start=tuple(int(i) for i in starts[0]),
        goals=tuple(tuple(int(i) for i in g) for g in goals),
        traps=tuple(tuple(int(i) for i in t) for t in traps),
    )
    _check_goals_reachable(out, grid)
    out.walls.setflags(write=False)
    return out


def _check_goals_reachable(layout: GridLayout, grid: np.ndarray) -> None:
    """Every goal must border the 4-connected component of S through non-terminal free cells."""
    from scipy import ndimage

    passable = (grid == ord(".")) | (grid == ord("S"))
    labels, _ = ndimage.label(passable, structure=[[0, 1, 0], [1, 1, 1], [0, 1, 0]])
    comp = labels[layout.start]
    R, C = grid.shape
    for g in layout.goals:
        ok = False
        for dr, dc in MOVES:
            r, c = g[0] + dr, g[1] + dc
            if 0 <= r < R and 0 <= c < C and labels[r, c] == comp:
                ok = True
                break
        if not ok:
            raise ValueError(f"layout: goal at row {g[0]}, col {g[1]} is unreachable from the start {layout.start}")


@dataclass(frozen=True, eq=False)
class GridWorld:
    """A gridworld: its layout, the :class:`TabularMDP`, and cell <-> state maps."""

    layout: GridLayout
    """Parsed layout."""
    mdp: TabularMDP
    """The finite-horizon MDP (states = non-wall cells, row-major)."""
    coords: np.ndarray
    """``int[S, 2]``: ``(row, col)`` of each state."""
    state_of: np.ndarray
    """``int[R, C]``: state index of each cell, -1 on walls."""
    slip: float
    """Slip probability used to build the transitions."""

    @property
    def start_state(self) -> int:
        return int(self.state_of[self.layout.start])

    def to_grid(self, values) -> np.ndarray:
        """Per-state ``values[S]`` → ``float[R, C]`` image with NaN on walls (for heatmaps)."""
        v = as_array(values, "values", shape=(self.mdp.n_states,))
        img = np.full(self.layout.shape, np.nan)
        img[self.coords[:, 0], self.coords[:, 1]] = v
        return img

    @functools.cached_property
    def distance_to_goal(self) -> np.ndarray:
        """``int[S]``: fewest moves to the nearest goal ignoring slips (-1 if none; 0 on goals)."""
        import scipy.sparse as sp
        from scipy.sparse.csgraph import dijkstra

        S = self.mdp.n_states
        R, C = self.layout.shape
        src, dst = [], []
        passable = ~self.layout.walls
        for dr, dc in MOVES:
            r2, c2 = self.coords[:, 0] + dr, self.coords[:, 1] + dc
            ok = (r2 >= 0) & (r2 < R) & (c2 >= 0) & (c2 < C)
            ok[ok] &= passable[r2[ok], c2[ok]]
            ok &= ~self.mdp.terminal  # no moves out of terminal states
            src.append(np.flatnonzero(ok))
            dst.append(self.state_of[r2[ok], c2[ok]])
        src, dst = np.concatenate(src), np.concatenate(dst)
        # Reverse graph: distance from s to a goal = distance from the goals to s on reversed edges.
        g = sp.csr_matrix((np.ones(src.size), (dst, src)), shape=(S, S))
        dist = dijkstra(g, indices=self.mdp.goal_states, min_only=True, unweighted=True)
        out = np.where(np.isfinite(dist), dist, -1).astype(np.int64)
        out.setflags(write=False)
        return out

    def render(self, values=None, *, fmt: str = "{:5.2f}") -> str:
        """ASCII map; with ``values[S]`` each free cell shows ``fmt.format(value)`` instead."""
        if values is None:
            return self.layout.text()
        img = self.to_grid(values)
        width = len(fmt.format(0.0))
        lines = []
        for r, row in enumerate(self.layout.rows):
            cells = []
            for c, ch in enumerate(row):
                cells.append("#" * width if ch == "#" else fmt.format(img[r, c]))
            lines.append(" ".join(cells))
        return "\n".join(lines)

    def render_policy(self, pi) -> str:
        """Map with the most likely action of ``pi[s, a]`` drawn as an arrow on each free cell."""
        pi = as_array(pi, "pi", shape=(self.mdp.n_states, 4))
        best = pi.argmax(axis=1)
        chars = [list(r) for r in self.layout.rows]
        for s, (r, c) in enumerate(self.coords):
            if chars[r][c] in ".":
                chars[r][c] = ARROWS[best[s]]
        return "\n".join("".join(r) for r in chars)


def build_gridworld(
    layout: str | Sequence[str] | GridLayout = DEFAULT_LAYOUT,
    *,
    slip: float = 0.0,
    horizon: int = DEFAULT_HORIZON,
    name: str | None = None,
) -> GridWorld:
    """Gridworld MDP from an ASCII layout (rules in the module docstring).

    Builds the pair-CSR transitions with vectorised NumPy (fast up to ~1e6 cells).
    """
    lay = layout if isinstance(layout, GridLayout) else parse_layout(layout)
    slip = check_probability(slip, "slip")
    R, C = lay.shape
    free = ~lay.walls
    state_of = np.full((R, C), -1, dtype=np.int64)
    coords = np.argwhere(free)
    S = coords.shape[0]
    state_of[coords[:, 0], coords[:, 1]] = np.arange(S)
    A = 4

    terminal = np.zeros(S, dtype=bool)
    reward = np.zeros(S)
    for g in lay.goals:
        terminal[state_of[g]] = True
        reward[state_of[g]] = 1.0
    for x in lay.traps:
        terminal[state_of[x]] = True

    # tgt[s, k]: where moving in direction k from s lands (s itself when blocked).
    tgt = np.empty((S, 4), dtype=np.int64)
    for k, (dr, dc) in enumerate(MOVES):
        r2, c2 = coords[:, 0] + dr, coords[:, 1] + dc
        ok = (r2 >= 0) & (r2 < R) & (c2 >= 0) & (c2 < C)
        ok[ok] &= free[r2[ok], c2[ok]]
        tgt[:, k] = np.arange(S)
        tgt[ok, k] = state_of[r2[ok], c2[ok]]
    tgt[terminal] = np.flatnonzero(terminal)[:, None]  # terminal rows: self-loops

    # q[a, k]: probability that intending a executes direction k.
    q = np.full((A, 4), slip / 3.0)
    np.fill_diagonal(q, 1.0 - slip)
    cand_t = np.broadcast_to(tgt[:, None, :], (S, A, 4)).reshape(S * A, 4)
    cand_p = np.broadcast_to(q[None], (S, A, 4)).reshape(S * A, 4)
    order = np.argsort(cand_t, axis=1, kind="stable")
    cand_t = np.take_along_axis(cand_t, order, axis=1).ravel()
    cand_p = np.take_along_axis(cand_p, order, axis=1).ravel()
    pair_of = np.repeat(np.arange(S * A, dtype=np.int64), 4)
    new = np.ones(cand_t.size, dtype=bool)
    new[1:] = (cand_t[1:] != cand_t[:-1]) | (pair_of[1:] != pair_of[:-1])
    group = np.cumsum(new) - 1
    probs = np.bincount(group, weights=cand_p)
    targets = cand_t[new]
    pairs = pair_of[new]
    keep = probs > 0
    probs, targets, pairs = probs[keep], targets[keep], pairs[keep]
    probs[terminal[pairs // A]] = 1.0  # terminal self-loops: exactly 1, not 0.7 + 0.1 + 0.1 + 0.1
    indptr = np.concatenate([[0], np.cumsum(np.bincount(pairs, minlength=S * A))])
    init = np.zeros(S)
    init[state_of[lay.start]] = 1.0
    mdp = TabularMDP(
        indptr=indptr.astype(INDEX_DTYPE),
        indices=targets.astype(INDEX_DTYPE),
        probs=probs,
        n_actions=A,
        terminal=terminal,
        terminal_reward=reward,
        init=init,
        horizon=horizon,
        name=name or f"grid{R}x{C}" + (f"-slip{slip:g}" if slip else ""),
    )
    coords.setflags(write=False)
    state_of.setflags(write=False)
    return GridWorld(layout=lay, mdp=mdp, coords=coords, state_of=state_of, slip=float(slip))


def random_layout(n_rows: int, n_cols: int, *, wall_density: float = 0.2, seed: int = 0) -> str:
    """Random ASCII layout: S top-left, G bottom-right, walls i.i.d. with ``wall_density``.

    A random monotone (right/down) corridor from S to G is kept free, so G is always reachable.
    Used for large benchmark grids (e.g. 256x256, 1000x1000).
    """
    if n_rows < 2 or n_cols < 2:
        raise ValueError(f"n_rows/n_cols: need at least a 2x2 grid, got {n_rows}x{n_cols}")
    check_probability(wall_density, "wall_density", open_high=True)
    rng = np.random.default_rng(seed)
    walls = rng.random((n_rows, n_cols)) < wall_density
    steps = np.array([0] * (n_rows - 1) + [1] * (n_cols - 1))
    rng.shuffle(steps)
    r = np.concatenate([[0], np.cumsum(steps == 0)])
    c = np.concatenate([[0], np.cumsum(steps == 1)])
    walls[r, c] = False
    chars = np.where(walls, "#", ".").astype("<U1")
    chars[0, 0] = "S"
    chars[-1, -1] = "G"
    return "\n".join("".join(row) for row in chars)


#: Named layouts (``PGConfig.layout`` and the Figure 2 sweep accept these names): ``maze7`` is
#: :data:`DEFAULT_LAYOUT` (shortest path 12 moves); ``openN`` is an N x N room without walls, S
#: top-left, G bottom-right (shortest path 2N - 2 moves).
LAYOUTS: Registry[str] = Registry(
    "layout", {"maze7": DEFAULT_LAYOUT, **{f"open{n}": random_layout(n, n, wall_density=0.0) for n in (5, 7, 9)}}
)


def layout_text(layout: str) -> str:
    """The ASCII layout named ``layout`` in :data:`LAYOUTS`, ``layout`` itself if it is ASCII, or
    :data:`DEFAULT_LAYOUT` if empty."""
    if not layout:
        return DEFAULT_LAYOUT
    return LAYOUTS[layout] if layout in LAYOUTS else layout
