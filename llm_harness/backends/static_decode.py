"""A decode step for Qwen2-family models over a preallocated ("static") KV cache (HF backend, opt-in).

Why: on the CPU test bed a decode step of the HF model is mostly overhead — module dispatch,
mask building, and ``DynamicCache.update``'s ``torch.cat``, which copies the whole cache of every
layer on every generated token (O(T^2) copying over a response). :class:`StaticQwen2Decoder` keeps
the cache in one preallocated tensor per layer (``k[L][rows, kv_heads, width, head_dim]``), writes
each new key/value in place, and runs the layer arithmetic with the model's own weights as plain
tensor calls, in the order of ``transformers``' Qwen2 code:

    x = embed(tok); for each layer: h = rms(x); q, k, v = h W_qkv^T + b; rotate q, k at the row's
    position; write k, v at column c; a = softmax(q K[:, :c+1]^T / sqrt(d) + mask) V[:, :c+1];
    x += a W_o^T; h = rms(x); g, u = h W_gu^T; x += down(silu(g) * u); finally rms(x)

The prefill still runs through the HF model; its ``DynamicCache`` is copied in once.

Fewer, larger kernels than the HF step (measured by ``benchmarks/trainer_vs_trl.py``'s ``ours_static``
contender): q/k/v and gate/up each as one matmul over concatenated weights (rebuilt for every
decoder, so they follow the trained weights), RMSNorm as ``F.rms_norm`` (bit-identical to the
op-by-op form in float32), RoPE once over the q and k heads together, and the attention of the one
query token as two batched matmuls over ``[rows x kv heads]`` with an additive mask, the grouped query
heads of a kv head as the rows of its matmul (query head j reads kv head j // rep, as ``repeat_kv``).
On the CPU test bed that attention is faster than ``scaled_dot_product_attention``'s flash kernel,
which is built for long queries.

Exactness: the same float32 arithmetic up to summation order (fused matmuls, matmul attention
instead of the flash kernel), so logits agree with the HF step to ~1e-6 relative; the tests check
that sampled tokens agree on fixed seeds and that a training run's metrics agree to 1e-5
(``tests/llm_harness/backends/test_static_decode.py``).

Supported: ``model_type`` ``qwen2`` (the test-bed models) and ``llama`` (SmolLM2: the same layer without
q/k/v biases; no MLP biases) with default RoPE, no sliding window, no logit soft-capping, sdpa or eager attention; :func:`supports` says why not otherwise and the
backend falls back to the HF step.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from llm_harness.backends.packed_linear import PackCache, packed_linear

__all__ = ["SUPPORTED_TYPES", "StaticQwen2Decoder", "fused_gate_up", "fused_projections", "fused_qkv", "qwen2_rms_norm",
           "rotate_half", "supports"]


#: decoder families whose layer is the Qwen2 layer up to optional biases: Llama (SmolLM2, ...) is Qwen2 without the
#: q/k/v biases (``attention_bias`` adds q/k/v/o biases, handled; ``mlp_bias`` is refused)
SUPPORTED_TYPES = ("qwen2", "llama")


def supports(model: Any, *, attention: bool = True) -> str | None:
    """None if :class:`StaticQwen2Decoder` can run ``model``, else the reason it cannot (``attention=False``: do not
    check the model's attention implementation, for code that computes attention itself from the weights)."""
    cfg = getattr(model, "config", None)
    if cfg is None or getattr(cfg, "model_type", None) not in SUPPORTED_TYPES:
        return f"model_type {getattr(cfg, 'model_type', None)!r} is not one of {SUPPORTED_TYPES}"
    if getattr(cfg, "mlp_bias", False):
        return "MLP biases"
    if int(getattr(cfg, "pretraining_tp", 1) or 1) != 1:
        return f"pretraining_tp {cfg.pretraining_tp}"
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
    if attention and impl not in ("sdpa", "eager", None):
        return f"attention implementation {impl!r}"
    return None


def fused_qkv(layer: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(W_qkv, b_qkv)``: a Qwen2 layer's q/k/v projections as one matrix (``torch.cat`` of the parameters: under
    autograd the gradients flow back to them); the bias ``None`` when no projection has one."""
    projs = (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj)
    w_qkv = torch.cat([p.weight for p in projs], 0)
    b_qkv = None
    if any(p.bias is not None for p in projs):
        b_qkv = torch.cat([p.bias if p.bias is not None else p.weight.new_zeros(p.weight.shape[0]) for p in projs])
    return w_qkv, b_qkv


def fused_gate_up(layer: Any) -> torch.Tensor:
    """``W_gate_up``: a Qwen2 layer's gate and up projections as one matrix (``torch.cat``, as :func:`fused_qkv`)."""
    return torch.cat([layer.mlp.gate_proj.weight, layer.mlp.up_proj.weight], 0)


def fused_projections(layer: Any) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """``(W_qkv, b_qkv, W_gate_up)``: :func:`fused_qkv` and :func:`fused_gate_up` of a layer."""
    return (*fused_qkv(layer), fused_gate_up(layer))


def qwen2_rms_norm(norm: Any, x: torch.Tensor) -> torch.Tensor:
    """transformers' ``Qwen2RMSNorm``: ``w * (x * rsqrt(mean(x^2) + eps))`` in float32, rounded to ``x``'s dtype
    before the weight multiplies. In float32 one fused ``F.rms_norm`` (bit-identical); otherwise as HF rounds."""
    eps = norm.variance_epsilon
    if x.dtype == torch.float32 and norm.weight.dtype == torch.float32:
        return F.rms_norm(x, (x.shape[-1],), norm.weight, eps)
    return norm.weight * F.rms_norm(x.float(), (x.shape[-1],), None, eps).to(x.dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """RoPE's rotation of the last dimension's halves: ``(-x2, x1)``."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class StaticQwen2Decoder:
    """One-token decode steps of a Qwen2 ``*ForCausalLM`` over a preallocated KV cache (module doc).

    ``from_cache(model, cache, extra)`` takes a prefilled ``DynamicCache`` (``rows`` x ``width``
    columns) and room for ``extra`` more columns; :meth:`step` decodes one token per live row;
    :meth:`select` keeps a subset of rows (finished rows dropped).
    """

    def __init__(self, model: Any, keys: list[torch.Tensor], values: list[torch.Tensor], used: int,
                 packs: PackCache | None = None):
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
        dev = self.embed.device.type
        autocast_dt = torch.get_autocast_dtype(dev) if torch.is_autocast_enabled(dev) else None
        self.head = None  # packed: the output projection on packed weights (the backend applies soft-capping)
        if packs is not None:  # every matmul on weights packed once (llm_harness.backends.packed_linear)
            dt = autocast_dt or self.embed.dtype
            self._lin = [self._packed_layer(packs, li, layer, dt) for li, layer in enumerate(self.layers)]
            head = model.get_output_embeddings()
            self.head = packs.get(("head",), (head.weight, getattr(head, "bias", None)),
                                  lambda: packed_linear(head.weight, getattr(head, "bias", None), dt))
            return
        fused = [fused_projections(layer) for layer in self.layers]  # copies: rebuilt per decoder (weights change)
        if autocast_dt is not None:  # cast the fused copies once: autocast re-casts a non-leaf on every call
            fused = [tuple(None if t is None else t.to(autocast_dt) for t in f) for f in fused]
        self._lin = [self._plain_layer(layer, *f) for layer, f in zip(self.layers, fused)]

    @staticmethod
    def _plain_layer(layer: Any, w_qkv: torch.Tensor, b_qkv: torch.Tensor | None, w_gu: torch.Tensor) -> tuple:
        """``(qkv, o, gate_up, down)`` as ``F.linear`` calls (under autocast: autocast's casts)."""
        o, down = layer.self_attn.o_proj, layer.mlp.down_proj
        return (lambda h: F.linear(h, w_qkv, b_qkv), lambda a: F.linear(a, o.weight, o.bias),
                lambda h: F.linear(h, w_gu), lambda m: F.linear(m, down.weight))

    @staticmethod
    def _packed_layer(packs: PackCache, li: int, layer: Any, dt: torch.dtype) -> tuple:
        """``(qkv, o, gate_up, down)`` on packed weights, reused from ``packs`` while the parameters are unchanged."""
        att, mlp = layer.self_attn, layer.mlp
        qkv_src = tuple(t for p in (att.q_proj, att.k_proj, att.v_proj) for t in (p.weight, p.bias))

        return (packs.get(("qkv", li), qkv_src, lambda: packed_linear(*fused_qkv(layer), dt)),
                packs.get(("o", li), (att.o_proj.weight, att.o_proj.bias),
                          lambda: packed_linear(att.o_proj.weight, att.o_proj.bias, dt)),
                packs.get(("gu", li), (mlp.gate_proj.weight, mlp.up_proj.weight),
                          lambda: packed_linear(fused_gate_up(layer), None, dt)),
                packs.get(("down", li), (mlp.down_proj.weight,), lambda: packed_linear(mlp.down_proj.weight, None, dt)))

    @classmethod
    def from_cache(cls, model: Any, cache: Any, extra: int, packs: PackCache | None = None) -> "StaticQwen2Decoder":
        """Copy a prefilled ``DynamicCache`` into preallocated tensors with ``extra`` free columns; with ``packs``,
        the matmuls run on packed weights kept there (:mod:`llm_harness.backends.packed_linear`)."""
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
        return cls(model, keys, values, used or 0, packs)

    @property
    def rows(self) -> int:
        return int(self.keys[0].shape[0]) if self.keys else 0

    def select(self, keep: torch.Tensor) -> None:
        """Keep rows ``keep`` (a 1-D index tensor) of the cache."""
        self.keys = [k.index_select(0, keep) for k in self.keys]
        self.values = [v.index_select(0, keep) for v in self.values]

    def step(self, tok: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Final hidden state ``[rows, hidden]`` after feeding ``tok[rows]`` at positions ``pos[rows]``.

        ``mask[rows, used + 1]`` (0/1): which cache columns (the new token's last) each row attends to;
        the last column must be 1 (a row always attends to its own token).
        """
        c = self.used
        if c >= self.keys[0].shape[2]:
            raise ValueError(f"static cache: full ({c} columns)")
        if mask.shape != (tok.shape[0], c + 1):
            raise ValueError(f"mask: expected shape {(tok.shape[0], c + 1)}, got {tuple(mask.shape)}")
        b, d, hq, hkv = tok.shape[0], self.head_dim, self.n_heads, self.n_kv
        rep, nq, nk = hq // hkv, hq * self.head_dim, hkv * self.head_dim
        x = F.embedding(tok, self.embed)  # [b, hidden]
        freqs = pos[:, None].float() * self.inv_freq.to(x.device)  # [b, d/2]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos = (emb.cos() * self.attention_scaling).to(x.dtype)[:, None]  # [b, 1, d]: every head
        sin = (emb.sin() * self.attention_scaling).to(x.dtype)[:, None]
        # additive mask per (row, kv head) for the grouped query heads: [b * kv, rep, c + 1]
        bias = torch.zeros(mask.shape, dtype=x.dtype, device=x.device).masked_fill_(mask == 0, float("-inf"))
        bias = bias[:, None, None, :].expand(b, hkv, rep, c + 1).reshape(b * hkv, rep, c + 1)
        for li, layer in enumerate(self.layers):
            lin_qkv, lin_o, lin_gu, lin_down = self._lin[li]
            h = qwen2_rms_norm(layer.input_layernorm, x)
            qkv = lin_qkv(h)  # [b, (heads + 2 kv) * d]
            qk = qkv[:, : nq + nk].reshape(b, hq + hkv, d)
            qk = qk * cos + rotate_half(qk) * sin  # RoPE on q and k heads alike
            self.keys[li][:, :, c] = qk[:, hq:]
            self.values[li][:, :, c] = qkv[:, nq + nk :].view(b, hkv, d)
            # one query token: query heads grouped per kv head (head j reads kv head j // rep); the
            # cache slices [:, :, :c+1] flatten to [b * kv, c+1, d] without a copy
            kk = self.keys[li][:, :, : c + 1].reshape(b * hkv, c + 1, d)
            vv = self.values[li][:, :, : c + 1].reshape(b * hkv, c + 1, d)
            q = qk[:, :hq].reshape(b * hkv, rep, d)
            scores = torch.baddbmm(bias, q, kk.transpose(1, 2), alpha=self.scaling)
            a = torch.bmm(torch.softmax(scores, dim=-1), vv).reshape(b, nq)
            x = x + lin_o(a)
            h = qwen2_rms_norm(layer.post_attention_layernorm, x)
            gu = lin_gu(h)
            inter = gu.shape[-1] // 2
            x = x + lin_down(F.silu(gu[:, :inter]) * gu[:, inter:])
        self.used = c + 1
        return qwen2_rms_norm(self.final_norm, x)
