"""Arithmetic ladder: easy natural-language arithmetic for small pretrained chat models.

A real ~100M-parameter instruct model (SmolLM2-135M-Instruct) gets single-digit sums right only
some of the time and two-digit sums almost never, so the CPU test bed's step arithmetic and
competition maths give it no prompt with ``0 < p < 1``. The ladder's levels sit in that model's
competence band (measured in ``figures/real_model/card/README.md``):

=========  ==========================================================  =======================
level      problem                                                     space (x phrasings)
=========  ==========================================================  =======================
``add``    ``a + b``, ``a, b`` in 1..9                                 81 x 4
``sub``    ``a - b`` with ``b`` in 1..9 and ``a - b`` in 0..9            90 x 4
``mul``    ``a * b``, ``a, b`` in 2..9                                 64 x 4
``add3``   ``a + b + c``, ``a, b, c`` in 1..9                          729 x 4
``word``   one-step word problems (gets / gives away / puts in /        8 424
           takes away), numbers 1..9, six names, six objects
``add2d``  ``a + b``, ``a, b`` in 10..99 (opt-in)                       8 100 x 4
``mul2d``  ``a * b``, ``a`` in 11..99 not a multiple of 10, ``b`` in      648 x 4
           2..9 (opt-in)
``word2``  two-step word problems: gets ``b`` more, then gives ``c``     5 976
           away, ``a, b`` in 1..9, ``c`` in 1..a+b−1, ``c`` not ``a`` or
           ``b`` and the answer none of ``a, b, c``, a third of that space
           (``a + b + c`` divisible by 3); six names, six objects (opt-in)
=========  ==========================================================  =======================

The last three are harder levels for models past the first five (a 0.5B Qwen2 imported from a GGUF passed ``add`` and
``mul`` at about 1.0 in a card run that is not committed); they are not in the default ``levels``, so
every committed run keeps its problems. Appended to :data:`LEVELS`, they leave the first five levels'
``difficulty`` unchanged.

No operand is 0 and no multiplier is 1, so a response that merely repeats an operand of ``a + b``,
``a * b`` or ``a + b + c`` is never graded correct (the last-number reading below would otherwise
pass ``0 + 9`` -> "...0 + 9 is not a number..."); in ``a - b`` and the take-away word problems the
answer equals the subtrahend when ``a = 2b``. :func:`states_result` tells a stated answer
(``= 5``, ``is 5``) from a number that merely occurs, which the model card reports.

Each arithmetic level is asked in four phrasings (``What is 2 + 3?``, ``Calculate 2 + 3.``,
``What is 2 plus 3?``, ``What is the sum of 2 and 3?``); ``difficulty`` is the level's position
in :data:`LEVELS` (1-based), the same whichever levels a config selects. The prompt is posed as
one user message (rendered by the model's chat template) followed by ``instruction``.

Reference solutions (for cold start and for prefix studies, which cut them at a fraction α of
their tokens) are short sentences ending in ``The answer is N.``, e.g. ``First, 2 + 5 = 7. Then,
7 + 1 = 8. The answer is 8.``; :meth:`ArithLadderTask.split_steps` cuts after every sentence.

Splits: a problem's split is a salted hash of its text (:func:`~llm_harness.tasks.base.assign_split`),
so train / validation / test are disjoint whatever the seed; the seed decides which problems of a
split are drawn, at most ``n_<split>`` per level (a small level contributes all it has), levels
interleaved (problem ``i`` is of level ``i mod L`` while every level still has problems).

Budgets: ``level_budgets`` gives a level its own response budget (new tokens), carried in each of its problems'
``metadata["max_new_tokens"]``; the samplers cut that level's responses there, and the run's response budget stays
the most any response gets (:func:`~llm_harness.tasks.base.problem_budget`).

Verification (:func:`read_natural_answer`) reads the answer the way a small chat model writes it:
the last ``\\boxed{}``, else the last ``#### N``, else the last ``answer is N`` / ``answer: N``,
else the last number in the text, else the last number word (``five``; 0-20 and the tens) when the
text holds no digit at all. The reward is 1 iff that number equals the gold answer. Reading the
*last* number is the usual crude extractor for free-form answers (GSM8K-style); a response that
states the right sum and then keeps rambling about other numbers is graded on the last one.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from typing import Callable, Iterator, Mapping, Sequence

from llm_harness.tasks.base import (MAX_SPLIT_PROBLEMS, RESPONSE_BUDGET_KEY, ParseStatus, Problem, Step, Task,
                                    VerifyResult, assign_split, partition_spans)
from llm_harness.tasks.math_answers import extract_boxed
from llm_harness.tasks.registry import build_config, register_task
from vsr_util.checks import check_number
from vsr_util.registry import Registry

__all__ = [
    "LEVELS",
    "ArithLadderConfig",
    "ArithLadderTask",
    "ANSWER_MODES",
    "STRICT_RULES",
    "read_natural_answer",
    "read_strict_answer",
    "split_sentences",
    "states_result",
]

SPLITS = ("train", "validation", "test")
#: most tokens a level's budget may name (the trainer's own bound on a response budget)
MAX_LEVEL_BUDGET = 1_048_576
_SALT = "arith_ladder/v1"

# ---------------------------------------------------------------------------- answer reading
_NUM = r"-?\d+(?:\.\d+)?"
_NUMBER_RE = re.compile(_NUM)
_HASHES_RE = re.compile(r"####\s*(" + _NUM + ")")
_WORDS = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
          "sixteen seventeen eighteen nineteen twenty").split()
#: number words read when a response holds no digit (``five`` -> 5)
NUMBER_WORDS: dict[str, int] = {w: i for i, w in enumerate(_WORDS)} | {
    w: 10 * k for k, w in enumerate("thirty forty fifty sixty seventy eighty ninety".split(), start=3)
}
_WORD_RE = re.compile(r"\b(" + "|".join(sorted(NUMBER_WORDS, key=len, reverse=True)) + r")\b", re.IGNORECASE)
_ANSWER_IS_RE = re.compile(
    r"answer\s*(?:is|:|=)\s*:?\s*\**\$?\s*(" + _NUM + "|" + "|".join(sorted(NUMBER_WORDS, key=len, reverse=True)) + r")\b",
    re.IGNORECASE,
)


def _to_number(text: str) -> float | None:
    t = text.strip().strip("$ .*").replace("\u2212", "-")
    if t.lower() in NUMBER_WORDS:
        return float(NUMBER_WORDS[t.lower()])
    if re.fullmatch(_NUM, t):
        return float(t)
    return None


def read_natural_answer(text: str) -> tuple[ParseStatus, str | None, str]:
    """``(status, answer text, rule)`` of a free-form response (module doc, in priority order).

    ``rule`` is ``"boxed"``, ``"hashes"``, ``"answer_is"``, ``"last_number"``, ``"number_word"``
    or ``""`` (nothing found: MISSING). A ``\\boxed{}`` whose content is not a number is MALFORMED.
    """
    text = text.replace("\u2212", "-")
    box = extract_boxed(text)
    if box.status == "malformed":
        return ParseStatus.MALFORMED, None, "boxed"
    if box.status == "ok":
        value = _to_number(box.content or "")
        return (ParseStatus.OK, box.content, "boxed") if value is not None else (ParseStatus.MALFORMED, box.content, "boxed")
    hashes = _HASHES_RE.findall(text)
    if hashes:
        return ParseStatus.OK, hashes[-1], "hashes"
    answer = _ANSWER_IS_RE.findall(text)
    if answer:
        return ParseStatus.OK, answer[-1], "answer_is"
    numbers = _NUMBER_RE.findall(text)
    if numbers:
        return ParseStatus.OK, numbers[-1], "last_number"
    words = _WORD_RE.findall(text)
    if words:
        return ParseStatus.OK, words[-1], "number_word"
    return ParseStatus.MISSING, None, ""


_RESULT_WORDS = r"(?:=|\bis|\bequals?|\bare|\bmakes?|\bgets?|\bgives?|\btotal of|\banswer:?|\bresult)"


def states_result(text: str, value: int) -> bool:
    """True iff ``text`` states ``value`` as a result: right after ``=``, ``is``, ``equals``, ``are``,
    ``makes``, ``get(s)``, ``give(s)``, ``total of``, ``answer`` or ``result`` (optionally ``$`` or
    ``**`` between), or in ``\boxed{}`` / ``####``. A diagnostic of the grading, not the reward."""
    v = re.escape(str(int(value)))
    return re.search(_RESULT_WORDS + r"\s*(?:\$|\*\*)?\s*" + v + r"(?!\d|\.\d)|\\boxed\{\s*" + v + r"\s*\}|####\s*" + v + r"\b",
                     text.replace("\u2212", "-"), re.IGNORECASE) is not None


