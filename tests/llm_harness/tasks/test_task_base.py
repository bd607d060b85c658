"""Task protocol: Problem / VerifyResult validation, split assignment, registry, prompt rendering."""

from __future__ import annotations

import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

from llm_harness.tasks import (
    ParseStatus,
    Problem,
    VerifyResult,
    assign_split,
    available_tasks,
    get_task,
    has_chat_template,
    register_task,
)
from llm_harness.tasks.base import partition_spans, stable_unit_hash
from llm_harness.tasks.math_task import REPLAY_SYSTEM_PROMPT, REPLAY_USER_TEMPLATE, MathTask


class FakeChatTokenizer:
    """A tokenizer stand-in with a chat template: ``<|role|>content`` blocks."""

    def __init__(self) -> None:
        self.calls = []

    def apply_chat_template(self, messages, tokenize=True, add_generation_prompt=False):
        self.calls.append((messages, tokenize, add_generation_prompt))
        text = "".join(f"<|{m['role']}|>{m['content']}<|end|>" for m in messages)
        return text + ("<|assistant|>" if add_generation_prompt else "")


class NoTemplateTokenizer(FakeChatTokenizer):
    """Like a Hugging Face tokenizer whose ``chat_template`` is None (base model / test bed)."""

    chat_template = None


class IdsTokenizer(FakeChatTokenizer):
    def apply_chat_template(self, messages, tokenize=True, add_generation_prompt=False):
        return [1, 2, 3]


# ---------------------------------------------------------------------------- data classes
def test_problem_validation_and_hashing():
    p = Problem("p1", "What?", "3", solution="because\n3", difficulty=2, metadata={"k": [1]})
    assert hash(p) == hash(Problem("p1", "What?", "3", solution="because\n3", difficulty=2))
    assert pickle.loads(pickle.dumps(p)) == p
    for kwargs, word in [
        (dict(id="", prompt="x", answer="1"), "id"),
        (dict(id="a", prompt="  ", answer="1"), "prompt"),
        (dict(id="a", prompt="x", answer=1), "answer"),
        (dict(id="a", prompt="x", answer="1", solution=3), "solution"),
    ]:
        with pytest.raises(ValueError, match=f"^{word}"):
            Problem(**kwargs)


def test_verify_result_checks():
    r = VerifyResult(1, "ok", "3")
    assert r.reward == 1.0 and r.status is ParseStatus.OK and r.correct
    assert not VerifyResult(0.5, ParseStatus.OK).correct
    with pytest.raises(ValueError, match="^reward"):
        VerifyResult(1.5, ParseStatus.OK)
    with pytest.raises(ValueError, match="^reward"):
        VerifyResult(-0.1, ParseStatus.OK)
    with pytest.raises(ValueError, match="^timed_out"):
        VerifyResult(1.0, ParseStatus.TIMEOUT, timed_out=True)
    with pytest.raises(ValueError):
        VerifyResult(0.0, "bogus")


# ---------------------------------------------------------------------------- split helpers
@given(st.text(min_size=0, max_size=30), st.text(min_size=1, max_size=8))
def test_assign_split_is_deterministic_and_in_range(key, salt):
    fr = {"a": 0.5, "b": 0.3, "c": 0.2}
    u = stable_unit_hash(key, salt)
    assert 0.0 <= u < 1.0
    s = assign_split(key, fr, salt)
    assert s == assign_split(key, fr, salt)
    lo = {"a": 0.0, "b": 0.5, "c": 0.8}[s]
    assert lo <= u < lo + fr[s] + 1e-12


def test_assign_split_fractions_are_respected():
    # 20000 keys: Hoeffding with failure probability 1e-6 per split (Bonferroni x3).
    n = 20_000
    fr = {"train": 0.7, "validation": 0.2, "test": 0.1}
    counts = dict.fromkeys(fr, 0)
    for i in range(n):
        counts[assign_split(f"k{i}", fr, "salt")] += 1
    import math

    eps = math.sqrt(math.log(2 * 3 / 1e-6) / (2 * n))
    for name, f in fr.items():
        assert abs(counts[name] / n - f) <= eps


