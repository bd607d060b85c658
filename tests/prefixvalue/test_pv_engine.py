"""Sampling plumbing: one batched generate call per step, budgets, verification, bad input."""

from __future__ import annotations

import pytest
from fakes import ScriptedBackend

from llm_harness.tasks import ALPHABET, get_task
from llm_harness.tasks.step_arith import make_problem
from llm_harness.trainer.data import StartState
from llm_harness.trainer.modeling import CharTokenizer, Codec
from llm_harness.trainer.rollout import call_budgets
from prefixvalue.config import StudyConfig
from prefixvalue.engine import (
    StudyContext,
    build_context,
    check_tokenizer_covers,
    select_problems,
)
from vsr_util.seeding import derive_seed


def _ctx(backend, **cfg):
    task = get_task("step_arith")
    cfg = StudyConfig(split="validation", response_budget=cfg.pop("response_budget", 40), **cfg)
    return StudyContext(cfg=cfg, backend=backend, tokenizer=backend.tok, task=task)


def test_sample_is_one_batched_call_and_verifies_prefix_plus_continuation():
    p = make_problem((2, 3, 4), ("+", "+"))  # 2+3=5,5+4=9 / A:9
    # even samples finish correctly, odd samples answer 8
    backend = ScriptedBackend(lambda text, j: ("5+4=9\nA:9" if j % 2 == 0 else "5+4=8\nA:8"))
    ctx = _ctx(backend)
    prefix = Codec(backend.tok).encode("2+3=5,")
    states = [ctx.state(p, prefix), ctx.state(p, prefix[:2]), ctx.state(p)]
    groups = ctx.sample(states, 4, temperature=1.0, top_p=1.0, seed=7)
    assert len(backend.calls) == 1  # many states, n samples each: ONE generate call
    n_states, n, sp = backend.calls[0]
    assert (n_states, n, sp.seed, sp.temperature) == (3, 4, 7, 1.0)
    assert [v.correct for v in groups[0].verify] == [True, False, True, False]
    assert groups[0].completion_text(0, ctx.codec) == "2+3=5,5+4=9\nA:9"
    assert groups[0].completion_ids(0)[: len(prefix)] == prefix
    assert groups[0].stopped[0] and len(groups[0].response_ids[0]) == len("5+4=9\nA:9") + 1
    # the other states got the same continuation text after a different prefix: wrong answers
    assert groups[1].completion_text(0, ctx.codec) == "2+5+4=9\nA:9" and groups[1].rewards[0] == 1.0  # verifier reads the A: line only
    assert groups[2].completion_text(0, ctx.codec) == "5+4=9\nA:9"


def test_budget_counts_the_prefix_and_cuts_long_samples():
    p = make_problem((2, 3, 4), ("+", "+"))
    backend = ScriptedBackend(lambda text, j: "5+4=9\nA:9")
    ctx = _ctx(backend, response_budget=12)
    long_prefix = Codec(backend.tok).encode("2+3=5,")  # 6 tokens -> 6 left; the continuation needs 10
    states = [ctx.state(p, long_prefix), ctx.state(p)]
    max_new, budgets = call_budgets(states, 12, backend.max_context)
    assert budgets == [6, 12] and max_new == 12
    groups = ctx.sample(states, 1, temperature=1.0, top_p=1.0, seed=0)
    cut = groups[0]
    assert (len(cut.response_ids[0]) == 6 and not cut.stopped[0] and cut.completion_text(0, ctx.codec) == "2+3=5,5+4=9\n"
            and not cut.verify[0].correct)
    assert len(groups[1].response_ids[0]) == 10 and groups[1].stopped[0]
    with pytest.raises(ValueError, match="response budget"):
        call_budgets([StartState((1,), p, tuple(range(12)))], 12, 256)
    with pytest.raises(ValueError, match="model context"):
        call_budgets([StartState(tuple(range(250)), p, ())], 12, 250)


def test_max_new_tokens_respects_the_model_context():
    p = make_problem((2, 3), ("+",))
    states = [StartState(tuple(range(200)), p, ()), StartState((1, 2), p, ())]
    max_new, budgets = call_budgets(states, 100, 256)
    assert budgets == [100, 100] and max_new == 56


