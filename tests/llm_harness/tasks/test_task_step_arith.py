"""Step arithmetic: generator determinism, split disjointness, hard split, verifier, steps."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from llm_harness.tasks import ALPHABET, ParseStatus, get_task
from llm_harness.tasks.step_arith import (
    StepArithConfig,
    StepArithTask,
    check_partial,
    draw_chain,
    evaluate_chain,
    format_solution,
    make_problem,
    parse_prompt,
    split_step_arith,
    verify_step_arith,
)

SMALL = dict(n_train=400, n_validation=60, n_test=60, n_hard=45)


@pytest.fixture(scope="module")
def task() -> StepArithTask:
    return get_task("step_arith", seed=0, **SMALL)


def test_example_from_the_issue():
    p = make_problem((97, 53, 5, 33), ("-", "-", "-"))
    assert p.prompt == "Q:97-53-5-33=?"
    assert p.solution == "97-53=44,44-5=39,39-33=6\nA:6"
    assert p.answer == "6" and p.difficulty == 4 and p.id == "step_arith/97-53-5-33"
    assert parse_prompt(p.prompt) == ((97, 53, 5, 33), ("-", "-", "-"))


def test_same_seed_same_problems_other_seed_differs():
    a = get_task("step_arith", seed=7, **SMALL)
    b = get_task("step_arith", seed=7, **SMALL)
    c = get_task("step_arith", seed=8, **SMALL)
    for split in a.splits:
        assert a.problems(split) == b.problems(split)
        assert a.problems(split) != c.problems(split)
    assert a.sample_problems("train", 30, seed=1) == b.sample_problems("train", 30, seed=1)
    assert a.sample_problems("train", 30, seed=1) != a.sample_problems("train", 30, seed=2)


def test_splits_disjoint_sized_unique_and_seed_independent(task):
    other = get_task("step_arith", seed=123, **SMALL)
    ids = {s: {p.id for p in task.problems(s)} for s in task.splits}
    for s in task.splits:
        assert len(ids[s]) == len(task.problems(s)) == task.config.size(s)  # unique within split
    names = list(ids)
    for i, s in enumerate(names):
        for t in names[i + 1 :]:
            assert not ids[s] & ids[t], (s, t)
    # Membership depends on content only: a problem drawn under another seed lands in the same split.
    for s in task.splits:
        for p in other.problems(s):
            assert task.split_of(p.id.split("/", 1)[1]) == s
        for p in task.sample_problems(s, 20, seed=5):
            assert task.split_of(p.id.split("/", 1)[1]) == s


def test_problem_invariants_and_alphabet(task):
    for s in task.splits:
        lo, hi = task.config.term_range(s)
        counts = {}
        for p in task.problems(s):
            terms, ops = parse_prompt(p.prompt)
            vals = evaluate_chain(terms, ops)
            assert lo <= len(terms) <= hi and p.difficulty == len(terms)
            assert all(0 <= v <= 99 for v in vals) and all(0 <= t <= 99 for t in terms)
            assert p.answer == str(vals[-1])
            assert set(task.render_prompt(p) + p.solution) <= set(ALPHABET)
            assert verify_step_arith(p.solution, int(p.answer)).reward == 1.0
            counts[len(terms)] = counts.get(len(terms), 0) + 1
        # stratified: term counts differ by at most one problem
        assert set(counts) == set(range(lo, hi + 1)) and max(counts.values()) - min(counts.values()) <= 1
    assert len(ALPHABET) == 19 and len(set(ALPHABET)) == 19


def test_hard_split_properties(task):
    hard = task.problems("hard")
    assert len(hard) == 45
    assert all(7 <= p.difficulty <= 9 for p in hard)
    assert all(p.solution and p.solution.count(",") == p.difficulty - 2 for p in hard)
    assert min(p.difficulty for p in hard) > max(p.difficulty for p in task.problems("train"))
    custom = get_task("step_arith", hard_min_terms=10, hard_max_terms=12, **SMALL)
    assert {p.difficulty for p in custom.problems("hard")} == {10.0, 11.0, 12.0}


@given(st.integers(0, 2**32 - 1), st.integers(2, 12), st.integers(1, 200))
def test_draw_chain_keeps_running_values_in_range(seed, n_terms, max_value):
    terms, ops = draw_chain(random.Random(seed), n_terms, max_value)
    vals = evaluate_chain(terms, ops)
    assert len(terms) == n_terms and len(ops) == n_terms - 1
    assert all(0 <= v <= max_value for v in vals)
    sol = format_solution(terms, ops)
    assert sol.endswith(f"\nA:{vals[-1]}")


def test_draw_chain_uses_both_operations_and_full_range():
    rng = random.Random(0)
    ops_seen, firsts, operands = set(), set(), set()
    for _ in range(3000):
        terms, ops = draw_chain(rng, 3)
        ops_seen.update(ops)
        firsts.add(terms[0])
        operands.update(terms[1:])
    assert ops_seen == {"+", "-"}
    assert firsts == set(range(100)) and operands == set(range(100))


def test_config_validation():
    for kwargs, word in [
        (dict(min_terms=1), "min_terms"),
        (dict(min_terms=4, max_terms=3), "max_terms"),
        (dict(hard_min_terms=9, hard_max_terms=8), "hard_max_terms"),
        (dict(n_test=-1), "n_test"),
        (dict(split_fractions=(0.5, 0.5, 0.5, 0.5)), "fractions"),
        (dict(split_fractions=(1.0,)), "split_fractions"),
        (dict(max_value=0), "max_value"),
    ]:
        with pytest.raises(ValueError, match=f"^{word}"):
            StepArithConfig(**kwargs)


def test_exhausted_split_raises_clearly():
    # Only ~5% of the 10100 two-term expressions belong to validation: 2000 cannot be found.
    t = get_task("step_arith", min_terms=2, max_terms=2, n_validation=2000, n_train=1, n_test=1, n_hard=1)
    with pytest.raises(ValueError, match="^n_validation: could not find"):
        t.problems("validation")


# ---------------------------------------------------------------------------- verifier
@pytest.mark.parametrize(
    "completion, reward, status, extracted",
    [
        ("97-53=44,44-5=39,39-33=6\nA:6", 1.0, ParseStatus.OK, "6"),
        ("A:6", 1.0, ParseStatus.OK, "6"),
        ("A:6\n", 1.0, ParseStatus.OK, "6"),  # trailing whitespace ignored
        ("97-53=44\nA:7", 0.0, ParseStatus.OK, "7"),
        ("A:-6", 0.0, ParseStatus.OK, "-6"),
        ("A:5\nA:6", 1.0, ParseStatus.OK, "6"),  # the last A: counts
        ("A:6\nA:5", 0.0, ParseStatus.OK, "5"),
        ("97-53=44,44-5=39,39-33=6", 0.0, ParseStatus.MISSING, None),
        ("", 0.0, ParseStatus.MISSING, None),
        ("A:", 0.0, ParseStatus.MALFORMED, ""),
        ("A:06", 0.0, ParseStatus.MALFORMED, "06"),
        ("A:6,7", 0.0, ParseStatus.MALFORMED, "6,7"),
        ("A:6=6", 0.0, ParseStatus.MALFORMED, "6=6"),
        ("A:" + "9" * 5000, 0.0, ParseStatus.MALFORMED, "9" * 64),  # no giant int parse
        ("A:6\n97", 0.0, ParseStatus.MALFORMED, "6\n97"),
    ],
)
def test_verify_cases(completion, reward, status, extracted):
    r = verify_step_arith(completion, 6)
    assert (r.reward, r.status, r.extracted, r.timed_out) == (reward, status, extracted, False)


def test_task_verify_uses_gold(task):
    p = task.problems("test")[0]
    assert task.verify(p, p.solution).correct
    wrong = str((int(p.answer) + 1) % 100)
    assert task.verify(p, f"A:{wrong}").reward == 0.0
    rs = task.verify_many(task.problems("test")[:3], [q.solution for q in task.problems("test")[:3]])
    assert [r.reward for r in rs] == [1.0, 1.0, 1.0]


# ---------------------------------------------------------------------------- steps
def test_split_steps_offsets():
    text = "97-53=44,44-5=39,39-33=6\nA:6"
    steps = split_step_arith(text)
    assert [s.text for s in steps] == ["97-53=44,", "44-5=39,", "39-33=6\n", "A:6"]
    assert [(s.start, s.end) for s in steps] == [(0, 9), (9, 17), (17, 25), (25, 28)]
    assert text[: steps[1].end] == "97-53=44,44-5=39,"
    assert split_step_arith("") == ()
    assert [s.text for s in split_step_arith("12+3")] == ["12+3"]


# ---------------------------------------------------------------------------- partial checker
def test_check_partial_progress_along_gold_chain():
    p = make_problem((97, 53, 5, 33), ("-", "-", "-"))
    sol = p.solution
    steps = split_step_arith(sol)
    expect = [(1, 44), (2, 39), (3, 6)]
    for k, (n_ok, value) in enumerate(expect):
        c = check_partial(p, sol[: steps[k].end])
        assert (c.n_correct_prefix, c.running_value, c.gold_value, c.all_correct) == (n_ok, value, value, True)
        assert c.fraction_correct == n_ok / 3 and not c.answer_reached
    full = check_partial(p, sol)
    assert full.answer_reached and full.answer == 6 and full.n_correct_prefix == 3 and full.tail == ""
    empty = check_partial(p, "")
    assert (empty.n_correct_prefix, empty.running_value, empty.gold_value, empty.steps) == (0, 97, 97, ())


def test_check_partial_detects_errors_and_tails():
    p = make_problem((97, 53, 5, 33), ("-", "-", "-"))
    # arithmetic slip in step 2, continued consistently from the wrong value
    c = check_partial(p, "97-53=44,44-5=38,38-33=5\nA:5")
    assert [s.on_chain for s in c.steps] == [True, False, False]
    assert [s.arithmetic_ok for s in c.steps] == [True, False, True]
    assert c.n_correct_prefix == 1 and c.gold_value == 44 and c.running_value == 5 and not c.all_correct
    assert c.answer == 5
    # wrong operand copied from the problem: arithmetic fine, off the chain
    c = check_partial(p, "97-53=44,44-6=38,")
    assert [(s.arithmetic_ok, s.on_chain) for s in c.steps] == [(True, True), (True, False)]
    # right operands, result copied from the gold chain, but the arithmetic is wrong
    c = check_partial(p, "97-53=44,44-6=39,")
    assert [(s.arithmetic_ok, s.on_chain) for s in c.steps] == [(True, True), (False, False)]
    # incomplete trailing step is not graded
    c = check_partial(p, "97-53=44,44-5=3")
    assert len(c.steps) == 1 and c.tail == "44-5=3" and c.running_value == 44
    # unparsable step
    c = check_partial(p, "97-53=44,garbage,")
    assert [s.parsed for s in c.steps] == [True, False] and c.running_value is None and c.n_correct_prefix == 1
    # more steps than the chain has
    c = check_partial(make_problem((5, 3), ("+",)), "5+3=8,8+0=8,")
    assert [s.on_chain for s in c.steps] == [True, False] and c.n_correct_prefix == 1 and c.fraction_correct == 1.0
    with pytest.raises(ValueError, match="^prompt"):
        check_partial(make_problem((5, 3), ("+",)).__class__("x", "What?", "1"), "")
