"""The memory-table benchmark's plumbing on a tiny synthetic Qwen2: a GGUF written and imported, one step per mode in
a process of its own, the rows' fields, and failures recorded as rows (no sizes or timings asserted)."""

from __future__ import annotations

import json
import sys

import pytest

from benchmarks import memory_table
from benchmarks.memory_table import MODES, MemoryTableConfig, ModelSpec, markdown, run, run_process, train_config

pytest.importorskip("gguf", reason="the GGUF writer and reader (make real-model installs the `realmodel` extra)")
pytest.importorskip("accelerate", reason="transformers' GGUF loader needs accelerate (the `realmodel` extra)")

SMALL = dict(steps=1, prompts_per_step=2, group_size=2, max_new_tokens=6, micro_batch_rows=2, threads=1, merges=50)


def test_one_lean_step_of_a_tiny_synthetic_qwen2(tmp_path):
    cfg = MemoryTableConfig(models=("qwen2_tiny",), modes=("lean",), out_dir=str(tmp_path / "out"),
                            cache_dir=str(tmp_path / "cache"), **SMALL)
    assert run(cfg) == 0
    res = json.loads((tmp_path / "out" / "memory_table.json").read_text())
    assert res["models"]["qwen2_tiny"]["folder"] and res["machine"]["cpus"] >= 1
    (row,) = res["rows"]
    assert (row["model"], row["mode"], row["status"], row["returncode"]) == ("qwen2_tiny", "lean", "ok", 0)
    assert set(row["fixed_gb"]) == {"weights", "grads", "optimizer"} and all(v > 0 for v in row["fixed_gb"].values())
    assert set(row["peak_gb"]) >= {"generate", "score", "train"} and all(v > 0 for v in row["peak_gb"].values())
    assert row["max_rss_gb"] > 0 and row["s_per_step"] > 0 and len(row["time_step_s"]) == 1
    assert row["checkpoint_written"] and row["checkpoint_gb"] > 0
    assert row["dry_run_line"].startswith("dry run:") and row["dry_run_total_gb"] > 0
    assert not (tmp_path / "out" / "runs" / "qwen2_tiny_lean" / "checkpoints").exists()  # deleted once measured
    used = json.loads((tmp_path / "out" / "configs" / "qwen2_tiny_lean.json").read_text())["run"]
    assert used["group_prompt_once"] and used["static_decode"] and used["micro_batch_rows"] == 2
    table = (tmp_path / "out" / "memory_table.md").read_text()
    assert "| qwen2_tiny | lean | ok |" in table


def test_modes_set_the_run_options(tmp_path):
    cfg = MemoryTableConfig(**SMALL)
    plain = train_config(cfg, "folder", "plain", tmp_path)["run"]
    assert plain["checkpoint_every"] == 1 and not set(plain) & set(MODES["lean"])
    lean16 = train_config(cfg, "folder", "lean_bf16", tmp_path)["run"]
    assert lean16 == {**plain, "group_prompt_once": True, "fused_optimizer": True, "static_decode": True,
                      "sampler": "inverse_cdf", "micro_batch_rows": 2, "precision": "bf16"}


def test_a_killed_or_stuck_process_is_a_status_not_a_crash(tmp_path):
    killed = run_process([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"],
                         tmp_path / "k.log", 60)
    assert killed["returncode"] == -9 and killed["status"] == "killed by signal 9 (out of memory?)"
    stuck = run_process([sys.executable, "-c", "import time; time.sleep(60)"], tmp_path / "s.log", 0.5)
    assert stuck["status"] == "timeout" and stuck["wall_s"] < 30


def test_a_failed_import_is_a_row(tmp_path, monkeypatch):
    monkeypatch.setitem(memory_table.MODELS, "missing", ModelSpec("missing", registered=str(tmp_path / "no.gguf")))
    cfg = MemoryTableConfig(models=("missing",), modes=("plain", "lean"), out_dir=str(tmp_path / "out"), **SMALL)
    assert run(cfg) == 1
    rows = json.loads((tmp_path / "out" / "memory_table.json").read_text())["rows"]
    assert [(r["mode"], r["status"]) for r in rows] == [("plain", "model import failed"), ("lean", "model import failed")]
    assert "| missing | plain | model import failed |" in markdown(rows)
