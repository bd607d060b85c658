"""Runs that stop part-way: a full disk names the file being written and says how the run continues once
space is freed; the line printed for an interrupt is true of what the run folder holds (a checkpoint's step, or none
yet, so the run starts again). Each case runs ``vsr train`` in-process on a tiny random model (a few seconds)."""

from __future__ import annotations

import errno
import io
from pathlib import Path

import pytest
import torch

import llm_harness.trainer.checkpoint as ck
import llm_harness.trainer.runlog as runlog
from llm_harness.trainer.checkpoint import save_checkpoint
from trainer_support import tiny_config
from vsr_util.atomic import write_text
from vsr.cli import error_message, interrupted_message, main

TINY_YAML = """steps: {steps}
model: {{random_init: true, hidden_size: 16, num_layers: 1, num_heads: 2, max_context: 64}}
task: {{name: step_arith, params: {{n_train: 50, n_validation: 8, n_test: 8}}}}
rollout: {{prompts_per_step: 2, group_size: 2, max_new_tokens: 4, verify_timeout_s: 0}}
run: {{progress: false, checkpoint_every: 1}}
"""
FULL = "No space left on device"


def _cfg(tmp_path: Path, steps: int) -> str:
    p = tmp_path / f"tiny{steps}.yaml"
    p.write_text(TINY_YAML.format(steps=steps))
    return str(p)


def _error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("vsr train: error:")]
    assert len(lines) == 1, err
    return lines[0]


def _no_checkpoint_hint(run: Path) -> str:
    return (f"rerun the same command to start the run again: it has no checkpoint yet (none complete in "
            f"{run / 'checkpoints'}), so --run.resume true would find nothing to resume")


# --- a full disk (ENOSPC) names the path and says how the run continues -----------------------------------------


def test_a_full_disk_during_a_checkpoint_names_it_and_the_resume_it_promises_works(tmp_path, monkeypatch, capsys):
    real, calls = ck.write_tensors_streaming, {"n": 0}

    def filling(tensors, path, metadata=None):
        calls["n"] += 1
        if calls["n"] > 2:  # each checkpoint streams two files: the second checkpoint finds the disk full
            raise OSError(errno.ENOSPC, FULL)  # as write() raises it: no file name
        return real(tensors, path, metadata)

    monkeypatch.setattr(ck, "write_tensors_streaming", filling)
    run, cfg = tmp_path / "run", _cfg(tmp_path, 3)
    rc = main(["train", "--config", cfg, "--run.run-dir", str(run)])
    err = capsys.readouterr().err
    assert rc == 1 and "Traceback" not in err
    assert _error_line(err) == (f"vsr train: error: {FULL}: {run / 'checkpoints' / 'step_000002'}; free some space, "
                                "then rerun the same command with --run.resume true to continue from the last "
                                "checkpoint (step 1)")
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["latest", "step_000001"]  # no temporary left
    monkeypatch.setattr(ck, "write_tensors_streaming", real)  # space freed: the resume the line gives works
    assert main(["train", "--config", cfg, "--run.run-dir", str(run), "--run.resume", "true"]) == 0
    assert "resumed from step 1" in capsys.readouterr().err


class _FullFile(io.StringIO):
    def write(self, s):  # noqa: ARG002 - the disk takes nothing
        raise OSError(errno.ENOSPC, FULL)


def test_a_full_disk_during_a_metrics_write_names_the_file_and_says_the_run_starts_again(tmp_path, monkeypatch,
                                                                                          capsys):
    monkeypatch.setattr(runlog, "open", lambda *a, **k: _FullFile(), raising=False)  # the appends of each row
    run, cfg = tmp_path / "run", _cfg(tmp_path, 2)
    rc = main(["train", "--config", cfg, "--run.run-dir", str(run)])
    err = capsys.readouterr().err
    assert rc == 1 and "Traceback" not in err
    assert _error_line(err) == (f"vsr train: error: {FULL}: {run / 'metrics.jsonl'}; free some space, then "
                                + _no_checkpoint_hint(run))
    monkeypatch.undo()  # space freed: the same command runs
    assert main(["train", "--config", cfg, "--run.run-dir", str(run)]) == 0


