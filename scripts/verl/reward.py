"""verl ``reward.custom_reward_function`` that grades with the toolkit's own verifier (docs/scaling-out.md).

``data_source`` is ``vsr/<task>`` (written by ``make_data.py``) and ``extra_info["params"]`` the
task's parameters; the task is built once per (name, params) and its ``verify`` grades the
decoded response against ``ground_truth``. The VSR agent loop calls the same function with the
replayed state's own problem.
"""

from __future__ import annotations

import functools
import json


@functools.lru_cache(maxsize=8)
def _task(name: str, params: str):
    from llm_harness.tasks import get_task

    return get_task(name, **json.loads(params))


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """Reward in [0, 1] of ``solution_str`` for the problem whose answer is ``ground_truth``."""
    from llm_harness.tasks import Problem

    if not str(data_source).startswith("vsr/"):
        raise ValueError(f"data_source: expected 'vsr/<task>' (scripts/verl/make_data.py), got {data_source!r}")
    info = extra_info or {}
    task = _task(str(data_source)[4:], str(info.get("params", "{}")))
    problem = Problem(str(info.get("problem_id", "verl")), "verl prompt", str(ground_truth))
    return float(task.verify(problem, solution_str).reward)
