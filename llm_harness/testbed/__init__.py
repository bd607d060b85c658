"""The CPU test bed: a character-level tokenizer and a ~1M-parameter Qwen2 trained by SFT on step
arithmetic, shipped as ``save_pretrained`` checkpoints (issue 4 item 3; SPEC §3.6).

* :func:`load_testbed` / :func:`shipped_checkpoint` — load a checkpoint (``from_pretrained``).
* :func:`build_tokenizer`, :func:`make_model` — a fresh tokenizer and model.
* ``build.build(cfg)`` — ``vsr testbed build``; ``evaluate.evaluate(cfg)`` — ``vsr testbed eval``.

Importing this package does not import torch or transformers.
"""

from llm_harness.testbed.model import TestbedModelConfig, load_testbed, make_model, n_parameters
from llm_harness.testbed.paths import CHECKPOINT_DIR, SHIPPED_CHECKPOINTS, shipped_checkpoint
from llm_harness.testbed.tokenizer import build_tokenizer, save_tokenizer

__all__ = [
    "CHECKPOINT_DIR",
    "SHIPPED_CHECKPOINTS",
    "TestbedModelConfig",
    "build_tokenizer",
    "load_testbed",
    "make_model",
    "n_parameters",
    "save_tokenizer",
    "shipped_checkpoint",
]
