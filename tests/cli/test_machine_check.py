"""``vsr_util.machine``: the copy bandwidth a long run checks first, the starved flag and the one-line report
(warning by default, exit 3 under ``--strict``), and the long-run scripts that call it."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest

import vsr_util.machine as machine

ROOT = Path(__file__).resolve().parents[2]


def test_copy_bandwidth_is_a_positive_rate_and_refuses_bad_sizes():
    assert machine.copy_bandwidth(mib=4, repeats=2) > 0
    with pytest.raises(ValueError, match="mib and repeats"):
        machine.copy_bandwidth(mib=0)


def _bandwidth(small: float, huge: float):
    return lambda mib=256, repeats=3, *, huge_pages=False: huge if huge_pages else small


def test_the_huge_page_switch_is_restored():
    import numpy as np

    switch = np._core.multiarray if hasattr(np, "_core") else np.core.multiarray
    before = switch._get_madvise_hugepage()
    machine.copy_bandwidth(mib=4, repeats=1, huge_pages=not before)
    assert switch._get_madvise_hugepage() == before


@pytest.mark.parametrize("small, huge, starved, helps", [(1.1, 20.0, True, True), (7.99, 9.0, True, False),
                                                          (8.0, 8.0, False, False), (30.0, 31.0, False, False),
                                                          (10.0, 20.0, False, True)])
def test_the_flags_follow_the_bandwidths(monkeypatch, small, huge, starved, helps):
    monkeypatch.setattr(machine, "copy_bandwidth", _bandwidth(small, huge))
    m = machine.machine_check()
    assert m["starved"] is starved and m["huge_pages_help"] is helps and m["copy_gbps"] == small and m["cpus"] >= 1


def test_a_starved_machine_warns_and_strict_refuses(monkeypatch, capsys):
    monkeypatch.delenv("THP_MEM_ALLOC_ENABLE", raising=False)
    monkeypatch.setattr(machine, "copy_bandwidth", _bandwidth(1.1, 1.5))  # huge pages do not rescue it
    assert machine.main(["--what", "the lab", "--export"]) == 0
    out = capsys.readouterr()
    assert "copy bandwidth 1.1 GB/s on 4 KiB pages" in out.err and "STARVED" in out.err
    assert "the lab may take many times" in out.err and out.out == ""
    assert machine.main(["--strict"]) == 3
    capsys.readouterr()
    monkeypatch.setattr(machine, "copy_bandwidth", _bandwidth(25.0, 26.0))
    assert machine.main(["--strict", "--export"]) == 0
    out = capsys.readouterr()
    assert "copy bandwidth 25.0 GB/s" in out.err and "STARVED" not in out.err and out.out == ""


def test_huge_pages_that_rescue_a_starved_machine_are_exported(monkeypatch, capsys):
    monkeypatch.delenv("THP_MEM_ALLOC_ENABLE", raising=False)
    monkeypatch.setattr(machine, "copy_bandwidth", _bandwidth(0.5, 20.0))
    assert machine.main(["--export", "--strict"]) == 0  # rescued: not refused
    out = capsys.readouterr()
    assert out.out == "export THP_MEM_ALLOC_ENABLE=1\n" and "STARVED" not in out.err and "THP_MEM_ALLOC_ENABLE=1" in out.err
    assert machine.main(["--strict"]) == 3  # without --export nothing turns them on: still starved
    capsys.readouterr()
    monkeypatch.setenv("THP_MEM_ALLOC_ENABLE", "1")  # already set by the caller: nothing to export, not starved
    assert machine.main(["--export", "--strict"]) == 0
    out = capsys.readouterr()
    assert out.out == "" and "is set" in out.err


@pytest.mark.parametrize("script", ["lab_runs.sh", "real_model_studies.sh", "real_model_grpo.sh"])
def test_the_long_run_scripts_check_the_machine_first(script):
    text = (ROOT / "scripts" / script).read_text()
    assert "-m vsr_util.machine" in text


@pytest.mark.parametrize("mode, expect", [("1", ["-m", "vsr_util.machine", "--export", "--what", "the real-model studies"]),
                                          ("strict", ["-m", "vsr_util.machine", "--export", "--strict", "--what",
                                                      "the real-model studies"]),
                                          ("0", None)])
def test_the_studies_script_runs_the_check_before_any_study(tmp_path, mode, expect):
    calls = tmp_path / "calls.txt"
    fake = tmp_path / "python"  # records its arguments, one line per call
    fake.write_text(f'#!/usr/bin/env bash\nprintf "%q " "$@" >> {shlex.quote(str(calls))}\necho >> {shlex.quote(str(calls))}\n')
    fake.chmod(0o755)
    res = subprocess.run(["bash", str(ROOT / "scripts" / "real_model_studies.sh"), "hint-ratio"], capture_output=True,
                         text=True, timeout=60, env={"PATH": "/usr/bin:/bin", "PYTHON": str(fake), "MACHINE_CHECK": mode,
                                                     "MODEL": str(tmp_path / "m"), "OUT": str(tmp_path / "out")})
    assert res.returncode == 0, res.stderr
    lines = [shlex.split(x) for x in calls.read_text().splitlines()]
    if expect is None:
        assert lines[0][:4] == ["-m", "vsr", "study", "hint-ratio"]
    else:
        assert lines[0] == expect and lines[1][:4] == ["-m", "vsr", "study", "hint-ratio"]


def test_strict_stops_the_script_on_a_starved_machine(tmp_path):
    """The check's exit 3 under MACHINE_CHECK=strict ends the script before any study (set -e on the assignment)."""
    calls = tmp_path / "calls.txt"
    fake = tmp_path / "python"  # exits 3 as the check on a starved machine would; records every call
    fake.write_text(f'#!/usr/bin/env bash\nprintf "%q " "$@" >> {shlex.quote(str(calls))}\necho >> {shlex.quote(str(calls))}\n'
                    'case "$*" in *vsr_util.machine*--strict*) exit 3 ;; esac\n')
    fake.chmod(0o755)
    res = subprocess.run(["bash", str(ROOT / "scripts" / "real_model_studies.sh"), "hint-ratio"], capture_output=True,
                         text=True, timeout=60, env={"PATH": "/usr/bin:/bin", "PYTHON": str(fake), "MACHINE_CHECK": "strict",
                                                     "MODEL": str(tmp_path / "m"), "OUT": str(tmp_path / "out")})
    assert res.returncode == 3
    assert [shlex.split(x)[:2] for x in calls.read_text().splitlines()] == [["-m", "vsr_util.machine"]]
