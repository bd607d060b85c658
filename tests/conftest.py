"""Shared test configuration: deterministic hypothesis profiles and capability markers."""

from __future__ import annotations

import os

# Before torch is imported anywhere: passive OpenMP waiting keeps torch's idle threads from
# slowing Numba's parallel regions (see gridworld's benchmark notes).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import pytest  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

# "ci": deterministic (derandomized) so CI never flakes; "dev": random exploration, more examples.
settings.register_profile(
    "ci",
    derandomize=True,
    database=None,
    max_examples=60,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile("dev", max_examples=200, deadline=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# figures in the default format (PNG only) whatever the caller's shell asks; tests of the PDF set it themselves
os.environ.pop("VSR_FIGURE_FORMATS", None)


def _has_cuda() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:  # pragma: no cover
        return False


def pytest_collection_modifyitems(config, items):
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if not gpu_items or _has_cuda():  # only pay for importing torch when a GPU test exists
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device")
    for item in gpu_items:
        item.add_marker(skip_gpu)


@pytest.fixture(autouse=True, scope="session")
def _single_torch_thread():
    """One intra-op thread per test process: on 2 shared cores (and under xdist) tiny torch ops
    run many times slower with thread contention."""
    import sys

    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(1)
    yield
