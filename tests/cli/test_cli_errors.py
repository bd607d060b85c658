"""Bad input at the CLI: one clean message and a non-zero exit, nothing written before validation."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from vsr.cli import main, normalise_bool_flags
from llm_harness.trainer.config import TrainConfig

TINY_YAML = """steps: 1
model: {random_init: true, hidden_size: 16, num_layers: 1, num_heads: 2, max_context: 64}
task: {name: step_arith, params: {n_train: 50, n_validation: 8, n_test: 8}}
rollout: {prompts_per_step: 2, group_size: 2, max_new_tokens: 4, verify_timeout_s: 0}
run: {progress: false}
"""


def _cfg(tmp_path, extra=""):
    p = tmp_path / f"tiny{abs(hash(extra))}.yaml"
    p.write_text(TINY_YAML + extra)
    return p


def _vsr(*args, env=None, cwd=None):
    e = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", **(env or {})}
    return subprocess.run([sys.executable, "-m", "vsr", *args], capture_output=True, text=True, env=e, cwd=cwd, timeout=300)


def test_a_scalar_section_is_refused_with_one_line_and_exit_2(tmp_path):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("optim: 5\n")
    r = _vsr("train", "--config", str(cfg), "--run.run-dir", str(tmp_path / "run"))
    assert r.returncode == 2
    assert "optim: must be a mapping of OptimConfig fields" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "run").exists()
    r = _vsr("train", "--config", str(cfg), "--debug")
    assert r.returncode != 0 and "Traceback" in r.stderr  # --debug keeps the traceback


def test_nested_errors_carry_the_dotted_path(tmp_path):
    (tmp_path / "c.yaml").write_text("optim:\n  lr: -1\n")
    with pytest.raises(ValueError, match=r"c\.yaml\.optim\.lr: must be > 0"):
        from vsr_util.config_io import load_config

        load_config(TrainConfig, tmp_path / "c.yaml")


def test_bool_flags_accept_true_and_false():
    assert normalise_bool_flags(TrainConfig, ["--run.resume", "true", "--steps", "3"]) == ["--run.resume", "--steps", "3"]
    assert normalise_bool_flags(TrainConfig, ["--run.resume=false"]) == ["--run.no-resume"]
    assert normalise_bool_flags(TrainConfig, ["--run.progress", "False", "--run.resume"]) == ["--run.no-progress", "--run.resume"]
    assert normalise_bool_flags(TrainConfig, ["--model.random_init", "yes"]) == ["--model.random-init"]
    with pytest.raises(ValueError, match="run.resume: expected true or false"):
        normalise_bool_flags(TrainConfig, ["--run.resume=maybe"])


def test_refused_resume_names_the_field_and_keeps_the_run_config(tmp_path):
    run, cfg = tmp_path / "run", str(_cfg(tmp_path))
    r = _vsr("train", "--config", cfg, "--run.run-dir", str(run))
    assert r.returncode == 0, r.stderr
    before = (run / "config.yaml").read_text()
    r = _vsr("train", "--config", cfg, "--run.run-dir", str(run), "--run.resume", "true", "--optim.lr", "5e-5")
    assert r.returncode == 2 and "optim.lr: 0.0002 in the run, 5e-05 now" in r.stderr and "Traceback" not in r.stderr
    assert (run / "config.yaml").read_text() == before
    r = _vsr("train", "--config", cfg, "--steps", "2", "--run.run-dir", str(run), "--run.resume", "true")  # documented spelling
    assert r.returncode == 0 and "resumed from step 1" in r.stderr, r.stderr


def test_model_task_and_plugin_errors_write_nothing(tmp_path):
    cfg = str(_cfg(tmp_path))
    cases = [["--task.name", "nope"], ["--model.no-random-init", "--model.path", str(tmp_path / "missing")],
             ["--config", str(_cfg(tmp_path, "plugins: {nope: {}}\n"))]]
    for i, extra in enumerate(cases):
        run = tmp_path / f"run{i}"
        assert main(["train", "--config", cfg, *extra, "--run.run-dir", str(run)]) != 0
        assert not run.exists(), extra


def test_unencodable_task_is_refused_before_training(tmp_path, capsys):
    data = tmp_path / "m.jsonl"
    data.write_text('{"id": "a", "problem": "What is two plus two?", "answer": "4"}\n')
    cfg = _cfg(tmp_path).read_text().replace("task: {name: step_arith, params: {n_train: 50, n_validation: 8, n_test: 8}}",
                                               f"task: {{name: math, params: {{files: {{train: '{data}'}}}}}}")
    (tmp_path / "math.yaml").write_text(cfg)
    run = tmp_path / "run"
    rc = main(["train", "--config", str(tmp_path / "math.yaml"), "--run.run-dir", str(run)])
    err = capsys.readouterr().err
    assert rc == 2 and "tokenizer: cannot encode" in err and "'W'" in err
    assert not run.exists()


def test_non_utf8_jsonl_names_file_and_line(tmp_path):
    from llm_harness.tasks.math_task import load_math_jsonl

    p = tmp_path / "bad.jsonl"
    p.write_bytes(b'{"id": "a", "problem": "1+1", "answer": "2"}\n{"id": "b", "problem": "x\xff", "answer": "4"}\n')
    with pytest.raises(ValueError, match=r"bad\.jsonl:2: not UTF-8 \(byte 0xff at column 26\)"):
        load_math_jsonl(p)


def test_full_disk_is_one_clean_line(tmp_path, monkeypatch, capsys):
    import llm_harness.trainer.entry as entry

    def full(*a, **k):
        raise OSError(28, "No space left on device", str(tmp_path / "run" / "config.yaml"))

    monkeypatch.setattr(entry, "save_config", full)
    rc = main(["train", "--config", str(_cfg(tmp_path)), "--run.run-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert rc == 1 and "vsr train: error: No space left on device" in err and "Traceback" not in err
