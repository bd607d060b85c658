"""Validation metrics: the papers' protocols, pass@j for every j, length by
correctness and the diversity metrics, checked against independent computations on fixed samples,
and the keys ``Trainer.validate`` emits."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import torch

from llm_harness.backends import Sample
from llm_harness.embedders import NGramEmbedder
from llm_harness.tasks import get_task
from llm_harness.trainer.config import TrainConfig, ValidationConfig
from llm_harness.trainer.eval_protocols import EVAL_PROTOCOLS, EvalProtocol, get_protocol
from llm_harness.trainer.evaluation import SamplingSession, evaluate_policy
from llm_harness.trainer.modeling import CharTokenizer, Codec
from llm_harness.trainer.rollout import SafeVerifier
from theory.metrics import distinct_n, self_bleu
from vsr_util.config_io import from_dict, to_dict

# ----------------------------------------------------------------------------- protocols


@pytest.mark.parametrize("name, t, p, k", [("replay", 0.6, 0.8, 8), ("replay_aime", 0.6, 0.8, 16),
                                           ("extra", 0.7, 0.9, 16), ("vsr", 0.7, 1.0, 16)])
def test_protocols_are_the_papers_numbers(name, t, p, k):
    pr = get_protocol(name)
    assert (pr.temperature, pr.top_p, pr.k) == (t, p, k)
    v = ValidationConfig(protocol=name)
    assert (v.temperature, v.top_p, v.k) == (t, p, k)  # the fields hold the values in force
    s = v.sampling()
    assert (s.temperature, s.top_p, s.k) == (t, p, k)


def test_protocol_fills_only_unset_fields_and_refuses_disagreement():
    s = ValidationConfig(protocol="extra", k=8).sampling()  # the sample budget may differ
    assert (s.temperature, s.top_p, s.k) == (0.7, 0.9, 8)
    assert ValidationConfig(protocol="extra", temperature=0.7, top_p=0.9).sampling().k == 16  # agreeing values are fine
    with pytest.raises(ValueError, match=r"^temperature: .*protocol 'replay'"):
        ValidationConfig(protocol="replay", temperature=1.0)
    with pytest.raises(ValueError, match=r"^top_p: .*protocol 'extra'"):
        ValidationConfig(protocol="extra", top_p=1.0)
    with pytest.raises(ValueError, match=r"^protocol: unknown evaluation protocol 'math'"):
        ValidationConfig(protocol="math")
    with pytest.raises(ValueError, match=r"^diversity_embedder: unknown embedder"):
        ValidationConfig(diversity_embedder="bert")
    with pytest.raises(ValueError, match=r"^logdet_alpha"):
        ValidationConfig(logdet_alpha=0.0)
    with pytest.raises(ValueError, match=r"^temperature"):
        EvalProtocol(0.0, 1.0, 4, "x")
    d = ValidationConfig().sampling()
    assert (d.k, d.temperature, d.top_p) == (4, 1.0, 1.0)  # the defaults before protocols existed
    s = ValidationConfig(k=2, temperature=0.5, top_p=0.7).sampling()
    assert (s.k, s.temperature, s.top_p) == (2, 0.5, 0.7)
    assert set(EVAL_PROTOCOLS) == {"replay", "replay_aime", "extra", "vsr"}


def test_protocol_config_round_trips_through_a_file_mapping():
    cfg = from_dict(TrainConfig, {"validation": {"protocol": "replay", "every": 5}})
    s = cfg.validation.sampling()
    assert (s.temperature, s.top_p, s.k) == (0.6, 0.8, 8)
    assert from_dict(TrainConfig, to_dict(cfg)) == cfg
    # a protocol named on top of a built config that has other values in force is refused, not silently applied
    with pytest.raises(ValueError, match=r"^temperature: 1.0 disagrees with protocol 'extra'"):
        replace(from_dict(TrainConfig, {}).validation, protocol="extra")
    over = replace(from_dict(TrainConfig, {}).validation, protocol="extra", temperature=None, top_p=None, k=None)
    assert (over.temperature, over.top_p, over.k) == (0.7, 0.9, 16)
    with pytest.raises(ValueError, match=r"^validation\.top_p"):
        from_dict(TrainConfig, {"validation": {"protocol": "replay", "top_p": 0.9}})


def test_vsr_eval_takes_the_same_protocols():
    from llm_harness.trainer.config import EvalConfig

    e = EvalConfig(protocol="replay")
    assert (e.temperature, e.top_p, e.k) == (0.6, 0.8, 8)
    d = EvalConfig()
    assert (d.temperature, d.top_p, d.k) == (1.0, 1.0, 8)  # the defaults before protocols existed
    with pytest.raises(ValueError, match=r"^top_p: 0.95 disagrees with protocol 'vsr'"):
        EvalConfig(protocol="vsr", top_p=0.95)
    with pytest.raises(ValueError, match=r"^k: must be >= 1"):
        EvalConfig(k=0)


# ----------------------------------------------------------------------------- evaluate_policy on fixed samples


class _Fixed:
    """Problem i's sample j is ``texts[i][j]`` (then the stop token 1); records sampling parameters."""

    def __init__(self, codec, task, problems, texts):
        self.codec, self.task, self.problems, self.texts = codec, task, list(problems), texts
        self.prompts = [list(codec.encode(task.render_prompt(p, codec.tokenizer))) for p in self.problems]
        self.params = []

    def generate(self, prompts, n, sp):
        self.params.append((sp.temperature, sp.top_p))
        out = []
        for ids in prompts:
            i = self.prompts.index(list(ids))
            out.append([Sample(tuple(self.codec.encode(self.texts[i][j])) + (1,), (-0.1,) * (len(self.texts[i][j]) + 1),
                               "stop") for j in range(n)])
        return out


