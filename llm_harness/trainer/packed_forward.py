"""The training forward of a Qwen2-family decoder over packed tokens (opt-in ``run.packed_forward``).

Why: the loss pass runs on right-padded rows (``build_batch``), and on the test bed about a third of the
positions are padding (four updates of the trainer benchmark's setting: 64-72 % of 40-64 rows x 66-70
columns real). The
projections and the MLP — most of the pass's matrix work — need no padding: they act on each token
alone. :func:`packed_hidden` runs them on the real tokens only (``[N, hidden]``, N = the tokens the
attention mask keeps) and scatters q/k/v into the padded ``[rows, heads, columns, head_dim]`` layout only
for attention, which then reads the real keys only: with right padding, a real query at column t
attends to columns <= t, all real, so plain causal attention is the padded model's masked attention
for every real token (pad queries are computed and dropped).

The arithmetic follows ``transformers``' Qwen2 code in the order of
:mod:`llm_harness.backends.static_decode` (q/k/v and gate/up as one matmul over concatenated weights,
``F.rms_norm``, RoPE at the token's column, causal attention with query head j reading kv head j // rep
as ``repeat_kv`` does: two matmuls for short rows on the CPU, ``scaled_dot_product_attention`` otherwise),
with autograd through the model's own parameters: the same log-probs and gradients as the HF forward up
to float summation order (tests: ~1e-6 relative in float32; in bfloat16 both paths are off the float32
result by rounding of the same size, 0.025-0.03 in hidden states of magnitude ~3, and off each other by
0.016-0.03).

Supported: what :func:`llm_harness.backends.static_decode.supports` accepts (any attention implementation:
attention is computed here), no attention dropout, and
right-padded rows (each row's mask a run of ones from column 0); :func:`supports` says why not, and
``sequence_logprobs`` falls back to the HF forward for rows that are not right-padded.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from llm_harness.backends.static_decode import fused_projections, qwen2_rms_norm, rotate_half
from llm_harness.backends.static_decode import supports as decode_supports

__all__ = ["MATMUL_ATTENTION_BYTES", "additive_mask", "attend", "layer_qkv", "layer_rest", "packed_hidden",
           "right_padded", "rope_tables", "supports"]

#: most bytes the matmul attention's float32 scores may take over all layers under ``attention="auto"``
MATMUL_ATTENTION_BYTES = 256 * 2**20


def supports(model: Any) -> str | None:
    """None if :func:`packed_hidden` can run ``model``, else the reason it cannot."""
    why = decode_supports(model, attention=False)  # attention is computed here, whatever the model's implementation
    if why is not None:
        return why
    if float(getattr(model.config, "attention_dropout", 0.0) or 0.0) != 0.0:
        return "attention dropout > 0"
    return None


def right_padded(attention_mask: torch.Tensor) -> bool:
    """Whether every row's mask is ones from column 0 up to its length, then zeros."""
    lengths = attention_mask.sum(dim=1, keepdim=True)
    cols = torch.arange(attention_mask.shape[1], device=attention_mask.device)[None]
    return bool(torch.equal(attention_mask != 0, cols < lengths))


def rope_tables(rot: Any, pos: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """``(cos, sin)`` of shape ``[N, 1, head_dim]`` (every head) for tokens at positions ``pos [N]``, from the
    model's rotary embedding ``rot`` (its ``inv_freq`` and ``attention_scaling``), as transformers computes them."""
    freqs = pos[:, None].float() * rot.inv_freq.float().to(pos.device)
    emb = torch.cat((freqs, freqs), dim=-1)
    scale = float(getattr(rot, "attention_scaling", 1.0))
    return (emb.cos() * scale).to(dtype)[:, None], (emb.sin() * scale).to(dtype)[:, None]


def layer_qkv(layer: Any, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, hq: int, hkv: int,
              d: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(qkv [N, (hq + 2 hkv) * d], W_gate_up)``: a layer's input norm and fused q/k/v projection of the packed
    hidden states ``x [N, hidden]``, RoPE applied to q and k; the layer's fused gate/up matrix for
    :func:`layer_rest`."""
    w_qkv, b_qkv, w_gu = fused_projections(layer)
    nq, nk = hq * d, hkv * d
    qkv = F.linear(qwen2_rms_norm(layer.input_layernorm, x), w_qkv, b_qkv)
    qk = qkv[:, : nq + nk].reshape(-1, hq + hkv, d)
    qk = qk * cos + rotate_half(qk) * sin
    return torch.cat((qk.reshape(-1, nq + nk), qkv[:, nq + nk:]), dim=1), w_gu


def layer_rest(layer: Any, x: torch.Tensor, a: torch.Tensor, w_gu: torch.Tensor) -> torch.Tensor:
    """The layer after attention: ``x + o_proj(a)``, then the post-attention norm and the SwiGLU MLP on the fused
    gate/up matrix ``w_gu``, with its residual; ``[N, hidden]``."""
    att = layer.self_attn
    x = x + F.linear(a, att.o_proj.weight, att.o_proj.bias)
    gu = F.linear(qwen2_rms_norm(layer.post_attention_layernorm, x), w_gu)
    g, u = gu.chunk(2, dim=-1)  # one split (its backward: one cat) rather than two slices (two zero-filled grads)
    return x + F.linear(F.silu(g) * u, layer.mlp.down_proj.weight)


def additive_mask(allowed: torch.Tensor, rep: int, matmul: bool, dtype: torch.dtype) -> torch.Tensor:
    """The additive mask :func:`attend` takes, built once per pass from ``allowed [X or 1, Lq, Lk]`` (bool):
    ``[X or 1, 1, rep * Lq, Lk]`` float32 for the matmul attention (the rep query heads of a kv head stacked),
    ``[X or 1, 1, Lq, Lk]`` in the queries' dtype for SDPA."""
    mask = torch.zeros(allowed.shape, dtype=torch.float32, device=allowed.device)
    mask = mask.masked_fill_(~allowed, float("-inf"))[:, None]
    return mask.repeat(1, 1, rep, 1) if matmul else mask.to(dtype)


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, rep: int, scaling: float,
            matmul: bool) -> torch.Tensor:
    """Attention of ``q [X, hq, Lq, d]`` over ``k, v [X, hkv, Lk, d]`` (query head j reads kv head j // rep) with
    the additive ``mask`` of :func:`additive_mask`; ``[X, hq, Lq, d]``. ``matmul``: two matmuls and a float32
    softmax with the query heads of a kv head stacked, else ``scaled_dot_product_attention``."""
    X, hq, Lq, d = q.shape
    hkv = k.shape[1]
    if not matmul:
        return F.scaled_dot_product_attention(q, k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1),
                                              attn_mask=mask, scale=scaling)
    scores = torch.matmul(q.reshape(X, hkv, rep * Lq, d), k.transpose(-1, -2)).mul_(scaling) + mask
    a = torch.matmul(torch.softmax(scores, dim=-1, dtype=torch.float32).to(v.dtype), v)
    return a.reshape(X, hq, Lq, d)


