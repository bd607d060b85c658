"""The text-environment protocol: episodes driven by action text, with exact state restore.

An environment (:class:`TextEnv`) is played one turn at a time by a text policy:

* ``reset(seed) -> observation`` starts the episode that ``seed`` determines (the same seed gives
  the same episode on every machine and in every process);
* ``step(action_text) -> (observation, reward, done, info)`` plays one turn;
* ``instruction`` is the task text, ``action_words`` the legal actions, ``render()`` the text
  rendering of the current observation (what ``reset``/``step`` returned);
* ``snapshot()`` returns the episode state as plain JSON data, ``restore(snapshot)`` puts any
  instance with the same parameters into exactly that state, and ``replay(seed, actions)``
  re-executes an action sequence from the seed. Both give bit-identical observations, rewards
  and futures (tests/llm_harness/envs check it on every registered environment);
* ``expert_actions(seed)`` is a verified successful action sequence for the seed's episode.

**Action format** (one format for every environment, :func:`parse_action`): a reply is either a
bare action word (the whole reply, surrounding whitespace ignored) or contains exactly one
``<action>WORD</action>`` block (any other text, e.g. ``<think>...</think>``, is ignored).
Matching is case-insensitive. Anything else -- no word, an unknown word, two action blocks, an
unclosed tag -- is an *invalid* action.

**Invalid actions** are a no-op on the world: the turn is spent (it counts against the step
budget, so a policy cannot stall forever), the reward is the environment's no-op reward minus
``invalid_penalty`` (0.1 by default, verl-agent's ``invalid_action_penalty_coef``), and the
episode's counter ``invalid_actions`` (also in ``info``) goes up. They never raise (stepping an
episode that has ended is a caller's bug and raises RuntimeError).

**Snapshot format** (plain data: dict / list / str / int / float / bool / None, so checkpoints load
it with ``json``, never pickle)::

    {"format": "llm_harness.envs.snapshot/1", "env": <registry name>, "params": <env config>,
     "seed": <int>, "history": [<action word or null for an invalid turn>, ...],
     "done": <bool>, "success": <bool>, "world": <environment-specific state>,
     "checksum": <sha256 of the canonical JSON of every other field>}

``restore`` refuses (ValueError naming the problem) a snapshot that is not such a mapping, whose
checksum does not match (corrupted or edited), that was taken by another environment or with
other parameters, or whose world state is inconsistent.
"""

from __future__ import annotations

import abc
import dataclasses
import hashlib
import json
import math
import re
from typing import Any, ClassVar, Iterable, Mapping, Sequence

from vsr_util.checks import check_number

__all__ = [
    "SNAPSHOT_FORMAT",
    "TextEnv",
    "canonical_json",
    "check_budget",
    "check_penalty",
    "check_seed",
    "parse_action",
    "seed_range",
]

SNAPSHOT_FORMAT = "llm_harness.envs.snapshot/1"
_SNAPSHOT_KEYS = frozenset({"format", "env", "params", "seed", "history", "done", "success", "world", "checksum"})
_ACTION_BLOCK = re.compile(r"<action>(.*?)</action>", re.IGNORECASE | re.DOTALL)
_ACTION_TAG = re.compile(r"</?action>", re.IGNORECASE)


# ----------------------------------------------------------------------------- small checks
def check_seed(seed: object, where: str = "seed") -> int:
    """``seed`` as an int >= 0 (ValueError naming ``where`` otherwise; bools are refused)."""
    check_number(where, seed, 0, integer=True)
    return int(seed)


def check_budget(max_steps: object, where: str = "max_steps") -> int:
    """An action budget (turns per episode) as an int >= 1; 0 or less is refused by name."""
    check_number(where, max_steps, integer=True)
    if max_steps < 1:
        raise ValueError(f"{where}: the action budget must be >= 1 turn, got {max_steps}")
    return int(max_steps)


