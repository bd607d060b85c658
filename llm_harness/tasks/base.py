"""The task protocol: problems with verifiable answers, prompt rendering, verification, steps.

Verification as in Replay App. A ("Verifier"); expert solutions for SFT and VSR's cold start (VSR §3.2).

A :class:`Task` owns a set of named splits of :class:`Problem` objects and knows how to

* render a problem as prompt text (:meth:`Task.render_prompt`): through the tokenizer's chat
  template when the tokenizer has one, otherwise through the task's plain template;
* verify a completion (:meth:`Task.verify`) into a :class:`VerifyResult` whose ``reward`` lies in
  ``[0, 1]``, with a :class:`ParseStatus` and a ``timed_out`` flag;
* split a solution or completion into reasoning steps (:meth:`Task.split_steps`), returned as
  character spans that *partition* the text, so callers cut prefixes at step boundaries
  (``text[:steps[k].end]``) and map them to token prefixes with an offset mapping.

Split assignment helpers (:func:`assign_split`) hash a problem's content with a fixed salt, so
splits are disjoint by construction and independent of the seed that selects problems.
"""

from __future__ import annotations

import abc
import enum
import hashlib
import random
from dataclasses import dataclass, field
from typing import Any, ClassVar, Iterator, Mapping, Sequence

from vsr_util.checks import check_number

__all__ = [
    "MAX_SPLIT_PROBLEMS",
    "ParseStatus",
    "Problem",
    "Step",
    "Task",
    "VerifyResult",
    "RESPONSE_BUDGET_KEY",
    "assign_split",
    "has_chat_template",
    "problem_budget",
    "check_task_params",
    "parse_task_params",
    "stable_unit_hash",
]


#: Most problems a task's size parameter may ask of one split (``n_train``, ``n_test``, ``size``...): the generated
#: tasks build their splits eagerly (a million step-arithmetic problems take ~30 s and ~1 GB), so a slip such as
#: ``n_train: 1e9`` is refused naming the parameter instead of filling the memory.
MAX_SPLIT_PROBLEMS = 1_000_000


#: ``Problem.metadata`` key of a problem's own response budget (new tokens; e.g. ``arith_ladder``'s ``level_budgets``)
RESPONSE_BUDGET_KEY = "max_new_tokens"


def problem_budget(problem: "Problem", response_budget: int) -> int:
    """The new-token budget of a response to ``problem``: the run's ``response_budget``, or the problem's own
    (``metadata[RESPONSE_BUDGET_KEY]``) where that is smaller. The run's budget stays the most any response gets, so
    memory bounds computed from it hold."""
    own = problem.metadata.get(RESPONSE_BUDGET_KEY)
    return response_budget if own is None else min(int(own), response_budget)


class ParseStatus(str, enum.Enum):
    """How the answer in a completion was read.

    ``OK``: an answer was found and compared (the reward says whether it was right).
    ``MISSING``: no answer marker at all (no ``A:`` line, no ``\\boxed{}``, no ``<answer>`` tag).
    ``MALFORMED``: a marker was found but its content could not be read (unbalanced braces,
    empty box, a non-integer after ``A:``).
    ``TIMEOUT``: verification did not finish within the deadline (reward 0, ``timed_out``).
    ``ERROR``: the grader raised (reward 0; the message is in ``VerifyResult.detail``).
    """

    OK = "ok"
    MISSING = "missing"
    MALFORMED = "malformed"
    TIMEOUT = "timeout"
    ERROR = "error"


@dataclass(frozen=True)
class VerifyResult:
    """Outcome of verifying one completion against one problem."""

    reward: float
    """Reward in ``[0, 1]`` (binary tasks give exactly 0.0 or 1.0)."""
    status: ParseStatus
    """How the completion's answer was read; see :class:`ParseStatus`."""
    extracted: str | None = None
    """The answer text read from the completion (``None`` when missing)."""
    timed_out: bool = False
    """True iff verification was cut by the deadline (then ``reward == 0``)."""
    detail: str = ""
    """Free-form note (grader used, error message, fallback taken)."""

    def __post_init__(self) -> None:
        r = check_number("reward", float(self.reward), 0, 1)
        object.__setattr__(self, "reward", r)
        object.__setattr__(self, "status", ParseStatus(self.status))
        if self.timed_out and (r != 0.0 or self.status is not ParseStatus.TIMEOUT):
            raise ValueError("timed_out: a timed-out verification must have reward 0 and status TIMEOUT")

    @property
    def correct(self) -> bool:
        """True iff the reward is full (``reward == 1``)."""
        return self.reward == 1.0


