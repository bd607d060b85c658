"""The test-bed causal LM: a ~1M-parameter Qwen2 built from a config, and loading.

The model is a stock ``transformers`` ``Qwen2ForCausalLM`` (nothing custom), so a checkpoint
saved with ``save_pretrained`` loads through the same ``AutoModelForCausalLM.from_pretrained``
path as a real model, on any machine with ``transformers`` and nothing downloaded.
Default shape: hidden 128, 4 layers, 4 query heads, 2 KV heads, MLP width 512, tied embeddings,
256 positions, vocabulary 23 (the character tokenizer) -> 0.99M parameters (4 MB in fp32).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vsr_util.checks import check_number

__all__ = ["TestbedModelConfig", "load_testbed", "make_model", "n_parameters"]


@dataclass(frozen=True)
class TestbedModelConfig:
    """Shape of the test-bed Qwen2 model."""

    __test__ = False  # not a pytest test class despite the name

    hidden_size: int = 128
    """Width of the residual stream."""
    num_hidden_layers: int = 4
    """Number of transformer blocks."""
    num_attention_heads: int = 4
    """Query heads (head size = hidden_size / num_attention_heads)."""
    num_key_value_heads: int = 2
    """Key/value heads (grouped-query attention when fewer than the query heads)."""
    intermediate_size: int = 512
    """Width of the SwiGLU MLP."""
    max_position_embeddings: int = 256
    """Longest sequence (prompt + completion) the model accepts."""
    rope_theta: float = 10_000.0
    """RoPE base."""
    initializer_range: float = 0.02
    """Std of the normal weight initialisation."""

    def __post_init__(self) -> None:
        for name in ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                     "intermediate_size", "max_position_embeddings"):
            check_number(name, getattr(self, name), 1, integer=True)
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"hidden_size: must be divisible by num_attention_heads ({self.num_attention_heads}), got {self.hidden_size}"
            )
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"num_key_value_heads: must divide num_attention_heads ({self.num_attention_heads}), "
                f"got {self.num_key_value_heads}"
            )
        check_number("rope_theta", self.rope_theta, 0, lo_open=True)
        check_number("initializer_range", self.initializer_range, 0, lo_open=True)


def make_model(arch: TestbedModelConfig, tokenizer: Any, *, seed: int):
    """A freshly initialised ``Qwen2ForCausalLM`` (fp32, train mode) for ``tokenizer``'s vocabulary.

    Deterministic: the weights depend only on ``arch``, the vocabulary size and ``seed``
    (``torch.manual_seed(seed)`` right before construction). Special ids (pad/bos/eos) are
    copied from the tokenizer into the model and generation configs, so ``HFBackend`` and
    ``model.generate`` stop at ``<eos>``.
    """
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    check_number("seed", seed, 0, integer=True)
    for name in ("pad_token_id", "eos_token_id"):
        if getattr(tokenizer, name, None) is None:
            raise ValueError(f"tokenizer: has no {name}")
    cfg = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=arch.hidden_size,
        num_hidden_layers=arch.num_hidden_layers,
        num_attention_heads=arch.num_attention_heads,
        num_key_value_heads=arch.num_key_value_heads,
        intermediate_size=arch.intermediate_size,
        max_position_embeddings=arch.max_position_embeddings,
        rope_theta=arch.rope_theta,
        initializer_range=arch.initializer_range,
        tie_word_embeddings=True,
        attention_dropout=0.0,
        use_sliding_window=False,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(cfg).float()
    gc = model.generation_config
    gc.pad_token_id, gc.bos_token_id, gc.eos_token_id = tokenizer.pad_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id
    model.train()
    return model


def n_parameters(model) -> int:
    """Number of distinct parameters (tied embedding counted once)."""
    return sum(p.numel() for p in model.parameters())


def load_testbed(path: str | os.PathLike, *, device: str = "cpu"):
    """``(model, tokenizer)`` from a local checkpoint folder via ``from_pretrained`` (eval mode, fp32).

    Only local files are read (``local_files_only=True``); a missing folder raises ValueError.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from llm_harness.models.manifest import check_model_folder

    path = Path(path)
    if not (path / "config.json").is_file():
        raise ValueError(f"path: {str(path)!r} is not a saved model folder (no config.json)")
    check_model_folder(path, "path")  # an imported folder must match its manifest
    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True).float().to(device).eval()
    from llm_harness.tasks.coverage import keep_unknown_token

    tokenizer = keep_unknown_token(AutoTokenizer.from_pretrained(path, local_files_only=True))
    return model, tokenizer