#: the rules of a *declared* final answer (``answer_mode: strict``): no fallback to a number the text merely contains
STRICT_RULES = ("boxed", "hashes", "answer_is")


def read_strict_answer(text: str) -> tuple[ParseStatus, str | None, str]:
    """:func:`read_natural_answer` restricted to a declared final answer (:data:`STRICT_RULES`: ``\\boxed{}``,
    ``#### N``, "the answer is N"): a response that only mentions numbers is MISSING, so a pass cannot be a number
    that happens to be the last one in the text."""
    status, extracted, rule = read_natural_answer(text)
    if rule in STRICT_RULES:
        return status, extracted, rule
    return ParseStatus.MISSING, None, ""


#: answer mode -> reader (``ArithLadderConfig.answer_mode``)
ANSWER_MODES = {"lenient": read_natural_answer, "strict": read_strict_answer}

#: the instruction that asks a chat model to declare its answer: of three probed on SmolLM2-135M-Instruct (200 samples
#: each, strict reader) it got the most declared answers (figures/real_model/card-strict/README.md)
DECLARE_INSTRUCTION = 'Answer briefly and finish with "The answer is" and the number.'

#: the real-model runs' reader (model card, studies, GRPO): a declared final answer only, asked for by
#: :data:`DECLARE_INSTRUCTION`, as ``key=value`` task parameters (``vsr ... --task-params``)
STRICT_READER: tuple[str, ...] = ("answer_mode=strict", f"instruction={DECLARE_INSTRUCTION}")


