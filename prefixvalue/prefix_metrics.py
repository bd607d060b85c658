"""Prefix metrics of the MTE-correlation study (ExTra §5.6, App. C.2).

(Named ``prefix_metrics`` to keep it apart from ``theory.metrics``, the evaluation metrics, and
``llm_harness.trainer.runlog``, the trainer's metric logs.)

Three families, each a registry so tasks can add their own:

* **label-free** (from the policy's teacher-forced trace of the trajectory, no labels): MTE,
  last-step entropy, min/max/std entropy, next-token entropy, mean log-prob, perplexity, length,
  position — computed by :func:`prefixvalue.prefixes.entropy_stats` plus positions;
* **outcome-aware** (verifier outcomes the trainer already has, no gold text): the initial group's
  success rate ``p0``, the source trajectory's reward, VSR's ``p̂`` and ``σ̂``;
* **label-aware** (need the gold answer / solution): the gold answer's log-prob when the model is
  made to answer right after the prefix (:data:`ANSWER_PROBES`, per task), overlap and similarity
  with the gold solution (any task with a solution), and task-specific graders
  (:data:`LABEL_METRICS`; step arithmetic: steps on the gold chain, arithmetic errors, distance
  of the running value to the gold value / answer, via ``check_partial``).
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass
from typing import Callable

from llm_harness.tasks import Problem
from vsr_util.registry import Registry

__all__ = [
    "ANSWER_PROBES",
    "LABEL_AWARE",
    "LABEL_FREE",
    "LABEL_METRICS",
    "LabelMetrics",
    "OUTCOME_AWARE",
    "answer_probe",
    "gold_overlap",
    "label_metrics",
    "metric_family",
    "register_answer_probe",
    "register_label_metrics",
]

#: Label-free metric columns (higher MTE is expected to mean lower value).
LABEL_FREE = ("mte", "last_step_entropy", "min_entropy", "max_entropy", "std_entropy", "next_token_entropy",
              "mean_logprob", "perplexity", "prefix_tokens", "position", "steps_in_prefix", "step_fraction")
#: Columns that use verifier outcomes of sampled trajectories (no gold text).
OUTCOME_AWARE = ("p0", "trajectory_reward", "p_hat", "sigma_hat")
#: Generic label-aware columns (the task registry adds more).
LABEL_AWARE = ("gold_answer_logprob", "gold_prefix_overlap", "gold_similarity")

#: task name -> ``(problem, prefix_text) -> (context_text, answer_text)``: the response-side text
#: after which the model is asked for the answer, and the gold answer text scored there.
ANSWER_PROBES: Registry[Callable[[Problem, str], tuple[str, str]]] = Registry("answer probe")


@dataclass(frozen=True)
class LabelMetrics:
    """The task-specific label-aware metrics of one task."""

    columns: tuple[str, ...]
    """The columns ``fn`` returns."""
    fn: Callable[[Problem, str], dict[str, float]]
    """``(problem, prefix_text) -> {column: value}``."""


#: task name -> :class:`LabelMetrics`.
LABEL_METRICS: Registry[LabelMetrics] = Registry("label-metrics task")


def register_answer_probe(task: str, fn: Callable[[Problem, str], tuple[str, str]]) -> None:
    """Add the answer probe of ``task`` (duplicates rejected)."""
    ANSWER_PROBES.add(task, fn)


def register_label_metrics(task: str, columns: tuple[str, ...], fn: Callable[[Problem, str], dict[str, float]]) -> None:
    """Add the task-specific label-aware metrics of ``task`` (duplicates rejected)."""
    LABEL_METRICS.add(task, LabelMetrics(tuple(columns), fn))


def _generic_probe(problem: Problem, prefix: str) -> tuple[str, str]:
    return prefix + "\n", problem.answer


def answer_probe(task: str, problem: Problem, prefix: str) -> tuple[str, str]:
    """``(context_text, answer_text)`` for the gold-answer log-prob of ``prefix`` (generic fallback:
    a newline, then the answer)."""
    return ANSWER_PROBES.get(task, _generic_probe)(problem, prefix)


def gold_overlap(prefix: str, solution: str | None) -> dict[str, float]:
    """``gold_prefix_overlap``: longest common prefix with the gold solution / prefix length;
    ``gold_similarity``: difflib ratio between the prefix and the gold solution's first
    ``len(prefix)`` characters. NaN without a gold solution or an empty prefix."""
    if not solution or not prefix:
        return {"gold_prefix_overlap": math.nan, "gold_similarity": math.nan}
    n = 0
    for a, b in zip(prefix, solution):
        if a != b:
            break
        n += 1
    ratio = difflib.SequenceMatcher(None, prefix, solution[: len(prefix)], autojunk=False).ratio()
    return {"gold_prefix_overlap": n / len(prefix), "gold_similarity": float(ratio)}


def label_metrics(task: str, problem: Problem, prefix: str) -> dict[str, float]:
    """Generic gold-solution overlap plus the task's registered label-aware metrics."""
    out = gold_overlap(prefix, problem.solution)
    entry = LABEL_METRICS.get(task)
    if entry is not None:
        out.update(entry.fn(problem, prefix))
    return out


def metric_family(column: str, task: str) -> str | None:
    """``"label-free"``, ``"outcome-aware"``, ``"label-aware"`` or None (not a metric column)."""
    if column in LABEL_FREE:
        return "label-free"
    if column in OUTCOME_AWARE:
        return "outcome-aware"
    if column in LABEL_AWARE or (task in LABEL_METRICS and column in LABEL_METRICS[task].columns):
        return "label-aware"
    return None


# ------------------------------------------------------------------ step arithmetic


def _step_arith_probe(problem: Problem, prefix: str) -> tuple[str, str]:
    # the answer line follows the last complete step: "...,44-5=39" + "\nA:" -> gold answer
    return prefix.rstrip(",\n") + "\nA:", problem.answer


STEP_ARITH_COLUMNS = ("steps_on_chain", "fraction_on_chain", "all_steps_on_chain", "arithmetic_errors",
                      "running_value_error", "answer_distance")


def _step_arith_metrics(problem: Problem, prefix: str) -> dict[str, float]:
    from llm_harness.tasks.step_arith import check_partial, evaluate_chain, parse_prompt

    pc = check_partial(problem, prefix)
    gold = evaluate_chain(*parse_prompt(problem.prompt))
    k = len(pc.steps)
    v = pc.running_value
    return {
        "steps_on_chain": float(pc.n_correct_prefix),
        "fraction_on_chain": float(pc.fraction_correct),
        "all_steps_on_chain": float(pc.all_correct),
        "arithmetic_errors": float(sum(1 for s in pc.steps if not s.arithmetic_ok)),
        # the model's value after its k complete steps vs the gold value after k steps
        "running_value_error": float(abs(v - gold[k])) if v is not None and k < len(gold) else math.nan,
        "answer_distance": float(abs(v - gold[-1])) if v is not None else math.nan,
    }


register_answer_probe("step_arith", _step_arith_probe)
register_answer_probe("math", lambda p, prefix: (prefix + "\n\nThe final answer is $\\boxed{", p.answer + "}$"))
register_label_metrics("step_arith", STEP_ARITH_COLUMNS, _step_arith_metrics)
