"""Generation + scoring backends: one protocol, a transformers and a vLLM implementation.

``BACKENDS`` maps a name to a backend class; each class has ``from_config(config)`` taking its own
frozen config (``HFBackendConfig`` / ``VLLMBackendConfig``). ``available_backends()`` lists the
names whose dependencies are importable here (vLLM is optional and never imported eagerly).
"""

from __future__ import annotations

import importlib.util

from llm_harness.backends.hf_backend import HFBackend, HFBackendConfig
from llm_harness.backends.protocol import (
    GenerationBackend,
    Sample,
    SamplingParams,
    ScoreResult,
    continuation_budget,
)
from llm_harness.backends.sampling import sample_next_tokens, sampling_log_probs, truncate_logits
from llm_harness.backends.scoring import chunked_logprobs_entropy, rows_per_chunk
from llm_harness.backends.vllm_backend import VLLMBackend, VLLMBackendConfig
from vsr_util.registry import Registry

#: name -> backend class (uniform constructor ``cls.from_config(config)``).
BACKENDS: Registry[type] = Registry("backend")
#: name -> module whose presence makes the backend usable (filled by :func:`register_backend` only).
_REQUIRES: dict[str, str] = {}


def register_backend(name: str, cls: type, requires: str) -> type:
    """Add a backend under ``name``; a duplicate name is an error."""
    BACKENDS.add(name, cls)
    _REQUIRES[name] = requires
    return cls


register_backend("hf", HFBackend, "transformers")
register_backend("vllm", VLLMBackend, "vllm")


def available_backends() -> list[str]:
    """Registered backends whose required package is installed."""
    return [name for name in BACKENDS if importlib.util.find_spec(_REQUIRES[name]) is not None]


__all__ = [
    "BACKENDS",
    "GenerationBackend",
    "HFBackend",
    "HFBackendConfig",
    "Sample",
    "SamplingParams",
    "ScoreResult",
    "VLLMBackend",
    "VLLMBackendConfig",
    "available_backends",
    "chunked_logprobs_entropy",
    "continuation_budget",
    "register_backend",
    "rows_per_chunk",
    "sample_next_tokens",
    "sampling_log_probs",
    "truncate_logits",
]
