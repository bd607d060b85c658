"""Accuracy of a test-bed checkpoint by number of terms, with confidence intervals.

``vsr testbed eval --model PATH`` runs :func:`evaluate`. Sampling and grading are the trainer's
evaluation sampler (:func:`llm_harness.trainer.evaluation.sample_and_verify`, the one evaluator of
the project) on the project's generation backend (``llm_harness.backends.HFBackend.generate``:
batched, KV-cached, seeded, left padded); the split name selects the sampling stream
(``stream=(split,)``). A sample is correct iff the step arithmetic verifier gives reward 1;
a completion cut by ``max_new_tokens`` is verified as it stands. Problems are the first ``n_problems`` of each split in stored order, which
is stratified over term counts. Intervals: exact Clopper–Pearson with one sample per problem,
Korn–Graubard effective-size Clopper–Pearson with several (``stats.clustered_interval``).
"""

from __future__ import annotations

import os
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from llm_harness.tasks import Problem, Task
from llm_harness.testbed.paths import CHECKPOINT_DIR
from theory.metrics.binomial import clustered_interval
from vsr_util.checks import check_number

__all__ = [
    "TestbedEvalConfig",
    "accuracy_by_terms",
    "evaluate",
    "evaluate_model",
    "format_report",
    "sample_correct",
    "split_problems",
]


@dataclass(frozen=True)
class TestbedEvalConfig:
    """``vsr testbed eval``: sampling accuracy of a checkpoint by number of terms."""

    __test__ = False  # not a pytest test class despite the name

    model: str = str(CHECKPOINT_DIR / "high")
    """Checkpoint folder (loaded with ``from_pretrained``; model and tokenizer)."""
    splits: tuple[str, ...] = ("validation", "hard")
    """Step-arithmetic splits to evaluate (train, validation, test, hard)."""
    n_problems: int = 500
    """Problems per split (the first ones, stratified by term count; fewer when the split is
    smaller, e.g. the 300 hard problems); 0 = the whole split."""
    samples_per_problem: int = 1
    """Samples drawn per problem (> 1: intervals account for the within-problem correlation)."""
    temperature: float = 1.0
    """Sampling temperature (0 = greedy)."""
    top_p: float = 1.0
    """Nucleus mass (1 = no truncation)."""
    seed: int = 0
    """Seed of the sampling streams."""
    max_new_tokens: int = 160
    """Token budget of a completion (a 9-term expert solution needs about 80)."""
    confidence: float = 0.95
    """Level of the confidence intervals."""
    task_seed: int = 0
    """Seed of the step-arithmetic task (``StepArithConfig.seed``; selects the split problems)."""
    device: str = "cpu"
    """Torch device of the model (``cpu``, ``cuda``, ``cuda:1``)."""
    batch_sequences: int = 256
    """Sequences decoded together (problems x samples per generate call)."""
    num_threads: int = 0
    """``torch.set_num_threads`` for the run; 0 leaves torch's default."""
    out: str = ""
    """Optional JSON file for the results (written atomically); empty = print only."""
    progress: bool = True
    """Show tqdm progress bars."""

    def __post_init__(self) -> None:
        if not self.splits:
            raise ValueError("splits: must name at least one split")
        from llm_harness.tasks.base import MAX_SPLIT_PROBLEMS
        from llm_harness.trainer.config import LIMITS

        for name, lo, hi in (("n_problems", 0, MAX_SPLIT_PROBLEMS), ("samples_per_problem", 1, LIMITS["group_size"]),
                             ("max_new_tokens", 1, LIMITS["max_new_tokens"]),
                             ("batch_sequences", 1, LIMITS["max_batch_sequences"]), ("seed", 0, None),
                             ("task_seed", 0, None), ("num_threads", 0, LIMITS["num_threads"])):
            check_number(name, getattr(self, name), lo, hi, integer=True)
        check_number("confidence", self.confidence, 0, 1, lo_open=True, hi_open=True)


def split_problems(task: Task, split: str, n_problems: int) -> tuple[Problem, ...]:
    """The first ``min(n_problems, len(split))`` problems of ``split`` (all of them when 0)."""
    check_number("n_problems", n_problems, 0, integer=True)
    probs = task.problems(task.check_split(split))
    return probs if n_problems == 0 else probs[:n_problems]


def _decode_completion(tokenizer: Any, token_ids: Sequence[int], stopped: bool) -> str:
    """Completion text (:func:`llm_harness.trainer.evaluation.completion_text` with the tokenizer's codec)."""
    from llm_harness.trainer.evaluation import completion_text
    from llm_harness.trainer.modeling import Codec

    return completion_text(Codec(tokenizer), token_ids, stopped)


def sample_correct(
    model,
    tokenizer: Any,
    task: Task,
    problems: Sequence[Problem],
    *,
    samples_per_problem: int,
    temperature: float,
    top_p: float = 1.0,
    max_new_tokens: int = 160,
    seed: int = 0,
    split: str = "",
    batch_sequences: int = 256,
    progress: bool = False,
) -> tuple[np.ndarray, dict[str, int]]:
    """``correct[problem, sample]`` (0/1 int8) and counts of finish reasons / parse statuses.

    :func:`llm_harness.trainer.evaluation.sample_and_verify` on an ``HFBackend`` around ``model``
    (groups of ``batch_sequences // samples_per_problem`` problems per ``generate`` call, seeds
    from ``(seed, split, group index)``), graded by ``task.verify_many``; the model's train/eval
    mode is restored.
    """
    from llm_harness.backends import HFBackend, HFBackendConfig
    from llm_harness.trainer.evaluation import SamplingSession, sample_and_verify
    from llm_harness.trainer.modeling import Codec

    if not problems:
        raise ValueError("problems: must not be empty")
    training = model.training
    backend = HFBackend(
        model, tokenizer, config=HFBackendConfig(max_batch_sequences=batch_sequences, pad_token_id=tokenizer.pad_token_id)
    )
    try:
        session = SamplingSession(backend, Codec(tokenizer), task, task, temperature=temperature, top_p=top_p,
                                  max_new_tokens=max_new_tokens, chunk_sequences=batch_sequences)
        ev = sample_and_verify(session, problems, k=samples_per_problem, seed=seed, stream=(split,), progress=progress,
                               desc=f"eval {split}".strip())
    finally:
        model.train(training)
    return ev.correct.astype(np.int8), ev.counts


