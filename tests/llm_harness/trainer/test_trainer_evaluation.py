"""The one evaluation sampler (trainer/evaluation.sample_and_verify), shared by the trainer's
validation / ``vsr eval`` and the test bed's ``vsr testbed eval``: seeds, grading, counts."""

from __future__ import annotations

import numpy as np
import pytest

from llm_harness.backends import HFBackend, Sample
from llm_harness.tasks import get_task
from llm_harness.trainer.evaluation import SamplingSession, completion_text, evaluate_policy, sample_and_verify
from llm_harness.trainer.modeling import CharTokenizer, Codec
from llm_harness.trainer.rollout import SafeVerifier
from vsr_util.seeding import derive_seed


class _Scripted:
    """Sample j of problem i is correct iff ``(i + j + seed) % 3 == 0``; records every call's seed."""

    def __init__(self, codec, task, problems):
        self.codec, self.task, self.problems = codec, task, list(problems)
        self.prompts = [list(codec.encode(task.render_prompt(p, codec.tokenizer))) for p in self.problems]
        self.seeds = []

    def generate(self, prompts, n, sp):
        self.seeds.append(sp.seed)
        out = []
        for ids in prompts:
            i = self.prompts.index(list(ids))
            p = self.problems[i]
            row = []
            for j in range(n):
                good = (i + j + sp.seed) % 3 == 0
                text = p.solution if good else p.solution.rsplit("A:", 1)[0] + f"A:{int(p.answer) + 1}"
                toks = tuple(self.codec.encode(text)) + (1,)
                row.append(Sample(toks, tuple(-0.1 for _ in toks), "stop"))
            out.append(row)
        return out


@pytest.fixture()
def setup():
    task = get_task("step_arith", n_train=10, n_validation=7, n_test=4, n_hard=2, max_terms=3)
    codec = Codec(CharTokenizer())
    probs = list(task.problems("validation"))
    return task, codec, probs, _Scripted(codec, task, probs)


def test_chunks_seeds_grades_and_counts(setup):
    task, codec, probs, be = setup
    ev = sample_and_verify(SamplingSession(be, codec, task, SafeVerifier(task, 0), chunk_sequences=6), probs, k=3,
                           seed=5, stream=("validation",))
    assert be.seeds == [derive_seed(5, 0xE7A1, "validation", c) for c in range(4)]  # 2 problems per call
    want = np.zeros((7, 3), dtype=np.int64)
    for i in range(7):
        for j in range(3):
            want[i, j] = (i + j + be.seeds[i // 2]) % 3 == 0
    assert np.array_equal(ev.correct, want)
    assert ev.counts == {"finish_stop": 21, "status_ok": 21}
    assert ev.lengths[0, 0] == len(ev.token_ids[0][0]) and ev.token_ids[0][0][-1] == 1


def test_the_trainer_summary_and_the_test_bed_use_the_same_samples(setup):
    task, codec, probs, be = setup
    res = evaluate_policy(SamplingSession(be, codec, task, SafeVerifier(task, 0), chunk_sequences=6), probs, k=3, seed=2)
    trainer_seeds = list(be.seeds)
    assert trainer_seeds == [derive_seed(2, 0xE7A1, c) for c in range(4)]  # the trainer's streams, unchanged
    ev = sample_and_verify(SamplingSession(be, codec, task, task, chunk_sequences=6), probs, k=3, seed=2)
    assert res["avg_at_k"] == pytest.approx(ev.correct.mean())


def test_test_bed_sample_correct_is_the_shared_sampler(setup, monkeypatch):
    from llm_harness.testbed.evaluate import sample_correct
    from llm_harness.testbed.model import TestbedModelConfig, make_model
    from llm_harness.testbed.tokenizer import build_tokenizer

    tok = build_tokenizer()
    task = get_task("step_arith")
    probs = task.problems("validation")[:5]
    hf_codec = Codec(tok)
    be = _Scripted(hf_codec, task, probs)
    monkeypatch.setattr(HFBackend, "generate", lambda self, prompts, n, sp: be.generate(prompts, n, sp))
    model = make_model(TestbedModelConfig(hidden_size=16, num_hidden_layers=1, intermediate_size=16), tok, seed=0)
    correct, counts = sample_correct(model, tok, task, probs, samples_per_problem=2, temperature=1.0, seed=4,
                                     split="validation", batch_sequences=4)
    ref = sample_and_verify(SamplingSession(be, hf_codec, task, task, max_new_tokens=64, chunk_sequences=4), probs, k=2,
                            seed=4, stream=("validation",))
    assert np.array_equal(correct, ref.correct) and correct.dtype == np.int8 and counts == ref.counts


def test_completion_text_drops_only_the_final_stop_token():
    codec = Codec(CharTokenizer())
    ids = list(codec.encode("1+2=3\nA:3"))
    assert completion_text(codec, ids + [1], stopped=True) == "1+2=3\nA:3"
    assert completion_text(codec, ids, stopped=False) == "1+2=3\nA:3"
    assert completion_text(codec, [], stopped=True) == ""
