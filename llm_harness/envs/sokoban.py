"""Text Sokoban in verl-agent's setting: a 6x6 room, one box, at most 15 steps.

**Why our own generator, not gym-sokoban.** gym-sokoban 0.0.6 (2019) is written against the old
``gym`` API (4-tuple ``step``, ``seed()``), draws rooms from Python's global ``random`` module
(verl-agent wraps every reset in a global-seed context manager to make it reproducible), and
its reverse-playing generator can fail (verl-agent then retries with a hashed seed) and yields
a solution, not the shortest one. Here the room is a pure function of the seed (and the room
parameters), every room is certified solvable by breadth-first search within the step budget,
and that search also yields the shortest expert demonstration. The state is a few small tuples,
so a snapshot is the full state and restore loads it directly; it is checked first against the
seed and the history (walls and targets are those of the seed's room, and re-playing the
snapshot's actions from that room -- at most ``max_steps`` moves -- puts the player and the boxes
where the grid has them), so an edited or mismatched snapshot is refused, naming the field.

**Generation** (:func:`generate_room`, ``numpy.random.default_rng(seed)``): carve the floor by
a random walk over the interior (1.7 x (width + height) steps as in gym-sokoban; the direction
is redrawn with probability 0.5 at each step, and each visited cell also opens one random side
neighbour), place targets, boxes and the player on distinct floor cells drawn uniformly, and keep
the room iff BFS solves it in 1..``max_steps`` moves; otherwise draw again from the same stream.
gym-sokoban instead reverse-plays from a solved state and keeps the state of best score (box
swaps x box displacement), which favours rooms that need more pushes; ours are uniform over
solvable placements. With
the defaults (seeds 0..1999) the shortest solution has median 4 moves (mean 4.8; 21 % need at
most 2, 14 % need 8 or more). The generator depends on numpy's ``Generator.integers``/``random``
streams, pinned by a golden-room test; restoring a snapshot regenerates the seed's room to
check the snapshot against it, so a snapshot taken with another generator is refused.

**Rendering** (verl-agent's symbols): ``#`` wall, ``_`` floor, ``O`` target, ``X`` box, ``√`` box
on target, ``P`` player, ``S`` player on target; one text row per grid row, cells separated by a
space. :func:`parse_room` inverts it exactly.

**Rules**: ``up``/``down``/``left``/``right`` move the player one cell; walking into a box pushes
it one cell if the cell behind it is floor or an empty target; walls and a second box block (the
turn is spent, nothing moves, ``info["moved"]`` is False).

**Reward schemes** (``reward`` in :class:`SokobanConfig`, :data:`REWARD_SCHEMES`): the default
``gym_sokoban`` is the scheme verl-agent trains GiGPO with (gym-sokoban's): -0.1 per turn, +1
when a push raises the number of boxes on targets, -1 when it lowers it, +10 on solving.
``binary`` pays 1 on the solving turn and 0 otherwise. **Success** (``info["success"]``) means
every box is on a target before the budget of ``max_steps`` turns runs out; the episode ends then.
An invalid action is a no-op that pays the scheme's per-turn reward minus ``invalid_penalty``
(-0.1 - 0.1 with the defaults, as in verl-agent, where the projection maps it to a standing
still step and the trainer subtracts ``invalid_action_penalty_coef``).
"""

from __future__ import annotations

import functools
from collections import deque
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from llm_harness.envs.base import TextEnv, check_budget, check_penalty, check_seed
from vsr_util.registry import Registry
from vsr_util.checks import check_number

__all__ = [
    "MOVES",
    "REWARD_SCHEMES",
    "RewardScheme",
    "Room",
    "SokobanConfig",
    "SokobanEnv",
    "generate_room",
    "parse_room",
    "play_room",
    "render_room",
    "solve",
]

Cell = tuple[int, int]

WALL, FLOOR, TARGET, BOX_ON_TARGET, BOX, PLAYER, PLAYER_ON_TARGET = "#", "_", "O", "√", "X", "P", "S"
#: action word -> (row, column) displacement
MOVES: dict[str, Cell] = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}
_P_KEEP_DIRECTION = 0.5
_MAX_DRAWS = 10_000


