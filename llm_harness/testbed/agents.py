"""CPU test-bed agents: environment families, the evaluation and training seeds, and the SFT
demonstrations.

A test-bed agent is the arithmetic test bed's kind of model (a ~1M-parameter Qwen2 with a
character tokenizer, ``model.py`` / ``tokenizer.py``) trained by the same deterministic SFT loop
(``sft.py``) to act in a text environment of ``llm_harness.envs``: its input at every turn is
:func:`llm_harness.envs.prompt.render_agent_prompt` of the turn (the multi-turn engine's format),
its reply the bare action word followed by ``<eos>``.

* **Families** (:data:`AGENT_FAMILIES`, keyed by the environment's registry name): the rendering
  alphabet (printable ASCII and newline, plus Sokoban's ``√``), the prompt's history ``window``,
  the model's positions (``context``), the default level and the build's training defaults.
* **Seeds, defined here only.** :data:`EVAL_SEEDS` are the 128 fixed evaluation map seeds
  ``0 .. 127`` of every card (the VSR paper's protocol, D.3); training uses map seeds from
  :data:`TRAIN_SEED_START` = 1,000,000 on (:func:`train_seeds`), so the two sets are disjoint by
  construction. A training seed whose first prompt (instruction + initial observation) equals
  that of an evaluation seed of the same level is also left out -- the seeds differ but the room
  is the same (32 of the first 10,000 Sokoban training seeds; :class:`AgentSFTData` lists them).
* **Demonstrations**: ``expert_actions(seed)`` (Sokoban: BFS-shortest; BabyAI: the BabyAI bot)
  played out; one SFT sample per turn: prompt = the turn's rendered prompt, target = the action
  word (``encode_sft_batch`` appends ``<eos>`` and puts the loss on the word and ``<eos>`` only).
* **Order**: the samples of training seeds ``0 .. n-1`` (in seed order, then turn order) form a
  pool; epoch ``e`` visits it in the order ``numpy.random.default_rng(data_seed(seed, e))
  .permutation``; step ``s`` takes the next ``batch_size`` samples of that stream. The batch of a
  step depends only on ``(seed, s, batch_size, pool)``, never on the run's length, so the
  constant-schedule prefix invariance of ``sft.py`` (one run saves low/mid/high) still holds.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np

from llm_harness.envs import ENVS, make_env, seed_range
from llm_harness.envs.base import TextEnv, check_budget
from llm_harness.envs.prompt import Turn, render_agent_prompt
from llm_harness.testbed.sft import data_seed
from vsr_util.checks import check_number
from vsr_util.registry import Registry

__all__ = [
    "AGENT_FAMILIES",
    "ASCII_TEXT",
    "EVAL_SEEDS",
    "TRAIN_SEED_START",
    "AgentFamily",
    "AgentSFTData",
    "build_sft_data",
    "demonstration",
    "family_env",
    "train_seeds",
]

#: newline and printable ASCII (space .. ~): every agent alphabet contains it
ASCII_TEXT = "\n" + "".join(chr(c) for c in range(32, 127))
#: the 128 fixed evaluation map seeds of every agent card (VSR D.3)
EVAL_SEEDS: tuple[int, ...] = tuple(seed_range(0, 128, "eval_seeds"))
#: training map seeds are TRAIN_SEED_START, TRAIN_SEED_START + 1, ... (disjoint from EVAL_SEEDS)
TRAIN_SEED_START = 1_000_000
assert max(EVAL_SEEDS) < TRAIN_SEED_START


def train_seeds(n: int) -> range:
    """The first ``n`` training map seeds (before dropping rooms equal to an evaluation room)."""
    return seed_range(TRAIN_SEED_START, n, "train_seeds")


@dataclass(frozen=True)
class AgentFamily:
    """What an environment family's test-bed agent is built from (module doc)."""

    env: str
    """``llm_harness.envs.ENVS`` name."""
    alphabet: str
    """Characters of the tokenizer (covers every rendered instruction and observation, tested)."""
    window: int
    """``render_agent_prompt`` history window of the agent's prompts."""
    context: int
    """``max_position_embeddings`` of the model (prompt + reply), checked against the prompts."""
    level: str | None = None
    """Default level (None: the environment has no levels)."""
    save_steps: tuple[int, ...] = ()
    """Default optimizer steps of the low / mid / high checkpoints."""
    n_train_seeds: int = 5000
    """Default number of training map seeds in the demonstration pool."""
    max_new_tokens: int = 8
    """Reply budget in tokens (the longest action word + ``<eos>`` fits with room to spare)."""
    max_steps: int | Mapping[str, int] | None = None
    """Action budget (turns) of the family's environment: one for every level, or ``{level: budget}`` (levels
    not named keep the environment's own); None = the environment's own."""
    curve_checkpoints: tuple[str, ...] = ("low", "mid", "high")
    """Default checkpoints whose card has the whole continuation curve (the others: α = 0 only)."""
    notes: str = ""
    """Why these settings (written into the card)."""

    def __post_init__(self) -> None:
        ENVS.check(self.env, where="env")
        for name in ("window", "context", "n_train_seeds", "max_new_tokens"):
            check_number(name, getattr(self, name), 0 if name == "window" else 1, integer=True)
        if isinstance(self.max_steps, Mapping):
            object.__setattr__(self, "max_steps", MappingProxyType(dict(self.max_steps)))
            for lv, budget in self.max_steps.items():
                if lv not in ENVS[self.env].levels:
                    raise ValueError(f"max_steps: {self.env} has no level {lv!r}; levels: {list(ENVS[self.env].levels) or 'none'}")
                check_budget(budget)
        elif self.max_steps is not None:
            check_budget(self.max_steps)

    def env_params(self, level: str | None) -> dict[str, Any]:
        """``make_env`` parameters for ``level`` (the family's default when None) and the family's budget."""
        level = self.level if level is None else level
        steps = self.max_steps.get(level) if isinstance(self.max_steps, Mapping) else self.max_steps
        budget = {} if steps is None else {"max_steps": steps}
        if ENVS[self.env].levels:
            return {"level": level, **budget}
        if level is not None:
            raise ValueError(f"level: the {self.env} environment has no levels, got {level!r}")
        return budget


