"""A damaged records manifest: named once, with its line, before anything is restored, trained or reported
(not once per planned job), and ``--report-only`` never trains; a damaged sibling suite's manifest is named once and
its records are not used."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import llm_harness.compare.runner as runner
from llm_harness.compare.jobs import CompareConfig, plan_jobs
from llm_harness.compare.records import MANIFEST, RecordError, read_manifest, records_root, save_record
from llm_harness.compare.runner import run
from vsr.cli import main

from test_compare import _fake_run  # noqa: E402 - the same fake runs as the report tests

ARGS = ["--seeds", "1", "--steps", "3", "--methods", "grpo", "vsr", "--regimes", "normal"]


def _records(tmp_path: Path, report_only: bool = True) -> CompareConfig:
    """A suite whose normal-regime jobs (base, grpo, vsr; seed 0) finished and kept their records; the run folders are
    gone (a fresh clone)."""
    cfg = CompareConfig(out=tmp_path, seeds=1, steps=3, methods=("grpo", "vsr"), regimes=("normal",),
                        report_only=report_only)
    for job in plan_jobs(cfg):
        _fake_run(job, 0.5, 100.0)
        save_record(job, records_root(cfg))
    shutil.rmtree(cfg.runs_root)
    return cfg


def _never_train(monkeypatch) -> None:
    def trained(*a, **k):
        raise AssertionError("a job was trained")

    monkeypatch.setattr(runner, "EXECUTORS", {"process": trained})
    monkeypatch.setattr(runner, "prepare_pool", trained)


def _damage(manifest: Path, how: str) -> str:
    """Damage ``manifest``; returns a pattern of the message that names it."""
    text = manifest.read_text()
    if how == "truncated":
        manifest.write_text(text[: len(text) // 2])
        return rf"{manifest}:\d+: not a JSON manifest \(.* at column \d+\)"
    if how == "not utf-8":
        manifest.write_bytes(b"\xff" + text.encode())
        return rf"{manifest}: not a JSON manifest"
    if how == "not an object":
        manifest.write_text("[]\n")
        return rf"{manifest}: expected an object with a 'records' mapping"
    data = json.loads(text)
    data["records"]["normal/grpo/seed0"] = 5
    manifest.write_text(json.dumps(data))
    return rf"{manifest}: the entry of 'normal/grpo/seed0' is int, not an object"


@pytest.mark.parametrize("how", ["truncated", "not utf-8", "not an object", "entry"])
def test_a_damaged_manifest_is_named_once_and_report_only_trains_nothing(tmp_path, monkeypatch, capsys, how):
    cfg = _records(tmp_path)
    _never_train(monkeypatch)
    pattern = _damage(records_root(cfg) / MANIFEST, how)
    with pytest.raises(RecordError, match=pattern + r".*stopped before restoring, training or reporting anything"):
        run(cfg)
    assert "record not used" not in capsys.readouterr().out  # was one line per planned job (57 here)
    assert not list(cfg.runs_root.rglob("done.json")) and not (tmp_path / "report.md").exists()
    rc = main(["compare", "--out", str(tmp_path), *ARGS, "--report-only"])
    out, err = capsys.readouterr()
    assert rc == 2 and "Traceback" not in err and "record not used" not in out
    assert [line for line in err.splitlines() if "error:" in line] == [
        next(line for line in err.splitlines() if line.startswith(f"vsr compare: error: {records_root(cfg) / MANIFEST}"))]


def test_a_damaged_manifest_is_refused_before_training_too(tmp_path, monkeypatch, capsys):
    """Training would end at the first finished job anyway: its record cannot be added to a manifest that does not read."""
    cfg = _records(tmp_path, report_only=False)
    _never_train(monkeypatch)
    _damage(records_root(cfg) / MANIFEST, "truncated")
    rc = main(["compare", "--out", str(tmp_path), *ARGS])
    out, err = capsys.readouterr()
    assert rc == 2 and f"vsr compare: error: {records_root(cfg) / MANIFEST}:" in err and "record not used" not in out


def test_report_only_says_a_damaged_record_is_left_out_not_retrained(tmp_path, monkeypatch, capsys):
    cfg = _records(tmp_path)
    _never_train(monkeypatch)
    done = records_root(cfg) / "normal" / "vsr" / "seed0" / "done.json"
    done.write_text("{broken")
    assert run(cfg) == 0
    out = capsys.readouterr().out
    assert f"record not used, the job is left out of the report (--report-only trains nothing): {done}" in out
    assert "trains again" not in out


def test_a_damaged_sibling_manifest_is_named_once_and_not_used(tmp_path, monkeypatch, capsys):
    cfg = _records(tmp_path / "compare_a")
    sibling = tmp_path / "compare_b" / "records"
    sibling.mkdir(parents=True)
    (sibling / MANIFEST).write_text('{"format": 1, "records": {')
    monkeypatch.setattr(runner, "shared_records_roots", lambda cfg: [sibling])
    _never_train(monkeypatch)
    assert run(cfg) == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if str(sibling / MANIFEST) in line]
    assert len(lines) == 1 and lines[0].startswith("vsr compare: a sibling suite's records are not used, their jobs are "
                                                   "left out of the report unless restored from another folder: ")
    assert read_manifest(records_root(cfg))  # this suite's own records were restored and kept
    with pytest.raises(RecordError, match=r"refusing \(--no-retrain\)"):
        run(CompareConfig(out=tmp_path / "compare_a", seeds=1, steps=3, methods=("grpo", "vsr"), regimes=("normal",),
                          report_only=True, retrain=False))


def test_a_bad_task_parameter_fails_once_at_planning_naming_the_job(tmp_path):
    """Round 4: a task parameter the task does not take used to fail inside every worker; now before any starts."""
    import copy
    from dataclasses import replace as dc_replace

    from llm_harness.compare.jobs import CompareConfig, plan_jobs
    from llm_harness.compare.runner import check_jobs

    cfg = CompareConfig(out=tmp_path / "suite", seeds=1, steps=1, methods=("grpo",), regimes=("normal",))
    jobs = plan_jobs(cfg)
    check_jobs(jobs)  # the suite as shipped passes
    bad = copy.deepcopy(jobs[-1].mapping)
    bad.setdefault("task", {}).setdefault("params", {})["no_such_param"] = 1
    broken = dc_replace(jobs[-1], mapping=bad)
    with pytest.raises(ValueError, match=rf"^{broken.regime}/{broken.method}: task '\w+' with params .*no_such_param"):
        check_jobs([*jobs, broken])