@dataclass(frozen=True)
class RewardScheme:
    """Per-turn reward = ``step`` + ``box_on`` (more boxes on targets) + ``box_off`` (fewer) +
    ``solved`` (the turn that solves the room)."""

    step: float
    box_on: float
    box_off: float
    solved: float


REWARD_SCHEMES: Registry[RewardScheme] = Registry(
    "Sokoban reward scheme",
    {"gym_sokoban": RewardScheme(step=-0.1, box_on=1.0, box_off=-1.0, solved=10.0), "binary": RewardScheme(0.0, 0.0, 0.0, 1.0)},
)


@dataclass(frozen=True)
class Room:
    """A Sokoban state: square ``size`` x ``size`` grid, wall cells, targets, boxes, player."""

    size: int
    walls: frozenset[Cell]
    targets: tuple[Cell, ...]
    boxes: tuple[Cell, ...]
    player: Cell

    @property
    def boxes_on_target(self) -> int:
        return len(set(self.boxes) & set(self.targets))

    @property
    def solved(self) -> bool:
        return set(self.boxes) == set(self.targets)

    def move(self, word: str) -> tuple[Room, bool]:
        """The room after ``word`` (a key of :data:`MOVES`) and whether anything moved."""
        dr, dc = MOVES[word]
        r, c = self.player
        ahead = (r + dr, c + dc)
        if ahead in self.walls:
            return self, False
        if ahead in self.boxes:
            beyond = (ahead[0] + dr, ahead[1] + dc)
            if beyond in self.walls or beyond in self.boxes:
                return self, False
            boxes = tuple(sorted(beyond if b == ahead else b for b in self.boxes))
            return Room(self.size, self.walls, self.targets, boxes, ahead), True
        return Room(self.size, self.walls, self.targets, self.boxes, ahead), True


def render_room(room: Room) -> str:
    """verl-agent's text grid of ``room`` (module doc)."""
    boxes, targets = set(room.boxes), set(room.targets)
    rows = []
    for r in range(room.size):
        cells = []
        for c in range(room.size):
            p = (r, c)
            if p in room.walls:
                cells.append(WALL)
            elif p == room.player:
                cells.append(PLAYER_ON_TARGET if p in targets else PLAYER)
            elif p in boxes:
                cells.append(BOX_ON_TARGET if p in targets else BOX)
            else:
                cells.append(TARGET if p in targets else FLOOR)
        rows.append(" ".join(cells))
    return "\n".join(rows)


def parse_room(text: str) -> Room:
    """The :class:`Room` that :func:`render_room` drew (ValueError on a malformed grid)."""
    if not isinstance(text, str):
        raise ValueError(f"grid: must be a string, got {type(text).__name__}")
    rows = [row.split(" ") for row in text.split("\n")]
    size = len(rows)
    if size < 3 or any(len(row) != size for row in rows):
        raise ValueError(f"grid: must be a square of at least 3 rows of space-separated cells, got {[len(r) for r in rows]}")
    walls, targets, boxes, players = set(), [], [], []
    for r, row in enumerate(rows):
        for c, sym in enumerate(row):
            p = (r, c)
            if sym == WALL:
                walls.add(p)
            elif sym in (TARGET, BOX_ON_TARGET, PLAYER_ON_TARGET):
                targets.append(p)
            elif sym not in (FLOOR, BOX, PLAYER):
                raise ValueError(f"grid: unknown symbol {sym!r} at row {r}, column {c}")
            if sym in (BOX, BOX_ON_TARGET):
                boxes.append(p)
            if sym in (PLAYER, PLAYER_ON_TARGET):
                players.append(p)
    if len(players) != 1:
        raise ValueError(f"grid: needs exactly one player, found {len(players)}")
    if not boxes or len(boxes) != len(targets):
        raise ValueError(f"grid: needs as many boxes as targets (at least one), found {len(boxes)} boxes, {len(targets)} targets")
    border = {(r, c) for r in range(size) for c in range(size) if r in (0, size - 1) or c in (0, size - 1)}
    if not border <= walls:
        raise ValueError("grid: the outer border must be wall")
    return Room(size, frozenset(walls), tuple(sorted(targets)), tuple(sorted(boxes)), players[0])


