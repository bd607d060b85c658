"""Every command that takes a backend, run with ``vllm`` on the test bed, as a user runs it (a subprocess each).

Skipped where vLLM is not installed (``make vllm-test`` runs them in ``.venv-vllm`` with the CPU build).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from backend_models import vllm_available

ROOT = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.skipif(not vllm_available(), reason="vLLM is not installed here (make vllm-test)")

STUDIES = ("hint-ratio", "failed-prefix", "sigma-validation", "mte-correlation", "prefix-selection")


def vsr(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "VLLM_LOGGING_LEVEL": "ERROR", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-m", "vsr", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, f"vsr {' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-3000:]}"
    return proc


def metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("study", STUDIES)
def test_study_quick_on_vllm(study, tmp_path):
    vsr("study", study, "--quick", "--backend", "vllm", "--no-progress", "--out", str(tmp_path / study))
    summary = json.loads((tmp_path / study / "summary.json").read_text())
    assert summary  # the study's own summary was written
    assert (tmp_path / study / "records" / "config.yaml").read_text().count("backend: vllm") == 1  # records_dir


def test_eval_text_and_env_on_vllm(tmp_path):
    vsr("eval", "--model", "llm_harness/testbed/checkpoints/mid", "--model.backend", "vllm",
        "--n-problems", "16", "--k", "2", "--out", str(tmp_path / "text"))
    res = json.loads((tmp_path / "text" / "eval.json").read_text())
    assert res["n_problems"] == 16 and 0.0 < res["avg_at_k"] < 1.0
    vsr("eval", "--env", "sokoban", "--window", "0", "--model", "llm_harness/testbed/checkpoints/sokoban/mid",
        "--model.backend", "vllm", "--n-problems", "16", "--k", "2", "--out", str(tmp_path / "env"))
    env = json.loads((tmp_path / "env" / "eval.json").read_text())
    assert 0.0 <= env["success"] <= 1.0 and env["turns_mean"] > 0


def _train(tmp_path: Path, name: str, backend: str, *extra: str, steps: int = 3) -> Path:
    run = tmp_path / name
    vsr("train", "--config", "configs/testbed_grpo.yaml", "--steps", str(steps), "--model.backend", backend,
        "--validation.every", str(steps), "--validation.n-problems", "16", "--validation.k", "2",
        "--out", str(run), "--run.progress", "false", *extra)
    return run


def test_train_grpo_on_vllm_matches_hf_within_sampling_error(tmp_path):
    """Same config, same seed, ``backend: vllm`` vs ``hf``: step 0 samples the same policy on the same prompts,
    so its reward and length differ only by sampling. Bound: 4.4 standard errors of a difference of two
    independent means over N samples, with the per-sample variance bounded by the pooled one (samples of a
    prompt are positively correlated only through the prompt, which both runs share)."""
    wide = ("--rollout.prompts-per-step", "32", "--algo.filter-zero-variance", "false")
    runs = {b: metrics(_train(tmp_path, b, b, *wide)) for b in ("hf", "vllm")}
    for b, rows in runs.items():
        assert [r["step"] for r in rows] == [0, 1, 2], b
        assert all(math.isfinite(r["loss"]) for r in rows), b
        assert "val_avg_at_2" in rows[-1], b
    n = 32 * 8
    v0, h0 = runs["vllm"][0], runs["hf"][0]
    p = (v0["reward_mean"] + h0["reward_mean"]) / 2
    se = math.sqrt(2 * max(p * (1 - p), 1 / n) / n)
    assert abs(v0["reward_mean"] - h0["reward_mean"]) <= 4.4 * se, (v0["reward_mean"], h0["reward_mean"], se)
    lv, lh = v0["gen_new_tokens"] / n, h0["gen_new_tokens"] / n
    assert abs(lv - lh) <= 0.25 * max(lv, lh), (lv, lh)


def test_train_plugin_composition_and_resume_on_vllm(tmp_path):
    """VSR + ExTra's novelty bonus + rollout replay (configs/testbed_compose.yaml) on vLLM, stopped after 2 steps
    and resumed: the engine is re-synced from the checkpoint, training continues."""
    extra = ("--config", "configs/testbed_compose.yaml", "--plugins.replay.warmup", "0")
    run = tmp_path / "vsr"
    common = ("train", *extra, "--steps", "4", "--model.backend", "vllm", "--validation.every", "0",
              "--out", str(run), "--run.progress", "false", "--run.checkpoint-every", "2")
    vsr(*common, "--run.stop-after", "2")
    assert [r["step"] for r in metrics(run)] == [0, 1]
    vsr(*common, "--run.resume", "true")
    rows = metrics(run)
    assert [r["step"] for r in rows] == [0, 1, 2, 3]
    assert any(k.startswith("vsr") for k in rows[-1]), sorted(rows[-1])


def test_train_in_bf16_on_vllm_samples_in_bf16_and_corrects_the_gap(tmp_path):
    """``run.precision bf16`` with the vLLM backend: the engine runs in bf16 on the float32 master weights (synced
    every step), the trainer measures the train/sample log-prob gap and applies the truncated weights."""
    run = _train(tmp_path, "bf16", "vllm", "--run.precision", "bf16", steps=2)
    rows = metrics(run)
    assert [r["step"] for r in rows] == [0, 1]
    trained = [r for r in rows if "mismatch_logp_mean" in r]
    assert trained, rows  # the test bed's mid model leaves mixed groups on step arithmetic
    for r in trained:
        assert math.isfinite(r["loss"])
        # bf16 sampling against the bf16 loss pass: a gap exists (not bit-identical kernels) but is small
        assert 0.0 < r["mismatch_logp_mean"] < 0.1, r["mismatch_logp_mean"]
        assert 0.5 < r["tis_weight_mean"] <= 2.0