class _FirstTokenEmbedder:
    """e = one-hot of the response's first token over 64 ids (known vectors for the LogDet check)."""

    name = "first_token"

    def __init__(self):
        self.calls = []

    def embed(self, prompts, solutions):
        self.calls.append((len(prompts), len(solutions)))
        e = np.zeros((len(solutions), 64))
        for r, s in enumerate(solutions):
            e[r, s[0] % 64] = 1.0
        return e


@pytest.fixture()
def fixed():
    task = get_task("step_arith", n_train=10, n_validation=4, n_test=4, n_hard=2, max_terms=3)
    probs = list(task.problems("validation"))[:3]
    codec = Codec(CharTokenizer())
    good = [p.solution for p in probs]
    bad = [p.solution.rsplit("A:", 1)[0] + f"A:{int(p.answer) + 1}" for p in probs]
    wrong2 = [f"9+9=18\nA:{int(p.answer) + 2}" for p in probs]
    # problem 0: 1 of 4 correct; problem 1: 3 of 4; problem 2: none; the wrong texts differ in length
    texts = [[good[0], bad[0], wrong2[0], bad[0]],
             [good[1], good[1], wrong2[1], good[1]],
             [bad[2], wrong2[2], bad[2], wrong2[2]]]
    correct = np.array([[1, 0, 0, 0], [1, 1, 0, 1], [0, 0, 0, 0]])
    return task, probs, codec, texts, correct


def _logdet_by_hand(first_tokens, alpha):
    """log det(I + alpha K) for one-hot embeddings: K[i, j] = 1 iff the first tokens agree."""
    f = np.asarray(first_tokens) % 64
    K = (f[:, None] == f[None, :]).astype(float)
    sign, val = np.linalg.slogdet(np.eye(len(f)) + alpha * K)
    assert sign > 0
    return val