@dataclass(frozen=True)
class Problem:
    """One problem with a verifiable answer.

    ``metadata`` is excluded from hashing (problems stay hashable); treat it as read-only.
    """

    id: str
    """Unique identifier within its task (content-derived where possible)."""
    prompt: str
    """The problem statement (the question itself, before any template is applied)."""
    answer: str
    """The gold answer as text."""
    solution: str | None = None
    """An expert step-by-step solution ending in the answer, used for cold start and step
    prefixes (``None`` when the source has none)."""
    difficulty: float | None = None
    """A task-specific difficulty (step arithmetic: number of terms)."""
    metadata: Mapping[str, Any] = field(default_factory=dict, hash=False, compare=False)
    """Extra task-specific fields (source file and line, reasoning-gym entry, ...)."""

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise ValueError(f"id: must be a non-empty string, got {self.id!r}")
        if not isinstance(self.prompt, str) or not self.prompt.strip():
            raise ValueError(f"prompt: must be a non-empty string (problem {self.id!r})")
        if not isinstance(self.answer, str):
            raise ValueError(f"answer: must be a string, got {type(self.answer).__name__} (problem {self.id!r})")
        if self.solution is not None and not isinstance(self.solution, str):
            raise ValueError(f"solution: must be a string or None (problem {self.id!r})")
        object.__setattr__(self, "metadata", dict(self.metadata))


@dataclass(frozen=True)
class Step:
    """One reasoning step as a character span ``text[start:end]`` of the split text.

    The steps returned by :meth:`Task.split_steps` partition the text: the first starts at 0,
    each starts where the previous ends, the last ends at ``len(text)``; a step includes its
    trailing separator (comma, newline, blank line).  ``text[:steps[k].end]`` is the prefix
    that contains steps ``0..k``.
    """

    start: int
    """Offset of the first character of the step."""
    end: int
    """Offset one past the last character (separator included)."""
    text: str
    """``text[start:end]`` of the split text."""


