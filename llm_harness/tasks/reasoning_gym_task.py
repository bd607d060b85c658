"""Adapter for any reasoning-gym dataset (verification as in :mod:`llm_harness.tasks.base`).

``get_task("reasoning_gym", dataset="chain_sum", params={"min_terms": 2}, size=1000, seed=0)``
builds ``reasoning_gym.create_dataset(dataset, size=size, seed=seed, **params)`` and exposes its
entries as problems.  The package is imported lazily (``pip install reasoning-gym``); a missing
package raises ImportError with the install hint.

* Splits: train / validation / test by a salted hash of the question text
  (``split_fractions``), so identical questions never straddle two splits.
* Prompt: the reasoning-gym ``"default"`` system prompt (answer inside ``<answer>`` tags) and
  the question as the user message; plain prompt = system + blank line + question + blank line.
* Verification: the answer is the content of the last ``<answer>...</answer>`` pair
  (reasoning-gym's ``extract_answer``), scored by the dataset's own ``score_answer(answer,
  entry)``; no tags -> MISSING with reward ``score_answer(None, entry)`` (0 for every dataset we
  know).  Scores are rewards in ``[0, 1]`` (some datasets give partial credit); a score outside
  ``[0, 1]`` is reported as ERROR with reward 0.  With ``timeout_s`` set (default) scoring runs
  in an :class:`IsolatedRunner` worker under that deadline (timeout -> reward 0, TIMEOUT).
* Steps: blank-line paragraphs (the math splitter).
* Reasoning-gym entries carry no expert solution (``Problem.solution`` is ``None``).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from llm_harness.tasks.base import MAX_SPLIT_PROBLEMS, ParseStatus, Problem, Step, Task, VerifyResult, assign_split
from llm_harness.tasks.isolation import IsolatedRunner, shared_runner
from llm_harness.tasks.math_task import split_math_steps
from llm_harness.tasks.registry import build_config, register_task
from vsr_util.checks import check_number

__all__ = ["ReasoningGymConfig", "ReasoningGymTask", "import_reasoning_gym"]

logger = logging.getLogger(__name__)

SPLITS = ("train", "validation", "test")
_SALT = "reasoning_gym/v1"


def import_reasoning_gym():
    """Import ``reasoning_gym`` or raise ImportError with the install hint."""
    try:
        import reasoning_gym  # type: ignore[import-not-found]
    except ImportError as exc:
        raise ImportError(
            "the reasoning-gym task needs the 'reasoning-gym' package: pip install reasoning-gym "
            f"(or the project's 'reasoning' extra) [{exc}]"
        ) from None
    return reasoning_gym


@dataclass(frozen=True)
class ReasoningGymConfig:
    """Which reasoning-gym dataset, how many entries, how to split and score them."""

    dataset: str = "chain_sum"
    """reasoning-gym dataset name (``reasoning_gym.factory.DATASETS`` lists them)."""
    params: Mapping[str, Any] = field(default_factory=dict)
    """Extra keyword parameters of the dataset's config (e.g. ``min_terms``)."""
    size: int = 1000
    """Number of entries generated (before splitting)."""
    seed: int = 0
    """reasoning-gym generator seed."""
    split_fractions: tuple[float, float, float] = (0.8, 0.1, 0.1)
    """(train, validation, test) shares, assigned by question-text hash."""
    system_prompt: str | None = "default"
    """A key of ``reasoning_gym.utils.SYSTEM_PROMPTS``, literal text, or ``None`` for none."""
    answer_tag: str = "answer"
    """Tag whose last occurrence holds the answer."""
    timeout_s: float | None = 10.0
    """Deadline of one scoring call in a worker process; ``None`` scores inline (no deadline)."""

    def __post_init__(self) -> None:
        check_number("size", self.size, 1, MAX_SPLIT_PROBLEMS, integer=True)
        if self.timeout_s is not None:
            check_number("timeout_s", self.timeout_s, 0, lo_open=True)
        if not re.fullmatch(r"[A-Za-z_][\w\-]*", self.answer_tag):
            raise ValueError(f"answer_tag: must be a tag name, got {self.answer_tag!r}")
        object.__setattr__(self, "params", dict(self.params))
        object.__setattr__(self, "split_fractions", tuple(self.split_fractions))
        assign_split("probe", dict(zip(SPLITS, self.split_fractions)), _SALT)


_DATASET_CACHE: dict[tuple, Any] = {}


