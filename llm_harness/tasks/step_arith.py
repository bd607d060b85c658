"""Step arithmetic: the CPU test-bed task (cold start as in VSR §3.2).

A problem is a chain of additions and subtractions over ``0..max_value`` (default 99) whose
running value stays in ``0..max_value`` after every operation, e.g.::

    prompt    Q:97-53-5-33=?
    solution  97-53=44,44-5=39,39-33=6
              A:6

Text format (exact, character level)
------------------------------------
* plain prompt (no chat template): ``"Q:" + expression + "=?" + "\\n"``;
* completion / expert solution: the steps ``a<op>b=c`` joined by ``","``, then ``"\\n"``, then
  ``"A:" + answer``; the model ends with its end-of-sequence token (not part of the text).
* chat message (a tokenizer with a chat template): the bare ``"Q:" + expression + "=?"``, which does not
  ask for the ``A:`` line, so a chat model is refused (``Task.needs_answer_format``) unless the task's
  ``instruction`` parameter states the format (it is appended to the chat message only).
* Every character of prompts and solutions lies in :data:`ALPHABET`
  (``0-9 + - = , : ? Q A`` and newline: 19 symbols; a character-level tokenizer adds its own
  special tokens such as EOS/PAD/BOS on top).

Generation
----------
* Difficulty = number of terms ``n`` (``n - 1`` steps).  The first term is uniform on
  ``0..max_value``; each next operation is ``+`` or ``-`` with probability 1/2 and its operand is
  uniform on the values that keep the running value in range (``0..max_value - v`` for ``+``,
  ``0..v`` for ``-``), so every intermediate result lies in ``0..max_value`` by construction.
* Split membership is a salted hash of the expression (:func:`assign_split`), so the
  train / validation / test / hard splits are disjoint by problem whatever the seed or term
  ranges; the seed only decides which problems of each split are drawn.  Within a split,
  problems are unique and stratified over term counts (problem ``i`` has
  ``min_terms + i mod (max_terms - min_terms + 1)`` terms).
* The **hard** split uses long chains (default 7-9 terms) on which a small model rarely
  succeeds; like every split it carries the expert solution of each problem.

Verification: the answer is the text after the last ``"A:"`` (trailing whitespace ignored); it
must be a canonical integer (``-?(0|[1-9][0-9]*)``, at most 10 digits), else MALFORMED; no
``"A:"`` at all is MISSING.  Reward 1 iff the integer equals the gold answer (intermediate steps
are not graded; :func:`check_partial` does that).  Verification is pure string work bounded by
the completion length, so it runs inline without a timeout.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Sequence

from llm_harness.tasks.base import (
    MAX_SPLIT_PROBLEMS,
    ParseStatus,
    Problem,
    Step,
    Task,
    VerifyResult,
    assign_split,
    partition_spans,
)
from llm_harness.tasks.registry import build_config, register_task
from vsr_util.checks import check_number

__all__ = [
    "ALPHABET",
    "MAX_TERMS",
    "PartialCheck",
    "StepArithConfig",
    "StepArithTask",
    "StepCheck",
    "check_partial",
    "draw_chain",
    "evaluate_chain",
    "format_solution",
    "parse_prompt",
    "split_step_arith",
    "verify_step_arith",
]

#: Every character that can appear in a step-arithmetic prompt or solution (19 symbols).
ALPHABET = "0123456789+-=,:?QA\n"

SPLITS = ("train", "validation", "test", "hard")
_SALT = "step_arith/v1"
_MAX_ATTEMPTS = 20_000
_ANSWER_RE = re.compile(r"-?(?:0|[1-9][0-9]{0,9})")
_STEP_RE = re.compile(r"([0-9]{1,6})([+-])([0-9]{1,6})=(-?[0-9]{1,6})")
_PROMPT_RE = re.compile(r"Q:([0-9]{1,6}(?:[+-][0-9]{1,6})+)=\?")
#: Most terms of a chain (any split): a chain is built term by term, so ``max_terms: 1e9`` would never finish
MAX_TERMS = 1_000


@dataclass(frozen=True)
class StepArithConfig:
    """Parameters of the step-arithmetic task (all splits are deterministic given these)."""

    seed: int = 0
    """Selects which problems of each split are drawn (split membership does not depend on it)."""
    min_terms: int = 2
    """Fewest terms in train / validation / test problems (>= 2)."""
    max_terms: int = 6
    """Most terms in train / validation / test problems."""
    hard_min_terms: int = 7
    """Fewest terms in the hard split."""
    hard_max_terms: int = 9
    """Most terms in the hard split."""
    n_train: int = 20_000
    """Number of train problems."""
    n_validation: int = 500
    """Number of validation problems."""
    n_test: int = 1_000
    """Number of test problems."""
    n_hard: int = 300
    """Number of hard problems."""
    max_value: int = 99
    """Terms and every intermediate value lie in ``0..max_value``."""
    split_fractions: tuple[float, float, float, float] = (0.85, 0.05, 0.05, 0.05)
    """Share of expression space given to (train, validation, test, hard); sums to 1."""
    instruction: str = ""
    """Text appended (after a newline) to the question in the chat message: how to lay out the steps and the
    ``A:<n>`` answer line. Empty: the chat message is the bare ``Q:...=?`` (the test bed's models render the plain
    prompt, which this leaves unchanged), so a chat model is refused (:attr:`StepArithTask.needs_answer_format`)."""

    def __post_init__(self) -> None:
        check_number("min_terms", self.min_terms, 2, MAX_TERMS, integer=True)
        check_number("max_terms", self.max_terms, self.min_terms, MAX_TERMS, integer=True)  # >= min_terms
        check_number("hard_min_terms", self.hard_min_terms, 2, MAX_TERMS, integer=True)
        check_number("hard_max_terms", self.hard_max_terms, self.hard_min_terms, MAX_TERMS, integer=True)
        for name in ("n_train", "n_validation", "n_test", "n_hard"):
            check_number(name, getattr(self, name), 0, MAX_SPLIT_PROBLEMS, integer=True)
        if not isinstance(self.instruction, str):
            raise ValueError(f"instruction: must be a string, got {type(self.instruction).__name__}")
        check_number("max_value", self.max_value, 1, 999_999, integer=True)
        if len(self.split_fractions) != 4:
            raise ValueError(f"split_fractions: expected 4 fractions (train, validation, test, hard), got {self.split_fractions}")
        # assign_split validates positivity and the sum.
        assign_split("probe", dict(zip(SPLITS, self.split_fractions)), _SALT)

    def term_range(self, split: str) -> tuple[int, int]:
        """Inclusive ``(min, max)`` number of terms for ``split``."""
        return (self.hard_min_terms, self.hard_max_terms) if split == "hard" else (self.min_terms, self.max_terms)

    def size(self, split: str) -> int:
        """Number of problems in ``split``."""
        return {"train": self.n_train, "validation": self.n_validation, "test": self.n_test, "hard": self.n_hard}[split]


# ---------------------------------------------------------------------------- pure functions
def draw_chain(rng: random.Random, n_terms: int, max_value: int = 99) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """Draw ``terms[n_terms]`` and ``ops[n_terms - 1]`` (``"+"``/``"-"``) with every running value
    in ``0..max_value`` (see the module docstring for the distribution)."""
    check_number("n_terms", n_terms, 2, integer=True)
    v = rng.randint(0, max_value)
    terms, ops = [v], []
    for _ in range(n_terms - 1):
        op = "+" if rng.random() < 0.5 else "-"
        b = rng.randint(0, max_value - v) if op == "+" else rng.randint(0, v)
        v = v + b if op == "+" else v - b
        terms.append(b)
        ops.append(op)
    return tuple(terms), tuple(ops)


def evaluate_chain(terms: Sequence[int], ops: Sequence[str]) -> tuple[int, ...]:
    """Running values ``v[n_terms]``: ``v[0] = terms[0]``, ``v[k+1] = v[k] ops[k] terms[k+1]``."""
    if len(terms) != len(ops) + 1:
        raise ValueError(f"ops: expected {len(terms) - 1} operations for {len(terms)} terms, got {len(ops)}")
    vals = [int(terms[0])]
    for op, b in zip(ops, terms[1:]):
        if op == "+":
            vals.append(vals[-1] + int(b))
        elif op == "-":
            vals.append(vals[-1] - int(b))
        else:
            raise ValueError(f"ops: unknown operation {op!r} (expected '+' or '-')")
    return tuple(vals)


def format_expression(terms: Sequence[int], ops: Sequence[str]) -> str:
    """``"97-53-5-33"`` from the terms and operations."""
    return str(terms[0]) + "".join(f"{op}{b}" for op, b in zip(ops, terms[1:]))


def format_solution(terms: Sequence[int], ops: Sequence[str]) -> str:
    """Expert solution ``"97-53=44,44-5=39,39-33=6\\nA:6"``."""
    vals = evaluate_chain(terms, ops)
    steps = ",".join(f"{vals[k]}{op}{b}={vals[k + 1]}" for k, (op, b) in enumerate(zip(ops, terms[1:])))
    return f"{steps}\nA:{vals[-1]}"


def parse_prompt(prompt: str) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """Inverse of the prompt format: ``"Q:97-53-5-33=?"`` -> ``((97, 53, 5, 33), ("-", "-", "-"))``."""
    m = _PROMPT_RE.fullmatch(prompt.strip())
    if m is None:
        raise ValueError(f"prompt: not a step-arithmetic prompt 'Q:<a><op><b>...=?': {prompt[:60]!r}")
    parts = re.split(r"([+-])", m.group(1))
    return tuple(int(x) for x in parts[0::2]), tuple(parts[1::2])


def verify_step_arith(completion: str, gold: int) -> VerifyResult:
    """Reward 1 iff the integer after the last ``"A:"`` equals ``gold`` (module docstring)."""
    idx = completion.rfind("A:")
    if idx < 0:
        return VerifyResult(0.0, ParseStatus.MISSING, None, detail="no 'A:' in completion")
    text = completion[idx + 2 :].strip()
    if _ANSWER_RE.fullmatch(text) is None:
        return VerifyResult(0.0, ParseStatus.MALFORMED, text[:64], detail="answer after 'A:' is not a canonical integer")
    return VerifyResult(1.0 if int(text) == int(gold) else 0.0, ParseStatus.OK, text)


def split_step_arith(text: str) -> tuple[Step, ...]:
    """Steps of a step-arithmetic solution: cut after every ``","`` and ``"\\n"``.

    ``"97-53=44,44-5=39\\nA:39"`` -> ``["97-53=44,", "44-5=39\\n", "A:39"]`` (the answer line is
    the last step).
    """
    return partition_spans(text, [i + 1 for i, ch in enumerate(text) if ch in ",\n"])


@dataclass(frozen=True)
class StepCheck:
    """Grading of one complete ``a<op>b=c`` step of a (partial) solution."""

    index: int
    """0-based step position."""
    text: str
    """The step text without its separator."""
    parsed: bool
    """The text has the form ``a<op>b=c``."""
    arithmetic_ok: bool
    """``c == a op b`` (whatever ``a`` and ``b`` are)."""
    on_chain: bool
    """The step is exactly the gold step at this position (right running value, operation,
    operand and result)."""


@dataclass(frozen=True)
class PartialCheck:
    """Label-aware state of a partial solution (label-aware prefix metric; ExTra §5.6, App. C.2)."""

    steps: tuple[StepCheck, ...]
    """Every complete step (followed by ``","`` or ``"\\n"``) before the answer line."""
    n_gold_steps: int
    """Number of steps of the gold chain (``n_terms - 1``)."""
    n_correct_prefix: int
    """Number of leading steps that are on the gold chain."""
    running_value: int | None
    """The model's current value: the result of its last complete parsed step, else the first
    term (``None`` when the last complete step did not parse)."""
    gold_value: int
    """The gold running value after ``n_correct_prefix`` steps."""
    answer_reached: bool
    """An ``A:`` line has started."""
    answer: int | None
    """The integer on the ``A:`` line when it is a canonical integer (in a cut prefix it may be
    the beginning of a longer number)."""
    tail: str
    """Trailing text after the last separator that is not (yet) a complete step (empty once the
    answer line has started)."""

    @property
    def all_correct(self) -> bool:
        """Every complete step so far is on the gold chain."""
        return self.n_correct_prefix == len(self.steps)

    @property
    def fraction_correct(self) -> float:
        """``n_correct_prefix / n_gold_steps``: progress along the gold chain in ``[0, 1]``."""
        return self.n_correct_prefix / self.n_gold_steps


def check_partial(problem: Problem, partial: str) -> PartialCheck:
    """Grade the complete steps of a partial solution against ``problem``'s gold chain.

    A trailing segment without a separator is not graded (its last number may still grow);
    it is returned as ``tail``.  Steps after an ``A:`` line are ignored.
    """
    terms, ops = parse_prompt(problem.prompt)
    gold = evaluate_chain(terms, ops)
    checks: list[StepCheck] = []
    answer_reached, answer, tail = False, None, ""
    model_value: int | None = gold[0]
    for seg in split_step_arith(partial):
        body = seg.text.rstrip(",\n")
        complete = seg.text.endswith((",", "\n"))
        if body.startswith("A:"):
            answer_reached = True
            m = _ANSWER_RE.fullmatch(body[2:].strip())
            answer = int(body[2:].strip()) if m else None
            break
        if not complete:
            tail = seg.text
            break
        k = len(checks)
        m = _STEP_RE.fullmatch(body)
        if m is None:
            checks.append(StepCheck(k, body, False, False, False))
            model_value = None
            continue
        a, op, b, c = int(m.group(1)), m.group(2), int(m.group(3)), int(m.group(4))
        arith = c == (a + b if op == "+" else a - b)
        on_chain = k < len(ops) and a == gold[k] and op == ops[k] and b == terms[k + 1] and c == gold[k + 1]
        checks.append(StepCheck(k, body, True, arith, on_chain))
        model_value = c
    n_ok = 0
    while n_ok < len(checks) and checks[n_ok].on_chain:
        n_ok += 1
    return PartialCheck(
        steps=tuple(checks),
        n_gold_steps=len(ops),
        n_correct_prefix=n_ok,
        running_value=model_value,
        gold_value=gold[n_ok],
        answer_reached=answer_reached,
        answer=answer,
        tail=tail,
    )


# ---------------------------------------------------------------------------- the task
def make_problem(terms: Sequence[int], ops: Sequence[str]) -> Problem:
    """The :class:`Problem` for one chain (id ``"step_arith/<expression>"``)."""
    expr = format_expression(terms, ops)
    vals = evaluate_chain(terms, ops)
    return Problem(
        id=f"step_arith/{expr}",
        prompt=f"Q:{expr}=?",
        answer=str(vals[-1]),
        solution=format_solution(terms, ops),
        difficulty=float(len(terms)),
        metadata={"n_terms": len(terms), "terms": tuple(terms), "ops": tuple(ops)},
    )


class StepArithTask(Task):
    """Step-arithmetic chains with train / validation / test / hard splits (module docstring)."""

    name = "step_arith"

    def __init__(self, config: StepArithConfig | None = None) -> None:
        self.config = config or StepArithConfig()
        self._fractions = dict(zip(SPLITS, self.config.split_fractions))
        self._cache: dict[str, tuple[Problem, ...]] = {}

    @property
    def splits(self) -> tuple[str, ...]:
        return SPLITS

    def params_outside(self, split: str) -> frozenset[str]:
        """The other splits' sizes, and the hard term range outside the hard split: each split draws from its own
        random stream (:meth:`problems`), so these leave ``split``'s problems as they are."""
        self.check_split(split)
        sizes = {f"n_{s}" for s in SPLITS if s != split}
        return frozenset(sizes | ({"hard_min_terms", "hard_max_terms"} if split != "hard" else {"min_terms", "max_terms"}))

    def split_of(self, expression: str) -> str:
        """The split an expression (e.g. ``"97-53-5-33"``) belongs to."""
        return assign_split(expression, self._fractions, _SALT)

    def _draw_in_split(self, rng: random.Random, split: str, n_terms: int, seen: set[str] | None) -> Problem:
        for _ in range(_MAX_ATTEMPTS):
            terms, ops = draw_chain(rng, n_terms, self.config.max_value)
            expr = format_expression(terms, ops)
            if (seen is None or expr not in seen) and self.split_of(expr) == split:
                if seen is not None:
                    seen.add(expr)
                return make_problem(terms, ops)
        raise ValueError(
            f"n_{split}: could not find a new {n_terms}-term problem for split {split!r} after {_MAX_ATTEMPTS} "
            "draws; the split has (almost) run out of distinct problems of this length: ask for fewer problems "
            "or widen the term range"
        )

    def problems(self, split: str) -> tuple[Problem, ...]:
        """The ``config.size(split)`` unique problems of ``split`` (stratified by term count)."""
        self.check_split(split)
        if split not in self._cache:
            lo, hi = self.config.term_range(split)
            rng = random.Random(f"{_SALT}|{self.config.seed}|{split}")
            seen: set[str] = set()
            span = hi - lo + 1
            self._cache[split] = tuple(
                self._draw_in_split(rng, split, lo + i % span, seen) for i in range(self.config.size(split))
            )
        return self._cache[split]

    def sample_problems(self, split: str, n: int, *, seed: int, n_terms: int | None = None) -> tuple[Problem, ...]:
        """``n`` fresh i.i.d. problems from ``split``'s region (with repeats possible), e.g. an
        endless SFT stream; ``n_terms`` fixes the length, else it is uniform over the split's
        term range."""
        self.check_split(split)
        check_number("n", n, 0, MAX_SPLIT_PROBLEMS, integer=True)
        lo, hi = self.config.term_range(split)
        if n_terms is not None:
            check_number("n_terms", n_terms, 2, MAX_TERMS, integer=True)
        rng = random.Random(f"{_SALT}|sample|{seed}|{split}")
        return tuple(
            self._draw_in_split(rng, split, n_terms if n_terms is not None else rng.randint(lo, hi), None)
            for _ in range(n)
        )

    @property
    def needs_answer_format(self) -> str:  # type: ignore[override]
        """The ``A:<n>`` answer line, unless :attr:`StepArithConfig.instruction` asks for it (:attr:`Task.needs_answer_format`)."""
        if self.config.instruction:
            return ""
        return ("its verifier reads the answer only from a last line 'A:<integer>' after steps 'a+b=c' separated by "
                "commas, and its chat message is the bare 'Q:<expression>=?', which does not ask for that format")

    def messages(self, problem: Problem) -> list[dict[str, str]]:
        if self.config.instruction:
            return [{"role": "user", "content": f"{problem.prompt}\n{self.config.instruction}"}]
        return [{"role": "user", "content": problem.prompt}]

    def plain_prompt(self, problem: Problem) -> str:
        return problem.prompt + "\n"

    def verify(self, problem: Problem, completion: str) -> VerifyResult:
        return verify_step_arith(completion, int(problem.answer))

    def split_steps(self, text: str) -> tuple[Step, ...]:
        return split_step_arith(text)

    def check_partial(self, problem: Problem, partial: str) -> PartialCheck:
        """See :func:`check_partial`."""
        return check_partial(problem, partial)


@register_task("step_arith")
def _make_step_arith(**params) -> StepArithTask:
    """``get_task("step_arith", seed=0, min_terms=2, ...)``: fields of :class:`StepArithConfig`."""
    if "split_fractions" in params:
        params["split_fractions"] = tuple(params["split_fractions"])
    return StepArithTask(build_config(StepArithConfig, params))
