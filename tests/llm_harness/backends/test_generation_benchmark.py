"""Smoke test of ``benchmarks/generation.py --quick``: it runs, prints a table and writes the CSV."""

from __future__ import annotations

import csv
import importlib.util
import json
import sys
from dataclasses import replace
from pathlib import Path

BENCH = Path(__file__).resolve().parents[3] / "benchmarks" / "generation.py"


def _load():
    spec = importlib.util.spec_from_file_location("bench_generation", BENCH)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(mod)
    return mod


def test_quick_mode_writes_table_and_csv(tmp_path, capsys):
    bench = _load()
    cfg = bench.GenerationBenchConfig(quick=True, out=str(tmp_path / "gen.csv"))
    # quick mode, further shrunk so the smoke test stays fast (the sizes are config fields)
    small = replace(cfg.resolved(), quick=False, vocab_sizes=(26, 2_000), max_new_tokens=8, num_prompts=2,
                    prefix_len=8, repeats=1)
    assert bench.run(small) == 0
    out = capsys.readouterr().out
    assert "ratio" in out and "generation" in out and "entropy" in out
    with open(tmp_path / "gen.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert [r["benchmark"] for r in rows] == ["generation", "generation", "entropy", "entropy"]
    assert [r["scenario"] for r in rows[:2]] == ["fresh", "prefix"]
    assert {r["vocab_size"] for r in rows[2:]} == {"26", "2000"}
    for r in rows:
        assert float(r["ratio"]) > 0 and float(r["ours_tok_per_s"]) > 0 and float(r["baseline_tok_per_s"]) > 0
        assert r["meets_target"] in ("True", "False")
    saved = json.loads((tmp_path / "gen.config.json").read_text())
    assert saved["vocab_sizes"] == [26, 2000] and saved["max_new_tokens"] == 8


def test_quick_resolution_shrinks_sizes():
    bench = _load()
    full = bench.GenerationBenchConfig()
    quick = bench.GenerationBenchConfig(quick=True).resolved()
    assert quick.repeats < full.repeats and quick.max_new_tokens < full.max_new_tokens
    assert 152_064 in full.vocab_sizes and 152_064 not in quick.vocab_sizes
