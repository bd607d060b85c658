"""Math verification: 63 answer pairs with expected verdicts for the Minerva-style training
reward and the math-verify evaluator, parse statuses, and the timeout on pathological input."""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from llm_harness.tasks import IsolatedRunner, MathTask, MathTaskConfig, ParseStatus, Problem
from llm_harness.tasks.math_answers import extract_boxed, normalize_answer
from llm_harness.tasks.math_grading import grade_math_verify, grade_minerva

pytest.importorskip("math_verify")

TIMEOUT_S = 1.5  # deadline for the tests that exercise the timeout itself
#: deadline for verdict tests: generous, so a loaded CI machine never turns a verdict into a timeout
VERDICT_TIMEOUT_S = 30.0

# (gold, completion, minerva verdict, math-verify verdict)
PAIRS = [
    # fractions
    ("\\frac{1}{2}", "\\boxed{\\frac{1}{2}}", 1, 1),
    ("\\frac{1}{2}", "\\boxed{\\dfrac{1}{2}}", 1, 1),
    ("\\frac{1}{2}", "\\boxed{\\tfrac12}", 1, 1),
    ("\\frac{1}{2}", "\\boxed{0.5}", 0, 1),
    ("\\frac{1}{2}", "\\boxed{1/2}", 0, 1),
    ("\\frac{3}{4}", "\\boxed{\\frac{4}{3}}", 0, 0),
    ("\\frac{2}{4}", "\\boxed{\\frac{1}{2}}", 0, 1),
    ("-\\frac{1}{3}", "\\boxed{-\\frac13}", 1, 1),
    ("\\frac{-1}{3}", "\\boxed{-\\frac{1}{3}}", 0, 1),
    # radicals
    ("2\\sqrt{2}", "\\boxed{2\\sqrt2}", 1, 1),
    ("2\\sqrt{2}", "\\boxed{\\sqrt{8}}", 0, 1),
    ("\\frac{\\sqrt{3}}{2}", "\\boxed{\\dfrac{\\sqrt3}{2}}", 1, 1),
    ("\\sqrt{3}", "\\boxed{\\sqrt{2}}", 0, 0),
    ("\\sqrt[3]{2}", "\\boxed{2^{1/3}}", 0, 1),
    # intervals
    ("(1,2)", "\\boxed{\\left( 1, 2 \\right)}", 1, 1),
    ("[1,2)", "\\boxed{(1,2]}", 0, 0),
    ("(-\\infty, 3]", "\\boxed{(-\\infty,3]}", 1, 1),
    ("[0, 1]", "\\boxed{[0,1)}", 0, 0),
    ("(-\\infty,-1)\\cup(1,\\infty)", "\\boxed{(-\\infty, -1) \\cup (1, \\infty)}", 1, 1),
    # sets and lists
    ("\\{1,2,3\\}", "\\boxed{\\{3,2,1\\}}", 0, 1),
    ("\\{1,2\\}", "\\boxed{\\{1, 2\\}}", 1, 1),
    ("1,2", "\\boxed{2, 1}", 0, 1),
    # LaTeX variants and delimiters
    ("10", "\\boxed{\\text{10}}", 1, 1),
    ("10", "\\boxed{\\mathbf{10}}", 1, 1),
    ("x^2+1", "\\boxed{x^{2}+1}", 0, 1),
    ("3", "$\\boxed{3}$.", 1, 1),
    ("3", "so \\fbox{3}", 1, 1),
    ("3", "so \\boxed 3", 1, 1),
    ("B", "\\boxed{\\text{B}}", 1, 1),
    ("\\text{Monday}", "\\boxed{\\text{Monday}}", 1, 1),
    ("\\text{Monday}", "\\boxed{\\text{Tuesday}}", 0, 0),
    # units, money, percent, degrees
    ("10", "\\boxed{10 \\text{ cm}}", 1, 1),
    ("12", "\\boxed{12\\text{ inches}}", 1, 1),
    ("25", "\\boxed{25\\text{ cm}^2}", 1, 1),
    ("20", "\\boxed{\\$20}", 1, 1),
    ("20", "\\boxed{20 dollars}", 1, 0),  # math-verify keeps plain unit words
    ("50", "\\boxed{50\\%}", 1, 1),
    ("50\\%", "\\boxed{50}", 1, 1),
    ("50\\%", "\\boxed{0.5}", 0, 1),
    ("90", "\\boxed{90^\\circ}", 1, 1),
    ("90^\\circ", "\\boxed{90}", 1, 1),
    ("45", "\\boxed{45^{\\circ}}", 1, 1),
    # negative numbers, equations, number formats
    ("-3", "\\boxed{-3}", 1, 1),
    ("-3", "\\boxed{3}", 0, 0),
    ("-3", "\\boxed{- 3}", 1, 1),
    ("3", "\\boxed{x = 3}", 1, 1),
    ("5", "\\boxed{x=1, y=5}", 0, 0),
    ("1000", "\\boxed{1,000}", 1, 1),
    ("1,2", "\\boxed{12}", 0, 0),  # a list is not a thousands-separated number
    ("1000000", "\\boxed{1{,}000{,}000}", 1, 1),
    ("0.5", "\\boxed{.5}", 1, 1),
    ("3", "\\boxed{3.}", 1, 1),
    ("3", "\\boxed{3.0}", 0, 1),
    # symbolic
    ("\\pi", "\\boxed{\\pi}", 1, 1),
    ("\\frac{\\pi}{2}", "\\boxed{\\pi/2}", 0, 1),
    ("(x+1)^2", "\\boxed{x^2+2x+1}", 0, 1),
    ("3.14", "\\boxed{\\pi}", 0, 0),
    # which box counts, boxed gold, junk inside the box
    ("3", "\\boxed{2} then \\boxed{3}", 1, 1),
    ("3", "\\boxed{3} then \\boxed{2}", 0, 0),
    ("\\boxed{3}", "\\boxed{3}", 1, 1),
    ("\\frac{1}{2}", "\\boxed{\\frac{1}{2}}}}", 1, 1),
    ("7", "\\boxed{\\left(}", 0, 0),
    ("3", "\\boxed{\\frac{}{}}", 0, 0),
    ("3", "\\boxed{\\}}", 0, 0),
]


