"""Packed-weight linears of the static decoder (``llm_harness.backends.packed_linear``): the same products as
``F.linear`` (bit for bit in float32 from 5 rows, and in bf16 against the bf16-cast weight), a packing reused
only while its weights are unchanged, and samples equal to the unpacked decoder's."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from backend_models import tiny_llama, tiny_qwen2

from llm_harness.backends import HFBackend, HFBackendConfig, SamplingParams
from llm_harness.backends.packed_linear import PackCache, pack_kind, packed_linear
from llm_harness.backends.static_decode import StaticQwen2Decoder

HAS_MKL = pack_kind(torch.zeros(2, 2), torch.float32) == "mkl"
HAS_BF16 = pack_kind(torch.zeros(2, 2), torch.bfloat16) == "onednn_bf16"


@pytest.mark.skipif(not HAS_MKL, reason="this torch build has no MKL packed SGEMM")
@pytest.mark.parametrize("rows", [5, 16, 17, 64])
def test_float32_packing_is_bit_identical_from_five_rows(rows):
    g = torch.Generator().manual_seed(rows)
    w, b = torch.randn(96, 40, generator=g), torch.randn(96, generator=g)
    x = torch.randn(rows, 40, generator=g)
    lin = packed_linear(w, b, torch.float32)
    assert torch.equal(lin(x), F.linear(x, w, b))
    assert torch.equal(packed_linear(w, None, torch.float32)(x), F.linear(x, w))


@pytest.mark.skipif(not HAS_MKL, reason="this torch build has no MKL packed SGEMM")
def test_float32_packing_of_a_single_row_differs_only_by_rounding():
    g = torch.Generator().manual_seed(1)
    w, x = torch.randn(96, 40, generator=g), torch.randn(1, 40, generator=g)
    torch.testing.assert_close(packed_linear(w, None, torch.float32)(x), F.linear(x, w), rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(not HAS_BF16, reason="this CPU has no native bf16 (oneDNN falls back)")
@pytest.mark.parametrize("rows", [1, 16, 40])
def test_bf16_packing_equals_the_bf16_matmul_autocast_computes(rows):
    g = torch.Generator().manual_seed(rows)
    w, b = torch.randn(96, 40, generator=g), torch.randn(96, generator=g)
    x = torch.randn(rows, 40, generator=g)
    got = packed_linear(w, b, torch.bfloat16)(x)
    assert got.dtype == torch.bfloat16
    assert torch.equal(got, F.linear(x.bfloat16(), w.bfloat16(), b.bfloat16()))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.equal(got, F.linear(x, w, b))


def test_unsupported_cases_fall_back_to_the_plain_matmul():
    w = torch.randn(8, 4, dtype=torch.float64)
    x = torch.randn(3, 4, dtype=torch.float64)
    assert pack_kind(w, torch.float64) is None
    assert torch.equal(packed_linear(w, None, torch.float64)(x), F.linear(x, w))
    w16 = torch.randn(8, 4)
    assert pack_kind(w16, torch.float16) is None
    got = packed_linear(w16, None, torch.float16)(torch.randn(3, 4))
    assert got.dtype == torch.float16


def test_a_packing_is_reused_while_its_weights_are_unchanged_and_rebuilt_after_an_update():
    w = torch.nn.Parameter(torch.randn(16, 8))
    cache, built = PackCache(), []

    def build():
        built.append(1)
        return packed_linear(w, None, torch.float32)

    x = torch.randn(6, 8)
    first = cache.get("w", (w,), build)(x)
    cache.get("w", (w,), build)
    assert len(built) == 1 and len(cache) == 1
    with torch.no_grad():
        w.add_(1.0)  # an optimizer step: in place, so the version moves
    second = cache.get("w", (w,), build)(x)
    assert len(built) == 2
    torch.testing.assert_close(second, F.linear(x, w.detach()))
    assert not torch.equal(first, second)
    cache.clear()
    assert len(cache) == 0


@pytest.mark.parametrize("family", [tiny_qwen2, tiny_llama])
def test_the_packed_decoder_steps_like_the_plain_one(family):
    torch.manual_seed(0)
    model = family(50)
    be = HFBackend(model, config=HFBackendConfig(pad_token_id=0))
    ids = torch.tensor([[0, 0, 5, 6, 7], [3, 4, 5, 6, 7], [0, 9, 8, 7, 6], [1, 2, 3, 4, 5], [0, 0, 0, 4, 5]])
    mask = (ids != 0).long()
    pos = (mask.cumsum(-1) - 1).clamp_min(0)
    with torch.inference_mode():
        _, cache = be._decode(ids, mask, pos, be._new_cache())
        plain = StaticQwen2Decoder.from_cache(model, copy.deepcopy(cache), extra=3)
        packs = PackCache()
        packed = StaticQwen2Decoder.from_cache(model, copy.deepcopy(cache), extra=3, packs=packs)
        assert plain.head is None and packed.head is not None and len(packs) == 4 * len(plain.layers) + 1
        tok, nxt = torch.tensor([11, 12, 13, 14, 15]), pos[:, -1] + 1
        for step in range(3):
            mask = torch.cat([mask, mask.new_ones((5, 1))], dim=1)
            h_plain, h_packed = plain.step(tok, nxt + step, mask), packed.step(tok, nxt + step, mask)
            torch.testing.assert_close(h_packed, h_plain, rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(packed.head(h_packed), be._logits(h_plain), rtol=1e-5, atol=1e-5)
            tok = be._logits(h_plain).argmax(-1)
        # a second decoder on unchanged weights packs nothing again
        before = {k: v[1] for k, v in packs._items.items()}
        StaticQwen2Decoder.from_cache(model, copy.deepcopy(cache), extra=3, packs=packs)
        assert all(packs._items[k][1] is fn for k, fn in before.items())


def test_packed_and_plain_sampling_draw_the_same_tokens():
    torch.manual_seed(0)
    model = tiny_qwen2(50)
    rng = np.random.default_rng(0)
    prompts = [rng.integers(2, 50, int(k)).tolist() for k in rng.integers(1, 12, 7)]
    sp = SamplingParams(max_new_tokens=12, seed=3)
    out = {}
    for packed in (True, False):
        be = HFBackend(model, config=HFBackendConfig(pad_token_id=0, static_decode=True, packed_weights=packed))
        out[packed] = be.generate(prompts, 4, sp)
        assert be._packs is None  # freed with the call
    n = 0
    for ra, rb in zip(out[True], out[False]):
        for sa, sb in zip(ra, rb):
            assert sa.token_ids == sb.token_ids
            np.testing.assert_allclose(sa.sampling_logprobs, sb.sampling_logprobs, rtol=1e-5, atol=1e-5)
            n += len(sa.token_ids)
    assert n > 100