def with_strict_reader(params: Sequence[str]) -> tuple[str, ...]:
    """``key=value`` task parameters with :data:`STRICT_READER` filled in, unless they choose the reader
    themselves (an ``answer_mode`` key: then they stay as given); a key they set keeps its value
    (``instruction=...`` replaces the default instruction)."""
    keys = {str(p).split("=", 1)[0].strip() for p in params}
    if "answer_mode" in keys:
        return tuple(params)
    return (*params, *(p for p in STRICT_READER if p.split("=", 1)[0] not in keys))


def verify_natural(completion: str, gold: int, mode: str = "lenient") -> VerifyResult:
    """Reward 1 iff the reader of ``mode`` (:data:`ANSWER_MODES`) finds a number equal to ``gold``."""
    status, extracted, rule = ANSWER_MODES[mode](completion)
    if status is not ParseStatus.OK:
        return VerifyResult(0.0, status, extracted, detail=rule or "no number in the response")
    value = _to_number(extracted or "")
    return VerifyResult(1.0 if value == float(gold) else 0.0, ParseStatus.OK, extracted, detail=rule)


def split_sentences(text: str) -> tuple[Step, ...]:
    """Steps of a reference solution or response: cut after every ``". "`` (sentence end followed
    by whitespace, which stays with the sentence) and every newline."""
    cuts = [m.end() for m in re.finditer(r"\.[ \t]+|\n", text)]
    return partition_spans(text, cuts)


# ---------------------------------------------------------------------------- levels
@dataclass(frozen=True)
class Item:
    """One problem of a level before it becomes a :class:`Problem`."""

    question: str
    answer: int
    solution: str
    operands: tuple[int, ...]


