"""The CPU test bed: a character-level tokenizer and a ~1M-parameter Qwen2 trained by SFT on step
arithmetic, shipped as ``save_pretrained`` checkpoints, and the same
kind of model trained on expert demonstrations of a text environment (the agent test beds,
``agents.py``, shipped under ``checkpoints/<family>/``).

* :func:`load_testbed` / :func:`shipped_checkpoint` — load a checkpoint (``from_pretrained``).
* :func:`build_tokenizer`, :func:`make_model` — a fresh tokenizer and model.
* ``build.build(cfg)`` — ``vsr testbed build [--family sokoban]``; ``evaluate.evaluate(cfg)`` —
  ``vsr testbed eval`` (arithmetic); ``agent_eval`` — agent success and continuation curves.

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