def play_room(room: Room, words: Sequence[str | None]) -> Room:
    """The room after playing ``words`` in order (None: an invalid turn, which moves nothing).
    ValueError if the room is solved before the last word (the episode would have ended there)."""
    for i, word in enumerate(words):
        if room.solved:
            raise ValueError(f"the room is solved after {i} of the {len(words)} actions; the episode ends there")
        if word is not None:
            room = room.move(word)[0]
    return room


def solve(room: Room, max_moves: int) -> tuple[str, ...] | None:
    """A shortest move sequence solving ``room`` in at most ``max_moves`` moves (breadth-first
    search over (player, boxes) states), ``()`` if already solved, None if there is none."""
    if room.solved:
        return ()
    start = (room.player, room.boxes)
    parent: dict = {start: None}
    frontier = deque([(room, 0)])
    while frontier:
        cur, depth = frontier.popleft()
        if depth >= max_moves:
            continue
        for word in MOVES:
            nxt, moved = cur.move(word)
            key = (nxt.player, nxt.boxes)
            if not moved or key in parent:
                continue
            parent[key] = ((cur.player, cur.boxes), word)
            if nxt.solved:
                path = []
                while parent[key] is not None:
                    key, w = parent[key]
                    path.append(w)
                return tuple(reversed(path))
            frontier.append((nxt, depth + 1))
    return None


def _carve_floor(rng: np.random.Generator, size: int) -> list[Cell]:
    lo, hi = 1, size - 2
    clamp = lambda v: min(max(v, lo), hi)  # noqa: E731
    dirs = list(MOVES.values())
    pos = (int(rng.integers(lo, hi + 1)), int(rng.integers(lo, hi + 1)))
    d = dirs[int(rng.integers(4))]
    floor = {pos}
    for _ in range(int(1.7 * (2 * size))):
        if rng.random() >= _P_KEEP_DIRECTION:
            d = dirs[int(rng.integers(4))]
        pos = (clamp(pos[0] + d[0]), clamp(pos[1] + d[1]))
        side = (d[1], d[0]) if rng.random() < 0.5 else (-d[1], -d[0])
        floor.add(pos)
        floor.add((clamp(pos[0] + side[0]), clamp(pos[1] + side[1])))
    return sorted(floor)


@functools.lru_cache(maxsize=4096)
def generate_room(seed: int, size: int = 6, num_boxes: int = 1, max_steps: int = 15) -> tuple[Room, tuple[str, ...]]:
    """The room of map ``seed`` and its shortest solution (module doc: generation, certificate)."""
    check_seed(seed)
    rng = np.random.default_rng(seed)
    everything = {(r, c) for r in range(size) for c in range(size)}
    for _ in range(_MAX_DRAWS):
        floor = _carve_floor(rng, size)
        if len(floor) < 2 * num_boxes + 2:
            continue
        pick = [floor[i] for i in rng.permutation(len(floor))[: 2 * num_boxes + 1]]
        room = Room(
            size,
            frozenset(everything - set(floor)),
            tuple(sorted(pick[:num_boxes])),
            tuple(sorted(pick[num_boxes : 2 * num_boxes])),
            pick[-1],
        )
        plan = solve(room, max_steps)
        if plan:  # None: unsolvable within the budget; (): already solved
            return room, plan
    raise RuntimeError(f"seed {seed}: no solvable {size}x{size} room with {num_boxes} boxes in {_MAX_DRAWS} draws")


@dataclass(frozen=True)
class SokobanConfig:
    """Parameters of :class:`SokobanEnv` (defaults: verl-agent's Sokoban examples)."""

    size: int = 6
    """Side of the square room, outer wall included (verl-agent ``dim_room`` 6)."""
    num_boxes: int = 1
    """Boxes (and targets) per room."""
    max_steps: int = 15
    """Action budget: turns per episode, invalid ones included; every room is solvable within it."""
    reward: str = "gym_sokoban"
    """Reward scheme: ``gym_sokoban`` (verl-agent's) or ``binary`` (module doc)."""
    invalid_penalty: float = 0.1
    """Subtracted from the turn's reward when the action is invalid (verl-agent 0.1)."""

    def __post_init__(self) -> None:
        check_number("size", self.size, 5, 16, integer=True)
        check_number("num_boxes", self.num_boxes, 1, 4, integer=True)
        check_budget(self.max_steps)
        REWARD_SCHEMES.check(self.reward, where="reward")
        check_penalty(self.invalid_penalty)