def _phrasings(op: str, xs: tuple[int, ...]) -> list[str]:
    a = [str(x) for x in xs]
    sym, word, noun = {"+": ("+", "plus", "sum"), "-": ("-", "minus", None), "*": ("*", "times", "product")}[op]
    expr = f" {sym} ".join(a)
    listed = a[0] if len(a) == 1 else ", ".join(a[:-1]) + " and " + a[-1]
    fourth = f"What is the {noun} of {listed}?" if noun else f"Subtract {a[1]} from {a[0]}."
    return [f"What is {expr}?", f"Calculate {expr}.", f"What is {f' {word} '.join(a)}?", fourth]


def _arith_items(op: str, tuples: Iterator[tuple[int, ...]]) -> Iterator[Item]:
    fn = {"+": lambda x, y: x + y, "-": lambda x, y: x - y, "*": lambda x, y: x * y}[op]
    for xs in tuples:
        vals = [xs[0]]
        for x in xs[1:]:
            vals.append(fn(vals[-1], x))
        if len(xs) == 2:
            sol = f"{xs[0]} {op} {xs[1]} = {vals[-1]}. The answer is {vals[-1]}."
        else:
            parts = [f"{vals[k]} {op} {xs[k + 1]} = {vals[k + 1]}" for k in range(len(xs) - 1)]
            sol = "First, " + parts[0] + ". " + "".join(f"Then, {p}. " for p in parts[1:]) + f"The answer is {vals[-1]}."
        for q in _phrasings(op, xs):
            yield Item(q, vals[-1], sol, tuple(xs))


_NAMES = (("Tom", "He"), ("Anna", "She"), ("Sam", "He"), ("Lily", "She"), ("Ben", "He"), ("Mia", "She"))
_OBJECTS = (("apple", "apples"), ("pencil", "pencils"), ("marble", "marbles"), ("cookie", "cookies"),
            ("book", "books"), ("sticker", "stickers"))


def _n(count: int, obj: tuple[str, str]) -> str:
    """``"1 apple"``, ``"3 apples"``."""
    return f"{count} {obj[0] if count == 1 else obj[1]}"


def _cast() -> Iterator[tuple[str, str, tuple[str, str], str]]:
    """Every (name, pronoun, object, its plural) of the word problems, in a fixed order."""
    for name, he in _NAMES:
        for obj in _OBJECTS:
            yield name, he, obj, obj[1]


def _word_items() -> Iterator[Item]:
    for name, he, obj, objs in _cast():
        for a in range(1, 10):
            for b in range(1, 10):
                c = a + b
                yield Item(f"{name} has {_n(a, obj)}. {he} gets {b} more. How many {objs} does {name} have now?",
                           c, f"{name} has {_n(a, obj)} and gets {b} more, so {a} + {b} = {c}. The answer is {c}.", (a, b))
                yield Item(f"There {'is' if a == 1 else 'are'} {_n(a, obj)} in a box. {name} puts {b} more in the box. "
                           f"How many {objs} are in the box now?",
                           c, f"The box has {_n(a, obj)} and {b} more are put in, so {a} + {b} = {c}. The answer is {c}.", (a, b))
                if b < a:
                    d = a - b
                    yield Item(f"{name} has {_n(a, obj)}. {he} gives {b} to a friend. How many {objs} does {name} have left?",
                               d, f"{name} has {_n(a, obj)} and gives away {b}, so {a} - {b} = {d}. The answer is {d}.", (a, b))
                    yield Item(f"There are {_n(a, obj)} on a table. {name} takes {b} of them. How many {objs} are left on the table?",
                               d, f"The table has {_n(a, obj)} and {b} are taken, so {a} - {b} = {d}. The answer is {d}.", (a, b))


