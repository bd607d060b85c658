"""scripts/gpu_check.sh: the parts that run without a GPU (argument checks, step table)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu_check.sh"


def _run(out_dir: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), str(out_dir)], capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "PYTHON": sys.executable})


def test_refuses_a_folder_that_holds_an_earlier_run(tmp_path):
    (tmp_path / "steps.tsv").write_text("step\texit\tseconds\n")
    res = _run(tmp_path)
    assert res.returncode == 3
    assert str(tmp_path) in res.stderr and "not empty" in res.stderr
    assert (tmp_path / "steps.tsv").read_text() == "step\texit\tseconds\n"  # nothing touched


def test_without_cuda_it_says_so_and_exits_2(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("CUDA is available here: the script would run its checks")
    res = _run(tmp_path / "out")
    assert res.returncode == 2
    assert "CUDA is not available" in res.stderr


def test_every_default_step_has_a_function():
    text = SCRIPT.read_text()
    default = re.search(r'STEPS="\$\{STEPS:-([^}]*)\}"', text).group(1).split()
    defined = set(re.findall(r"^step_(\w+)\(\)", text, flags=re.M))
    assert "contract" in defined and set(default) <= defined
    assert set(default) | {"contract"} == defined  # no step left out of the default run
