"""reasoning-gym adapter: dataset by name and params, splits, scoring with score_answer."""

from __future__ import annotations

import sys

import pytest

from llm_harness.tasks import ParseStatus, get_task
from llm_harness.tasks.reasoning_gym_task import import_reasoning_gym

PARAMS = dict(dataset="chain_sum", params={"min_terms": 2, "max_terms": 3}, size=60, seed=1)


def test_missing_package_gives_install_hint(monkeypatch):
    monkeypatch.setitem(sys.modules, "reasoning_gym", None)  # makes `import reasoning_gym` fail
    with pytest.raises(ImportError, match="pip install reasoning-gym"):
        import_reasoning_gym()
    with pytest.raises(ImportError, match="pip install reasoning-gym"):
        get_task("reasoning_gym", dataset="chain_sum", params={"min_terms": 2, "max_terms": 3}, size=7, seed=99)


@pytest.fixture(scope="module")
def task():
    pytest.importorskip("reasoning_gym")
    return get_task("reasoning_gym", timeout_s=None, **PARAMS)


def test_problems_splits_and_determinism(task):
    rg = pytest.importorskip("reasoning_gym")
    ds = rg.create_dataset("chain_sum", size=60, seed=1, min_terms=2, max_terms=3)
    all_p = [p for s in task.splits for p in task.problems(s)]
    assert len(all_p) == 60 and all(len(task.problems(s)) > 0 for s in ("train", "test"))
    by_index = {p.metadata["index"]: p for p in all_p}
    for i in range(60):
        assert by_index[i].prompt == ds[i]["question"] and by_index[i].answer == str(ds[i]["answer"])
    questions = {s: {p.prompt for p in task.problems(s)} for s in task.splits}
    assert not questions["train"] & questions["test"] and not questions["train"] & questions["validation"]
    again = get_task("reasoning_gym", timeout_s=None, **PARAMS)
    assert all(again.problems(s) == task.problems(s) for s in task.splits)


def test_duplicate_questions_stay_in_one_split():
    pytest.importorskip("reasoning_gym")
    # one-digit, two-term sums: 200 draws from a small space repeat many questions
    t = get_task(
        "reasoning_gym",
        dataset="chain_sum",
        params={"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1},
        size=200,
        seed=1,
        timeout_s=None,
    )
    where: dict[str, set[str]] = {}
    for s in t.splits:
        for p in t.problems(s):
            where.setdefault(p.prompt, set()).add(s)
    assert len(where) < 200  # duplicates exist
    assert all(len(splits) == 1 for splits in where.values())


def test_scoring_uses_score_answer(task):
    p = task.problems("train")[0]
    ok = task.verify(p, f"thinking...\n<answer>{p.answer}</answer>")
    assert (ok.reward, ok.status, ok.extracted) == (1.0, ParseStatus.OK, p.answer)
    wrong = task.verify(p, f"<answer>{int(p.answer) + 1}</answer>")
    assert wrong.reward == 0.0 and wrong.status is ParseStatus.OK
    last = task.verify(p, f"<answer>0</answer> no, <answer> {p.answer} </answer>")
    assert last.reward == 1.0  # the last tag counts, whitespace stripped
    missing = task.verify(p, p.answer)
    assert (missing.reward, missing.status) == (0.0, ParseStatus.MISSING)


def test_prompts(task):
    p = task.problems("test")[0]
    msgs = task.messages(p)
    assert msgs[0]["role"] == "system" and "<answer>" in msgs[0]["content"]
    assert msgs[1] == {"role": "user", "content": p.prompt}
    assert task.render_prompt(p).endswith(p.prompt + "\n\n")
    bare = get_task("reasoning_gym", timeout_s=None, system_prompt=None, **PARAMS)
    assert bare.messages(p) == [{"role": "user", "content": p.prompt}]
    assert bare.render_prompt(p) == p.prompt + "\n\n"


def test_unknown_dataset_and_bad_params():
    pytest.importorskip("reasoning_gym")
    with pytest.raises(ValueError, match="unknown reasoning-gym dataset 'no_such'.*chain_sum"):
        get_task("reasoning_gym", dataset="no_such")
    with pytest.raises(ValueError, match="^params: reasoning-gym rejected"):
        get_task("reasoning_gym", dataset="chain_sum", params={"bogus": 1}, size=5)


def test_scoring_in_worker_process_under_deadline(task):
    pytest.importorskip("reasoning_gym")
    from llm_harness.tasks import IsolatedRunner

    with IsolatedRunner(1, preload=("reasoning_gym",)) as runner:
        iso = get_task("reasoning_gym", timeout_s=20.0, runner=runner, **PARAMS)
        probs = iso.problems("train")[:3]
        rs = iso.verify_many(probs, [f"<answer>{q.answer}</answer>" for q in probs])
        assert [r.reward for r in rs] == [1.0, 1.0, 1.0] and not any(r.timed_out for r in rs)