def test_derive_seed_is_stable_and_key_sensitive():
    a = derive_seed(0, "hint-ratio", 3)
    assert a == derive_seed(0, "hint-ratio", 3)
    assert len({a, derive_seed(1, "hint-ratio", 3), derive_seed(0, "hint-ratio", 4), derive_seed(0, "x", 3)}) == 4
    assert 0 <= a < 2**31


def test_tokenizer_missing_characters_are_named():
    tok = CharTokenizer(ALPHABET.replace("7", "").replace("Q", ""))
    with pytest.raises(ValueError, match=r"cannot encode 2 character\(s\).*'7', 'Q'"):
        check_tokenizer_covers(Codec(tok), ALPHABET, "step_arith")
    check_tokenizer_covers(Codec(CharTokenizer()), ALPHABET, "step_arith")


def test_hf_tokenizer_unknown_character_is_named():
    from llm_harness.testbed import build_tokenizer

    tok = build_tokenizer(ALPHABET.replace("=", ""))
    with pytest.raises(ValueError, match=r"tokenizer: cannot encode 1 character\(s\) used by task 'step_arith': '='"):
        check_tokenizer_covers(Codec(tok), ALPHABET, "step_arith")


def test_build_context_refuses_a_mismatched_model_before_sampling():
    tok = CharTokenizer(ALPHABET.replace("A", ""))
    backend = ScriptedBackend(lambda t, j: "", tokenizer=tok)
    with pytest.raises(ValueError, match="'A'"):
        build_context(StudyConfig(split="validation"), backend=backend, tokenizer=tok)
    assert backend.calls == []


def test_difficulty_filter_that_keeps_nothing_names_the_filter_and_counts():
    task = get_task("step_arith")
    with pytest.raises(ValueError, match=r"difficulty filter \[20, inf\] keeps 0 of 500 problems of split 'validation' "
                                         r"\(difficulties present: 2\.\.6\)"):
        select_problems(task, "validation", 10, 20.0, float("inf"))
    got = select_problems(task, "validation", 7, 5.0, 6.0)
    assert len(got) == 7 and all(5 <= p.difficulty <= 6 for p in got)
    assert select_problems(task, "validation", 3, float("-inf"), float("inf")) == task.problems("validation")[:3]


def test_a_problems_own_budget_caps_its_responses_and_its_prefix_counts_against_it():
    from dataclasses import replace

    from llm_harness.tasks.base import RESPONSE_BUDGET_KEY, problem_budget

    p = make_problem((2, 3, 4), ("+", "+"))
    short = replace(p, metadata={**p.metadata, RESPONSE_BUDGET_KEY: 8})
    wide = replace(p, metadata={**p.metadata, RESPONSE_BUDGET_KEY: 500})
    assert (problem_budget(p, 12), problem_budget(short, 12), problem_budget(wide, 12)) == (12, 8, 12)
    backend = ScriptedBackend(lambda text, j: "5+4=9\nA:9")  # 9 tokens and the stop token
    ctx = _ctx(backend, response_budget=12)
    prefix = Codec(backend.tok).encode("2+3=5,")  # 6 tokens
    states = [ctx.state(short), ctx.state(short, prefix[:3]), ctx.state(wide), ctx.state(p)]
    max_new, budgets = call_budgets(states, 12, backend.max_context)
    assert budgets == [8, 5, 12, 12] and max_new == 12  # the run's budget stays the most any response gets
    groups = ctx.sample(states, 1, temperature=1.0, top_p=1.0, seed=0)
    assert len(backend.calls) == 1  # still one call: the short rows are cut afterwards
    assert [len(g.response_ids[0]) for g in groups] == [8, 5, 10, 10]
    assert [g.finish_reasons[0] for g in groups] == ["length", "length", "stop", "stop"]
    assert not groups[0].verify[0].correct and groups[2].verify[0].correct
    with pytest.raises(ValueError, match="response budget"):  # a prefix as long as the problem's budget
        call_budgets([ctx.state(short, tuple(range(8)))], 12, 256)
