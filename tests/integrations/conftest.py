"""tests/integrations: one local Ray instance for the whole session (starting one costs ~10-40 s here)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def local_ray():
    """``ray.init`` on this machine (2 CPUs, no dashboard), shut down after the session."""
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield ray
    ray.shutdown()