def _freeze(value: Any) -> Any:
    """A hashable, picklable form of nested params (dicts -> sorted item tuples, lists -> tuples)."""
    if isinstance(value, Mapping):
        return tuple(sorted((str(k), _freeze(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    return value


def _thaw_params(frozen: tuple) -> dict[str, Any]:
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in frozen}


def _dataset(name: str, params: tuple, size: int, seed: int):
    key = (name, params, size, seed)
    if key not in _DATASET_CACHE:
        rg = import_reasoning_gym()
        try:
            _DATASET_CACHE[key] = rg.create_dataset(name, size=size, seed=seed, **_thaw_params(params))
        except ValueError as exc:
            if name not in rg.factory.DATASETS:
                raise ValueError(
                    f"dataset: unknown reasoning-gym dataset {name!r}; known: {', '.join(sorted(rg.factory.DATASETS))}"
                ) from None
            raise ValueError(f"params: reasoning-gym rejected the parameters of {name!r}: {exc}") from None
        except TypeError as exc:
            raise ValueError(f"params: reasoning-gym rejected the parameters of {name!r}: {exc}") from None
    return _DATASET_CACHE[key]


def score_entry(name: str, params: tuple, size: int, seed: int, answer: str | None, entry: dict) -> float:
    """``dataset.score_answer(answer, entry)`` (module-level so a worker process can run it)."""
    return float(_dataset(name, params, size, seed).score_answer(answer, entry))


class ReasoningGymTask(Task):
    """A reasoning-gym dataset as a :class:`Task` (module docstring)."""

    name = "reasoning_gym"

    def __init__(self, config: ReasoningGymConfig | None = None, *, runner: IsolatedRunner | None = None) -> None:
        self.config = config or ReasoningGymConfig()
        c = self.config
        self._key = (c.dataset, _freeze(c.params), c.size, c.seed)
        ds = _dataset(*self._key)
        fractions = dict(zip(SPLITS, c.split_fractions))
        by_split: dict[str, list[Problem]] = {s: [] for s in SPLITS}
        for i in range(len(ds)):
            entry = ds[i]
            question = str(entry["question"])
            by_split[assign_split(question, fractions, _SALT)].append(
                Problem(
                    id=f"reasoning_gym/{c.dataset}/{c.seed}/{i}",
                    prompt=question,
                    answer=str(entry["answer"]),
                    solution=None,
                    difficulty=None,
                    metadata={"index": i, "entry": entry},
                )
            )
        self._problems = {s: tuple(v) for s, v in by_split.items()}
        self._runner = runner
        self._answer_re = re.compile(rf"<{c.answer_tag}>\s?(.*?)\s?</{c.answer_tag}>", re.DOTALL)

    @property
    def splits(self) -> tuple[str, ...]:
        return SPLITS

    def problems(self, split: str) -> tuple[Problem, ...]:
        return self._problems[self.check_split(split)]

    @property
    def runner(self) -> IsolatedRunner:
        if self._runner is None:
            self._runner = shared_runner(1, preload=("reasoning_gym",))
        return self._runner

    def system_text(self) -> str | None:
        """The resolved system prompt (``None`` when disabled)."""
        sp = self.config.system_prompt
        if sp is None:
            return None
        prompts = import_reasoning_gym().utils.SYSTEM_PROMPTS
        return prompts.get(sp, sp)

    def messages(self, problem: Problem) -> list[dict[str, str]]:
        sys_text = self.system_text()
        msgs = [{"role": "system", "content": sys_text}] if sys_text else []
        return msgs + [{"role": "user", "content": problem.prompt}]

    def plain_prompt(self, problem: Problem) -> str:
        sys_text = self.system_text()
        head = f"{sys_text.rstrip()}\n\n" if sys_text else ""
        return f"{head}{problem.prompt}\n\n"

    def extract_answer(self, completion: str) -> str | None:
        """Content of the last ``<answer_tag>...</answer_tag>`` pair, stripped (``None`` if none)."""
        matches = self._answer_re.findall(completion)
        return matches[-1].strip() if matches else None

    def verify(self, problem: Problem, completion: str) -> VerifyResult:
        answer = self.extract_answer(completion)
        entry = problem.metadata["entry"]
        args = (*self._key, answer, entry)
        if self.config.timeout_s is None:
            try:
                score = score_entry(*args)
            except Exception as exc:
                return VerifyResult(0.0, ParseStatus.ERROR, answer, detail=f"{type(exc).__name__}: {exc}")
        else:
            out = self.runner.call(score_entry, args, timeout_s=self.config.timeout_s)
            if out.timed_out:
                logger.warning("reasoning-gym scoring of %r timed out after %.2f s: reward 0", problem.id, out.elapsed_s)
                return VerifyResult(0.0, ParseStatus.TIMEOUT, answer, timed_out=True, detail="score_answer timed out")
            if out.error is not None:
                return VerifyResult(0.0, ParseStatus.ERROR, answer, detail=out.error)
            score = out.value
        if not (0.0 <= score <= 1.0):
            return VerifyResult(0.0, ParseStatus.ERROR, answer, detail=f"score_answer returned {score!r}, outside [0, 1]")
        status = ParseStatus.OK if answer is not None else ParseStatus.MISSING
        return VerifyResult(score, status, answer, detail="score_answer")

    def split_steps(self, text: str) -> tuple[Step, ...]:
        return split_math_steps(text)


@register_task("reasoning_gym")
def _make_reasoning_gym(*, runner: IsolatedRunner | None = None, **params) -> ReasoningGymTask:
    """``get_task("reasoning_gym", dataset=..., params={...}, size=..., seed=...)``: fields of
    :class:`ReasoningGymConfig`."""
    return ReasoningGymTask(build_config(ReasoningGymConfig, params), runner=runner)
