"""Agent SFT data: per-turn expert samples, loss on the action tokens only, a deterministic stream
of training seeds disjoint from the 128 evaluation seeds; prefix-shared training equals the plain loss."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from llm_harness.envs import make_env
from llm_harness.envs.prompt import render_agent_prompt
from llm_harness.testbed.agents import (
    AGENT_FAMILIES,
    EVAL_SEEDS,
    TRAIN_SEED_START,
    AgentSFTData,
    build_sft_data,
    demonstration,
    family_env,
    train_seeds,
)
from llm_harness.testbed.model import TestbedModelConfig, make_model
from llm_harness.testbed.sft import encode_sft_batch, sft_logits, sft_loss
from llm_harness.testbed.tokenizer import build_tokenizer

TOK = build_tokenizer(AGENT_FAMILIES["sokoban"].alphabet, model_max_length=384)


@pytest.fixture(scope="module")
def data() -> AgentSFTData:
    return build_sft_data("sokoban", None, 0, 300)


def test_seed_sets_are_disjoint_and_fixed():
    assert EVAL_SEEDS == tuple(range(128))
    assert tuple(train_seeds(3)) == (TRAIN_SEED_START, TRAIN_SEED_START + 1, TRAIN_SEED_START + 2)
    assert not set(train_seeds(10_000)) & set(EVAL_SEEDS)


def test_pool_is_every_expert_turn_in_seed_order(data):
    env = family_env("sokoban")
    assert set(data.seeds).isdisjoint(EVAL_SEEDS) and set(data.excluded).isdisjoint(data.seeds)
    assert sorted(data.seeds + data.excluded) == list(train_seeds(300))
    expected = [turn for s in data.seeds for turn in demonstration(env, s, window=0)]
    assert list(data.samples) == expected
    for s in data.seeds[:20]:  # one sample per expert turn, prompts as render_agent_prompt draws them
        assert len(demonstration(env, s, 0)) == len(env.expert_actions(s))
    held_out = {render_agent_prompt(env.instruction, [], env.reset(s), window=0) for s in EVAL_SEEDS}
    first = {demonstration(env, s, 0)[0][0] for s in data.seeds}
    assert not first & held_out  # no training episode starts in an evaluation room
    for s in data.excluded:
        assert render_agent_prompt(env.instruction, [], env.reset(s), window=0) in held_out


def test_excluded_rooms_are_found():
    """Seeds differ, rooms repeat: 32 of the first 10,000 Sokoban training seeds draw an evaluation room."""
    from llm_harness.envs.sokoban import generate_room

    rooms = {generate_room(s)[0] for s in EVAL_SEEDS}
    dup = [s for s in train_seeds(2000) if generate_room(s)[0] in rooms]
    assert dup and set(dup) == set(build_sft_data("sokoban", None, 0, 2000).excluded)


def test_batch_stream_is_deterministic_and_prefix_invariant(data):
    again = AgentSFTData(data.samples, data.seeds, data.excluded)  # a fresh object: no shared cache
    n = len(data.samples)
    steps = [data.indices(s, 64, 0) for s in range(n // 64 + 3)]  # crosses an epoch boundary
    assert steps == [again.indices(s, 64, 0) for s in range(len(steps))]
    flat = [i for st in steps for i in st]
    assert sorted(flat[:n]) == list(range(n))  # an epoch visits each sample once
    assert flat[n : 2 * n] != flat[:n]  # epochs are reshuffled
    assert data.indices(0, 64, 1) != data.indices(0, 64, 0)  # the seed matters
    prompts, words = data.batch(3, 16, 0)
    assert [data.samples[i] for i in data.indices(3, 16, 0)] == list(zip(prompts, words))


def test_loss_mask_covers_the_action_word_and_eos_only(data):
    prompts, words = data.batch(0, 32, 0)
    batch = encode_sft_batch(TOK, prompts, words)
    for b, (p, w) in enumerate(zip(prompts, words)):
        ids = batch.input_ids[b]
        targets = ids[batch.loss_mask[b].bool()].tolist()
        assert targets == TOK.encode(w) + [TOK.eos_token_id]
        assert int(batch.loss_mask[b, : len(p)].sum()) == 0
        assert TOK.decode(ids[: len(p)].tolist()) == p and p.endswith("\nA:")


def test_shared_prefix_loss_and_gradients_equal_the_plain_forward(data):
    model = make_model(TestbedModelConfig(hidden_size=32, num_hidden_layers=2, intermediate_size=64,
                                          max_position_embeddings=384), TOK, seed=0)
    batch = encode_sft_batch(TOK, *data.batch(0, 16, 0))
    grads, losses = [], []
    for share in (False, True):
        model.zero_grad()
        logits, ids, mask = sft_logits(model, batch, share_prefix=share)
        loss = sft_loss(logits, ids, mask)
        loss.backward()
        losses.append(float(loss.detach()))
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
        if share:
            assert ids.shape[1] < batch.input_ids.shape[1] - 200  # the instruction ran once
    np.testing.assert_allclose(losses[0], losses[1], rtol=1e-5)
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-4, atol=1e-6)


def test_babyai_demonstrations_are_deterministic():
    a = build_sft_data.__wrapped__("babyai", "OneRoomS8", 0, 4)
    b = build_sft_data.__wrapped__("babyai", "OneRoomS8", 0, 4)
    assert a.samples == b.samples and len(a.samples) > 4
    env = make_env("babyai", level="OneRoomS8")
    assert [w for _, w in a.samples[: len(env.expert_actions(a.seeds[0]))]] == env.expert_actions(a.seeds[0])