def check_penalty(penalty: object, where: str = "invalid_penalty") -> float:
    """An invalid-action penalty: a finite number >= 0."""
    check_number(where, penalty, 0)
    return float(penalty)


def seed_range(start: int, count: int, where: str = "seeds") -> range:
    """The map seeds ``start, start + 1, ..., start + count - 1`` as a lazy ``range`` (an empty range is refused;
    a billion seeds cost nothing until iterated).

    The evaluation protocol of VSR D.3 uses a fixed set of map seeds per environment/level.
    """
    check_seed(start, f"{where}.start")
    check_number(f"{where}.count", count, integer=True)
    if count < 1:
        raise ValueError(f"{where}: the seed range is empty (count must be >= 1, got {count})")
    return range(start, start + count)


def parse_action(text: object, words: Sequence[str]) -> str | None:
    """The legal action word that ``text`` names, or None when the action is invalid (module doc).

    ``words`` are the legal words in lower case. A bare reply must be exactly one word; a reply
    with tags must hold exactly one ``<action>...</action>`` block whose content is a word.
    """
    if not isinstance(text, str):
        return None
    blocks = _ACTION_BLOCK.findall(text)
    if blocks:
        if len(blocks) != 1 or len(_ACTION_TAG.findall(text)) != 2:
            return None
        candidate = blocks[0]
    elif _ACTION_TAG.search(text):
        return None  # an unclosed or stray tag
    else:
        candidate = text
    candidate = candidate.strip().lower()
    return candidate if candidate in words else None


def _check_plain(value: Any, where: str) -> None:
    """Refuse anything that is not JSON plain data (and non-finite floats)."""
    if value is None or isinstance(value, (bool, int, str)):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{where}: non-finite float {value!r}")
        return
    if isinstance(value, list):
        for i, v in enumerate(value):
            _check_plain(v, f"{where}[{i}]")
        return
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                raise ValueError(f"{where}: key {k!r} is not a string")
            _check_plain(v, f"{where}.{k}")
        return
    raise ValueError(f"{where}: {type(value).__name__} is not plain data (dict/list/str/int/float/bool/None)")


def canonical_json(value: Any) -> str:
    """The canonical JSON text of plain data (sorted keys, no spaces, NaN refused)."""
    _check_plain(value, "snapshot")
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def _checksum(payload: Mapping[str, Any]) -> str:
    return hashlib.sha256(canonical_json(dict(payload)).encode("ascii")).hexdigest()