@pytest.fixture(scope="module")
def runner():
    r = IsolatedRunner(1, preload=("llm_harness.tasks.math_grading:warmup",))
    r.warm_up()
    yield r
    r.close()


def make_task(runner, golds, timeout_s: float = VERDICT_TIMEOUT_S, **cfg) -> tuple[MathTask, list[Problem]]:
    probs = [Problem(f"p{i}", f"question {i}", g) for i, g in enumerate(golds)]
    return MathTask({"test": probs}, MathTaskConfig(timeout_s=timeout_s, **cfg), runner=runner), probs


def test_at_least_forty_pairs():
    assert len(PAIRS) >= 40
    assert sum(m != v for _, _, m, v in PAIRS) >= 12  # the graders genuinely differ


@pytest.mark.parametrize("gold, completion, minerva, mverify", PAIRS)
def test_pair_verdicts(runner, gold, completion, minerva, mverify):
    task, (p,) = make_task(runner, [gold])
    train = task.verify(p, completion)
    ev = task.evaluate(p, completion)
    for r in (train, ev):
        assert r.status is ParseStatus.OK and not r.timed_out
        assert r.extracted == extract_boxed(completion).content
    assert train.reward == minerva, ("minerva", normalize_answer(train.extracted), normalize_answer(gold))
    assert ev.reward == mverify, ("math_verify", ev.detail)
    assert task.verify(p, completion, grader="math_verify").reward == mverify


def test_verify_many_matches_single_calls(runner):
    task, probs = make_task(runner, [g for g, _, _, _ in PAIRS])
    comps = [c for _, c, _, _ in PAIRS]
    assert [r.reward for r in task.verify_many(probs, comps)] == [float(m) for _, _, m, _ in PAIRS]
    assert [r.reward for r in task.verify_many(probs, comps, grader="math_verify")] == [float(v) for *_, v in PAIRS]