def test_every_metric_on_fixed_samples_matches_an_independent_computation(fixed):
    task, probs, codec, texts, correct = fixed
    be = _Fixed(codec, task, probs, texts)
    emb = _FirstTokenEmbedder()
    res = evaluate_policy(SamplingSession(be, codec, task, SafeVerifier(task, 0), temperature=0.7, top_p=0.9), probs,
                          k=4, embedder=emb, logdet_alpha=0.5)
    assert be.params and set(be.params) == {(0.7, 0.9)}
    # pass@j for every j = 1..k, from the binomial formula (not theory.metrics)
    assert sorted(res["pass_at"]) == [1, 2, 3, 4]
    n = 4
    for j in range(1, 5):
        want = np.mean([1 - math.comb(n - c, j) / math.comb(n, j) for c in correct.sum(axis=1)])
        assert res["pass_at"][j] == pytest.approx(want, rel=1e-12)
    assert res["avg_at_k"] == pytest.approx(correct.mean())
    # lengths by correctness: characters + the stop token
    lens = np.array([[len(t) + 1 for t in row] for row in texts])
    assert res["length_correct"] == pytest.approx(lens[correct == 1].mean())
    assert res["length_incorrect"] == pytest.approx(lens[correct == 0].mean())
    assert res["length_mean"] == pytest.approx(lens.mean())
    assert res["length_correct"] != res["length_incorrect"]
    # diversity: theory.metrics on the same token sequences, averaged over problems
    seqs = [[list(codec.encode(t)) + [1] for t in row] for row in texts]
    assert res["distinct_4"] == pytest.approx(np.mean([distinct_n(s, 4) for s in seqs]))
    assert res["self_bleu_4"] == pytest.approx(np.mean([self_bleu(s, 4) for s in seqs]))
    want_ld = np.mean([_logdet_by_hand([x[0] for x in s], 0.5) for s in seqs])
    assert res["logdet"] == pytest.approx(want_ld, rel=1e-10)
    assert res["logdet_embedder"] == "first_token" and emb.calls == [(4, 4)] * 3


def test_default_logdet_embedder_is_the_token_4gram_counts(fixed):
    task, probs, codec, texts, _ = fixed
    res = evaluate_policy(SamplingSession(_Fixed(codec, task, probs, texts), codec, task, SafeVerifier(task, 0)),
                          probs, k=4)
    from theory.metrics import logdet_diversity

    ng = NGramEmbedder(4, 2048)
    seqs = [[list(codec.encode(t)) + [1] for t in row] for row in texts]
    want = np.mean([logdet_diversity(ng.embed([[]] * 4, s), 1.0) for s in seqs])
    assert res["logdet_embedder"] == "ngram4" and res["logdet"] == pytest.approx(want)
    # identical responses are the least diverse: log(1 + alpha * m) for a rank-one kernel
    same = [[row[0]] * 4 for row in texts]
    r1 = evaluate_policy(SamplingSession(_Fixed(codec, task, probs, same), codec, task, SafeVerifier(task, 0)),
                         probs, k=4)
    assert r1["logdet"] == pytest.approx(math.log(5.0)) and r1["logdet"] < res["logdet"]
    assert r1["self_bleu_4"] == pytest.approx(1.0) and r1["distinct_4"] < res["distinct_4"]


def test_k1_has_no_pairwise_diversity(fixed):
    task, probs, codec, texts, _ = fixed
    res = evaluate_policy(SamplingSession(_Fixed(codec, task, probs, texts), codec, task, SafeVerifier(task, 0)),
                          probs, k=1)
    assert res["self_bleu_4"] is None and res["logdet"] is None and list(res["pass_at"]) == [1]


def test_validation_aes_is_replays_formula_on_validate_rows():
    from llm_harness.trainer.evaluation import SamplingSession, validation_aes

    ref = {"val_length_mean": 40.0, "val_avg_at_8": 0.5}
    shorter_better = {"val_length_mean": 30.0, "val_avg_at_8": 0.6}
    assert validation_aes(shorter_better, ref, 8) == pytest.approx(10 / 40 + 3 * 0.1 / 0.5)  # beta 3 on a gain
    longer_worse = {"val_length_mean": 50.0, "val_avg_at_8": 0.4}
    assert validation_aes(longer_worse, ref, 8) == pytest.approx(-10 / 40 - 5 * 0.1 / 0.5)  # beta 5 on a loss
    assert validation_aes(ref, ref, 8) == 0.0
    with pytest.raises(ValueError, match=r"metrics: val_avg_at_16 missing"):
        validation_aes(shorter_better, ref, 16)
    with pytest.raises(ValueError, match=r"reference: AES is undefined"):
        validation_aes(shorter_better, {"val_length_mean": 40.0, "val_avg_at_8": 0.0}, 8)
    with pytest.raises(ValueError, match=r"not finite"):
        validation_aes({"val_length_mean": float("nan"), "val_avg_at_8": 0.5}, ref, 8)


