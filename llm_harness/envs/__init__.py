"""Text environments for multi-turn agents (VSR App. D.3).

``make_env(name, **params)`` builds a registered environment (:data:`ENVS`): ``"sokoban"``
(verl-agent's 6x6 one-box setting, own generator with BFS certificates) and ``"babyai"`` (the
VSR paper's BabyAI levels through the optional ``minigrid`` dependency; ``level=`` picks one).
Every environment follows :class:`~llm_harness.envs.base.TextEnv`: text actions in a single
documented format, invalid actions as penalised no-ops, plain-data snapshots with a checksum,
and exact restore by snapshot or by re-execution from the seed.
"""

from __future__ import annotations

from typing import Any

from llm_harness.envs.babyai import BABYAI_LEVELS, BabyAIConfig, BabyAIEnv, describe_view, parse_view, require_minigrid
from llm_harness.envs.base import SNAPSHOT_FORMAT, TextEnv, parse_action, seed_range
from llm_harness.envs.sokoban import REWARD_SCHEMES, SokobanConfig, SokobanEnv, generate_room, parse_room, render_room, solve
from llm_harness.tasks.registry import build_config
from vsr_util.registry import Registry

__all__ = [
    "BABYAI_LEVELS",
    "ENVS",
    "REWARD_SCHEMES",
    "SNAPSHOT_FORMAT",
    "BabyAIConfig",
    "BabyAIEnv",
    "SokobanConfig",
    "SokobanEnv",
    "TextEnv",
    "describe_view",
    "generate_room",
    "make_env",
    "parse_action",
    "parse_room",
    "parse_view",
    "render_room",
    "require_minigrid",
    "seed_range",
    "solve",
]

#: environment name -> its :class:`TextEnv` subclass (``config_type`` gives its parameters)
ENVS: Registry[type[TextEnv]] = Registry("environment")
ENVS.add(SokobanEnv.name, SokobanEnv)
ENVS.add(BabyAIEnv.name, BabyAIEnv)


def make_env(name: str, **params: Any) -> TextEnv:
    """The environment registered as ``name`` built with ``params`` (fields of its config;
    ValueError naming an unknown environment, parameter or level)."""
    cls = ENVS.lookup(name, where="env")
    return cls(build_config(cls.config_type, params))
