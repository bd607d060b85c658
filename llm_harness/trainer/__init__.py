"""GRPO trainer with plug-in points (SPEC §3.1, §3.6; issue 6).

Layers (each importable on its own):

* ``data`` — :class:`StartState`, :class:`RolloutGroup`, padded :class:`TrainBatch` (prompt and
  prefix tokens masked out of the loss);
* ``losses`` / ``advantages`` — pure functions in registries (``AGGREGATIONS``,
  ``ADVANTAGE_ESTIMATORS``): clip-higher + dual-clip surrogate, k3 KL, token/sequence/Dr.GRPO
  aggregation; GRPO z-score, RLOO, constant (SFT);
* ``plugins`` — the four plug-in points (:class:`StartStateSource`, :class:`RolloutReplay`,
  :class:`AdvantageShaper`, :class:`StepHook`) with no-op defaults, the ``PLUGINS`` registry,
  the fresh-prompt source and Reinforce-Ada-Est reallocation;
* ``rollout`` — generation + deadline-guarded verification (``COLLECTORS``: ``generate``,
  ``expert`` for SFT);
* ``loop`` — :class:`Trainer` (DAPO dynamic sampling, zero-variance filter, PPO epochs,
  weight sync, hooks, metrics, checkpoints);
* ``checkpoint`` / ``metrics`` — atomic checkpoints with bit-identical resume; JSONL + CSV;
* ``evaluation`` — avg@k, pass@k, per-difficulty, lengths, Distinct-4, AES;
* ``entry`` — ``train(cfg: TrainConfig)`` (``vsr train``) and ``evaluate(cfg: EvalConfig)``
  (``vsr eval``).
"""

from llm_harness.trainer.advantages import ADVANTAGE_ESTIMATORS, estimate_advantages, group_advantages, register_advantage
from llm_harness.trainer.config import (
    AlgoConfig,
    EvalConfig,
    ModelConfig,
    OptimConfig,
    RolloutConfig,
    RunConfig,
    TaskConfig,
    TrainConfig,
    ValidationConfig,
)
from llm_harness.trainer.data import ORIGINS, Origin, RolloutGroup, StartState, TrainBatch, build_batch
from llm_harness.trainer.losses import AGGREGATIONS, policy_loss, register_aggregation, sft_loss
from llm_harness.trainer.plugins import (
    PLUGINS,
    AdvantageShaper,
    FreshPromptSource,
    Plugin,
    RolloutReplay,
    StartStateSource,
    StepHook,
    StepRecord,
    register_plugin,
)

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "AGGREGATIONS",
    "AdvantageShaper",
    "AlgoConfig",
    "EvalConfig",
    "FreshPromptSource",
    "ModelConfig",
    "ORIGINS",
    "OptimConfig",
    "Origin",
    "PLUGINS",
    "Plugin",
    "RolloutConfig",
    "RolloutGroup",
    "RolloutReplay",
    "RunConfig",
    "StartState",
    "StartStateSource",
    "StepHook",
    "StepRecord",
    "TaskConfig",
    "TrainBatch",
    "TrainConfig",
    "ValidationConfig",
    "build_batch",
    "estimate_advantages",
    "group_advantages",
    "policy_loss",
    "register_advantage",
    "register_aggregation",
    "register_plugin",
    "sft_loss",
]