class SokobanEnv(TextEnv):
    """Text Sokoban (module doc). ``SokobanEnv(SokobanConfig(...))`` or ``make_env("sokoban", ...)``."""

    name = "sokoban"
    description = "push the box onto the target in a 6x6 room within 15 moves (verl-agent's setting)"
    config_type = SokobanConfig
    action_words = tuple(MOVES)

    def __init__(self, config: SokobanConfig | None = None):
        super().__init__(config or SokobanConfig())
        self._scheme = REWARD_SCHEMES[self.config.reward]
        self._room: Room | None = None

    def _generated(self, seed: int) -> tuple[Room, tuple[str, ...]]:
        c = self.config
        return generate_room(seed, c.size, c.num_boxes, c.max_steps)

    def _reset_world(self, seed: int) -> int:
        self._room = self._generated(seed)[0]
        return self.config.max_steps

    def _noop_reward(self) -> float:
        return self._scheme.step

    def _apply(self, word: str) -> tuple[float, bool, bool, dict]:
        before = self._room
        after, moved = before.move(word)
        self._room = after
        s = self._scheme
        reward = s.step
        if after.boxes_on_target > before.boxes_on_target:
            reward += s.box_on
        elif after.boxes_on_target < before.boxes_on_target:
            reward += s.box_off
        if after.solved:
            reward += s.solved
        extra = {"moved": moved, "pushed": after.boxes != before.boxes, "boxes_on_target": after.boxes_on_target}
        return reward, after.solved, False, extra

    def _observe(self) -> str:
        return render_room(self._room)

    def _instruction(self) -> str:
        boxes = "the box onto the target" if self.config.num_boxes == 1 else "every box onto a target"
        return (
            f"Push {boxes}. Symbols: {WALL} wall, {FLOOR} floor, {TARGET} target, {BOX} box, "
            f"{BOX_ON_TARGET} box on target, {PLAYER} you, {PLAYER_ON_TARGET} you on a target. Walking into a box "
            "pushes it one cell if the cell behind it is free; boxes cannot be pulled. "
            f"Actions: {', '.join(self.action_words)}."
        )

    def _world_state(self) -> dict:
        return {"grid": render_room(self._room)}

    def _load_world(self, snap) -> int:
        world = snap["world"]
        if set(world) != {"grid"}:
            raise ValueError(f"snapshot.world: expected the key 'grid', got {sorted(world)}")
        try:
            room = parse_room(world["grid"])
        except ValueError as exc:
            raise ValueError(f"snapshot.world.{exc}") from None
        start = self._generated(snap["seed"])[0]
        if (room.size, room.walls, room.targets) != (start.size, start.walls, start.targets):
            raise ValueError(f"snapshot.world: walls and targets are not those of the room of seed {snap['seed']}")
        budget = self.config.max_steps
        n = len(snap["history"])
        if n > budget or snap["success"] != room.solved or snap["done"] != (room.solved or n >= budget):
            raise ValueError("snapshot: done/success flags or history length disagree with the grid and the budget")
        try:
            played = play_room(start, snap["history"])
        except ValueError as exc:
            raise ValueError(f"snapshot.history: {exc} (seed {snap['seed']})") from None
        for field in ("player", "boxes"):
            have, want = getattr(room, field), getattr(played, field)
            if have != want:
                raise ValueError(
                    f"snapshot.world.{field}: the grid has {field} {have}, but re-playing the snapshot's {n} actions "
                    f"from seed {snap['seed']} gives {want}; refusing to restore (the snapshot was edited or does not "
                    f"belong to this environment version)"
                )
        self._room = room
        return budget

    def expert_actions(self, seed: int) -> list[str]:
        """The BFS-shortest solution of the room of ``seed`` (certified within ``max_steps``)."""
        return list(self._generated(check_seed(seed))[1])

    @property
    def room(self) -> Room:
        """The current state."""
        self._require_episode()
        return self._room