def stable_unit_hash(key: str, salt: str) -> float:
    """Map ``key`` to a number in ``[0, 1)`` with a salted BLAKE2b hash (stable across runs and
    machines, unlike ``hash``)."""
    digest = hashlib.blake2b(f"{salt}\x00{key}".encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64


def assign_split(key: str, fractions: Mapping[str, float], salt: str) -> str:
    """Assign ``key`` to one of the named splits with probability ``fractions[name]``.

    The assignment depends only on ``(key, salt)``, so splits are disjoint by construction and
    do not move when a generator's seed changes.  ``fractions`` must be positive and sum to 1
    (the insertion order of the mapping fixes the layout of ``[0, 1)``).
    """
    if not fractions:
        raise ValueError("fractions: must not be empty")
    for name, f in fractions.items():
        check_number(f"fractions[{name!r}]", f, 0, lo_open=True)
    total = sum(float(f) for f in fractions.values())
    if abs(total - 1.0) > 1e-9:
        raise ValueError(f"fractions: must sum to 1, got {total:.12g}")
    u = stable_unit_hash(key, salt)
    acc = 0.0
    names = list(fractions)
    for name in names:
        acc += float(fractions[name])
        if u < acc:
            return name
    return names[-1]


def has_chat_template(tokenizer: Any) -> bool:
    """True iff ``tokenizer`` should render prompts through ``apply_chat_template``.

    Any object with a callable ``apply_chat_template`` qualifies, unless it exposes a
    ``chat_template`` attribute that is ``None`` (a Hugging Face tokenizer without a template,
    e.g. a base model's or the character-level test-bed tokenizer's).
    """
    if tokenizer is None or not callable(getattr(tokenizer, "apply_chat_template", None)):
        return False
    if hasattr(tokenizer, "chat_template") and getattr(tokenizer, "chat_template") is None:
        return False
    return True


class Task(abc.ABC):
    """A set of problems with a verifier, a prompt format and a step splitter (module doc).

    Subclasses implement :meth:`problems`, :meth:`messages`, :meth:`plain_prompt`,
    :meth:`verify` and :meth:`split_steps`; :meth:`render_prompt`, :meth:`iter_problems` and
    :meth:`verify_many` are shared.
    """

    name: ClassVar[str] = ""

    #: Empty, or the answer format the verifier needs that the task's chat messages do not ask for (a task made
    #: for models trained on its own format, such as the test bed's step arithmetic): a model that renders prompts
    #: through a chat template would score 0 on every problem, so it is refused (:func:`llm_harness.tasks.coverage.
    #: check_answer_format`). A subclass may compute it from its parameters (a property).
    needs_answer_format: str = ""

    @property
    @abc.abstractmethod
    def splits(self) -> tuple[str, ...]:
        """Names of the splits this task provides."""

    @abc.abstractmethod
    def problems(self, split: str) -> tuple[Problem, ...]:
        """All problems of ``split`` in a fixed, deterministic order."""

    @abc.abstractmethod
    def messages(self, problem: Problem) -> list[dict[str, str]]:
        """The chat messages (``{"role", "content"}`` dicts) that pose ``problem``."""

    @abc.abstractmethod
    def plain_prompt(self, problem: Problem) -> str:
        """The prompt text used when no chat template is available; the model's completion is
        appended directly after it."""

    @abc.abstractmethod
    def verify(self, problem: Problem, completion: str) -> VerifyResult:
        """Score ``completion`` (the generated text only) against ``problem``'s gold answer."""

    @abc.abstractmethod
    def split_steps(self, text: str) -> tuple[Step, ...]:
        """Split a solution or completion into reasoning steps (a partition of ``text``)."""

    # ------------------------------------------------------------------ shared behaviour
    def params_outside(self, split: str) -> frozenset[str]:
        """Task parameters that do not change ``split``'s problems or their prompts (e.g. another split's size): a
        prompt pool selected from ``split`` stays valid when only these differ (:func:`llm_harness.trainer.pool.
        load_pool`). None by default: every parameter counts."""
        return frozenset()

    def check_split(self, split: str) -> str:
        """Return ``split`` or raise ValueError naming the known splits."""
        if split not in self.splits:
            raise ValueError(f"split: unknown split {split!r} for task {self.name!r}; known: {', '.join(self.splits)}")
        return split

    def render_prompt(self, problem: Problem, tokenizer: Any = None) -> str:
        """Prompt text for ``problem``: the tokenizer's chat template when it has one
        (``apply_chat_template(messages, tokenize=False, add_generation_prompt=True)``, see
        :func:`has_chat_template`), otherwise :meth:`plain_prompt`."""
        if has_chat_template(tokenizer):
            text = tokenizer.apply_chat_template(self.messages(problem), tokenize=False, add_generation_prompt=True)
            if not isinstance(text, str):
                raise ValueError(
                    f"tokenizer: apply_chat_template(tokenize=False) must return a string, got {type(text).__name__}"
                )
            if not text:
                raise ValueError(f"tokenizer: apply_chat_template returned an empty prompt for problem {problem.id!r}")
            return text
        return self.plain_prompt(problem)

    def iter_problems(
        self, split: str, *, seed: int | None = None, shuffle: bool = True, repeat: bool = False
    ) -> Iterator[Problem]:
        """Iterate over ``split``; shuffled with ``seed`` (a fresh permutation per epoch, the same
        sequence for the same seed), in stored order when ``shuffle`` is False, forever when
        ``repeat`` is True."""
        items = list(self.problems(self.check_split(split)))
        if not items:
            return
        if shuffle and seed is None:
            raise ValueError("seed: required when shuffle=True")
        rng = random.Random(seed)
        while True:
            order = list(range(len(items)))
            if shuffle:
                rng.shuffle(order)
            for i in order:
                yield items[i]
            if not repeat:
                return

    def verify_many(self, problems: Sequence[Problem], completions: Sequence[str]) -> list[VerifyResult]:
        """Verify ``completions[i]`` against ``problems[i]`` for every ``i``."""
        if len(problems) != len(completions):
            raise ValueError(
                f"completions: expected {len(problems)} completions (one per problem), got {len(completions)}"
            )
        return [self.verify(p, c) for p, c in zip(problems, completions)]

    def expert_text(self, problem: Problem, tokenizer: Any = None) -> str:
        """Rendered prompt followed by the expert solution (SFT and cold-start text, VSR §3.2 / App. D.2)."""
        if problem.solution is None:
            raise ValueError(f"problem: {problem.id!r} has no expert solution")
        return self.render_prompt(problem, tokenizer) + problem.solution

    def find_problem(self, problem_id: str) -> Problem:
        """Look a problem up by id across all splits (raises ValueError when absent)."""
        for split in self.splits:
            for p in self.problems(split):
                if p.id == problem_id:
                    return p
        raise ValueError(f"problem_id: no problem {problem_id!r} in task {self.name!r}")


def partition_spans(text: str, cuts: Sequence[int]) -> tuple[Step, ...]:
    """Turn sorted interior cut offsets into :class:`Step` spans that partition ``text``.

    Empty text gives no steps; duplicate or out-of-range cuts are dropped.
    """
    if not text:
        return ()
    bounds = [0] + sorted({c for c in cuts if 0 < c < len(text)}) + [len(text)]
    return tuple(Step(a, b, text[a:b]) for a, b in zip(bounds[:-1], bounds[1:]))


def parse_task_params(items: tuple[str, ...]) -> dict[str, Any]:
    """``("seed=1", "n_hard=50")`` -> ``{"seed": 1, "n_hard": 50}`` (values parsed as YAML scalars)."""
    import yaml

    out: dict[str, Any] = {}
    for i, item in enumerate(items):
        if not isinstance(item, str) or "=" not in item:
            raise ValueError(f"task_params[{i}]: expected 'key=value', got {item!r}")
        key, value = item.split("=", 1)
        key = key.strip()
        if not key:
            raise ValueError(f"task_params[{i}]: empty key in {item!r}")
        if key in out:
            raise ValueError(f"task_params[{i}]: duplicate key {key!r}")
        try:
            out[key] = yaml.safe_load(value)
        except yaml.YAMLError:
            out[key] = value
    return out


def check_task_params(value: Any, field: str = "task_params") -> tuple[str, ...]:
    """``value`` (a config's ``key=value`` task parameters) as a tuple, every item parsed by
    :func:`parse_task_params`; ValueError naming ``field`` when it is not a tuple or list of such strings."""
    if isinstance(value, (str, bytes)) or not isinstance(value, (tuple, list)):
        raise ValueError(f"{field}: must be a tuple of 'key=value' strings, got {value!r}")
    parse_task_params(tuple(value))
    return tuple(value)