def _row(correct: np.ndarray, confidence: float, **extra) -> dict[str, Any]:
    acc, lo, hi = clustered_interval(correct, confidence)
    return {
        **extra,
        "n_problems": int(correct.shape[0]),
        "n_samples": int(correct.size),
        "correct": int(correct.sum()),
        "accuracy": acc,
        "ci_low": lo,
        "ci_high": hi,
    }


def accuracy_by_terms(problems: Sequence[Problem], correct: np.ndarray, confidence: float = 0.95) -> dict[str, Any]:
    """``{"overall": row, "by_terms": [row per number of terms]}`` for ``correct[problem, sample]``.

    A row holds ``n_problems, n_samples, correct, accuracy, ci_low, ci_high`` (and ``n_terms``).
    """
    correct = np.asarray(correct)
    if correct.ndim != 2 or correct.shape[0] != len(problems):
        raise ValueError(f"correct: expected shape [{len(problems)}, samples], got {correct.shape}")
    terms = np.array([int(p.metadata.get("n_terms", p.difficulty or 0)) for p in problems])
    rows = [_row(correct[terms == t], confidence, n_terms=int(t)) for t in sorted(set(terms.tolist()))]
    return {"overall": _row(correct, confidence), "by_terms": rows}


def evaluate_model(
    model,
    tokenizer: Any,
    task: Task,
    plan: Mapping[str, tuple[int, int]],
    *,
    temperature: float = 1.0,
    top_p: float = 1.0,
    max_new_tokens: int = 160,
    seed: int = 0,
    confidence: float = 0.95,
    batch_sequences: int = 256,
    progress: bool = False,
) -> dict[str, Any]:
    """Evaluate on each ``split -> (n_problems, samples_per_problem)`` of ``plan``.

    Returns ``{split: {"n_problems", "samples_per_problem", "overall", "by_terms", "counts",
    "correct_per_problem"}}``; ``correct_per_problem`` lists the correct samples of each problem in
    problem order (a string of digits when ``samples_per_problem <= 9``, else a list).
    """
    out: dict[str, Any] = {}
    for split, (n_problems, samples) in plan.items():
        probs = split_problems(task, split, n_problems)
        correct, counts = sample_correct(
            model, tokenizer, task, probs,
            samples_per_problem=samples, temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens,
            seed=seed, split=split, batch_sequences=batch_sequences, progress=progress,
        )
        per_problem = correct.sum(axis=1)
        out[split] = {
            "n_problems": len(probs),
            "samples_per_problem": samples,
            **accuracy_by_terms(probs, correct, confidence),
            "counts": counts,
            # correct samples of each problem, in problem order (one digit each when samples <= 9)
            "correct_per_problem": "".join(map(str, per_problem.tolist())) if samples <= 9 else per_problem.tolist(),
        }
    return out


def format_report(results: Mapping[str, Any], confidence: float = 0.95) -> str:
    """A plain-text table: one line per split and number of terms, then the split's total."""
    pct = f"{round(confidence * 100)}% CI"
    lines = [f"{'split':<11} {'terms':>5} {'problems':>8} {'samples':>7} {'accuracy':>8}  {pct}"]
    for split, res in results.items():
        for row in list(res["by_terms"]) + [dict(res["overall"], n_terms="all")]:
            lines.append(
                f"{split:<11} {str(row['n_terms']):>5} {row['n_problems']:>8} {row['n_samples']:>7} "
                f"{row['accuracy']:>8.3f}  [{row['ci_low']:.3f}, {row['ci_high']:.3f}]"
            )
    return "\n".join(lines)


def evaluate(cfg: TestbedEvalConfig) -> int:
    """``vsr testbed eval``: print accuracy by number of terms with CIs; optionally write JSON."""
    import torch

    from llm_harness.tasks import get_task
    from llm_harness.testbed.model import load_testbed
    from vsr_util.atomic import write_json

    if cfg.num_threads:
        torch.set_num_threads(cfg.num_threads)
    model, tokenizer = load_testbed(cfg.model, device=cfg.device)
    task = get_task("step_arith", seed=cfg.task_seed)
    results = evaluate_model(
        model, tokenizer, task, {s: (cfg.n_problems, cfg.samples_per_problem) for s in cfg.splits},
        temperature=cfg.temperature, top_p=cfg.top_p, max_new_tokens=cfg.max_new_tokens, seed=cfg.seed,
        confidence=cfg.confidence, batch_sequences=cfg.batch_sequences, progress=cfg.progress,
    )
    print(f"model: {cfg.model}  (T={cfg.temperature}, top_p={cfg.top_p}, {cfg.samples_per_problem} sample(s)/problem)")
    print(format_report(results, cfg.confidence))
    sys.stdout.flush()
    if cfg.out:
        write_json(Path(cfg.out), {"config": asdict(cfg), "results": results})
        print(f"wrote {os.fspath(cfg.out)}")
    return 0
