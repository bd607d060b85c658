"""Smoke test of benchmarks/exact_sweep.py in quick mode (``vsr bench exact``)."""

from __future__ import annotations

import csv
import dataclasses
import importlib.util
import json
import sys
from pathlib import Path

import pytest

from gridworld import exact
from vsr_util.registry import Registry

ROOT = Path(__file__).resolve().parents[2]


def _load():
    spec = importlib.util.spec_from_file_location("exact_sweep_bench", ROOT / "benchmarks" / "exact_sweep.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(mod)
    return mod


def test_quick_run_writes_csv_summary_and_config(tmp_path, capsys, force_parallel):
    mod = _load()
    out = tmp_path / "bench" / "exact.csv"
    cfg = mod.ExactSweepConfig(quick=True, measure_compile=False, progress=False, out=str(out))
    assert mod.run(cfg) == 0
    rows = list(csv.DictReader(out.open()))
    assert list(rows[0]) == list(mod.COLUMNS)
    assert len(rows) == 2 * 2 * 2 * 4  # families x sizes x inits x solvers
    assert {r["backend"] for r in rows} == {"numba_parallel", "numba_serial", "numpy", "scipy"}
    for r in rows:
        assert float(r["max_abs_err_vs_numpy"]) <= 1e-10
        assert float(r["sweep_s"]) > 0 and float(r["fraction_of_bandwidth"]) > 0
        assert float(r["sweep_fresh_s"]) > 0 and float(r["gather_free_fraction"]) > 0
        assert int(r["prefetch"]) == 0  # quick sizes fit in cache: no software prefetch
        if r["backend"] == "numpy":
            assert float(r["speedup_vs_numpy"]) == 1.0
    summary = json.loads(out.with_suffix(".json").read_text())
    assert summary["bandwidth_Bps"] > 0 and summary["threads"] >= 1
    assert summary["grid_target_consistent"] is True
    assert (tmp_path / "bench" / "exact_config.yaml").exists()
    printed = capsys.readouterr().out
    assert "x numpy" in printed and "all exact quantities" in printed


def test_mismatch_is_caught_before_timing(monkeypatch):
    mod = _load()
    good = exact.SOLVERS["scipy"]

    def wrong_backward(kern, ti, tr, H, out=None):
        p = good.backward(kern, ti, tr, H, out=out)
        p[0, 0] += 1e-6
        return p

    wrong = dataclasses.replace(good, backward=wrong_backward)
    monkeypatch.setattr(exact, "SOLVERS", Registry(exact.SOLVERS.kind, {**exact.SOLVERS, "scipy": wrong}))
    cfg = mod._quick(mod.ExactSweepConfig(families=("random",), inits=("point",), progress=False))
    with pytest.raises(RuntimeError, match="scipy disagrees"):
        mod.run_rows(cfg)


def test_sweep_bytes_model():
    mod = _load()
    # 2H mat-vecs, each: values + int32 indices, row pointers, read x, write y.
    assert mod.sweep_bytes(10, 30, 4) == 2 * 4 * (30 * 12 + 11 * 4 + 160)


def test_solvers_flag_and_its_old_name(capsys):
    """``--solvers`` selects the exact solvers; ``--backends`` (the old name) still works; unknown names are refused."""
    import tyro

    mod = _load()
    for flag in ("--solvers", "--backends"):
        assert tyro.cli(mod.ExactSweepConfig, args=[flag, "numpy", "scipy"]).solvers == ("numpy", "scipy")
    with pytest.raises(SystemExit):
        tyro.cli(mod.ExactSweepConfig, args=["--help"])
    assert "--solvers" in capsys.readouterr().out
    cfg = mod._quick(mod.ExactSweepConfig(families=("random",), inits=("point",), solvers=("cuda",), progress=False))
    with pytest.raises(ValueError, match=r"^solvers: unknown exact solver 'cuda'"):
        mod.run_rows(cfg)
