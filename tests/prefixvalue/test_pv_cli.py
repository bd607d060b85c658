"""Entry points: argparse (``python -m prefixvalue``, no tyro) and the tyro-facing ``run(cfg)`` functions."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from prefixvalue import cli
from prefixvalue.studies.prefix_selection import PrefixSelectionConfig
from prefixvalue.studies.sigma_validation import SigmaValidationConfig

ROOT = Path(__file__).resolve().parents[2]


def test_argparse_builds_the_study_config():
    name, cfg = cli.parse_config(["sigma-validation", "--quick", "--device", "cuda", "--out", "/tmp/x", "--positions",
                                  "0.3", "0.6", "--no-progress", "--task-params", "seed=2", "--max-difficulty", "6"])
    assert name == "sigma-validation" and isinstance(cfg, SigmaValidationConfig)
    assert (cfg.quick, cfg.device, cfg.out, cfg.positions, cfg.progress) == (True, "cuda", "/tmp/x", (0.3, 0.6), False)
    assert cfg.task_params == ("seed=2",) and cfg.max_difficulty == 6.0 and cfg.min_difficulty == 5.0
    name, cfg = cli.parse_config(["prefix-selection", "--embedder", "char-ngram", "--tau", "0.5", "--backend", "vllm"])
    assert isinstance(cfg, PrefixSelectionConfig) and (cfg.embedder, cfg.tau, cfg.backend) == ("char-ngram", 0.5, "vllm")
    assert math.isinf(cfg.max_difficulty)


def test_argparse_rejects_unknown_studies_and_bad_values():
    with pytest.raises(SystemExit):
        cli.parse_config(["no-such-study"])
    with pytest.raises(ValueError, match="backend"):
        cli.parse_config(["hint-ratio", "--backend", "tgi"])


def test_each_study_command_takes_its_study_config():
    from vsr.cli import COMMANDS, _config_type, _resolve

    for name, cls in (("hint-ratio", "HintRatioConfig"), ("failed-prefix", "FailedPrefixConfig"),
                      ("sigma-validation", "SigmaValidationConfig"), ("mte-correlation", "MTECorrelationConfig"),
                      ("prefix-selection", "PrefixSelectionConfig")):
        assert _config_type(_resolve(COMMANDS[f"study {name}"])).__name__ == cls


def test_tyro_parses_every_study_config():
    tyro = pytest.importorskip("tyro")
    from vsr.cli import COMMANDS, _config_type, _resolve

    for name in ("hint-ratio", "failed-prefix", "sigma-validation", "mte-correlation", "prefix-selection"):
        cfg = tyro.cli(_config_type(_resolve(COMMANDS[f"study {name}"])),
                       args=["--quick", "--model", "low", "--out", "/tmp/y", "--task-params", "seed=1"])
        assert cfg.quick and cfg.model == "low" and cfg.task_params == ("seed=1",)


@pytest.mark.slow
def test_python_dash_m_runs_a_study(tmp_path):
    out = tmp_path / "hr"
    res = subprocess.run(
        [sys.executable, "-m", "prefixvalue", "hint-ratio", "--n-problems", "2", "--chunk-problems", "2",
         "--n-continuations", "2", "--alphas", "0", "1", "--out", str(out), "--no-progress", "--num-threads", "1"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    assert f"results: {out}" in res.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert [c["alpha"] for c in summary["curve"]] == [0.0, 1.0]


def test_help_of_every_study_renders(capsys):
    """Titles and field docs hold '%' (e.g. '25/50/75% prefixes'): argparse must not read them as formats."""
    from prefixvalue.registry import STUDIES

    for name in [None, *STUDIES]:
        with pytest.raises(SystemExit) as info:
            cli.parse_config(["--help"] if name is None else [name, "--help"])
        assert info.value.code == 0
    assert "75% prefixes" in capsys.readouterr().out


def test_model_label_shortens_local_folders_only(tmp_path):
    from prefixvalue.runner import model_label

    d = tmp_path / "models" / "smollm2-135m-instruct-b179c9523d0e"
    d.mkdir(parents=True)
    assert model_label(str(d)) == "smollm2-135m-instruct-b179c9523d0e"
    assert model_label("mid") == "mid" and model_label("Qwen/Qwen2.5-7B-Instruct") == "Qwen/Qwen2.5-7B-Instruct"
