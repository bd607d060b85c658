"""Smoke test of benchmarks/prefix_value.py at tiny sizes."""

from __future__ import annotations

import csv

import pytest


@pytest.mark.slow
def test_prefix_value_benchmark_quick(tmp_path, capsys):
    from benchmarks.prefix_value import PrefixValueBenchConfig, run

    rc = run(PrefixValueBenchConfig(quick=True, out=str(tmp_path), study_sizes="none"))
    rows = list(csv.DictReader((tmp_path / "prefix_value.csv").open()))
    assert rows[0]["benchmark"] == "continuation throughput"
    ratio = float(rows[0]["ratio"])
    assert ratio > 0 and rc == (0 if ratio >= 3 else 1)
    assert "continuation throughput" in capsys.readouterr().out
    assert (tmp_path / "config.yaml").is_file()
