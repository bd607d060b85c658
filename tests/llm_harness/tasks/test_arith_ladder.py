"""Arithmetic ladder: answer reading, reference solutions, splits and levels."""

from __future__ import annotations

import pytest

from llm_harness.tasks import ParseStatus, get_task
from llm_harness.tasks.arith_ladder import (
    LEVELS,
    ArithLadderConfig,
    ArithLadderTask,
    read_natural_answer,
    split_sentences,
    states_result,
    verify_natural,
)


@pytest.mark.parametrize(
    "text, value, rule",
    [
        ("2 + 3 = 5<|im_end|>", "5", "last_number"),
        ("To add 8 and 6, you simply add them together: 8 + 6 = 14.", "14", "last_number"),
        ("So we get \\boxed{12} and then 3 more", "12", "boxed"),
        ("3 + 4 = 7 apples now.\nTom has 3 + 7 = 10 apples now.\n#### 10\nThe answer is 10.", "10", "hashes"),
        ("1 + 1 = 2, so the answer is 2. Then 3 others", "2", "answer_is"),
        ("The answer is: **9**", "9", "answer_is"),
        ("The answer is five.", "five", "answer_is"),
        ("The sum of two and three is five", "five", "number_word"),
        ("It is \u22123 degrees", "-3", "last_number"),
        ("12 - 7 = 5.0", "5.0", "last_number"),
    ],
)
def test_read_natural_answer(text, value, rule):
    status, got, how = read_natural_answer(text)
    assert (status, got, how) == (ParseStatus.OK, value, rule)


def test_read_natural_answer_missing_and_malformed():
    assert read_natural_answer("I like turtles")[0] is ParseStatus.MISSING
    assert read_natural_answer("so \\boxed{} it is 5")[0] is ParseStatus.MALFORMED
    assert read_natural_answer("so \\boxed{apples}")[0] is ParseStatus.MALFORMED


def test_verify_natural_compares_numbers():
    assert verify_natural("2 + 3 = 5", 5).correct
    assert verify_natural("12 - 7 = 5.0", 5).correct
    assert verify_natural("The answer is five", 5).correct
    assert not verify_natural("2 + 3 = 6", 5).correct
    r = verify_natural("no idea", 5)
    assert r.reward == 0.0 and r.status is ParseStatus.MISSING


def test_every_reference_solution_verifies_and_is_arithmetic():
    for level, make in LEVELS.items():
        n = 0
        for item in make():
            assert verify_natural(item.solution, item.answer).correct, (level, item)
            assert item.solution.endswith(f"The answer is {item.answer}.")
            assert item.answer >= 0
            n += 1
        assert n >= 256, level


def test_split_steps_partition_sentences():
    sol = "First, 2 + 5 = 7. Then, 7 + 1 = 8. The answer is 8."
    steps = split_sentences(sol)
    assert [s.text for s in steps] == ["First, 2 + 5 = 7. ", "Then, 7 + 1 = 8. ", "The answer is 8."]
    assert "".join(s.text for s in steps) == sol and steps[0].start == 0 and steps[-1].end == len(sol)
    assert [s.text for s in split_sentences("a 2.5 b\nc")] == ["a 2.5 b\n", "c"]


def test_splits_disjoint_deterministic_and_capped():
    task = get_task("arith_ladder", n_train=50, n_validation=20, n_test=20)
    ids = {s: [p.id for p in task.problems(s)] for s in task.splits}
    for s, v in ids.items():
        assert len(v) == len(set(v))
    assert not set(ids["train"]) & set(ids["test"]) and not set(ids["validation"]) & set(ids["test"])
    again = get_task("arith_ladder", n_train=50, n_validation=20, n_test=20)
    assert [p.id for p in again.problems("test")] == ids["test"]
    other = get_task("arith_ladder", seed=1, n_train=50, n_validation=20, n_test=20)
    assert [p.id for p in other.problems("test")] != ids["test"]
    # membership does not depend on the seed: seed 1's test problems are not train problems of seed 0's space
    big = get_task("arith_ladder", n_train=100_000, n_validation=0, n_test=0)
    assert not {p.id for p in other.problems("test")} & {p.id for p in big.problems("train")}
    levels = [p.metadata["level"] for p in task.problems("test")]
    assert levels[: len(ArithLadderConfig().levels)] == list(ArithLadderConfig().levels)  # interleaved
    assert all(levels.count(name) <= 20 for name in LEVELS)


def test_difficulty_is_the_registry_position_whatever_the_selection():
    task = get_task("arith_ladder", levels=("word", "add"), n_test=3)
    by_level = {p.metadata["level"]: p.difficulty for p in task.problems("test")}
    assert by_level == {"word": float(LEVELS.names().index("word") + 1), "add": float(LEVELS.names().index("add") + 1)}


def test_small_level_gives_all_it_has():
    task = get_task("arith_ladder", levels=("mul",), n_test=10_000)
    n = len(task.problems("test"))
    assert 0 < n < 256  # 64 pairs x 4 phrasings, about a fifth of them in test