@pytest.mark.parametrize(
    "fractions, msg", [({}, "empty"), ({"a": 0.5, "b": 0.6}, "sum to 1"), ({"a": 1.0, "b": 0.0}, "> 0")]
)
def test_assign_split_bad_fractions(fractions, msg):
    with pytest.raises(ValueError, match=msg):
        assign_split("k", fractions, "s")


@given(st.text(max_size=40), st.lists(st.integers(-5, 45), max_size=10))
def test_partition_spans_partition(text, cuts):
    steps = partition_spans(text, cuts)
    assert "".join(s.text for s in steps) == text
    if text:
        assert steps[0].start == 0 and steps[-1].end == len(text)
        assert all(a.end == b.start for a, b in zip(steps, steps[1:]))
        assert all(s.end > s.start for s in steps)
    else:
        assert steps == ()


# ---------------------------------------------------------------------------- registry
def test_registry_known_and_unknown():
    assert {"step_arith", "math", "reasoning_gym"} <= set(available_tasks())
    with pytest.raises(ValueError, match=r"unknown task 'nope'.*math.*reasoning_gym.*step_arith"):
        get_task("nope")
    with pytest.raises(ValueError, match="already registered"):
        register_task("step_arith")(lambda **kw: None)
    with pytest.raises(ValueError, match=r"unknown parameter\(s\) n_trian"):
        get_task("step_arith", n_trian=3)


# ---------------------------------------------------------------------------- prompt rendering
def test_has_chat_template_rules():
    assert has_chat_template(FakeChatTokenizer())
    assert not has_chat_template(NoTemplateTokenizer())
    assert not has_chat_template(None)
    assert not has_chat_template(object())


def test_render_prompt_with_and_without_chat_template():
    p = Problem("m1", "Compute $1+1$.", "2")
    task = MathTask({"test": [p]})
    tok = FakeChatTokenizer()
    chat = task.render_prompt(p, tok)
    user = REPLAY_USER_TEMPLATE.replace("{question}", p.prompt)
    assert chat == f"<|system|>{REPLAY_SYSTEM_PROMPT}<|end|><|user|>{user}<|end|><|assistant|>"
    (messages, tokenize, gen), = tok.calls
    assert tokenize is False and gen is True
    assert messages[1]["content"] == (
        "Problem : Compute $1+1$.\n\nPlease reason step by step, and put your final answer within \\boxed{}."
    )
    plain = task.render_prompt(p, NoTemplateTokenizer())
    assert plain == task.render_prompt(p) == f"{REPLAY_SYSTEM_PROMPT}\n\n{user}\n\n"
    with pytest.raises(ValueError, match="^tokenizer"):
        task.render_prompt(p, IdsTokenizer())

    arith = get_task("step_arith", n_train=2, n_validation=1, n_test=1, n_hard=1)
    q = arith.problems("test")[0]
    assert arith.render_prompt(q) == q.prompt + "\n"
    assert arith.render_prompt(q, FakeChatTokenizer()) == f"<|user|>{q.prompt}<|end|><|assistant|>"
    assert arith.expert_text(q) == q.prompt + "\n" + q.solution
    with pytest.raises(ValueError, match="no expert solution"):
        task.expert_text(p)


def test_iter_problems_seeded():
    task = get_task("step_arith", n_train=50, n_validation=5, n_test=5, n_hard=5)
    a = [p.id for p in task.iter_problems("train", seed=3)]
    b = [p.id for p in task.iter_problems("train", seed=3)]
    c = [p.id for p in task.iter_problems("train", seed=4)]
    assert a == b and a != c and sorted(a) == sorted(p.id for p in task.problems("train"))
    assert [p.id for p in task.iter_problems("train", shuffle=False)] == [p.id for p in task.problems("train")]
    it = task.iter_problems("validation", seed=0, repeat=True)
    first = [next(it).id for _ in range(10)]
    assert sorted(first[:5]) == sorted(first[5:])  # two full epochs
    with pytest.raises(ValueError, match="^seed"):
        next(task.iter_problems("train"))
    with pytest.raises(ValueError, match="unknown split 'dev'.*train, validation, test, hard"):
        task.problems("dev")
    assert task.find_problem(a[0]).id == a[0]
    with pytest.raises(ValueError, match="^problem_id"):
        task.find_problem("nope")
    with pytest.raises(ValueError, match="^completions"):
        task.verify_many(task.problems("test")[:2], ["A:1"])