def _word2_items() -> Iterator[Item]:
    """Two-step word problems: ``a`` objects, ``b`` more, ``c`` given away (``c`` never equal to ``a`` or ``b``, and
    the answer equal to none of the three, so repeating an operand never passes)."""
    for name, he, obj, objs in _cast():
        for a in range(1, 10):
            for b in range(1, 10):
                total = a + b
                for c in range(1, total):
                    d = total - c
                    if c in (a, b) or d in (a, b, c):
                        continue
                    if (a + b + c) % 3:  # a third of the space keeps each level's size in proportion
                        continue
                    yield Item(f"{name} has {_n(a, obj)}. {he} gets {b} more, then gives {c} to a friend. "
                               f"How many {objs} does {name} have now?", d,
                               f"{name} has {_n(a, obj)} and gets {b} more, so {a} + {b} = {total}. "
                               f"Then {he.lower()} gives away {c}, so {total} - {c} = {d}. The answer is {d}.", (a, b, c))


#: level name -> generator of its whole problem space, in a fixed order (difficulty = position + 1)
LEVELS: Registry[Callable[[], Iterator[Item]]] = Registry("arith_ladder level", {
    "add": lambda: _arith_items("+", ((a, b) for a in range(1, 10) for b in range(1, 10))),
    "sub": lambda: _arith_items("-", ((b + c, b) for b in range(1, 10) for c in range(10))),
    "mul": lambda: _arith_items("*", ((a, b) for a in range(2, 10) for b in range(2, 10))),
    "add3": lambda: _arith_items("+", ((a, b, c) for a in range(1, 10) for b in range(1, 10) for c in range(1, 10))),
    "word": _word_items,
    "add2d": lambda: _arith_items("+", ((a, b) for a in range(10, 100) for b in range(10, 100))),
    "mul2d": lambda: _arith_items("*", ((a, b) for a in range(11, 100) if a % 10 for b in range(2, 10))),
    "word2": _word2_items,
})


