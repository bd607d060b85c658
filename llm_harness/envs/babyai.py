"""BabyAI levels of the VSR paper through ``minigrid`` 3.x, as text.

Levels (:data:`BABYAI_LEVELS`): ``SynthLoc`` (``BabyAI-SynthLoc-v0``), ``OneRoomS8``
(``BabyAI-OneRoomS8-v0``) and ``MiniBoss`` (``BabyAI-MiniBossLevel-v0``). ``minigrid`` is an
optional dependency (the ``agents`` extra); without it, building a BabyAI environment raises an
ImportError that says how to install it, and the rest of ``llm_harness.envs`` still works.

* **Instruction**: the level's mission string (``env.mission``), e.g. ``"pick up the ball"``.
* **Observation** (:func:`describe_view`): a text description of exactly what minigrid gives the
  agent -- the 7x7 egocentric partial view of ``MiniGridEnv.gen_obs()`` (walls and closed doors
  occlude, as in minigrid) plus the facing direction -- with every visible non-empty cell named
  by type, colour and door state (open / closed / locked) and placed in steps forward and
  left/right of the agent. The first line gives the facing direction (east/south/west/north,
  minigrid's ``agent_dir`` 0..3) and the carried object (minigrid shows it in the agent's own
  cell), the second the cell straight ahead. Walls are grouped into straight runs
  ("walls from A to B"). :func:`parse_view` inverts the description back to the cells, which is
  how the tests check it is faithful. Empty floor and occluded cells are both left unsaid.
* **Actions**: ``left``, ``right`` (turn), ``forward``, ``pickup``, ``drop``, ``toggle`` --
  minigrid's action names. Its ``done`` action is left out: it does nothing in these levels, and
  a text agent would read it as "end the episode".
* **Reward**: the level's own success criterion (its instruction verifier) as a binary terminal
  reward. minigrid pays ``1 - 0.9 * step_count / max_steps`` on success; we map any success to
  1.0 (the raw value is in ``info["level_reward"]``) and everything else to 0. The episode ends on
  success, on the verifier's failure, or when the action budget runs out.
* **Budget**: ``max_steps`` turns; ``None`` keeps the level's own (minigrid sets it per episode
  from the maze size and the number of navigations the mission needs: 64 for OneRoomS8, 576 per
  navigation for SynthLoc, 100 per navigation for MiniBoss). Invalid turns count against it but
  do not advance minigrid's step counter.
* **Expert** (:meth:`BabyAIEnv.expert_actions`): minigrid's BabyAI bot
  (``minigrid.utils.baby_ai_bot.BabyAIBot``), run on a private copy of the episode and checked to
  succeed within the budget.
* **Exact restore** -- *by re-execution*. A BabyAI level's instruction verifier holds references
  to the world's objects, the positions it has tracked and the progress of sequenced sub-goals
  (``a_done``/``b_done``, ``preCarrying``); these are private objects of minigrid's classes, so
  capturing them as plain data would mean re-implementing the verifier. ``restore`` therefore
  resets to the snapshot's seed and re-executes its action history (minigrid's steps are
  deterministic: the RNG is only used while generating the level), then checks the re-executed
  state against the plain-data capture the snapshot carries -- full grid encoding, agent
  position and direction, carried object, step count, budget, mission and the RNG state -- and
  refuses a mismatch. Restoring costs one level generation plus one minigrid step per past action
  (milliseconds).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from llm_harness.envs.base import TextEnv, check_budget, check_penalty, check_seed
from vsr_util.registry import Registry

__all__ = ["ACTION_WORDS", "BABYAI_LEVELS", "BabyAIConfig", "BabyAIEnv", "DIRECTIONS", "describe_view", "parse_view", "require_minigrid"]

#: level name -> minigrid environment id
BABYAI_LEVELS: Registry[str] = Registry(
    "BabyAI level",
    {"SynthLoc": "BabyAI-SynthLoc-v0", "OneRoomS8": "BabyAI-OneRoomS8-v0", "MiniBoss": "BabyAI-MiniBossLevel-v0"},
)
ACTION_WORDS = ("left", "right", "forward", "pickup", "drop", "toggle")
#: minigrid ``agent_dir`` -> compass word (0 = +x = east, 1 = +y = south, ...)
DIRECTIONS = ("east", "south", "west", "north")

# minigrid.core.constants, repeated here so that describing/parsing needs no minigrid import
_OBJECTS = ("unseen", "empty", "wall", "floor", "door", "key", "ball", "box", "goal", "lava", "agent")
_COLORS = ("red", "green", "blue", "purple", "yellow", "grey")
_DOOR_STATES = ("open", "closed", "locked")
_WALL = (2, 5, 0)  # minigrid's walls are grey
_VIEW = 7


def require_minigrid():
    """Import ``minigrid`` (and register its environments) or explain how to install it."""
    os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")  # minigrid imports pygame
    try:
        import gymnasium
        import minigrid
    except ImportError as exc:
        raise ImportError(
            f"BabyAI environments need minigrid>=3.0,<4 and gymnasium>=1.0 ({exc}); "
            "install them with: pip install 'vsr-toolkit[agents]'"
        ) from None
    if not minigrid.__version__.startswith("3."):
        raise ImportError(f"BabyAI environments need minigrid 3.x, found {minigrid.__version__}")
    return gymnasium, minigrid


# ----------------------------------------------------------------------------- the text view
def _steps(n: int) -> str:
    return "1 step" if n == 1 else f"{n} steps"


def _place(f: int, l: int) -> str:
    """Where the cell ``f`` steps forward and ``l`` steps right (negative: left) of the agent is."""
    side = f"{_steps(abs(l))} {'left' if l < 0 else 'right'}"
    if l == 0:
        return f"{_steps(f)} forward"
    return side if f == 0 else f"{_steps(f)} forward and {side}"


def _name(cell: tuple[int, int, int]) -> str:
    t, c, s = cell
    kind = _OBJECTS[t]
    if kind == "wall":
        return "a wall"
    if kind == "door":
        return f"a {_DOOR_STATES[s]} {_COLORS[c]} door"
    return f"a {_COLORS[c]} {kind}"


def _cells(image: np.ndarray) -> dict[tuple[int, int], tuple[int, int, int]]:
    """Visible non-empty cells of a ``gen_obs`` image ``image[x, y] = (type, colour, state)`` keyed
    by (steps forward, steps right); the agent sits at ``x = 3, y = 6`` facing ``y = 0``."""
    out = {}
    for x in range(_VIEW):
        for y in range(_VIEW):
            t, c, s = (int(v) for v in image[x, y])
            if t > 1 and (x, y) != (_VIEW // 2, _VIEW - 1):  # not unseen / empty / the agent's cell
                out[(_VIEW - 1 - y, x - _VIEW // 2)] = (t, c, s)
    return out


def _wall_runs(walls: set[tuple[int, int]]) -> list[list[tuple[int, int]]]:
    """Walls as straight runs: rows first (runs of >= 2), then columns (>= 2), then single cells."""
    left, runs = set(walls), []
    for axis in (1, 0):  # 1: along a row (lateral varies), 0: along a column (forward varies)
        for cell in sorted(left, key=lambda p: (p[1 - axis], p[axis])):
            if cell not in left:
                continue
            run = [cell]
            while True:
                nxt = (run[-1][0] + (axis == 0), run[-1][1] + (axis == 1))
                if nxt not in left:
                    break
                run.append(nxt)
            if len(run) >= 2:
                runs.append(run)
                left -= set(run)
    runs.extend([p] for p in sorted(left))
    return runs


def describe_view(image: np.ndarray, direction: int) -> str:
    """The text observation of a minigrid ``gen_obs()`` view (module doc)."""
    image = np.asarray(image)
    if image.shape != (_VIEW, _VIEW, 3):
        raise ValueError(f"image: expected a {_VIEW}x{_VIEW}x3 minigrid view, got shape {image.shape}")
    if not 0 <= int(direction) < 4:
        raise ValueError(f"direction: must be 0..3, got {direction}")
    held = tuple(int(v) for v in image[_VIEW // 2, _VIEW - 1])
    carrying = _name(held) if held[0] > 1 else "nothing"
    cells = _cells(image)
    ahead = _name(cells[(1, 0)]) if (1, 0) in cells else "empty floor"
    lines = [f"You are facing {DIRECTIONS[int(direction)]}, carrying {carrying}.", f"In front of you: {ahead}.", "You see:"]
    order = sorted(cells, key=lambda p: (p[0], p[1]))
    lines += [f"- {_name(cells[p])} {_place(*p)}" for p in order if cells[p][0] != _WALL[0]]
    for run in _wall_runs({p for p in order if cells[p][0] == _WALL[0]}):
        lines.append(f"- a wall {_place(*run[0])}" if len(run) == 1 else f"- walls from {_place(*run[0])} to {_place(*run[-1])}")
    if len(lines) == 3:
        lines[-1] = "You see nothing else."
    return "\n".join(lines)


_PLACE = re.compile(r"^(?:(\d+) steps? forward)?(?: and )?(?:(\d+) steps? (left|right))?$")
_OBJECT = re.compile(r"^a (?:(open|closed|locked) )?(\w+) (\w+)$")


def _parse_place(text: str) -> tuple[int, int]:
    m = _PLACE.match(text)
    if not m or not (m.group(1) or m.group(2)):
        raise ValueError(f"view: cannot read the position {text!r}")
    f = int(m.group(1) or 0)
    l = int(m.group(2) or 0) * (-1 if m.group(3) == "left" else 1)
    return f, l


def _parse_object(text: str) -> tuple[int, int, int]:
    if text == "a wall":
        return _WALL
    m = _OBJECT.match(text)
    if not m or m.group(2) not in _COLORS or m.group(3) not in _OBJECTS or (m.group(1) is not None) != (m.group(3) == "door"):
        raise ValueError(f"view: cannot read the object {text!r}")
    state = _DOOR_STATES.index(m.group(1)) if m.group(1) else 0
    return _OBJECTS.index(m.group(3)), _COLORS.index(m.group(2)), state


def parse_view(text: str) -> tuple[int, tuple[int, int, int] | None, dict[tuple[int, int], tuple[int, int, int]]]:
    """Invert :func:`describe_view`: ``(direction, carried cell or None, {(forward, right): cell})``."""
    lines = text.split("\n")
    head = re.match(r"^You are facing (\w+), carrying (.+)\.$", lines[0])
    if not head or head.group(1) not in DIRECTIONS:
        raise ValueError(f"view: cannot read the first line {lines[0]!r}")
    carrying = None if head.group(2) == "nothing" else _parse_object(head.group(2))
    cells: dict[tuple[int, int], tuple[int, int, int]] = {}
    for line in lines[3:]:
        body = line[2:]
        m = re.match(r"^walls from (.+) to (.+)$", body)
        if m:
            (f0, l0), (f1, l1) = _parse_place(m.group(1)), _parse_place(m.group(2))
            if f0 != f1 and l0 != l1:
                raise ValueError(f"view: a wall run must be straight: {line!r}")
            for f in range(f0, f1 + 1):
                for l in range(l0, l1 + 1):
                    cells[(f, l)] = _WALL
            continue
        m = re.match(r"^(a (?:\w+ )?\w+(?: \w+)?) ((?:\d+ steps?) .+)$", body)
        if not m:
            raise ValueError(f"view: cannot read the line {line!r}")
        cells[_parse_place(m.group(2))] = _parse_object(m.group(1))
    return DIRECTIONS.index(head.group(1)), carrying, cells


# ----------------------------------------------------------------------------- the environment
@dataclass(frozen=True)
class BabyAIConfig:
    """Parameters of :class:`BabyAIEnv`."""

    level: str = "OneRoomS8"
    """BabyAI level: SynthLoc, OneRoomS8 or MiniBoss (``BABYAI_LEVELS``)."""
    max_steps: int | None = None
    """Action budget in turns (invalid ones included); None = the level's own minigrid budget."""
    invalid_penalty: float = 0.1
    """Subtracted from the turn's reward when the action is invalid (verl-agent 0.1)."""

    def __post_init__(self) -> None:
        BABYAI_LEVELS.check(self.level, where="level")
        if self.max_steps is not None:
            check_budget(self.max_steps)
        check_penalty(self.invalid_penalty)