# ----------------------------------------------------------------------------- the protocol
class TextEnv(abc.ABC):
    """Base of every text environment (module doc: protocol, action format, snapshots).

    Subclasses set ``name`` (the registry name), ``description``, ``levels`` and ``config_type``
    (a frozen dataclass whose fields ``max_steps`` and ``invalid_penalty`` the base reads) and
    implement the world hooks ``_reset_world``, ``_apply``, ``_observe``, ``_instruction``,
    ``_world_state`` and either ``_load_world`` (direct state restore) or nothing (the default
    restores by re-execution from the seed, then checks the result against the snapshot).
    """

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    levels: ClassVar[tuple[str, ...]] = ()
    config_type: ClassVar[type]
    action_words: tuple[str, ...] = ()

    def __init__(self, config: Any):
        if not isinstance(config, self.config_type):
            raise TypeError(f"config: {type(self).__name__} takes a {self.config_type.__name__}, got {type(config).__name__}")
        self.config = config
        self.invalid_penalty = check_penalty(config.invalid_penalty)
        self._seed: int | None = None
        self._history: list[str | None] = []
        self._done = False
        self._success = False
        self._budget = 0

    # ------------------------------------------------------------------ world hooks
    @abc.abstractmethod
    def _reset_world(self, seed: int) -> int:
        """Build the world of ``seed``; return the episode's action budget (turns)."""

    @abc.abstractmethod
    def _apply(self, word: str) -> tuple[float, bool, bool, dict]:
        """Play a legal action: ``(reward, success, terminated, extra info)``."""

    def _noop_reward(self) -> float:
        """The reward of a turn that changes nothing (an invalid action pays this minus the penalty)."""
        return 0.0

    @abc.abstractmethod
    def _observe(self) -> str:
        """The text observation of the current world."""

    @abc.abstractmethod
    def _instruction(self) -> str:
        """The task text of the current episode."""

    @abc.abstractmethod
    def _world_state(self) -> dict:
        """The environment-specific part of a snapshot (plain data)."""

    def _load_world(self, snap: Mapping[str, Any]) -> int:
        """Put the world into ``snap``'s state and return the episode's action budget. Default:
        re-execute the history from the seed and require the re-executed snapshot to equal
        ``snap`` (so the result is exact by construction)."""
        self.replay(snap["seed"], snap["history"])
        mine = self._payload()
        for key in sorted(mine):
            if mine[key] != snap[key]:
                field = repr(key)
                if key == "world" and isinstance(mine[key], dict):  # name the world's fields (agent_pos, carrying, ...)
                    field = ", ".join(repr(f"world.{k}") for k in sorted(set(mine[key]) | set(snap[key]))
                                      if mine[key].get(k) != snap[key].get(k))
                raise ValueError(
                    f"snapshot: re-executing its {len(snap['history'])} actions from seed {snap['seed']} gives a different "
                    f"{field} (the snapshot was edited or does not belong to this environment version); refusing to restore"
                )
        return self._budget

    # ------------------------------------------------------------------ the episode
    def params(self) -> dict:
        """The environment's parameters as plain data (part of every snapshot)."""
        return {f.name: getattr(self.config, f.name) for f in dataclasses.fields(self.config)}

    def reset(self, seed: int) -> str:
        """Start the episode of ``seed``; returns the first observation."""
        seed = check_seed(seed)
        self._budget = check_budget(self._reset_world(seed))
        self._seed = seed
        self._history = []
        self._done = False
        self._success = False
        return self._observe()

    def _require_episode(self) -> None:
        if self._seed is None:
            raise RuntimeError(f"{self.name}: call reset(seed) before using the episode")

    def step(self, action_text: str | None) -> tuple[str, float, bool, dict]:
        """Play one turn (module doc): ``(observation, reward, done, info)``.

        ``info`` holds ``valid`` (the action parsed), ``action`` (the word or None), ``success``,
        ``invalid_actions`` (this episode's count), ``steps`` (turns played), ``truncated`` (the
        budget ran out without success) and the environment's extra fields.
        """
        self._require_episode()
        if self._done:
            raise RuntimeError(f"{self.name}: the episode has ended; call reset(seed) or restore(snapshot)")
        word = parse_action(action_text, self.action_words)
        if word is None:
            reward, success, terminated, extra = self._noop_reward() - self.invalid_penalty, False, False, {}
        else:
            reward, success, terminated, extra = self._apply(word)
        self._history.append(word)
        self._success = bool(success)
        out_of_budget = len(self._history) >= self._budget
        self._done = bool(success or terminated or out_of_budget)
        info = {
            "valid": word is not None,
            "action": word,
            "success": self._success,
            "invalid_actions": self.invalid_actions,
            "steps": len(self._history),
            "truncated": bool(out_of_budget and not success and not terminated),
            **extra,
        }
        return self._observe(), float(reward), self._done, info

    def replay(self, seed: int, actions: Iterable[str | None]) -> str:
        """Reset to ``seed`` and play ``actions`` (texts, words, or None for invalid turns) in
        order; returns the final observation. Stops with ValueError if the episode ends early."""
        obs = self.reset(seed)
        for i, action in enumerate(actions):
            if self._done:
                raise ValueError(f"actions: the episode of seed {seed} ended after {i} actions; action {i} cannot be played")
            obs = self.step(action)[0]
        return obs

    # ------------------------------------------------------------------ views
    @property
    def instruction(self) -> str:
        """The task text (the BabyAI mission, the Sokoban goal and symbols)."""
        self._require_episode()
        return self._instruction()

    def render(self) -> str:
        """The text rendering of the current observation (what the last reset/step returned)."""
        self._require_episode()
        return self._observe()

    @property
    def seed(self) -> int | None:
        return self._seed

    @property
    def history(self) -> tuple[str | None, ...]:
        """The parsed actions of this episode (None marks an invalid turn)."""
        return tuple(self._history)

    @property
    def done(self) -> bool:
        return self._done

    @property
    def success(self) -> bool:
        """True once the task is solved (the success criterion of the environment)."""
        return self._success

    @property
    def invalid_actions(self) -> int:
        """Invalid turns in this episode."""
        return sum(1 for w in self._history if w is None)

    @property
    def max_steps(self) -> int:
        """This episode's action budget (turns)."""
        self._require_episode()
        return self._budget

    # ------------------------------------------------------------------ snapshots
    def _payload(self) -> dict:
        return {
            "format": SNAPSHOT_FORMAT,
            "env": self.name,
            "params": self.params(),
            "seed": self._seed,
            "history": list(self._history),
            "done": self._done,
            "success": self._success,
            "world": self._world_state(),
        }

    def snapshot(self) -> dict:
        """The episode state as plain JSON data with a checksum (module doc)."""
        self._require_episode()
        payload = self._payload()
        return {**payload, "checksum": _checksum(payload)}

    def restore(self, snapshot: Mapping[str, Any]) -> str:
        """Put this environment into ``snapshot``'s state; returns the observation there."""
        snap = self._validated(snapshot)
        self._budget = check_budget(self._load_world(snap))
        self._seed = snap["seed"]
        self._history = list(snap["history"])
        self._done = snap["done"]
        self._success = snap["success"]
        return self._observe()

    def _validated(self, snapshot: Any) -> dict:
        if not isinstance(snapshot, Mapping):
            raise ValueError(f"snapshot: must be a mapping, got {type(snapshot).__name__}")
        snap = dict(snapshot)
        keys = set(snap)
        if keys != _SNAPSHOT_KEYS:
            missing, extra = sorted(_SNAPSHOT_KEYS - keys), sorted(keys - _SNAPSHOT_KEYS)
            raise ValueError(f"snapshot: not an environment snapshot (missing keys {missing}, unexpected keys {extra})")
        if snap["format"] != SNAPSHOT_FORMAT:
            raise ValueError(f"snapshot: unsupported format {snap['format']!r} (expected {SNAPSHOT_FORMAT!r})")
        payload = {k: v for k, v in snap.items() if k != "checksum"}
        try:
            digest = _checksum(payload)
        except ValueError as exc:
            raise ValueError(f"snapshot: corrupted ({exc})") from None
        if snap["checksum"] != digest:
            raise ValueError("snapshot: checksum mismatch -- the snapshot is corrupted or was edited; refusing to restore")
        if snap["env"] != self.name:
            raise ValueError(f"snapshot: taken by environment {snap['env']!r}, cannot restore into {self.name!r}")
        if snap["params"] != self.params():
            raise ValueError(f"snapshot: taken with params {snap['params']}, this environment has {self.params()}")
        check_seed(snap["seed"], "snapshot.seed")
        history = snap["history"]
        if not isinstance(history, list) or any(w is not None and w not in self.action_words for w in history):
            raise ValueError(f"snapshot.history: must be a list of action words {list(self.action_words)} or null")
        for key in ("done", "success"):
            if not isinstance(snap[key], bool):
                raise ValueError(f"snapshot.{key}: must be a bool, got {snap[key]!r}")
        if not isinstance(snap["world"], dict):
            raise ValueError("snapshot.world: must be a mapping")
        return snap

    # ------------------------------------------------------------------ expert
    @abc.abstractmethod
    def expert_actions(self, seed: int) -> list[str]:
        """A successful action sequence for the episode of ``seed`` (verified; does not touch
        this instance's episode)."""