@pytest.mark.parametrize(
    "completion, status",
    [
        ("The answer is 3.", ParseStatus.MISSING),
        ("", ParseStatus.MISSING),
        ("\\boxed{3", ParseStatus.MALFORMED),
        ("\\boxed{}", ParseStatus.MALFORMED),
        ("\\boxed{ }", ParseStatus.MALFORMED),
        ("\\boxed", ParseStatus.MALFORMED),
        ("\\boxedx{3}", ParseStatus.MISSING),  # a different command, not a box
        ("\\boxed{3} " + "x" * 600, ParseStatus.MISSING),  # outside the 500-character window
    ],
)
def test_missing_and_malformed(runner, completion, status):
    task, (p,) = make_task(runner, ["3"])
    for r in (task.verify(p, completion), task.evaluate(p, completion)):
        assert (r.reward, r.status, r.timed_out) == (0.0, status, False)


def test_window_is_configurable(runner):
    task, (p,) = make_task(runner, ["3"], window=2000)
    assert task.verify(p, "\\boxed{3} " + "x" * 600).reward == 1.0


def test_unknown_grader(runner):
    task, (p,) = make_task(runner, ["3"])
    with pytest.raises(ValueError, match="^grader: unknown grader 'exact'"):
        task.verify(p, "\\boxed{3}", grader="exact")
    with pytest.raises(ValueError, match="^grader"):
        MathTaskConfig(grader="exact")


def test_fallback_to_normalised_equality_when_parsing_fails(monkeypatch):
    import math_verify

    monkeypatch.setattr(math_verify, "parse", lambda *a, **k: [])
    ok, detail = grade_math_verify("\\dfrac12", "\\frac{1}{2}")
    assert ok and detail.startswith("fallback: gold did not parse")
    ok, _ = grade_math_verify("0.5", "\\frac{1}{2}")
    assert not ok
    assert grade_minerva("", "") == (False, "minerva")  # empty answers never match


# ---------------------------------------------------------------------------- timeouts
PATHOLOGICAL = ["\\boxed{9^{9^{9^{9}}}}", "\\boxed{(10^{10^{10}})!}"]


@pytest.mark.parametrize("completion", PATHOLOGICAL)
def test_pathological_input_is_cut_by_the_timeout(runner, caplog, completion):
    task, (p,) = make_task(runner, ["1"], timeout_s=TIMEOUT_S)
    caplog.set_level(logging.WARNING, logger="llm_harness.tasks.math_task")
    t0 = time.perf_counter()
    r = task.evaluate(p, completion)
    elapsed = time.perf_counter() - t0
    assert r.timed_out and r.reward == 0.0 and r.status is ParseStatus.TIMEOUT
    assert elapsed < TIMEOUT_S + 10.0  # generous: a loaded machine restarts the worker slowly
    assert any("timed out" in rec.getMessage() and "'p0'" in rec.getMessage() for rec in caplog.records)
    # the worker was replaced: verification keeps working afterwards
    assert task.evaluate(p, "\\boxed{1}").reward == 1.0


def test_timeout_from_threads(runner):
    task, probs = make_task(runner, ["1", "1/2"], timeout_s=TIMEOUT_S)
    relaxed, _ = make_task(runner, ["1", "1/2"])
    with ThreadPoolExecutor(max_workers=2) as ex:
        bad = ex.submit(task.evaluate, probs[0], PATHOLOGICAL[0])
        good = ex.submit(relaxed.evaluate, probs[1], "\\boxed{0.5}")
        rb, rg = bad.result(timeout=60), good.result(timeout=60)
    assert rb.timed_out and rb.reward == 0.0
    assert rg.reward == 1.0 and not rg.timed_out


def test_verify_many_mixes_timeouts_and_answers(runner):
    task, probs = make_task(runner, ["1", "2", "3"], timeout_s=TIMEOUT_S)
    rs = task.verify_many(probs, ["\\boxed{1}", PATHOLOGICAL[0], "no box"], grader="math_verify")
    assert [r.reward for r in rs] == [1.0, 0.0, 0.0]
    assert [r.status for r in rs] == [ParseStatus.OK, ParseStatus.TIMEOUT, ParseStatus.MISSING]
    assert [r.timed_out for r in rs] == [False, True, False]
