"""The synthetic Qwen2 GGUF: written by ``benchmarks.synthetic_gguf`` and imported with the project's importer, it
holds exactly the weights of the reference model, with the padded byte-level vocabulary and the chat template."""

from __future__ import annotations

import pytest

from benchmarks.synthetic_gguf import (QWEN2_0_5B, SPECIALS, Qwen2Shape, learn_merges, reference_model, tokenizer_tokens,
                                       write_qwen2_gguf)

pytest.importorskip("gguf", reason="the GGUF writer and reader (make real-model installs the `realmodel` extra)")
pytest.importorskip("accelerate", reason="transformers' GGUF loader needs accelerate (the `realmodel` extra)")

TINY = dict(hidden=64, layers=2, heads=4, kv_heads=2, intermediate=128, vocab=400)


@pytest.fixture(scope="module", params=["f32", "f16"])
def imported(request, tmp_path_factory):
    """``(dtype, imported folder)`` of a tiny synthetic Qwen2 GGUF, imported into a fresh cache."""
    from llm_harness.models.gguf_import import ImportConfig, import_model

    tmp = tmp_path_factory.mktemp(f"qwen2-{request.param}")
    path = write_qwen2_gguf(tmp / "tiny-qwen2.gguf", **TINY, seed=5, dtype=request.param)
    return request.param, import_model(ImportConfig(source=str(path), cache_dir=str(tmp / "cache"), licence="CC0-1.0"))


def test_imported_model_reproduces_the_reference_logits(imported):
    import torch
    import transformers

    dtype, folder = imported
    ref = reference_model(Qwen2Shape(**TINY), seed=5, dtype=dtype)
    loaded = transformers.AutoModelForCausalLM.from_pretrained(folder, local_files_only=True)
    assert type(loaded).__name__ == "Qwen2ForCausalLM" and loaded.config.tie_word_embeddings
    assert loaded.config.rope_parameters["rope_theta"] == 1_000_000.0 and loaded.config.num_key_value_heads == 2
    assert loaded.model.layers[0].self_attn.q_proj.bias is not None
    ids = torch.tensor([list(range(0, TINY["vocab"], 3))])  # byte, merged, control and padding tokens
    with torch.inference_mode():
        want, got = ref(input_ids=ids).logits, loaded(input_ids=ids).logits
    assert want.shape[-1] == TINY["vocab"]
    assert torch.equal(want, got)  # float32 or float16 values, dequantised exactly either way


def test_imported_tokenizer_has_the_vocabulary_and_chat_template(imported):
    import transformers

    _, folder = imported
    tok = transformers.AutoTokenizer.from_pretrained(folder, local_files_only=True)
    assert len(tok) == TINY["vocab"]
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"
    chat = tok.apply_chat_template([{"role": "user", "content": "What is 2 + 3?"}], tokenize=False,
                                   add_generation_prompt=True)
    assert chat.startswith("<|im_start|>system\n") and chat.endswith("<|im_start|>assistant\n")
    ids = tok(chat, add_special_tokens=False)["input_ids"]
    assert tok.convert_tokens_to_ids("<|im_start|>") in ids and tok.decode(ids) == chat


def test_vocabulary_layout_is_padded_to_the_requested_size():
    tokens, types = tokenizer_tokens(300, ["Ġ t", "h e"])
    assert len(tokens) == len(types) == 300 and tokens[256:258] == ["Ġt", "he"]
    assert tokens[258:261] == list(SPECIALS) and types[258:261] == [3, 3, 3]
    assert tokens[261] == "[PAD261]" and set(types[261:]) == {5}
    with pytest.raises(ValueError, match="vocab"):
        tokenizer_tokens(100, [])


def test_learned_merges_join_the_corpus_words():
    merges = learn_merges(["the cat is the cat"] * 3, 4)
    assert 0 < len(merges) <= 4 and all(len(m.split(" ")) == 2 for m in merges)


def test_qwen2_0_5b_shapes_count_its_parameters():
    # Qwen2-0.5B: 494,032,768 parameters (tied head), counted without building anything
    shape = Qwen2Shape(**QWEN2_0_5B)
    assert shape.head_dim == 64 and shape.n_parameters == 494_032_768