def packed_hidden(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, *,
                  attention: str = "auto") -> torch.Tensor:
    """Final-norm hidden states ``[rows, columns, hidden]`` of the decoder of ``model`` (a Qwen2
    ``*ForCausalLM``) on right-padded rows; zeros at padded positions (module doc).

    ``attention``: ``matmul`` (two matmuls and a float32 softmax; on the CPU test bed faster than the flash
    kernel for rows of ~70 tokens, but autograd keeps every layer's float32 ``[rows, heads, L, L]`` scores),
    ``sdpa`` (``scaled_dot_product_attention``, causal), or ``auto``: matmul on the CPU while those scores take at
    most :data:`MATMUL_ATTENTION_BYTES`, else sdpa."""
    why = supports(model)
    if why is not None:
        raise ValueError(f"model: the packed forward does not support this model ({why})")
    if input_ids.shape != attention_mask.shape or input_ids.dim() != 2:
        raise ValueError(f"input_ids {tuple(input_ids.shape)} and attention_mask {tuple(attention_mask.shape)}: "
                         "expected the same [rows, columns] shape")
    if not right_padded(attention_mask):
        raise ValueError("attention_mask: the packed forward needs right-padded rows (ones from column 0, then zeros)")
    cfg = model.config
    dec = model.get_decoder()
    B, L = input_ids.shape
    hq, hkv = int(cfg.num_attention_heads), int(cfg.num_key_value_heads)
    d = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // hq)
    rep, nq = hq // hkv, hq * d
    idx = (attention_mask.reshape(-1) != 0).nonzero().squeeze(1)  # flat positions of the real tokens
    pos = idx % L  # right padding: a token's position is its column (as the HF forward without position ids)
    x = dec.embed_tokens(input_ids.reshape(-1).index_select(0, idx))  # [N, hidden] (its padding_idx: no gradient)
    cos, sin = rope_tables(dec.rotary_emb, pos, x.dtype)
    width = (hq + 2 * hkv) * d
    if attention not in ("auto", "matmul", "sdpa"):
        raise ValueError(f"attention: expected 'auto', 'matmul' or 'sdpa', got {attention!r}")
    if attention == "auto":  # matmul attention while its scores are small (short rows on the CPU test bed)
        # float32 scores [B, heads, L, L], kept by autograd for every layer
        small = B * hq * L * L * 4 * len(dec.layers) <= MATMUL_ATTENTION_BYTES
        attention = "matmul" if x.device.type == "cpu" and small else "sdpa"
    causal = None
    if attention == "matmul":  # additive causal mask, the same for the rep query heads of a kv head
        causal = additive_mask(torch.ones((L, L), dtype=torch.bool, device=x.device).tril_()[None], rep, True, x.dtype)
    for layer in dec.layers:
        att = layer.self_attn
        packed, w_gu = layer_qkv(layer, x, cos, sin, hq, hkv, d)
        full = packed.new_zeros((B * L, width)).index_copy(0, idx, packed).view(B, L, hq + 2 * hkv, d).transpose(1, 2)
        k, v = full[:, hq: hq + hkv], full[:, hq + hkv:]
        if causal is not None:  # query heads grouped per kv head (head j reads kv head j // rep, as repeat_kv)
            a = attend(full[:, :hq], k, v, causal, rep, att.scaling, True)  # [B, heads, L, d]
        else:
            a = F.scaled_dot_product_attention(full[:, :hq], k.repeat_interleave(rep, dim=1),
                                               v.repeat_interleave(rep, dim=1), is_causal=True, scale=att.scaling)
        a = a.reshape(B, hq, L, d).transpose(1, 2).reshape(B * L, nq).index_select(0, idx)
        x = layer_rest(layer, x, a, w_gu)
    x = qwen2_rms_norm(dec.norm, x)
    return x.new_zeros((B * L, x.shape[-1])).index_copy(0, idx, x).view(B, L, -1)