def test_an_atomic_write_on_a_full_disk_names_the_file_and_leaves_no_temporary(tmp_path, monkeypatch):
    def full(self, *a, **k):
        raise OSError(errno.ENOSPC, FULL)

    monkeypatch.setattr(Path, "write_text", full)
    with pytest.raises(OSError) as info:
        write_text(tmp_path / "memory.json", "{}\n")
    assert info.value.errno == errno.ENOSPC and info.value.filename == str(tmp_path / "memory.json")
    assert list(tmp_path.iterdir()) == []


def test_a_full_disk_line_of_other_commands_uses_their_resume_hint():
    exc = OSError(errno.ENOSPC, FULL, "out/records/manifest.json")
    assert error_message("compare", exc) == (f"{FULL}: out/records/manifest.json; free some space, then rerun the same "
                                             "command: finished runs are kept, unfinished ones start again")
    assert error_message("theory check", exc) == f"{FULL}: out/records/manifest.json; free some space and rerun the command"
    assert error_message("train", OSError(errno.EACCES, "Permission denied", "x")) == "Permission denied: x"


# --- an interrupt's hint is true of the run folder ---------------------------------------------------------------


def _linear_checkpoint(root: Path, step: int) -> None:
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.AdamW(model.parameters())
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    save_checkpoint(root, step, model=model, optimizer=opt, scheduler=sched, plugins=[], fingerprint="-")


def test_the_interrupt_line_names_the_checkpoint_or_says_there_is_none(tmp_path):
    run = tmp_path / "run"
    cfg = tiny_config(str(run))
    line, code = interrupted_message("train", KeyboardInterrupt(), cfg)
    assert code == 130 and line == "vsr train: interrupted by SIGINT; " + _no_checkpoint_hint(run)
    root = run / "checkpoints"
    (root / ".step_000001.abc.tmp").mkdir(parents=True)  # stopped while writing the first checkpoint
    assert interrupted_message("train", KeyboardInterrupt(), cfg)[0].endswith(_no_checkpoint_hint(run))
    _linear_checkpoint(root, 2)
    (root / "step_000003").mkdir()  # a newer folder without meta.json (damaged): resume skips it, so does the line
    want = ("vsr train: interrupted by SIGINT; rerun the same command with --run.resume true to continue from the "
            "last checkpoint (step 2)")
    assert interrupted_message("train", KeyboardInterrupt(), cfg)[0] == want
    # before the config is parsed: the fixed hint
    assert interrupted_message("train", KeyboardInterrupt())[0].endswith("continue from the last checkpoint")


def test_a_resumed_run_without_checkpoints_is_told_to_drop_the_resume_flag(tmp_path):
    from dataclasses import replace

    cfg = tiny_config(str(tmp_path / "run"))
    cfg = replace(cfg, run=replace(cfg.run, resume=True))
    line, _ = interrupted_message("train", KeyboardInterrupt(), cfg)
    assert "rerun it without --run.resume to start the run again" in line


def test_ctrl_c_during_the_first_checkpoint_says_start_again_and_that_is_true(tmp_path, monkeypatch, capsys):
    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(ck, "write_tensors_streaming", interrupted)
    run, cfg = tmp_path / "run", _cfg(tmp_path, 1)
    assert main(["train", "--config", cfg, "--run.run-dir", str(run)]) == 130
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1] == "vsr train: interrupted by SIGINT; " + _no_checkpoint_hint(run)
    monkeypatch.undo()
    # the resume the old line promised finds nothing; the command the line gives runs
    assert main(["train", "--config", cfg, "--run.run-dir", str(run), "--run.resume", "true"]) == 2
    assert "no checkpoint in" in capsys.readouterr().err
    assert main(["train", "--config", cfg, "--run.run-dir", str(run)]) == 0
    assert (run / "checkpoints" / "latest").read_text().strip() == "step_000001"
