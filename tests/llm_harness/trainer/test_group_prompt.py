"""Each group's prompt once in the loss pass: the same log-probs, entropies and gradients as the plain pass."""

from __future__ import annotations

import pytest
import torch
import transformers

from llm_harness.trainer.group_prompt import group_rows
from llm_harness.trainer.modeling import sequence_logprobs


def _model(kind: str) -> torch.nn.Module:
    common = dict(vocab_size=37, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                  intermediate_size=48, max_position_embeddings=64, tie_word_embeddings=kind == "qwen2")
    cfg = transformers.Qwen2Config(**common) if kind == "qwen2" else transformers.LlamaConfig(**common)
    torch.manual_seed(0)
    cls = transformers.Qwen2ForCausalLM if kind == "qwen2" else transformers.LlamaForCausalLM
    return cls(cfg).float().eval()


def _batch(groups: list[tuple[list[int], list[list[int]]]], pad: int = 0):
    """Right-padded rows ``prompt + response``; loss mask on the response tokens (build_batch's layout)."""
    rows = [(p, r) for p, rs in groups for r in rs]
    L = max(len(p) + len(r) for p, r in rows)
    ids = torch.full((len(rows), L), pad, dtype=torch.long)
    att = torch.zeros((len(rows), L), dtype=torch.long)
    lm = torch.zeros((len(rows), L - 1))
    for b, (p, r) in enumerate(rows):
        seq = p + r
        ids[b, : len(seq)] = torch.tensor(seq)
        att[b, : len(seq)] = 1
        lm[b, len(p) - 1: len(seq) - 1] = 1
    return ids, att, lm


GROUPS = [
    ([3, 4, 5, 6, 7], [[8, 9, 10], [11], [12, 13, 14, 15, 16, 17]]),
    ([3, 4, 20], [[21, 22], [23, 24, 25, 26], [27, 28]]),  # shares a start with group 0, then differs
    ([30, 31, 32, 33, 34, 35, 36, 2], [[5, 6]]),             # a group of one
]


@pytest.mark.parametrize("kind", ["qwen2", "llama"])
@pytest.mark.parametrize("temperature,top_p", [(1.0, 1.0), (0.7, 0.9)])
def test_group_prompt_pass_equals_plain_pass(kind: str, temperature: float, top_p: float) -> None:
    model = _model(kind)
    ids, att, lm = _batch(GROUPS)
    out = {}
    for mode in ("plain", "group"):
        model.zero_grad(set_to_none=True)
        lp, ent = sequence_logprobs(model, ids, att, lm, temperature=temperature, top_p=top_p, with_entropy=True,
                                    group_prompt=mode == "group")
        (lp * lm * torch.linspace(0.5, 1.5, lm.shape[1])).sum().backward()
        out[mode] = (lp.detach(), ent, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    assert_same_pass(out["plain"], out["group"])


def assert_same_pass(plain: tuple, fast: tuple) -> None:
    """``(log-probs, entropies, gradients)`` of two passes agree up to float rounding, at the same positions."""
    (lp0, e0, g0), (lp1, e1, g1) = plain, fast
    assert torch.allclose(lp1, lp0, rtol=1e-5, atol=1e-5)
    assert torch.equal(lp1 == 0, lp0 == 0)  # the same trained positions filled
    assert torch.allclose(e1, e0, rtol=1e-5, atol=1e-5)
    assert set(g1) == set(g0)
    for n in g0:
        scale = float(g0[n].abs().max()) + 1e-12
        assert float((g1[n] - g0[n]).abs().max()) / scale < 1e-4, n


def test_rows_are_grouped_by_context() -> None:
    ids, att, lm = _batch(GROUPS)
    g = group_rows(ids, att, lm)
    assert g.group.tolist() == [0, 0, 0, 1, 1, 1, 2]
    assert g.first.tolist() == [5, 5, 5, 3, 3, 3, 8]
    assert g.n_groups == 3


def test_row_without_target_is_skipped_and_left_padding_refused() -> None:
    model = _model("qwen2")
    ids, att, lm = _batch(GROUPS)
    lm[1] = 0  # a row that trains nothing
    plain, _ = sequence_logprobs(model, ids, att, lm, with_entropy=False)
    shared, _ = sequence_logprobs(model, ids, att, lm, with_entropy=False, group_prompt=True)
    assert torch.allclose(shared, plain, atol=1e-5) and float(shared[1].detach().abs().sum()) == 0.0
    left = torch.flip(att, dims=[1])
    with pytest.raises(ValueError, match="right-padded"):
        group_rows(ids, left, lm)
