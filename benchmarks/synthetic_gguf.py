"""A random-weight Qwen2 written as a GGUF file, so a model of a real model's shapes goes through the same import
path as a user's GGUF (``vsr model import --source FILE``) without downloading anything.

The layout follows llama.cpp's ``convert_hf_to_gguf.py`` for ``Qwen2ForCausalLM`` (``Qwen2Model``):

* architecture ``qwen2``; metadata ``qwen2.block_count`` / ``context_length`` / ``embedding_length`` /
  ``feed_forward_length`` / ``attention.head_count`` / ``attention.head_count_kv`` / ``rope.freq_base`` /
  ``attention.layer_norm_rms_epsilon`` (no ``rope.dimension_count``: the head width is ``hidden / heads``, which is
  also what transformers' GGUF loader assumes for ``qwen2``);
* tensors ``token_embd``, ``blk.N.attn_norm`` / ``attn_q`` / ``attn_k`` / ``attn_v`` (each with its ``.bias``) /
  ``attn_output`` / ``ffn_norm`` / ``ffn_gate`` / ``ffn_up`` / ``ffn_down``, ``output_norm``, and ``output`` only when
  the head is not tied to the embedding. Unlike llama, the query and key projections are stored as they are (no
  rotary permutation): llama.cpp's Qwen2 converter does not permute them and transformers' loader has no
  ``qwen2`` tensor processor that would undo one;
* a byte-level BPE tokenizer (``tokenizer.ggml.model = gpt2``, ``pre = qwen2``: Qwen2's split regex) laid out like
  Qwen2's vocabulary: the 256 byte symbols and the merged tokens (normal), then the control tokens
  ``<|endoftext|>`` ``<|im_start|>`` ``<|im_end|>``, then ``[PADn]`` fillers (type unused, as the converter pads a
  vocabulary to the embedding's rows) up to ``vocab`` entries, so the embedding and the logits have the real size;
  BOS = pad = ``<|endoftext|>``, EOS = ``<|im_end|>``, no BOS added; Qwen2-Instruct's ChatML chat template.

Weights are drawn from a seeded generator tensor by tensor (``numpy.random.default_rng([seed, index])``): matrices
and biases ``N(0, 0.02^2)`` (transformers' ``initializer_range``), norms ``1 + N(0, 0.1^2)`` (away from 1, so a
dropped or transposed norm shows). The file is written streaming (tensor infos first, then each tensor as it is
drawn), so writing holds one tensor in memory at a time (the 0.5B model's largest, the embedding, is 0.5 GiB in
F32). ``dtype="f32"`` stores everything in float32 (the imported model then equals :func:`reference_model`
exactly); ``"f16"`` stores the matrices in float16 and norms and biases in float32, as llama.cpp's ``--outtype f16``
(half the file; the reference model is built from the same float16-rounded values, so it is still exact).

``merges``: the default is a handful; :func:`learn_merges` learns realistic ones from sample text (byte-level BPE on
Qwen2's split), so a prompt tokenizes to about as many tokens as under a real vocabulary.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

__all__ = [
    "CHAT_TEMPLATE",
    "QWEN2_0_5B",
    "SPECIALS",
    "Qwen2Shape",
    "learn_merges",
    "qwen2_config",
    "qwen2_tensors",
    "reference_model",
    "tokenizer_tokens",
    "write_qwen2_gguf",
]

#: Qwen2-Instruct's chat template (ChatML with a default system message)
CHAT_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
#: control tokens, in this order after the normal tokens
SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
#: the default merges (byte-level symbols: ``Ġ`` is a space)
DEFAULT_MERGES = ("Ġ t", "h e", "Ġt he", "i s", "Ġ 1")
#: llama.cpp's token types
NORMAL, CONTROL, UNUSED = 1, 3, 5


@dataclass(frozen=True)
class Qwen2Shape:
    """The shapes of a Qwen2 decoder (head width = ``hidden / heads``)."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    context: int = 32768
    rope_theta: float = 1_000_000.0
    rms_eps: float = 1e-6
    tie: bool = True

    def __post_init__(self) -> None:
        for name in ("hidden", "layers", "heads", "kv_heads", "intermediate", "vocab", "context"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ValueError(f"{name}: must be a positive integer, got {getattr(self, name)!r}")
        if self.hidden % self.heads or self.heads % self.kv_heads:
            raise ValueError(f"heads: hidden {self.hidden} must split into {self.heads} heads, and those into "
                             f"{self.kv_heads} KV groups")

    @property
    def head_dim(self) -> int:
        """Width of one attention head."""
        return self.hidden // self.heads

    @property
    def n_parameters(self) -> int:
        """Parameters of the model (the tied head counted once)."""
        return sum(int(np.prod(shape)) for _, _, shape, _ in _tensor_specs(self))


#: Qwen2-0.5B's shapes (``Qwen/Qwen2-0.5B-Instruct``'s config): 494M parameters, tied embeddings, q/k/v biases
QWEN2_0_5B = dict(hidden=896, layers=24, heads=14, kv_heads=2, intermediate=4864, vocab=151936)


def _tensor_specs(shape: Qwen2Shape) -> list[tuple[str, str, tuple[int, ...], str]]:
    """``(GGUF name, transformers name, shape, kind)`` of every tensor, in file order; kind is ``matrix``,
    ``bias`` or ``norm``."""
    h, kv = shape.hidden, shape.kv_heads * shape.head_dim
    specs = [("token_embd.weight", "model.embed_tokens.weight", (shape.vocab, h), "matrix")]
    for i in range(shape.layers):
        g, t = f"blk.{i}.", f"model.layers.{i}."
        specs += [
            (g + "attn_norm.weight", t + "input_layernorm.weight", (h,), "norm"),
            (g + "attn_q.weight", t + "self_attn.q_proj.weight", (h, h), "matrix"),
            (g + "attn_q.bias", t + "self_attn.q_proj.bias", (h,), "bias"),
            (g + "attn_k.weight", t + "self_attn.k_proj.weight", (kv, h), "matrix"),
            (g + "attn_k.bias", t + "self_attn.k_proj.bias", (kv,), "bias"),
            (g + "attn_v.weight", t + "self_attn.v_proj.weight", (kv, h), "matrix"),
            (g + "attn_v.bias", t + "self_attn.v_proj.bias", (kv,), "bias"),
            (g + "attn_output.weight", t + "self_attn.o_proj.weight", (h, h), "matrix"),
            (g + "ffn_norm.weight", t + "post_attention_layernorm.weight", (h,), "norm"),
            (g + "ffn_gate.weight", t + "mlp.gate_proj.weight", (shape.intermediate, h), "matrix"),
            (g + "ffn_up.weight", t + "mlp.up_proj.weight", (shape.intermediate, h), "matrix"),
            (g + "ffn_down.weight", t + "mlp.down_proj.weight", (h, shape.intermediate), "matrix"),
        ]
    specs.append(("output_norm.weight", "model.norm.weight", (h,), "norm"))
    if not shape.tie:
        specs.append(("output.weight", "lm_head.weight", (shape.vocab, h), "matrix"))
    return specs


def _draw(index: int, shape: tuple[int, ...], kind: str, seed: int, dtype: str) -> np.ndarray:
    """Tensor ``index``'s values as stored in the file (module doc: distributions, float16 matrices for ``f16``)."""
    rng = np.random.default_rng([seed, index])
    values = rng.standard_normal(shape, dtype=np.float32)
    if kind == "norm":
        values = values * np.float32(0.1) + np.float32(1.0)
    else:
        values *= np.float32(0.02)
    return values.astype(np.float16) if dtype == "f16" and kind == "matrix" else values


def qwen2_tensors(shape: Qwen2Shape, seed: int, dtype: str = "f32") -> Iterator[tuple[str, str, np.ndarray]]:
    """``(GGUF name, transformers name, values as stored)`` of every tensor, drawn one at a time."""
    for index, (gguf_name, hf_name, tshape, kind) in enumerate(_tensor_specs(shape)):
        yield gguf_name, hf_name, _draw(index, tshape, kind, seed, dtype)


def learn_merges(texts: Sequence[str], count: int) -> list[str]:
    """Up to ``count`` byte-level BPE merges (``"a b"``, best first) learned from ``texts`` on Qwen2's split."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers, trainers
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated"),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    trainer = trainers.BpeTrainer(vocab_size=256 + count, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(list(texts), trainer)
    merges = json.loads(tok.to_str())["model"]["merges"]
    return [m if isinstance(m, str) else " ".join(m) for m in merges][:count]


def _byte_symbols() -> list[str]:
    """GPT-2's byte -> printable character map, in byte order."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    table = bytes_to_unicode()
    return [table[b] for b in range(256)]


def tokenizer_tokens(vocab: int, merges: Sequence[str]) -> tuple[list[str], list[int]]:
    """``(tokens, llama.cpp token types)`` of the vocabulary (module doc), exactly ``vocab`` entries."""
    normal = _byte_symbols()
    seen = set(normal)
    for m in merges:
        merged = "".join(m.split(" "))
        if merged not in seen:
            seen.add(merged)
            normal.append(merged)
    tokens = normal + list(SPECIALS)
    if len(tokens) > vocab:
        raise ValueError(f"vocab: {vocab} is fewer than the {len(tokens)} byte symbols, merged and control tokens")
    types = [NORMAL] * len(normal) + [CONTROL] * len(SPECIALS)
    pad = vocab - len(tokens)
    return tokens + [f"[PAD{len(tokens) + i}]" for i in range(pad)], types + [UNUSED] * pad


def _add_metadata(w, shape: Qwen2Shape, *, name: str, dtype: str, merges: Sequence[str]) -> None:
    """The model and tokenizer metadata of ``convert_hf_to_gguf.py``'s Qwen2 converter."""
    w.add_name(name)
    w.add_block_count(shape.layers)
    w.add_context_length(shape.context)
    w.add_embedding_length(shape.hidden)
    w.add_feed_forward_length(shape.intermediate)
    w.add_head_count(shape.heads)
    w.add_head_count_kv(shape.kv_heads)
    w.add_rope_freq_base(float(shape.rope_theta))
    w.add_layer_norm_rms_eps(float(shape.rms_eps))
    w.add_file_type(1 if dtype == "f16" else 0)  # MOSTLY_F16 / ALL_F32
    tokens, types = tokenizer_tokens(shape.vocab, merges)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(list(merges))
    first_special = tokens.index(SPECIALS[0])
    w.add_bos_token_id(first_special)  # <|endoftext|>
    w.add_eos_token_id(first_special + 2)  # <|im_end|>
    w.add_pad_token_id(first_special)
    w.add_add_bos_token(False)
    w.add_chat_template(CHAT_TEMPLATE)


def write_qwen2_gguf(path: str | Path, *, hidden: int, layers: int, heads: int, kv_heads: int, intermediate: int,
                     vocab: int, seed: int = 0, context: int = 32768, rope_theta: float = 1_000_000.0,
                     rms_eps: float = 1e-6, tie: bool = True, dtype: str = "f32",
                     merges: Sequence[str] = DEFAULT_MERGES, name: str = "synthetic qwen2") -> Path:
    """Write a random Qwen2 of these shapes as a GGUF file at ``path`` (module doc); return the path.

    The file is written under a temporary name and renamed into place, so a killed writer leaves no
    half-written ``path``.
    """
    import gguf

    if dtype not in ("f32", "f16"):
        raise ValueError(f"dtype: 'f32' or 'f16', got {dtype!r}")
    shape = Qwen2Shape(hidden=hidden, layers=layers, heads=heads, kv_heads=kv_heads, intermediate=intermediate,
                       vocab=vocab, context=context, rope_theta=rope_theta, rms_eps=rms_eps, tie=tie)
    path = Path(path)
    tmp = path.with_name(f".{path.name}.partial")
    w = gguf.GGUFWriter(str(tmp), "qwen2")
    _add_metadata(w, shape, name=name, dtype=dtype, merges=merges)
    for index, (gguf_name, _, tshape, kind) in enumerate(_tensor_specs(shape)):
        stored = np.float16 if dtype == "f16" and kind == "matrix" else np.float32
        w.add_tensor_info(gguf_name, tshape, np.dtype(stored), int(np.prod(tshape)) * np.dtype(stored).itemsize)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for _, _, values in qwen2_tensors(shape, seed, dtype):
        w.write_tensor_data(values)
    w.close()
    tmp.replace(path)
    return path


def qwen2_config(shape: Qwen2Shape, *, vocab_tokens: Sequence[str] | None = None):
    """The ``transformers.Qwen2Config`` of ``shape`` with the token ids of :func:`tokenizer_tokens`."""
    import transformers

    tokens = list(vocab_tokens) if vocab_tokens is not None else tokenizer_tokens(shape.vocab, DEFAULT_MERGES)[0]
    first_special = tokens.index(SPECIALS[0])
    return transformers.Qwen2Config(
        vocab_size=shape.vocab, hidden_size=shape.hidden, intermediate_size=shape.intermediate,
        num_hidden_layers=shape.layers, num_attention_heads=shape.heads, num_key_value_heads=shape.kv_heads,
        max_position_embeddings=shape.context, rms_norm_eps=shape.rms_eps, tie_word_embeddings=shape.tie,
        rope_parameters={"rope_type": "default", "rope_theta": float(shape.rope_theta)},
        bos_token_id=first_special, eos_token_id=first_special + 2, pad_token_id=first_special,
    )


def reference_model(shape: Qwen2Shape, seed: int, dtype: str = "f32", merges: Sequence[str] = DEFAULT_MERGES):
    """The transformers ``Qwen2ForCausalLM`` (float32, eval mode) holding exactly the values
    :func:`write_qwen2_gguf` writes for ``shape``, ``seed`` and ``dtype``."""
    import torch
    import transformers

    config = qwen2_config(shape, vocab_tokens=tokenizer_tokens(shape.vocab, merges)[0])
    with torch.random.fork_rng(devices=[]):  # the random init is overwritten; leave the global stream alone
        model = transformers.Qwen2ForCausalLM(config)
    state = {hf: torch.from_numpy(v.astype(np.float32)) for _, hf, v in qwen2_tensors(shape, seed, dtype)}
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected or [k for k in missing if not (shape.tie and k == "lm_head.weight")]:
        raise ValueError(f"reference_model: state does not fit Qwen2ForCausalLM (missing {missing}, unexpected {unexpected})")
    return model.eval()