# ----------------------------------------------------------------------------- Trainer.validate


def test_validate_emits_every_metric_and_follows_the_protocol(tmp_path):
    from trainer_support import make_trainer

    torch.set_num_threads(1)
    tr = make_trainer(str(tmp_path / "run"), validation=ValidationConfig(protocol="extra", k=6, n_problems=5))
    seen = []
    real = tr.backend.generate

    def spy(prompts, n, sp):
        seen.append((sp.temperature, sp.top_p, n))
        return real(prompts, n, sp)

    tr.backend.generate = spy
    try:
        out = tr.validate()
        again = tr.validate()
    finally:
        tr.close()
    want = ({"val_avg_at_6"} | {f"val_pass_at_{j}" for j in range(1, 7)}
            | {"val_length_mean", "val_length_correct", "val_length_incorrect", "val_distinct_4", "val_self_bleu_4",
               "val_logdet"})
    assert set(out) == want
    assert set(seen) == {(0.7, 0.9, 6)}
    passes = [out[f"val_pass_at_{j}"] for j in range(1, 7)]
    assert passes[0] == pytest.approx(out["val_avg_at_6"])
    assert all(a <= b + 1e-12 for a, b in zip(passes, passes[1:]))  # pass@j is non-decreasing in j
    assert 0 < out["val_distinct_4"] <= 1 and 0 <= out["val_self_bleu_4"] <= 1
    assert 0 <= out["val_logdet"] <= 6 * math.log(2.0) + 1e-9  # Hadamard bound, alpha = 1
    assert out == again  # the validation stream is seeded
    import json

    json.dumps(out, allow_nan=False)  # strict JSON as returned (undefined metrics are None, never NaN)


def test_validate_values_are_evaluate_policy_on_the_same_stream(tmp_path):
    from trainer_support import make_trainer
    from vsr_util.seeding import derive_seed

    torch.set_num_threads(1)
    tr = make_trainer(str(tmp_path / "run"), validation=ValidationConfig(k=3, n_problems=4, temperature=0.8,
                                                                         logdet_alpha=2.0))
    (tmp_path / "run").mkdir(exist_ok=True)  # a run folder exists from the first step on; validate keeps its outcomes there
    try:
        out = tr.validate()
        probs = list(tr.task.problems("validation"))[:4]
        res = evaluate_policy(SamplingSession(tr.backend, tr.codec, tr.task, tr.ctx.verifier, temperature=0.8,
                                              max_new_tokens=tr.cfg.rollout.max_new_tokens),
                              probs, k=3, seed=derive_seed(tr.cfg.seed, 0x7A1, 0),
                              embedder=NGramEmbedder(4, 2048), logdet_alpha=2.0)
    finally:
        tr.close()
    assert out["val_logdet"] == pytest.approx(res["logdet"]) and out["val_avg_at_3"] == pytest.approx(res["avg_at_k"])
    import json

    from llm_harness.trainer.loop import EVAL_OUTCOMES

    kept = json.loads((tmp_path / "run" / EVAL_OUTCOMES).read_text())  # the per-problem outcomes behind the averages
    assert kept["k"] == 3 and kept["problem_ids"] == [str(p.id) for p in probs] and kept["correct"] == res["problem_correct"]
    assert sum(kept["correct"]) / (3 * len(probs)) == pytest.approx(out["val_avg_at_3"])
    for key in ("length_mean", "distinct_4", "self_bleu_4"):
        assert out[f"val_{key}"] == pytest.approx(res[key])
    for key in ("length_correct", "length_incorrect"):
        assert out[f"val_{key}"] == (None if res[key] is None else pytest.approx(res[key]))


def test_validate_reports_undefined_metrics_as_none(tmp_path):
    import json

    from trainer_support import ToyTask, make_trainer

    torch.set_num_threads(1)
    tr = make_trainer(str(tmp_path / "run"), task=ToyTask(good=""), validation=ValidationConfig(k=2, n_problems=3))
    try:
        out = tr.validate()
    finally:
        tr.close()
    assert out["val_avg_at_2"] == 0.0 and out["val_length_correct"] is None and out["val_length_incorrect"] > 0
    json.dumps(out, allow_nan=False)
