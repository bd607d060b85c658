"""scripts/real_model_studies.sh: the arguments it hands each study (a stand-in for the interpreter records them)."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest

from llm_harness.tasks.arith_ladder import DECLARE_INSTRUCTION

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "real_model_studies.sh"


def _run(tmp_path: Path, *studies: str, **env: str) -> tuple[subprocess.CompletedProcess, list[list[str]]]:
    """The script with PYTHON a stand-in that appends its arguments to a file (one line per study) instead of
    running one."""
    calls = tmp_path / "calls.txt"
    fake = tmp_path / "python"
    fake.write_text(f'#!/usr/bin/env bash\nprintf "%q " "$@" >> {shlex.quote(str(calls))}\necho >> {shlex.quote(str(calls))}\n')
    fake.chmod(0o755)
    res = subprocess.run(["bash", str(SCRIPT), *studies], capture_output=True, text=True, timeout=60,
                         env={"PATH": "/usr/bin:/bin", "PYTHON": str(fake), "MODEL": str(tmp_path / "model"),
                              "OUT": str(tmp_path / "out"), "MACHINE_CHECK": "0", **env})
    lines = calls.read_text().splitlines() if calls.is_file() else []
    return res, [shlex.split(line) for line in lines]


def _params(args: list[str]) -> list[str]:
    i = args.index("--task-params")
    out = []
    for a in args[i + 1:]:
        if a.startswith("--"):
            break
        out.append(a)
    return out


@pytest.mark.parametrize("env", [{}, {"STRICT": "1"}], ids=["default", "STRICT=1"])
def test_strict_hands_every_study_the_strict_verifier_its_instruction_and_budgets(tmp_path, env):
    res, calls = _run(tmp_path, "hint-ratio", "failed-prefix", STRICT_BUDGETS="{word: 64}", **env)
    assert res.returncode == 0, res.stderr
    assert len(calls) == 2
    for call, study in zip(calls, ("hint-ratio", "failed-prefix")):
        assert call[:3] == ["-m", "vsr", "study"] and call[3] == study
        params = _params(call)
        assert "answer_mode=strict" in params and "level_budgets={word: 64}" in params
        assert f"instruction={DECLARE_INSTRUCTION}" in params  # the instruction the chat defaults use
        assert call[call.index("--out") + 1] == str(tmp_path / "out" / f"{study}-strict")


def test_strict_0_keeps_the_lenient_verifier_and_folders_of_the_first_runs(tmp_path):
    res, calls = _run(tmp_path, "hint-ratio", STRICT="0")
    assert res.returncode == 0, res.stderr
    assert _params(calls[0]) == ["answer_mode=lenient"]
    assert calls[0][calls[0].index("--out") + 1] == str(tmp_path / "out" / "hint-ratio")


def test_a_bad_strict_value_is_refused(tmp_path):
    res, calls = _run(tmp_path, "hint-ratio", STRICT="yes")
    assert res.returncode == 2 and "STRICT must be 1" in res.stderr and not calls


def test_an_unknown_study_is_named(tmp_path):
    res, calls = _run(tmp_path, "nope")
    assert res.returncode == 2 and "unknown study 'nope'" in res.stderr and not calls


@pytest.mark.parametrize("n", ["0", "x"])
def test_a_bad_problem_count_is_refused(tmp_path, n):
    res, _ = _run(tmp_path, "hint-ratio", N_PROBLEMS=n)
    assert res.returncode == 2 and "N_PROBLEMS must be a positive integer" in res.stderr
