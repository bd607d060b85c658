"""GRPO trainer with plug-in points (GRPO as in Replay §3 and App. A).

Layers (each importable on its own):

* ``data`` — :class:`StartState`, :class:`RolloutGroup`, padded :class:`TrainBatch` (prompt and
  prefix tokens masked out of the loss);
* ``losses`` / ``advantages`` — pure functions in registries (``AGGREGATIONS``,
  ``ADVANTAGE_ESTIMATORS``): clip-higher + dual-clip surrogate, k3 KL, token/sequence/Dr.GRPO
  aggregation; GRPO z-score, RLOO, constant (SFT);
* ``step`` — the step value (:class:`Step`: slots with owners → groups → kept → fresh/replayed →
  metrics) and the typed results plug-in stages return (:class:`Claim`, :class:`Refill`, ...);
* ``plugins`` — the typed :class:`TrainContext` and the plug-in points (:class:`StartStateSource`,
  :class:`AdvantageShaper`, :class:`GroupFilter`, :class:`RolloutReplay`, :class:`StepHook`) with
  no-op defaults, and the ``PLUGINS`` registry;
* ``prompts`` — the fresh prompt stream every method shares (plug-ins claim slots, never draw);
* ``verifier`` — deadline-guarded verification (``SafeVerifier``);
* ``rollout`` — generation and verified rollout groups (``COLLECTORS``: ``generate``,
  ``expert`` for SFT);
* ``loop`` — :class:`Trainer` (the stages of a step, zero-variance filter, PPO epochs, weight
  sync, metrics, checkpoints; DAPO and Reinforce-Ada-Est are plug-ins in ``llm_harness.methods``);
* ``checkpoint`` / ``runlog`` — atomic checkpoints with bit-identical resume; JSONL + CSV;
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
    GroupFilter,
    Plugin,
    RolloutReplay,
    StartStateSource,
    StepHook,
    TrainContext,
    register_plugin,
)
from llm_harness.trainer.prompts import FreshPromptSource
from llm_harness.trainer.step import Claim, Composition, Kept, Refill, Result, SampleCounts, Shaped, Slot, Step

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
    "Step",
    "Slot",
    "Claim",
    "SampleCounts",
    "Refill",
    "Shaped",
    "Kept",
    "Composition",
    "Result",
    "GroupFilter",
    "TrainContext",
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