def test_prompt_rendering_plain_and_chat():
    task = ArithLadderTask(ArithLadderConfig(levels=("add",), n_test=1, instruction="Answer with a number."))
    p = task.problems("test")[0]

    class ChatTok:
        chat_template = "x"

        def apply_chat_template(self, messages, tokenize, add_generation_prompt):
            return "<u>" + messages[0]["content"] + "</u><a>"

    assert task.render_prompt(p, ChatTok()) == f"<u>{p.prompt} Answer with a number.</u><a>"
    assert task.render_prompt(p, None) == f"Question: {p.prompt} Answer with a number.\nAnswer: "
    assert task.expert_text(p, None).endswith(p.solution)


@pytest.mark.parametrize(
    "params, match",
    [
        ({"levels": ("add", "nope")}, r"levels\[1\]: unknown arith_ladder level 'nope'"),
        ({"levels": ("add", "add")}, "distinct"),
        ({"levels": ()}, "at least one level"),
        ({"split_fractions": (0.5, 0.5)}, "expected 3 fractions"),
        ({"n_test": -1}, "n_test"),
        ({"colour": "red"}, "unknown parameter"),
    ],
)
def test_config_errors(params, match):
    with pytest.raises(ValueError, match=match):
        get_task("arith_ladder", **params)


def test_repeating_an_operand_never_passes_sums_and_products():
    # no 0 operand and no factor 1: "0 + 9 is not a number" must not read as 9
    for level in ("add", "mul", "add3", "add2d", "mul2d", "word2"):
        for item in LEVELS[level]():
            assert item.answer not in item.operands, (level, item)
    assert not verify_natural("When you have 0 + 9, it is not a number", 7).correct


@pytest.mark.parametrize(
    "text, value, stated",
    [
        ("2 + 3 = 5", 5, True),
        ("the total is 16.", 16, True),
        ("It equals **12**", 12, True),
        ("so \\boxed{7}", 7, True),
        ("#### 10", 10, True),
        ("0 + 9 is not a number", 9, False),
        ("the answer is 160", 16, False),
        ("x = 5.5", 5, False),
        ("I have 5 apples and 3 pears", 5, False),
    ],
)
def test_states_result(text, value, stated):
    assert states_result(text, value) is stated


def test_harder_levels_are_opt_in_and_keep_the_first_five_difficulties():
    from llm_harness.tasks.arith_ladder import ArithLadderConfig, ArithLadderTask

    assert ArithLadderConfig().levels == ("add", "sub", "mul", "add3", "word")  # committed runs keep their problems
    assert LEVELS.names()[:5] == ("add", "sub", "mul", "add3", "word") or list(LEVELS.names())[:5] == ["add", "sub", "mul", "add3", "word"]
    task = ArithLadderTask(ArithLadderConfig(levels=("add", "add2d", "mul2d", "word2"), n_test=8))
    probs = task.problems("test")
    by = {}
    for p in probs:
        by.setdefault(p.metadata["level"], []).append(p)
    assert {k: len(v) for k, v in by.items()} == {"add": 8, "add2d": 8, "mul2d": 8, "word2": 8}
    assert {k: v[0].difficulty for k, v in by.items()} == {"add": 1.0, "add2d": 6.0, "mul2d": 7.0, "word2": 8.0}
    for p in by["add2d"] + by["mul2d"]:
        a, b = p.metadata["operands"]
        assert a >= 10 and (b >= 10 if p.metadata["level"] == "add2d" else 2 <= b <= 9 and a % 10)
    for p in by["word2"]:
        a, b, c = p.metadata["operands"]
        assert int(p.answer) == a + b - c and "then gives" in p.prompt
        assert task.verify(p, p.solution).reward == 1.0 and task.verify(p, f"The answer is {a + b}.").reward == 0.0


def test_level_budgets_ride_on_each_problem_and_bad_ones_are_refused():
    from llm_harness.tasks.base import RESPONSE_BUDGET_KEY, problem_budget

    task = get_task("arith_ladder", levels=("add", "word", "word2"), level_budgets={"add": 24, "word2": 128})
    by_level = {}
    for p in task.problems("test"):
        by_level.setdefault(p.metadata["level"], set()).add(p.metadata.get(RESPONSE_BUDGET_KEY))
    assert by_level == {"add": {24}, "word": {None}, "word2": {128}}
    add, word, word2 = (next(p for p in task.problems("test") if p.metadata["level"] == lv) for lv in ("add", "word", "word2"))
    assert [problem_budget(p, 96) for p in (add, word, word2)] == [24, 96, 96]  # the run's budget caps every level's
    assert [problem_budget(p, 256) for p in (add, word, word2)] == [24, 256, 128]
    # the problems themselves (ids, prompts, answers) do not change with a budget
    plain = get_task("arith_ladder", levels=("add", "word", "word2"))
    assert plain.problems("test") == task.problems("test")
    with pytest.raises(ValueError, match="level_budgets: 'mul' is not one of"):
        get_task("arith_ladder", levels=("add",), level_budgets={"mul": 8})
    with pytest.raises(ValueError, match="level_budgets.add"):
        get_task("arith_ladder", level_budgets={"add": 0})
    with pytest.raises(ValueError, match="level_budgets: must be a mapping"):
        get_task("arith_ladder", level_budgets=[("add", 8)])
