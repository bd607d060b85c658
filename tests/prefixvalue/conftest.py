"""Fixtures of the prefix-value tests: the shipped test-bed model loaded once, a fake backend."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """Tiny models run fastest on one thread; the 2 shared cores are not oversubscribed."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def testbed():
    """``(backend, tokenizer)``: the shipped ``mid`` checkpoint behind an ``HFBackend`` (CPU)."""
    from llm_harness.backends import HFBackend, HFBackendConfig
    from llm_harness.testbed import shipped_checkpoint

    path = str(shipped_checkpoint("mid"))
    backend = HFBackend.from_pretrained(path, config=HFBackendConfig(model=path, device="cpu", max_batch_sequences=512))
    return backend, backend.tokenizer

from tiny_models import tiny_chat_folder  # noqa: E402,F401  (the model card test's fixture: tests/tiny_models.py)