class BabyAIEnv(TextEnv):
    """A BabyAI level as text (module doc). ``make_env("babyai", level="SynthLoc")``."""

    name = "babyai"
    description = "BabyAI missions in minigrid, partial 7x7 view described in text (VSR's levels)"
    levels = tuple(BABYAI_LEVELS)
    config_type = BabyAIConfig
    action_words = ACTION_WORDS

    def __init__(self, config: BabyAIConfig | None = None):
        super().__init__(config or BabyAIConfig())
        require_minigrid()
        self._env = self._make()
        self._obs: dict | None = None

    def _make(self):
        gymnasium, _ = require_minigrid()
        kwargs = {} if self.config.max_steps is None else {"max_steps": self.config.max_steps}
        return gymnasium.make(BABYAI_LEVELS[self.config.level], disable_env_checker=True, **kwargs).unwrapped

    @staticmethod
    def _reset_quietly(env, seed: int) -> dict:
        with contextlib.redirect_stdout(io.StringIO()):  # level generation prints its rejections
            return env.reset(seed=seed)[0]

    def _reset_world(self, seed: int) -> int:
        self._obs = self._reset_quietly(self._env, seed)
        return int(self._env.max_steps)

    def _apply(self, word: str) -> tuple[float, bool, bool, dict]:
        # minigrid's own truncation (its step_count reaching max_steps) implies that our budget,
        # which also counts invalid turns, is spent: the base class reports it as truncation
        obs, reward, terminated, _, _ = self._env.step(self._env.actions[word])
        self._obs = obs
        success = bool(terminated and reward > 0)
        return (1.0 if success else 0.0), success, bool(terminated), {"level_reward": float(reward)}

    def _observe(self) -> str:
        return describe_view(self._obs["image"], self._obs["direction"])

    def _instruction(self) -> str:
        return str(self._env.mission)

    def _world_state(self) -> dict:
        env = self._env
        grid = env.grid.encode()
        carrying = None if env.carrying is None else [int(v) for v in env.carrying.encode()]
        return {
            "grid": grid.tobytes().hex(),
            "grid_shape": [int(v) for v in grid.shape],
            "agent_pos": [int(v) for v in env.agent_pos],
            "agent_dir": int(env.agent_dir),
            "carrying": carrying,
            "step_count": int(env.step_count),
            "max_steps": int(env.max_steps),
            "mission": str(env.mission),
            "rng": _plain(env.np_random.bit_generator.state),
        }

    def expert_actions(self, seed: int) -> list[str]:
        """The BabyAI bot's actions for the episode of ``seed``, verified to succeed in budget."""
        from minigrid.utils.baby_ai_bot import BabyAIBot

        seed = check_seed(seed)
        env = self._make()
        self._reset_quietly(env, seed)
        bot = BabyAIBot(env)
        words: list[str] = []
        for _ in range(int(env.max_steps)):
            word = env.actions(bot.replan()).name
            if word not in ACTION_WORDS:
                break  # the bot says "done" without having succeeded
            _, reward, terminated, truncated, _ = env.step(env.actions[word])
            words.append(word)
            if terminated and reward > 0:
                return words
            if terminated or truncated:
                break
        raise RuntimeError(f"expert: the BabyAI bot did not solve {self.config.level} seed {seed} within {env.max_steps} steps")


def _plain(value: Any) -> Any:
    """numpy's bit-generator state (nested dicts of ints and strings) as plain data."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (np.integer, int)) and not isinstance(value, bool):
        return int(value)
    return value
