"""tests/llm_harness: torch on one intra-op thread in every test (tiny models; 2 shared cores)."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="session")
def local_ray():
    """One local Ray instance for the session (2 CPUs, no dashboard; starting one costs ~10-40 s
    here); skips where Ray is not installed (it comes with the ``verl`` extra)."""
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield ray
    ray.shutdown()
