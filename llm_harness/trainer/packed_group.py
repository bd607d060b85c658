"""The loss pass with each group's prompt once, on packed tokens (``run.group_prompt_once`` with
``run.packed_forward``; Qwen2-family models).

:mod:`llm_harness.trainer.group_prompt` runs each distinct context once through the Hugging Face decoder and the
rows' continuations on its selected cache; :mod:`llm_harness.trainer.packed_forward` runs the projections and the
MLP on the real tokens only, with fused q/k/v and gate/up matrices and one ``F.rms_norm`` per norm. This module
does both in one layer loop: the contexts' real tokens and the continuations' real tokens form one ``[N, hidden]``
matrix (one matmul per projection for both), and only attention sees a padded layout::

    contexts       [U, heads, C, d]   causal over the context's own columns
    continuations  [B, heads, R, d]   keys = [its group's context keys (C) | its own keys (R)]:
                                      context columns < c_b, own columns causal

Row ``b``'s tokens, context lengths ``c_b`` and the returned layout are those of
:func:`~llm_harness.trainer.group_prompt.group_shared_hidden` (the hidden state of target ``t`` at position
``t``; zeros where nothing is trained), and the arithmetic (layers and attention) is
:func:`~llm_harness.trainer.packed_forward.packed_hidden`'s, so the result equals both up to float summation order
(tests: log-probs and gradients against the plain pass).
Pad queries are computed and dropped; a real query never reads a pad key (right padding and the masks above).
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from llm_harness.backends.static_decode import qwen2_rms_norm
from llm_harness.trainer.group_prompt import group_rows
from llm_harness.trainer.packed_forward import (MATMUL_ATTENTION_BYTES, additive_mask, attend, layer_qkv, layer_rest,
                                                rope_tables, supports)

__all__ = ["group_layer", "packed_group_hidden"]


def group_layer(layer: Any, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, ctx_idx: torch.Tensor,
                r_idx: torch.Tensor, g: torch.Tensor, ctx_mask: torch.Tensor, r_mask: torch.Tensor, U: int, C: int,
                Bp: int, R: int, hq: int, hkv: int, d: int, matmul: bool) -> torch.Tensor:
    """One decoder layer of :func:`packed_group_hidden` on the packed tokens ``x [N, hidden]`` (the first
    ``len(ctx_idx)`` rows the contexts' real tokens, the rest the continuations'): norm and fused q/k/v with RoPE,
    the contexts' attention on their padded ``[U, heads, C, d]`` layout, the continuations' on ``[B', heads, R, d]``
    over their group's context keys and their own, then o-projection, norm and MLP; ``[N, hidden]``."""
    att = layer.self_attn
    nq, width, rep, Nc = hq * d, (hq + 2 * hkv) * d, hq // hkv, ctx_idx.shape[0]
    packed, w_gu = layer_qkv(layer, x, cos, sin, hq, hkv, d)  # [N, (heads + 2 kv) * d]
    cf = packed.new_zeros((U * C, width)).index_copy(0, ctx_idx, packed[:Nc])
    cf = cf.view(U, C, hq + 2 * hkv, d).transpose(1, 2)  # [U, heads, C, d]
    kc, vc = cf[:, hq: hq + hkv], cf[:, hq + hkv:]
    a = attend(cf[:, :hq], kc, vc, ctx_mask, rep, att.scaling, matmul)
    parts = [a.transpose(1, 2).reshape(U * C, nq).index_select(0, ctx_idx)]
    if R > 0:
        rf = packed.new_zeros((Bp * R, width)).index_copy(0, r_idx, packed[Nc:])
        rf = rf.view(Bp, R, hq + 2 * hkv, d).transpose(1, 2)  # [B', heads, R, d]
        k = torch.cat((kc.index_select(0, g), rf[:, hq: hq + hkv]), dim=2)  # [B', kv, C + R, d]
        v = torch.cat((vc.index_select(0, g), rf[:, hq + hkv:]), dim=2)
        a = attend(rf[:, :hq], k, v, r_mask, rep, att.scaling, matmul)
        parts.append(a.transpose(1, 2).reshape(Bp * R, nq).index_select(0, r_idx))
    return layer_rest(layer, x, torch.cat(parts) if len(parts) > 1 else parts[0], w_gu)


def packed_group_hidden(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, loss_mask: torch.Tensor,
                        *, attention: str = "auto", layer_fn: Callable[..., torch.Tensor] = group_layer) -> torch.Tensor:
    """Final hidden states ``[B, L - 1, hidden]`` at every trained position (``loss_mask`` 1; zeros elsewhere), each
    context run once and every projection on real tokens only (module doc); autograd through the parameters.

    ``attention``: ``matmul``, ``sdpa`` or ``auto`` (matmul on the CPU while the float32 scores autograd keeps
    over all layers take at most :data:`~llm_harness.trainer.packed_forward.MATMUL_ATTENTION_BYTES`).
    ``layer_fn``: the per-layer computation, :func:`group_layer` (a benchmark passes a ``torch.compile`` of it)."""
    why = supports(model)
    if why is not None:
        raise ValueError(f"model: the packed group pass does not support this model ({why})")
    if attention not in ("auto", "matmul", "sdpa"):
        raise ValueError(f"attention: expected 'auto', 'matmul' or 'sdpa', got {attention!r}")
    groups = group_rows(input_ids, attention_mask, loss_mask)  # validates shapes and right padding
    cfg = model.config
    dec = model.get_decoder()
    B, L = input_ids.shape
    dev = input_ids.device
    H = int(cfg.hidden_size)
    rows = (groups.group >= 0).nonzero().squeeze(1)  # rows with a trained target
    if rows.numel() == 0:  # as group_shared_hidden: zeros in the weights' dtype
        return dec.get_input_embeddings().weight.new_zeros((B, L - 1, H))
    hq, hkv = int(cfg.num_attention_heads), int(cfg.num_key_value_heads)
    d = int(getattr(cfg, "head_dim", None) or H // hq)
    rep = hq // hkv
    U = groups.n_groups
    ctx_len = groups.first[groups.leader]  # [U]
    C = int(ctx_len.max())
    g, c = groups.group[rows], groups.first[rows]
    rest = groups.lengths[rows] - c  # [B'] continuation tokens per row (>= 0)
    Bp, R = int(rows.numel()), int(rest.max())
    # the contexts' real tokens, then the continuations' real tokens: one packed [N] token list
    ctx_keep = torch.arange(C, device=dev)[None] < ctx_len[:, None]  # [U, C]
    ctx_idx = ctx_keep.reshape(-1).nonzero().squeeze(1)
    ctx_tok = input_ids[groups.leader, :C].reshape(-1).index_select(0, ctx_idx)
    ctx_pos = ctx_idx % C
    r_cols = torch.arange(R, device=dev)[None]
    r_keep = r_cols < rest[:, None]  # [B', R]
    r_idx = r_keep.reshape(-1).nonzero().squeeze(1)
    r_abs = c[:, None] + r_cols  # absolute position of continuation column j of row b
    r_tok = input_ids[rows[:, None], r_abs.clamp(max=L - 1)].reshape(-1).index_select(0, r_idx)
    r_pos = r_abs.reshape(-1).index_select(0, r_idx)
    Nc = int(ctx_idx.numel())  # the first Nc packed tokens are the contexts'
    x = dec.embed_tokens(torch.cat((ctx_tok, r_tok)))  # [N, hidden]
    cos, sin = rope_tables(dec.rotary_emb, torch.cat((ctx_pos, r_pos)), x.dtype)  # [N, 1, d]
    if attention == "auto":  # float32 scores autograd keeps for every layer
        score_bytes = (U * hq * C * C + Bp * hq * R * (C + R)) * 4 * len(dec.layers)
        attention = "matmul" if dev.type == "cpu" and score_bytes <= MATMUL_ATTENTION_BYTES else "sdpa"
    matmul = attention == "matmul"
    causal = torch.ones((C, C), dtype=torch.bool, device=dev).tril_()[None]  # a context: its own columns causally
    ctx_mask = additive_mask(causal, rep, matmul, x.dtype)
    # row b's continuation: its context's columns < c_b, then its own columns causally: [B', R, C + R]
    see_ctx = torch.arange(C, device=dev)[None] < c[:, None]  # [B', C]
    own = torch.ones((R, R), dtype=torch.bool, device=dev).tril_()
    allowed = torch.cat((see_ctx[:, None, :].expand(Bp, R, C), own[None].expand(Bp, R, R)), dim=2)
    r_mask = additive_mask(allowed, rep, matmul, x.dtype)
    for layer in dec.layers:
        x = layer_fn(layer, x, cos, sin, ctx_idx, r_idx, g, ctx_mask, r_mask, U, C, Bp, R, hq, hkv, d, matmul)
    x = qwen2_rms_norm(dec.norm, x)
    out = x.new_zeros((B, L - 1, H))
    # target c_b - 1 (the first trained one) reads the last context token of row b's group (contexts packed in order)
    last = ctx_len.cumsum(0) - 1
    out = out.index_put((rows, c - 1), x.index_select(0, last.index_select(0, g)))
    if R == 0:
        return out
    # continuation column j of row b is absolute position c_b + j: the hidden of target c_b + j (< L - 1)
    rb, rj = r_idx // R, r_idx % R
    p = c.index_select(0, rb) + rj
    keep = p < L - 1
    return out.index_put((rows.index_select(0, rb)[keep], p[keep]), x[Nc:][keep])
