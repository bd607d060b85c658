"""A decode step for Qwen2-family models over a preallocated ("static") KV cache (HF backend, opt-in).

Why: on the CPU test bed a decode step of the HF model is mostly overhead — module dispatch,
mask building, and ``DynamicCache.update``'s ``torch.cat``, which copies the whole cache of every
layer on every generated token (O(T^2) copying over a response). :class:`StaticQwen2Decoder` keeps
the cache in one preallocated tensor per layer (``k[L][rows, kv_heads, width, head_dim]``), writes
each new key/value in place, and runs the layer arithmetic with the model's own weights as plain
tensor calls, in the same order as ``transformers``' Qwen2 code:

    x = embed(tok); for each layer: h = rms(x); q, k, v = h W^T + b; rotate q, k at the row's
    position; write k, v at column c; a = sdpa(q, K[:, :, :c+1], V[:, :, :c+1], mask); x += a W_o^T;
    h = rms(x); x += down(silu(gate(h)) * up(h)); finally rms(x)

(RMSNorm, rotary tables ``cos/sin(pos * inv_freq)``, grouped heads packed as ``[rows, kv, rep, d]``
for one query token, exactly as ``transformers.integrations.sdpa_attention`` does.) The prefill
still runs through the HF model; its ``DynamicCache`` is copied in once.

Exactness: the same float32 operations on the same values; the attention reads a strided view
of the preallocated cache and always gets a boolean mask (HF may pass none when no row is
padded), so kernels may differ in the last bits: logits agree with the HF step to ~1e-6
relative, and the tests check that sampled tokens agree on fixed seeds
(``tests/llm_harness/backends/test_static_decode.py``).

Supported: ``model_type`` ``qwen2`` (the test-bed models) with default RoPE, no sliding window,
no logit soft-capping, sdpa or eager attention; :func:`supports` says why not otherwise and the
backend falls back to the HF step.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

__all__ = ["StaticQwen2Decoder", "supports"]


def supports(model: Any) -> str | None:
    """None if :class:`StaticQwen2Decoder` can run ``model``, else the reason it cannot."""
    cfg = getattr(model, "config", None)
    if cfg is None or getattr(cfg, "model_type", None) != "qwen2":
        return f"model_type {getattr(cfg, 'model_type', None)!r} is not qwen2"
    rope = getattr(cfg, "rope_parameters", None) or {}
    if rope.get("rope_type", "default") != "default":
        return f"rope_type {rope.get('rope_type')!r} is not 'default'"
    if getattr(cfg, "use_sliding_window", False) and getattr(cfg, "sliding_window", None):
        return "sliding-window attention"
    if getattr(cfg, "final_logit_softcapping", None):
        return "logit soft-capping"
    if getattr(cfg, "hidden_act", "silu") != "silu":
        return f"hidden_act {cfg.hidden_act!r} is not silu"
    impl = getattr(cfg, "_attn_implementation", "sdpa")
    if impl not in ("sdpa", "eager", None):
        return f"attention implementation {impl!r}"
    return None


class StaticQwen2Decoder:
    """One-token decode steps of a Qwen2 ``*ForCausalLM`` over a preallocated KV cache (module doc).

    ``from_cache(model, cache, extra)`` takes a prefilled ``DynamicCache`` (``rows`` x ``width``
    columns) and room for ``extra`` more columns; :meth:`step` decodes one token per live row;
    :meth:`select` keeps a subset of rows (finished rows dropped).
    """

    def __init__(self, model: Any, keys: list[torch.Tensor], values: list[torch.Tensor], used: int):
        why = supports(model)
        if why is not None:
            raise ValueError(f"model: static decode does not support this model ({why})")
        cfg = model.config
        dec = model.get_decoder()
        self.layers = list(dec.layers)
        self.embed = dec.embed_tokens.weight
        self.final_norm = dec.norm
        self.n_heads = int(cfg.num_attention_heads)
        self.n_kv = int(cfg.num_key_value_heads)
        self.head_dim = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads)
        self.scaling = self.head_dim ** -0.5
        rot = dec.rotary_emb
        self.attention_scaling = float(getattr(rot, "attention_scaling", 1.0))
        self.inv_freq = rot.inv_freq.float()
        self.keys, self.values, self.used = keys, values, int(used)

    @classmethod
    def from_cache(cls, model: Any, cache: Any, extra: int) -> "StaticQwen2Decoder":
        """Copy a prefilled ``DynamicCache`` into preallocated tensors with ``extra`` free columns."""
        layers = getattr(cache, "layers", None)
        if layers is None:
            raise ValueError("cache: expected a transformers DynamicCache with .layers")
        keys, values, used = [], [], None
        for lay in layers:
            k, v = lay.keys, lay.values
            b, h, w, d = k.shape
            if used is not None and w != used:
                raise ValueError("cache: layers hold different lengths")
            used = w
            kb = k.new_empty((b, h, w + extra, d))
            vb = v.new_empty((b, h, w + extra, d))
            kb[:, :, :w] = k
            vb[:, :, :w] = v
            keys.append(kb)
            values.append(vb)
        return cls(model, keys, values, used or 0)

    @property
    def rows(self) -> int:
        return int(self.keys[0].shape[0]) if self.keys else 0

    def select(self, keep: torch.Tensor) -> None:
        """Keep rows ``keep`` (a 1-D index tensor) of the cache."""
        self.keys = [k.index_select(0, keep) for k in self.keys]
        self.values = [v.index_select(0, keep) for v in self.values]

    @staticmethod
    def _rms(norm: Any, x: torch.Tensor) -> torch.Tensor:
        # transformers' Qwen2RMSNorm, op for op
        dtype = x.dtype
        h = x.to(torch.float32)
        var = h.pow(2).mean(-1, keepdim=True)
        h = h * torch.rsqrt(var + norm.variance_epsilon)
        return norm.weight * h.to(dtype)

    @staticmethod
    def _rotate_half(x: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        return torch.cat((-x[..., half:], x[..., :half]), dim=-1)

    def step(self, tok: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Final hidden state ``[rows, hidden]`` after feeding ``tok[rows]`` at positions ``pos[rows]``.

        ``mask[rows, used + 1]`` (0/1): which cache columns (the new token's last) each row attends to.
        """
        c = self.used
        if c >= self.keys[0].shape[2]:
            raise ValueError(f"static cache: full ({c} columns)")
        if mask.shape != (tok.shape[0], c + 1):
            raise ValueError(f"mask: expected shape {(tok.shape[0], c + 1)}, got {tuple(mask.shape)}")
        b = tok.shape[0]
        x = F.embedding(tok, self.embed)[:, None, :]  # [b, 1, hidden]
        freqs = pos[:, None, None].float() * self.inv_freq.to(x.device)  # [b, 1, d/2]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos = (emb.cos() * self.attention_scaling).to(x.dtype)[:, None]  # [b, 1, 1, d]
        sin = (emb.sin() * self.attention_scaling).to(x.dtype)[:, None]
        attn_mask = mask.bool()[:, None, None, :]  # [b, 1, 1, c + 1]
        rep = self.n_heads // self.n_kv
        for li, layer in enumerate(self.layers):
            att = layer.self_attn
            h = self._rms(layer.input_layernorm, x)
            q = F.linear(h, att.q_proj.weight, att.q_proj.bias).view(b, 1, -1, self.head_dim).transpose(1, 2)
            k = F.linear(h, att.k_proj.weight, att.k_proj.bias).view(b, 1, -1, self.head_dim).transpose(1, 2)
            v = F.linear(h, att.v_proj.weight, att.v_proj.bias).view(b, 1, -1, self.head_dim).transpose(1, 2)
            q = q * cos + self._rotate_half(q) * sin
            k = k * cos + self._rotate_half(k) * sin
            self.keys[li][:, :, c : c + 1] = k
            self.values[li][:, :, c : c + 1] = v
            kk = self.keys[li][:, :, : c + 1]
            vv = self.values[li][:, :, : c + 1]
            if rep > 1:  # one query token: heads packed per kv head (transformers' pack_gqa)
                q = q.reshape(b, self.n_kv, rep, self.head_dim)
            a = F.scaled_dot_product_attention(q, kk, vv, attn_mask=attn_mask, dropout_p=0.0, scale=self.scaling)
            a = a.reshape(b, -1, 1, self.head_dim).transpose(1, 2).contiguous().reshape(b, 1, -1)
            x = x + F.linear(a, att.o_proj.weight, att.o_proj.bias)
            h = self._rms(layer.post_attention_layernorm, x)
            mlp = layer.mlp
            x = x + F.linear(F.silu(F.linear(h, mlp.gate_proj.weight)) * F.linear(h, mlp.up_proj.weight),
                             mlp.down_proj.weight)
        self.used = c + 1
        return self._rms(self.final_norm, x)[:, 0]
