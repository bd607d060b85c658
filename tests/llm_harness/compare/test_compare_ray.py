"""``vsr compare --executor ray`` on a local Ray instance reproduces the process pool's summary.json
(timings aside) and resumes from the same ``done.json`` fingerprints."""

from __future__ import annotations

import json

import pytest

from llm_harness.compare.jobs import CompareConfig, plan_jobs
from llm_harness.compare.runner import run

TIMING = {"wall_s", "step_s", "plugin_s", "step_ratio", "plugin_overhead_s"}


def _strip(o):
    if isinstance(o, dict):
        return {k: _strip(v) for k, v in o.items() if k not in TIMING}
    if isinstance(o, list):
        return [_strip(v) for v in o]
    return o


@pytest.mark.xdist_group("ray")
def test_ray_executor_reproduces_the_process_pool_summary_and_resumes(tmp_path, local_ray, capsys):
    kw = dict(quick=True, methods=("grpo",), regimes=("normal",), workers=2)
    assert run(CompareConfig(out=tmp_path / "process", executor="process", **kw)) == 0
    assert run(CompareConfig(out=tmp_path / "ray", executor="ray", **kw)) == 0
    a = json.loads((tmp_path / "process" / "summary.json").read_text())
    b = json.loads((tmp_path / "ray" / "summary.json").read_text())
    assert a["regimes"]["normal"]["methods"]["grpo"]["seeds"]["0"]["curve"], "no evaluation recorded"
    assert _strip(a) == _strip(b)
    capsys.readouterr()
    cfg = CompareConfig(out=tmp_path / "process", executor="ray", **kw)  # the other executor finds the jobs done
    assert run(cfg) == 0
    assert f"{len(plan_jobs(cfg))} already done, 0 to run" in capsys.readouterr().out


def test_unknown_executor_is_refused_naming_the_field():
    with pytest.raises(ValueError, match="executor"):
        CompareConfig(executor="slurm")
