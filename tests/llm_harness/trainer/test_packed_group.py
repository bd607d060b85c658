"""Each group's prompt once on packed tokens (``run.group_prompt_once`` with ``run.packed_forward``): the plain
pass's log-probs, entropies and gradients, and the same training metrics."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_group_prompt import GROUPS, _batch, assert_same_pass  # noqa: E402
from test_packed_forward import _model  # noqa: E402

from llm_harness.trainer.group_prompt import group_shared_hidden  # noqa: E402
from llm_harness.trainer.modeling import sequence_logprobs  # noqa: E402
from llm_harness.trainer.packed_group import packed_group_hidden  # noqa: E402

#: a one-token response (only its context's target) in a group shared with GROUPS[0]
BATCH = GROUPS + [([3, 4, 5, 6, 7], [[9]])]


def _pass(model, ids, att, lm, **mode):
    model.zero_grad(set_to_none=True)
    lp, ent = sequence_logprobs(model, ids, att, lm, temperature=0.7, top_p=1.0, with_entropy=True, **mode)
    (lp * lm * torch.linspace(0.5, 1.5, lm.shape[1])).sum().backward()
    return lp.detach(), ent, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("seed, attention, cfg", [
    (0, "matmul", {}),
    (1, "sdpa", {}),
    (2, "matmul", {"num_key_value_heads": 1, "head_dim": 16}),  # one kv head; head_dim != hidden / heads
    (3, "sdpa", {"num_attention_heads": 8, "num_key_value_heads": 2, "tie_word_embeddings": True}),
    (4, "matmul", {"llama": True, "tie_word_embeddings": True, "rope_theta": 100000.0}),  # SmolLM2's family
    (5, "sdpa", {"llama": True, "attention_bias": True}),  # q/k/v/o biases
])
def test_packed_group_pass_equals_plain_pass(seed: int, attention: str, cfg: dict, monkeypatch) -> None:
    import llm_harness.trainer.packed_group as pg

    model = _model(seed, **cfg)
    ids, att, lm = _batch(BATCH)
    plain = _pass(model, ids, att, lm)
    monkeypatch.setattr(pg, "MATMUL_ATTENTION_BYTES", 2**40 if attention == "matmul" else 0)  # the auto rule's pick
    assert_same_pass(plain, _pass(model, ids, att, lm, group_prompt=True, packed=True))


def _rows(rows: list[tuple[list[int], list[int]]]):
    """Right-padded ``(tokens, trained target-hidden positions)`` rows: ``ids, attention mask, loss mask``."""
    L = max(len(t) for t, _ in rows)
    ids = torch.zeros((len(rows), L), dtype=torch.long)
    att = torch.zeros_like(ids)
    lm = torch.zeros((len(rows), L - 1))
    for b, (t, trained) in enumerate(rows):
        ids[b, : len(t)] = torch.tensor(t)
        att[b, : len(t)] = 1
        lm[b, trained] = 1
    return ids, att, lm


def _resp(prompt: list[int], response: list[int]) -> tuple[list[int], list[int]]:
    return prompt + response, list(range(len(prompt) - 1, len(prompt) + len(response) - 1))


P, Q = [3, 4, 5, 6, 7], [3, 4, 20]
CASES = {
    # a context that is another's plus a prefix (VSR / PS / PROS restarts), two prefix lengths in one batch
    "prefix restarts": [_resp(P, [8, 9]), _resp(P + [8, 9], [10, 11, 12]), _resp(P + [8, 9], [13]),
                        _resp(P + [8], [14, 15, 16, 17])],
    # row 0 trains nothing, groups interleaved: a group's leader is not the batch's first row
    "interleaved groups": [(P + [8, 9], []), _resp(Q, [21]), _resp(P, [8, 9, 10]), _resp(Q, [22, 23, 24, 25]),
                           _resp(P, [11])],
    "gaps in the loss mask (multi-turn)": [(P + [8, 9, 10, 11, 12, 13], [4, 5, 8, 9]), (P + [14, 15, 16, 17], [4, 7]),
                                           (Q + [1, 2, 3, 4, 5, 6, 7], [2, 6, 7, 8])],
    "one-token responses only (no continuation)": [_resp(P, [8]), _resp(P, [9]), _resp(Q, [10])],
    "one-token contexts": [_resp([3], [8, 9]), _resp([3], [10]), _resp([4], [5, 6, 7])],
    "contexts 1 and 12 tokens": [_resp([3], [4, 5, 6, 7, 8, 9, 10, 11, 12]), _resp(list(range(3, 15)), [20])],
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("cfg", [{}, {"llama": True, "attention_bias": True}])
def test_cases_equal_the_hf_group_pass_with_gradients(case: str, cfg: dict) -> None:
    model = _model(11, **cfg)
    ids, att, lm = _rows(CASES[case])
    w = torch.randn(*lm.shape, model.config.hidden_size, generator=torch.Generator().manual_seed(1))
    out = {}
    for name, fn in (("hf", lambda: group_shared_hidden(model, ids, att, lm)),
                     ("matmul", lambda: packed_group_hidden(model, ids, att, lm, attention="matmul")),
                     ("sdpa", lambda: packed_group_hidden(model, ids, att, lm, attention="sdpa"))):
        model.zero_grad(set_to_none=True)
        h = fn()
        (h * w).sum().backward()
        out[name] = (h.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    h0, g0 = out["hf"]
    for name in ("matmul", "sdpa"):
        h1, g1 = out[name]
        assert torch.allclose(h1, h0, rtol=1e-5, atol=1e-5), name
        assert torch.equal(h1 == 0, h0 == 0), name
        assert set(g1) == set(g0), name
        for n in g0:
            assert float((g1[n] - g0[n]).abs().max()) <= 1e-4 * (float(g0[n].abs().max()) + 1e-12), (name, n)


def test_hidden_states_equal_the_hf_group_pass_and_bad_input_is_refused() -> None:
    model = _model(7)
    ids, att, lm = _batch(BATCH)
    lm[1] = 0  # a row that trains nothing
    with torch.no_grad():
        ref = group_shared_hidden(model, ids, att, lm)
        for attention in ("matmul", "sdpa"):
            got = packed_group_hidden(model, ids, att, lm, attention=attention)
            assert got.shape == ref.shape
            assert torch.allclose(got, ref, rtol=1e-5, atol=1e-5), attention
            assert float(got[1].abs().sum()) == 0.0
        assert float(packed_group_hidden(model, ids, att, torch.zeros_like(lm)).abs().sum()) == 0.0  # nothing trained
    with pytest.raises(ValueError, match="right-padded"):
        packed_group_hidden(model, ids, torch.flip(att, dims=[1]), lm)
    with pytest.raises(ValueError, match="attention"):
        packed_group_hidden(model, ids, att, lm, attention="flash")
    bad = lm.clone()
    bad[1, -1] = 1  # row 1 is shorter than the batch: its last column is padding
    with pytest.raises(ValueError, match="padding position"):
        packed_group_hidden(model, ids, att, bad)
    with torch.autocast("cpu", dtype=torch.bfloat16):  # nothing trained: zeros in the weights' dtype, as the HF pass
        assert packed_group_hidden(model, ids, att, torch.zeros_like(lm)).dtype == torch.float32
    with pytest.raises(ValueError, match="share_prefix"):
        sequence_logprobs(model, ids, att, lm, share_prefix=True, packed=True, group_prompt=True)