@dataclass(frozen=True)
class ArithLadderConfig:
    """Parameters of the arithmetic ladder (every split is deterministic given these)."""

    seed: int = 0
    """Selects which problems of each split are drawn (split membership does not depend on it)."""
    levels: tuple[str, ...] = ("add", "sub", "mul", "add3", "word")
    """Levels to include (names of :data:`LEVELS`)."""
    n_train: int = 1000
    """Most train problems per level."""
    n_validation: int = 64
    """Most validation problems per level."""
    n_test: int = 64
    """Most test problems per level."""
    split_fractions: tuple[float, float, float] = (0.6, 0.2, 0.2)
    """Share of each level's problem space given to (train, validation, test); sums to 1."""
    instruction: str = ""
    """Text appended to every question after a space (e.g. ``Answer with a number.``); empty = none."""
    level_budgets: Mapping[str, int] = field(default_factory=dict)
    """Most new tokens of a response per level (``{word2: 128, add: 32}``), so a short level does not run on and a
    long one is not cut off; a level not named gets the run's response budget, which stays the most any response gets
    (a level's budget only lowers it: :func:`~llm_harness.tasks.base.problem_budget`). Problems carry it in
    ``metadata["max_new_tokens"]``. Empty: every level at the run's budget (the committed runs)."""
    answer_mode: str = "lenient"
    """How a response's answer is read: ``lenient`` (a declared final answer, else the last number, else the last
    number word: the committed results' verifier) or ``strict`` (only a declared final answer — ``\\boxed{}``,
    ``#### N``, "the answer is N" — so a pass cannot be an incidental last number; see the model card's chance level)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "levels", tuple(self.levels))
        if self.answer_mode not in ANSWER_MODES:
            raise ValueError(f"answer_mode: must be one of {sorted(ANSWER_MODES)}, got {self.answer_mode!r}")
        if not self.levels:
            raise ValueError("levels: must name at least one level")
        for i, name in enumerate(self.levels):
            LEVELS.check(name, f"levels[{i}]")
        if len(set(self.levels)) != len(self.levels):
            raise ValueError(f"levels: names must be distinct, got {self.levels}")
        for name in ("n_train", "n_validation", "n_test"):
            check_number(name, getattr(self, name), 0, MAX_SPLIT_PROBLEMS, integer=True)
        object.__setattr__(self, "split_fractions", tuple(self.split_fractions))
        if len(self.split_fractions) != 3:
            raise ValueError(f"split_fractions: expected 3 fractions (train, validation, test), got {self.split_fractions}")
        assign_split("probe", dict(zip(SPLITS, self.split_fractions)), _SALT)
        if not isinstance(self.instruction, str):
            raise ValueError(f"instruction: must be a string, got {type(self.instruction).__name__}")
        if not isinstance(self.level_budgets, Mapping):
            raise ValueError(f"level_budgets: must be a mapping of level name to tokens, got {type(self.level_budgets).__name__}")
        budgets = dict(self.level_budgets)
        for name, tokens in budgets.items():
            if name not in self.levels:
                raise ValueError(f"level_budgets: {name!r} is not one of this task's levels {list(self.levels)}")
            check_number(f"level_budgets.{name}", tokens, 1, MAX_LEVEL_BUDGET, integer=True)
        object.__setattr__(self, "level_budgets", budgets)

    def size(self, split: str) -> int:
        """Most problems per level in ``split``."""
        return {"train": self.n_train, "validation": self.n_validation, "test": self.n_test}[split]


class ArithLadderTask(Task):
    """The arithmetic ladder (module doc)."""

    name = "arith_ladder"

    def __init__(self, config: ArithLadderConfig | None = None) -> None:
        self.config = config or ArithLadderConfig()
        self._fractions = dict(zip(SPLITS, self.config.split_fractions))
        self._cache: dict[str, tuple[Problem, ...]] = {}

    @property
    def splits(self) -> tuple[str, ...]:
        return SPLITS

    def _level_problems(self, level: str, split: str) -> list[Problem]:
        difficulty = float(LEVELS.names().index(level) + 1)
        out = []
        for item in LEVELS[level]():
            if assign_split(f"{level}|{item.question}", self._fractions, _SALT) != split:
                continue
            out.append(Problem(
                id=f"arith_ladder/{level}/{item.question}",
                prompt=item.question,
                answer=str(item.answer),
                solution=item.solution,
                difficulty=difficulty,
                metadata={"level": level, "operands": item.operands,
                          **({RESPONSE_BUDGET_KEY: self.config.level_budgets[level]} if level in self.config.level_budgets else {})},
            ))
        rng = random.Random(f"{_SALT}|{self.config.seed}|{split}|{level}")
        rng.shuffle(out)
        return out[: self.config.size(split)]

    def problems(self, split: str) -> tuple[Problem, ...]:
        """At most ``config.size(split)`` problems per level, levels interleaved (module doc)."""
        self.check_split(split)
        if split not in self._cache:
            per_level = [self._level_problems(level, split) for level in self.config.levels]
            out: list[Problem] = []
            for i in range(max((len(p) for p in per_level), default=0)):
                out.extend(p[i] for p in per_level if i < len(p))
            self._cache[split] = tuple(out)
        return self._cache[split]

    def messages(self, problem: Problem) -> list[dict[str, str]]:
        return [{"role": "user", "content": self._question(problem)}]

    def plain_prompt(self, problem: Problem) -> str:
        return f"Question: {self._question(problem)}\nAnswer: "

    def _question(self, problem: Problem) -> str:
        return f"{problem.prompt} {self.config.instruction}" if self.config.instruction else problem.prompt

    def verify(self, problem: Problem, completion: str) -> VerifyResult:
        return verify_natural(completion, int(problem.answer), self.config.answer_mode)

    def split_steps(self, text: str) -> tuple[Step, ...]:
        return split_sentences(text)


@register_task("arith_ladder")
def _make_arith_ladder(**params) -> ArithLadderTask:
    """``get_task("arith_ladder", levels=("add", "sub"), n_test=64, ...)``: fields of :class:`ArithLadderConfig`."""
    return ArithLadderTask(build_config(ArithLadderConfig, params))
