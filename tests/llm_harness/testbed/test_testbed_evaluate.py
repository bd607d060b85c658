"""Test-bed evaluation: decoding + verification + bookkeeping (backend replaced by a scripted one)."""

from __future__ import annotations

import numpy as np
import pytest

from llm_harness.backends import HFBackend, Sample
from llm_harness.tasks import get_task
from llm_harness.testbed.evaluate import (
    TestbedEvalConfig,
    _decode_completion,
    accuracy_by_terms,
    format_report,
    sample_correct,
    split_problems,
)
from llm_harness.testbed.model import TestbedModelConfig, make_model
from llm_harness.testbed.tokenizer import build_tokenizer


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


@pytest.fixture(scope="module")
def task():
    return get_task("step_arith")


def _scripted_generate(tok, task):
    """A fake ``generate``: sample j of a problem is the expert solution when (answer + j) is even,
    otherwise the solution with a wrong answer; ends with EOS. Records the call sizes."""
    by_prompt = {p.prompt + "\n": p for split in ("validation", "hard") for p in task.problems(split)}
    calls = []

    def generate(self, prompt_ids, n, sampling):
        calls.append((len(prompt_ids), n, sampling.seed))
        out = []
        for ids in prompt_ids:
            p = by_prompt[tok.decode(ids)]
            row = []
            for j in range(n):
                good = (int(p.answer) + j) % 2 == 0
                text = p.solution if good else p.solution.rsplit("A:", 1)[0] + f"A:{int(p.answer) + 1}"
                new = tok.encode(text) + [tok.eos_token_id]
                row.append(Sample(tuple(new), tuple([0.0] * len(new)), "stop"))
            out.append(row)
        return out

    return generate, calls


def test_sample_correct_verifies_each_sample_in_place(tok, task, monkeypatch):
    gen, calls = _scripted_generate(tok, task)
    monkeypatch.setattr(HFBackend, "generate", gen)
    model = make_model(TestbedModelConfig(hidden_size=16, num_hidden_layers=1, intermediate_size=16), tok, seed=0)
    probs = split_problems(task, "validation", 23)
    correct, counts = sample_correct(model, tok, task, probs, samples_per_problem=3, temperature=1.0,
                                     batch_sequences=12, split="validation", seed=5)
    want = np.array([[(int(p.answer) + j) % 2 == 0 for j in range(3)] for p in probs], dtype=np.int8)
    assert np.array_equal(correct, want)
    assert [c[0] for c in calls] == [4] * 5 + [3]  # 12 // 3 problems per call
    assert len({c[2] for c in calls}) == len(calls)  # a fresh seed per call
    assert counts == {"finish_stop": 69, "status_ok": 69}
    assert model.training  # the caller's mode is restored


def test_decode_completion_drops_only_the_final_stop_token(tok):
    ids = tok.encode("12+3=15\nA:15")
    assert _decode_completion(tok, ids + [2], stopped=True) == "12+3=15\nA:15"
    assert _decode_completion(tok, ids, stopped=False) == "12+3=15\nA:15"
    # a stray special token stays visible, so the answer becomes malformed instead of silently fixed
    txt = _decode_completion(tok, tok.encode("A:1") + [0] + tok.encode("5") + [2], stopped=True)
    assert txt == "A:1<pad>5"
    assert get_task("step_arith").verify(get_task("step_arith").problems("validation")[0], txt).status.value == "malformed"


def test_accuracy_by_terms_groups_and_counts(task):
    probs = split_problems(task, "validation", 10)  # 2..6 terms, twice each
    correct = np.zeros((10, 2), dtype=np.int8)
    correct[0] = 1  # a 2-term problem
    correct[5, 0] = 1  # the other 2-term problem, one sample
    res = accuracy_by_terms(probs, correct)
    rows = {r["n_terms"]: r for r in res["by_terms"]}
    assert sorted(rows) == [2, 3, 4, 5, 6]
    assert rows[2]["correct"] == 3 and rows[2]["n_samples"] == 4 and rows[2]["accuracy"] == 0.75
    assert rows[3]["correct"] == 0 and rows[3]["ci_low"] == 0.0 and rows[3]["ci_high"] > 0
    assert res["overall"]["correct"] == 3 and res["overall"]["n_problems"] == 10
    text = format_report({"validation": res})
    assert text.count("\n") == 6 and "validation" in text and "  all" in text
    with pytest.raises(ValueError, match="correct"):
        accuracy_by_terms(probs, correct[:3])


def test_split_problems_and_config_validation(task):
    assert split_problems(task, "hard", 0) == task.problems("hard")
    assert split_problems(task, "hard", 10**6) == task.problems("hard")  # capped at the split size
    assert split_problems(task, "hard", 7) == task.problems("hard")[:7]
    with pytest.raises(ValueError, match="n_problems"):
        split_problems(task, "hard", -1)
    with pytest.raises(ValueError, match="split"):
        split_problems(task, "nope", 1)
    with pytest.raises(ValueError, match="samples_per_problem"):
        TestbedEvalConfig(samples_per_problem=0)
    with pytest.raises(ValueError, match="splits"):
        TestbedEvalConfig(splits=())
    with pytest.raises(ValueError, match="confidence"):
        TestbedEvalConfig(confidence=1.0)