AGENT_FAMILIES: Registry[AgentFamily] = Registry("test-bed agent family", {
    "sokoban": AgentFamily(
        env="sokoban", alphabet=ASCII_TEXT + "√", window=0, context=384, save_steps=(100, 450, 950),
        notes="Sokoban is fully observed (the grid is the state), so window 0 loses nothing and keeps every prompt "
              "at 317 tokens (instruction 235); history windows 1 / 2 would cost 399 / 481.",
    ),
    "babyai": AgentFamily(
        env="babyai", alphabet=ASCII_TEXT, window=0, context=512, level="OneRoomS8", save_steps=(70, 76, 90),
        max_steps={"OneRoomS8": 16}, curve_checkpoints=("mid",),
        notes="One level per build (OneRoomS8 by default): its expert episodes are short (2-14 turns, median 5, on the "
              "evaluation seeds) and its window-0 prompts at most ~300 characters; SynthLoc / MiniBoss need 49 / 26 "
              "expert turns on average and prompts up to 861 / 1066 characters at window 0. OneRoomS8's budget is 16 "
              "turns, not minigrid's 64 (the other levels keep their own): under 64 every checkpoint past step 100 "
              "solves the room almost always (97-99 % over 32 seeds x 4), so no checkpoint is in VSR's regime; 16 is "
              "at least the longest expert episode (14). The save steps lie inside the SFT's 100-step warm-up, where "
              "the agent learns to reply with valid action words: its weakness at 'mid' is mostly invalid replies "
              "(no-ops), not poor plans. Only 'mid' has the whole continuation curve: an episode costs ~0.3 s here "
              "(the missions differ, so only ~34 prompt tokens are shared), 5,120 per curve.",
    ),
})


def family_env(family: str, level: str | None = None) -> TextEnv:
    """A fresh environment of ``family`` at ``level`` (the family's default when None)."""
    fam = AGENT_FAMILIES.lookup(family, where="family")
    return make_env(fam.env, **fam.env_params(level))


def demonstration(env: TextEnv, seed: int, window: int | None) -> list[tuple[str, str]]:
    """``(prompt, action word)`` of every turn of the expert episode of ``seed`` (module doc)."""
    actions = env.expert_actions(seed)
    obs = env.reset(seed)
    turns: list[Turn] = []
    out = []
    for word in actions:
        out.append((render_agent_prompt(env.instruction, turns, obs, window=window), word))
        nxt = env.step(word)[0]
        turns.append(Turn(obs, word))
        obs = nxt
    if not env.success:
        raise RuntimeError(f"expert: the expert actions of seed {seed} did not solve the episode")
    return out


def _first_prompt(env: TextEnv, seed: int, window: int | None) -> str:
    obs = env.reset(seed)
    return render_agent_prompt(env.instruction, [], obs, window=window)


@dataclass(frozen=True)
class AgentSFTData:
    """The demonstration pool of a family/level/window and its deterministic batch stream (module doc)."""

    samples: tuple[tuple[str, str], ...]
    """``(prompt, action word)`` per turn, in (training seed, turn) order."""
    seeds: tuple[int, ...]
    """Training map seeds whose episodes are in the pool."""
    excluded: tuple[int, ...]
    """Training map seeds left out: their first prompt equals an evaluation seed's."""
    _perms: dict = field(default_factory=dict, repr=False, compare=False)

    def _epoch(self, seed: int, epoch: int) -> np.ndarray:
        key = (seed, epoch)
        if key not in self._perms:
            self._perms[key] = np.random.default_rng(data_seed(seed, epoch)).permutation(len(self.samples))
        return self._perms[key]

    def indices(self, step: int, batch_size: int, seed: int) -> list[int]:
        """Pool indices of the samples of step ``step`` (0-based)."""
        check_number("step", step, 0, integer=True)
        check_number("batch_size", batch_size, 1, integer=True)
        n = len(self.samples)
        out = []
        for j in range(step * batch_size, (step + 1) * batch_size):
            out.append(int(self._epoch(seed, j // n)[j % n]))
        return out

    def batch(self, step: int, batch_size: int, seed: int) -> tuple[list[str], list[str]]:
        """``(prompts, action words)`` of step ``step``."""
        picked = [self.samples[i] for i in self.indices(step, batch_size, seed)]
        return [p for p, _ in picked], [a for _, a in picked]


@functools.lru_cache(maxsize=8)
def build_sft_data(family: str, level: str | None, window: int | None, n_train_seeds: int) -> AgentSFTData:
    """The demonstration pool of the first ``n_train_seeds`` training seeds (module doc)."""
    env = family_env(family, level)
    held_out = {_first_prompt(env, s, window) for s in EVAL_SEEDS}
    samples: list[tuple[str, str]] = []
    used, excluded = [], []
    for s in train_seeds(n_train_seeds):
        demo = demonstration(env, s, window)
        if demo[0][0] in held_out:
            excluded.append(s)
            continue
        used.append(s)
        samples.extend(demo)
    return AgentSFTData(tuple(samples), tuple(used), tuple(excluded))
