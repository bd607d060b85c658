"""The ladder's strict answer mode (a declared final answer only) and the model card's chance level."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from llm_harness.tasks import get_task
from llm_harness.tasks.arith_ladder import read_natural_answer, read_strict_answer
from llm_harness.tasks.base import ParseStatus


@pytest.mark.parametrize("text, lenient, strict", [
    ("so 3 + 4 = 7", "7", None),                           # an incidental last number: lenient only
    ("The answer is 7.", "7", "7"),
    ("work... \\boxed{7} and then 9", "7", "7"),
    ("#### 7", "7", "7"),
    ("seven", "seven", None),
    ("no number here", None, None),
])
def test_strict_reads_only_a_declared_answer(text, lenient, strict):
    assert read_natural_answer(text)[1] == lenient
    status, value, rule = read_strict_answer(text)
    assert value == strict
    assert (status is ParseStatus.OK) == (strict is not None)


def test_the_task_verifies_in_its_mode_and_refuses_an_unknown_one():
    lenient, strict = get_task("arith_ladder"), get_task("arith_ladder", answer_mode="strict")
    p = next(q for q in lenient.problems("test") if q.metadata["level"] == "add")
    incidental = f"I think about it: {p.answer}"
    assert lenient.verify(p, incidental).reward == 1.0 and strict.verify(p, incidental).reward == 0.0
    declared = f"The answer is {p.answer}."
    assert lenient.verify(p, declared).reward == 1.0 and strict.verify(p, declared).reward == 1.0
    with pytest.raises(ValueError, match="answer_mode"):
        get_task("arith_ladder", answer_mode="loose")


def _samples(responses_by_problem):
    rows = []
    for pid, (level, answer, responses) in responses_by_problem.items():
        rows += [{"problem_id": pid, "level": level, "answer": str(answer), "response": r} for r in responses]
    return pd.DataFrame(rows)


def test_the_chance_level_is_what_answers_score_against_other_problems():
    from prefixvalue.model_card import chance_levels

    # every sample answers its own problem by a declared answer: pass 1, chance 0 (answers all differ)
    s = _samples({f"p{i}": ("add", i, [f"The answer is {i}."] * 4) for i in range(6)})
    (add, all_) = chance_levels(s, ["add"], draws=5)
    assert add["pass_lenient"] == add["pass_strict"] == 1.0 and add["chance_lenient"] == add["chance_strict"] == 0.0
    assert add["share_declared"] == 1.0 and all_["samples"] == 24
    # a model that always says "1" at the end: it passes the problems whose answer is 1, and so would by chance
    s = _samples({f"p{i}": ("add", 1 if i < 3 else 2 + i, ["blah 1"] * 4) for i in range(6)})
    (add, _) = chance_levels(s, ["add"], draws=200, seed=1)
    assert add["pass_lenient"] == 0.5 and add["pass_strict"] == 0.0 and add["share_declared"] == 0.0
    # chance: a problem with answer 1 meets another answer-1 problem 2 times in 5, others 3 in 5
    assert add["chance_lenient"] == pytest.approx((3 * 2 / 5 + 3 * 3 / 5) / 6, abs=0.03)
    assert np.isnan(chance_levels(_samples({"p0": ("add", 1, ["1"])}), ["add"], draws=2)[0]["chance_lenient"])
