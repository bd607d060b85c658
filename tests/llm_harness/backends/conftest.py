"""Fixtures of the backend tests: ``make_backend`` runs a test once per registered backend."""

from __future__ import annotations

import pytest
from backend_models import FACTORIES


@pytest.fixture(params=sorted(FACTORIES))
def make_backend(request, tmp_path):
    """``make_backend(model, **hf_config)`` for every registered backend (vLLM skipped when absent)."""
    factory = FACTORIES[request.param]

    def make(model, **cfg):
        return factory(model, tmp_path, **cfg)

    make.kind = request.param
    return make


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """Tiny models run faster on one thread, and the 2 shared cores are not oversubscribed."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(autouse=True, scope="session")
def _close_vllm_engines():
    """Shut the cached vLLM engines down at the end of the session (backend_models.vllm_engine_for)."""
    yield
    from backend_models import close_vllm_engines

    close_vllm_engines()
