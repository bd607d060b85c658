"""Math graders: the Minerva-style training reward and the math-verify evaluator (Replay App. A, "Verifier").

Both graders take the already extracted ``\\boxed{}`` content and the gold answer and return
``(correct, detail)``; they are module-level functions so :class:`IsolatedRunner` workers can
run them under a deadline (:mod:`llm_harness.tasks.isolation`).  They are also safe to call
directly (tests, main thread) but then have no deadline.

* ``minerva`` (training reward, Replay §: Minerva comparator): exact match of
  :func:`normalize_answer` of prediction and gold.
* ``math_verify`` (evaluation): ``math_verify.parse`` of the gold first, then of the prediction,
  each wrapped in ``$...$`` unless already inside a math environment; correct iff
  ``math_verify.verify(gold, pred)``.  If either side parses to nothing, fall back to equality
  of the normalised strings.  math-verify's own SIGALRM timeouts are switched off
  (``parsing_timeout=None``, ``timeout_seconds=None``); the worker deadline replaces them.
"""

from __future__ import annotations

import importlib.util
import logging
from typing import Callable

from llm_harness.tasks.math_answers import extract_boxed, normalize_answer
from vsr_util.registry import Registry

__all__ = [
    "GRADERS",
    "gold_answer_text",
    "grade_math_verify",
    "grade_minerva",
    "math_verify_available",
    "require_math_verify",
    "warmup",
]

Grader = Callable[[str, str], "tuple[bool, str]"]


def gold_answer_text(gold: str) -> str:
    """The gold answer with a surrounding ``\\boxed{}`` removed (datasets sometimes box it)."""
    g = gold.strip()
    if "\\boxed" in g or "\\fbox" in g:
        box = extract_boxed(g, window=len(g) + 1)
        if box.status == "ok" and box.content is not None:
            return box.content
    return g


def grade_minerva(pred: str, gold: str) -> tuple[bool, str]:
    """Exact match of the Minerva-style normal forms (training reward)."""
    p, g = normalize_answer(pred), normalize_answer(gold_answer_text(gold))
    return (p != "" and p == g), "minerva"


def _wrap_math(s: str) -> str:
    s = s.strip()
    if s.startswith("$") or s.startswith("\\(") or s.startswith("\\["):
        return s
    return f"${s}$"


def grade_math_verify(pred: str, gold: str) -> tuple[bool, str]:
    """math-verify equivalence (gold parsed first), normalised-string fallback (evaluation)."""
    from math_verify import parse, verify

    gold_text = gold_answer_text(gold)
    gold_parsed = parse(_wrap_math(gold_text), parsing_timeout=None)
    pred_parsed = parse(_wrap_math(pred), parsing_timeout=None)
    if gold_parsed and pred_parsed:
        return bool(verify(gold_parsed, pred_parsed, timeout_seconds=None)), "math_verify"
    p, g = normalize_answer(pred), normalize_answer(gold_text)
    side = "gold" if not gold_parsed else "prediction"
    return (p != "" and p == g), f"fallback: {side} did not parse, normalised string equality"


#: name -> grader ``(pred, gold) -> (correct, detail)``.
#: name -> grader ``(pred, gold) -> (correct, detail)`` (module-level functions: workers import them).
GRADERS: Registry[Grader] = Registry("grader", {"minerva": grade_minerva, "math_verify": grade_math_verify})


def warmup() -> None:
    """Import math-verify, silence its 'timeout disabled' warning (the worker deadline replaces
    it) and run one comparison so lazy parser set-up happens before any deadline starts."""
    grade_minerva("1", "1")
    if not math_verify_available():
        return  # the minerva grader still works; math_verify calls are refused by MathTask
    for name in ("math_verify", "math_verify.parser", "math_verify.grader", "latex2sympy2_extended"):
        logging.getLogger(name).setLevel(logging.ERROR)
    grade_math_verify("\\frac{1}{2}", "0.5")


def math_verify_available() -> bool:
    """True iff the ``math-verify`` package can be imported."""
    return importlib.util.find_spec("math_verify") is not None


def require_math_verify() -> None:
    """Raise ImportError with the install hint unless math-verify is installed."""
    if not math_verify_available():
        raise ImportError(
            "the math_verify grader needs the 'math-verify' package: pip install math-verify "
            "(the project's 'math' extra)"
        )
