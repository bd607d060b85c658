"""A tiny random Llama for the model tests (shared by ``tests/llm_harness/models/`` and the model card's test in
``tests/prefixvalue/``), written as a GGUF file with the ``gguf`` library (the converter's test input).

The layout follows llama.cpp's ``convert_hf_to_gguf.py`` for ``LlamaForCausalLM``: tensor names
``token_embd`` / ``blk.N.attn_q`` / ... / ``output``, and the rotary permutation of the query and
key projections (``permute``), which a GGUF reader must undo. Every tensor is stored as F32, so
the imported model must reproduce the source model's logits exactly. The tokenizer is a byte-level
BPE (``tokenizer.ggml.model = gpt2``) over the 256 byte symbols, a few merges and three control
tokens, with a ChatML chat template.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

CHAT_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
MERGES = ("Ġ t", "h e", "Ġt he", "i s", "Ġ 1")


def byte_symbols() -> list[str]:
    """GPT-2's byte -> printable character map, in byte order."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    table = bytes_to_unicode()
    return [table[b] for b in range(256)]


def tiny_llama(seed: int = 0, *, tie: bool = True, rope_theta: float = 50_000.0):
    """A random 2-layer Llama (hidden 64, 2 query heads of 32, 1 KV head) over the tiny vocabulary."""
    import torch
    import transformers

    n_vocab = len(SPECIALS) + 256 + len(MERGES)
    cfg = transformers.LlamaConfig(
        vocab_size=n_vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, head_dim=32, max_position_embeddings=256, rms_norm_eps=1e-5,
        rope_parameters={"rope_type": "default", "rope_theta": rope_theta}, tie_word_embeddings=tie,
        bos_token_id=1, eos_token_id=2, pad_token_id=0,
    )
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(cfg).eval()
    with torch.no_grad():  # norms away from 1 so a dropped or transposed norm shows
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
    return model


def _permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's rotary permutation of a query/key projection (``convert_hf_to_gguf.py``)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_gguf(model, path: Path, *, name: str = "tiny llama") -> Path:
    """Write ``model`` (a ``LlamaForCausalLM`` from :func:`tiny_llama`) to ``path`` as an F32 GGUF."""
    import gguf

    cfg = model.config
    sd = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name(name)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_rope_dimension_count(cfg.head_dim)
    w.add_rope_freq_base(float(cfg.rope_parameters["rope_theta"]))
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_vocab_size(cfg.vocab_size)
    w.add_file_type(0)  # ALL_F32
    merged = ["".join(m.split(" ")) for m in MERGES]
    tokens = list(SPECIALS) + byte_symbols() + merged
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types([3] * len(SPECIALS) + [1] * (len(tokens) - len(SPECIALS)))
    w.add_token_merges(list(MERGES))
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_pad_token_id(0)
    w.add_add_bos_token(False)
    w.add_chat_template(CHAT_TEMPLATE)
    w.add_tensor("token_embd.weight", sd["model.embed_tokens.weight"])
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}."
        w.add_tensor(f"blk.{i}.attn_norm.weight", sd[p + "input_layernorm.weight"])
        w.add_tensor(f"blk.{i}.attn_q.weight", _permute(sd[p + "self_attn.q_proj.weight"], cfg.num_attention_heads))
        w.add_tensor(f"blk.{i}.attn_k.weight", _permute(sd[p + "self_attn.k_proj.weight"], cfg.num_key_value_heads))
        w.add_tensor(f"blk.{i}.attn_v.weight", sd[p + "self_attn.v_proj.weight"])
        w.add_tensor(f"blk.{i}.attn_output.weight", sd[p + "self_attn.o_proj.weight"])
        w.add_tensor(f"blk.{i}.ffn_norm.weight", sd[p + "post_attention_layernorm.weight"])
        w.add_tensor(f"blk.{i}.ffn_gate.weight", sd[p + "mlp.gate_proj.weight"])
        w.add_tensor(f"blk.{i}.ffn_up.weight", sd[p + "mlp.up_proj.weight"])
        w.add_tensor(f"blk.{i}.ffn_down.weight", sd[p + "mlp.down_proj.weight"])
    w.add_tensor("output_norm.weight", sd["model.norm.weight"])
    if not cfg.tie_word_embeddings:
        w.add_tensor("output.weight", sd["lm_head.weight"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.fixture(scope="session")
def make_gguf():
    """``make_gguf(path, seed=0, tie=True) -> (source model, GGUF path)``."""

    def make(path: Path, seed: int = 0, tie: bool = True):
        model = tiny_llama(seed, tie=tie)
        return model, write_gguf(model, Path(path))

    return make


def byte_level_tokenizer():
    """A transformers fast tokenizer over the tiny vocabulary of :func:`write_gguf` (no GGUF needed):
    byte-level BPE, the same merges and control tokens, the ChatML template."""
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    tokens = list(SPECIALS) + byte_symbols() + ["".join(m.split(" ")) for m in MERGES]
    bpe = models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=[tuple(m.split(" ")) for m in MERGES])
    tok = Tokenizer(bpe)
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|im_start|>", eos_token="<|im_end|>",
                                                pad_token="<|endoftext|>", unk_token="<|endoftext|>")
    fast.add_special_tokens({"additional_special_tokens": list(SPECIALS)})
    fast.chat_template = CHAT_TEMPLATE
    return fast


@pytest.fixture(scope="session")
def tiny_chat_folder(tmp_path_factory):
    """A saved tiny random Llama chat model folder (config, safetensors, tokenizer with chat template)."""
    folder = tmp_path_factory.mktemp("tiny_chat") / "model"
    model = tiny_llama(seed=7)
    model.generation_config.eos_token_id = 2
    model.save_pretrained(folder, safe_serialization=True)
    byte_level_tokenizer().save_pretrained(folder)
    return folder
