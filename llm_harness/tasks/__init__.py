"""Tasks: problems with verifiable answers, prompt rendering, verifiers and step splitters.

Verification and prompt template as in Replay App. A; expert solutions for VSR's cold start (VSR §3.2).
``get_task(name, **params)`` builds a registered task: ``"step_arith"`` (the CPU test bed),
``"math"`` (JSONL/parquet/Hugging Face problems with ``\\boxed{}`` answers) and
``"reasoning_gym"`` (any reasoning-gym dataset; needs ``pip install reasoning-gym``) and
``"arith_ladder"`` (easy natural-language arithmetic for small pretrained chat models).
Importing this package is light: math-verify and reasoning-gym are imported lazily (math-verify
only inside verification worker processes).
"""

from llm_harness.tasks.arith_ladder import ArithLadderConfig, ArithLadderTask, read_natural_answer
from llm_harness.tasks.base import ParseStatus, Problem, Step, Task, VerifyResult, assign_split, has_chat_template
from llm_harness.tasks.isolation import CallOutcome, IsolatedRunner, shared_runner
from llm_harness.tasks.math_answers import extract_boxed, normalize_answer
from llm_harness.tasks.math_task import MathFields, MathTask, MathTaskConfig, load_math_file, split_math_steps
from llm_harness.tasks.reasoning_gym_task import ReasoningGymConfig, ReasoningGymTask
from llm_harness.tasks.registry import TASK_REGISTRY, available_tasks, get_task, register_task
from llm_harness.tasks.step_arith import (
    ALPHABET,
    PartialCheck,
    StepArithConfig,
    StepArithTask,
    check_partial,
    split_step_arith,
    verify_step_arith,
)

__all__ = [
    "ALPHABET",
    "ArithLadderConfig",
    "ArithLadderTask",
    "CallOutcome",
    "IsolatedRunner",
    "MathFields",
    "MathTask",
    "MathTaskConfig",
    "ParseStatus",
    "PartialCheck",
    "Problem",
    "ReasoningGymConfig",
    "ReasoningGymTask",
    "Step",
    "StepArithConfig",
    "StepArithTask",
    "TASK_REGISTRY",
    "Task",
    "VerifyResult",
    "assign_split",
    "available_tasks",
    "check_partial",
    "extract_boxed",
    "get_task",
    "has_chat_template",
    "load_math_file",
    "normalize_answer",
    "read_natural_answer",
    "register_task",
    "shared_runner",
    "split_math_steps",
    "split_step_arith",
    "verify_step_arith",
]
