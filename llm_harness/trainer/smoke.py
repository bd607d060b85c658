"""A smoke run that needs no trained checkpoint: a learnable toy task and a tiny configuration.

:class:`FirstCharTask` reuses the step-arithmetic problems but rewards a completion whose first character is in
``good`` (default the digits 0-4), so a random tiny model gets mixed groups from the first step and the loop's update
path is exercised without a trained checkpoint. :func:`tiny_config` is a few-second CPU run on a random tiny Qwen2.
``make figures`` trains them for the training curve when the test-bed checkpoint is missing or in quick mode
(:mod:`llm_harness.trainer.figures`); the trainer's tests build on them.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from llm_harness.tasks import ParseStatus, Problem, VerifyResult
from llm_harness.tasks.step_arith import StepArithConfig, StepArithTask
from llm_harness.trainer.config import (
    AlgoConfig,
    ModelConfig,
    OptimConfig,
    RolloutConfig,
    RunConfig,
    TaskConfig,
    TrainConfig,
)

__all__ = ["FirstCharTask", "tiny_config"]


class FirstCharTask(StepArithTask):
    """Step-arithmetic prompts; reward 1 iff the completion starts with a character in ``good``."""

    name = "toy_first_char"

    def __init__(self, good: str = "01234", n_train: int = 200):
        super().__init__(StepArithConfig(n_train=n_train, n_validation=32, n_test=32, n_hard=8, max_terms=3))
        self.good = good

    def verify(self, problem: Problem, completion: str) -> VerifyResult:
        ok = bool(completion) and completion[0] in self.good
        return VerifyResult(1.0 if ok else 0.0, ParseStatus.OK, extracted=completion[:1])


def tiny_config(run_dir: str, **over: Any) -> TrainConfig:
    """A few-second CPU run on a random tiny Qwen2 (override sections with keyword dataclasses)."""
    base = TrainConfig(
        seed=0,
        steps=4,
        model=ModelConfig(random_init=True, hidden_size=32, num_layers=2, num_heads=4, max_context=64),
        task=TaskConfig(name="step_arith", params={"n_train": 200}),
        rollout=RolloutConfig(prompts_per_step=4, group_size=4, max_new_tokens=8, verify_timeout_s=0.0),
        algo=AlgoConfig(),
        optim=OptimConfig(lr=3e-3),
        run=RunConfig(run_dir=run_dir, checkpoint_every=1, progress=False),
    )
    return replace(base, **over)
