"""Prefix embedders of the prefix-selection study (the trainer's registry, llm_harness.embedders):
the policy embedder pools only the prefix positions; char n-grams; registry."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from llm_harness.embedders import EMBEDDERS, EmbedContext, build_embedder, register_embedder
from llm_harness.tasks import get_task
from prefixvalue.config import StudyConfig
from llm_harness.trainer.data import StartState
from prefixvalue.engine import build_context


def embed_states(name, ctx, states):
    """``e[n, d]`` of the study states' prefixes with the registry's ``name`` (the study's call form)."""
    emb = build_embedder(name, {}, EmbedContext(model=ctx.backend.model, codec=ctx.codec), "embedder")
    return emb.embed([list(s.prompt_ids) for s in states], [list(s.prefix_ids) for s in states])


def test_policy_embedding_is_the_mean_hidden_state_over_the_prefix(testbed):
    backend, tok = testbed
    ctx = build_context(StudyConfig(split="validation"), backend=backend, tokenizer=tok)
    probs = get_task("step_arith").problems("validation")[:2]
    enc = ctx.codec.encode
    states = [ctx.state(probs[0], enc("12+3=15,")),
              ctx.state(probs[1], enc("7-2=5,5+40=45,")),
              ctx.state(probs[0])]
    e = embed_states("policy_hidden", ctx, states)  # batched and padded
    dec = backend.model.get_decoder()
    for s, row in zip(states, e):
        ids = torch.tensor([list(s.prompt_ids) + list(s.prefix_ids)])
        with torch.inference_mode():
            h = dec(input_ids=ids).last_hidden_state[0].double().numpy()
        lo = len(s.prompt_ids) if s.prefix_ids else len(s.prompt_ids) - 1
        np.testing.assert_allclose(row, h[lo:].mean(axis=0), rtol=1e-4, atol=1e-5)


def test_prefixes_of_one_trajectory_equal_separate_states(testbed):
    """What the study computes (embed_prefixes of the source trajectory) is the per-state embedding."""
    backend, tok = testbed
    ctx = build_context(StudyConfig(split="validation"), backend=backend, tokenizer=tok)
    p = get_task("step_arith").problems("validation")[0]
    traj = ctx.codec.encode("12+3=15,15-4=11\nA:11")
    emb = build_embedder("policy_hidden", {}, EmbedContext(model=backend.model, codec=ctx.codec), "embedder")
    (pre,) = emb.embed_prefixes([list(ctx.prompt_ids(p))], [list(traj)], [[3, 8, 16]])
    sep = embed_states("policy_hidden", ctx, [ctx.state(p, traj[:k]) for k in (3, 8, 16)])
    np.testing.assert_allclose(pre, sep, rtol=1e-4, atol=1e-5)


def test_char_ngram_embedding_is_normalised_and_lexical(testbed):
    backend, tok = testbed
    ctx = build_context(StudyConfig(split="validation"), backend=backend, tokenizer=tok)
    p = get_task("step_arith").problems("validation")[0]
    enc = ctx.codec.encode
    e = embed_states("char-ngram", ctx, [StartState((5,), p, enc(t)) for t in ("12+3=15,", "12+3=15,", "98-7=91,")])
    np.testing.assert_allclose(np.linalg.norm(e, axis=1), 1.0)
    assert e[0] @ e[1] == pytest.approx(1.0) and e[0] @ e[2] < 0.5


def test_embedder_registry_rejects_duplicates_and_unknown_names():
    with pytest.raises(ValueError, match="already registered"):
        register_embedder("policy_hidden")(EMBEDDERS["policy_hidden"])
    with pytest.raises(ValueError, match="unknown embedder 'bert'"):
        build_embedder("bert", {}, None, "embedder")


def test_embed_context_without_a_model_serves_the_text_embedders_only(testbed):
    backend, tok = testbed
    ctx = build_context(StudyConfig(split="validation"), backend=backend, tokenizer=tok)
    no_model = EmbedContext(model=None, codec=ctx.codec)
    e = build_embedder("char-ngram", {"dim": 64}, no_model, "embedder").embed([[5]], [list(ctx.codec.encode("1+2=3,"))])
    assert e.shape == (1, 64)
    with pytest.raises(ValueError, match="policy_hidden needs a"):
        build_embedder("policy_hidden", {}, no_model, "embedder")
