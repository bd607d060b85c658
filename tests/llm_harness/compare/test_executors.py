"""``vsr compare`` executors: the registry, the process pool's result/exception reporting, a clear
error where Ray is missing (the Ray executor itself runs in tests/llm_harness/compare/test_compare_ray.py)."""

from __future__ import annotations

import importlib.util

import pytest

from llm_harness.compare.executors import EXECUTORS


def test_registry_names_the_two_executors():
    assert set(EXECUTORS) == {"process", "ray"}


def test_process_pool_yields_results_and_exceptions_per_job():
    got = dict(EXECUTORS["process"](["7", "x", "12"], 2, int))
    assert got["7"] == 7 and got["12"] == 12
    assert isinstance(got["x"], ValueError)


@pytest.mark.skipif(importlib.util.find_spec("ray") is not None, reason="ray is installed")
def test_ray_executor_without_ray_says_what_to_install():
    with pytest.raises(ValueError, match="executor: 'ray' needs the ray package"):
        list(EXECUTORS["ray"](["1"], 1, int))
