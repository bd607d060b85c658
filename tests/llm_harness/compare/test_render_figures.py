"""The suite's summary figures (:func:`llm_harness.compare.render.suite_figures`): a sorted forest of paired
differences to the reference and learning curves with seed bands for at most six arms per panel, each with its
numbers in a CSV beside it; and their redrawing from a committed ``summary.json`` alone."""

from __future__ import annotations

import csv
import math
import re
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from llm_harness.compare import render
from theory.metrics.paired import paired_contrast

ROOT = Path(__file__).resolve().parents[3]
ARMS = ("grpo", "a1", "a2", "a3", "a4", "a5", "a6", "a7")
#: each arm's offset from the reference in final avg@1 (a1 the largest |Δ|, a7 the smallest)
OFFSET = {"grpo": 0.0, "a1": 0.12, "a2": -0.10, "a3": 0.08, "a4": -0.06, "a5": 0.04, "a6": 0.02, "a7": -0.01}


def _suite(figure_arms: tuple[str, ...] = ()) -> SimpleNamespace:
    methods = tuple(SimpleNamespace(name=a, label=f"arm {a} | label", family="x") for a in ARMS)
    return SimpleNamespace(methods=methods, reference="grpo", figure_arms=figure_arms)


def _summary() -> dict:
    """Two regimes, eight arms, three seeds, evaluations at updates 10 and 20 (30 for one arm); seed 2 of a3 lost its
    last evaluation (its final is nan) and a7 has one seed only."""
    out = {}
    for ri, r in enumerate(("easy", "hard")):
        base = {s: {"avg": 0.30 + 0.01 * s - 0.1 * ri, "pass": 0.6} for s in range(3)}
        methods = {}
        for ai, a in enumerate(ARMS):
            noise = np.random.default_rng(10 * ri + ai)
            seeds = {}
            for s in (range(1) if a == "a7" else range(3)):
                final = 0.40 - 0.1 * ri + 0.01 * s + OFFSET[a] + 0.005 * noise.random()
                steps = (10, 20, 30) if a == "a5" else (10, 20)
                curve = [[st, final - 0.02 * (len(steps) - 1 - i), 0.7] for i, st in enumerate(steps)]
                if a == "a3" and s == 2:
                    curve[-1][1] = None
                    final = math.nan
                seeds[s] = {"avg": final, "pass": 0.7, "curve": curve}
            methods[a] = {"seeds": seeds}
        out[r] = {"base": base, "methods": methods}
    return out


def _read(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return list(csv.DictReader(f))


def _capture(monkeypatch) -> dict:
    """Record, per saved figure stem, the number of lines and the legend labels of each axes that has lines."""
    seen: dict = {}
    save = render.save_figure

    def spy(fig, out_dir, stem, **kw):
        seen[stem] = [([ln.get_label() for ln in ax.get_lines()], ax.get_title()) for ax in fig.axes if ax.get_lines()]
        return save(fig, out_dir, stem, **kw)

    monkeypatch.setattr(render, "save_figure", spy)
    return seen


def test_suite_figures_write_both_figures_and_their_csvs(tmp_path, monkeypatch):
    seen = _capture(monkeypatch)
    summary = _summary()
    names = render.suite_figures(tmp_path, summary, _suite())
    assert names == ["compare_final.png", "compare_curves.png"]
    for stem in ("compare_final", "compare_curves"):
        assert (tmp_path / f"{stem}.png").stat().st_size > 0 and (tmp_path / f"{stem}.csv").is_file()

    # the forest's numbers: paired differences to the reference over the common finite seeds
    rows = {(r["regime"], r["method"]): r for r in _read(tmp_path / "compare_final.csv")}
    assert set(rows) == {(r, a) for r in summary for a in ("base",) + ARMS}
    for r, reg in summary.items():
        ref = reg["methods"]["grpo"]["seeds"]
        for a in ARMS:
            seeds = reg["methods"][a]["seeds"]
            common = [s for s in seeds if math.isfinite(seeds[s]["avg"])]
            diffs = [seeds[s]["avg"] - ref[s]["avg"] for s in common]
            row = rows[(r, a)]
            assert float(row["diff"]) == pytest.approx(sum(diffs) / len(diffs), abs=1e-6)
            assert int(row["n_paired"]) == len(common) and int(row["n_seeds"]) == len(common)
            c = paired_contrast(diffs)
            if len(common) > 1 and a != "grpo":
                assert float(row["diff_lo"]) == pytest.approx(c.ci_low, abs=1e-6)
                assert float(row["diff_hi"]) == pytest.approx(c.ci_high, abs=1e-6)
                assert float(row["diff_lo"]) < float(row["diff"]) < float(row["diff_hi"])
            if a == "a7":  # one seed: the point, no interval
                assert row["diff_lo"] == "" and row["diff_hi"] == ""
        base = [reg["base"][s]["avg"] - ref[s]["avg"] for s in range(3)]
        assert float(rows[(r, "base")]["diff"]) == pytest.approx(np.mean(base), abs=1e-6)
    # the forest: one panel per regime, every arm but the reference, sorted by the difference
    assert len(seen["compare_final"]) == 2

    # the curves' numbers: every arm, mean/min/max per step over the seeds with a finite value, step 0 the start
    curves = _read(tmp_path / "compare_curves.csv")
    assert {(c["regime"], c["method"]) for c in curves} == {(r, a) for r in summary for a in ARMS}
    a3_last = next(c for c in curves if c["regime"] == "easy" and c["method"] == "a3" and c["step"] == "20")
    assert a3_last["n_seeds"] == "2"  # the lost evaluation is left out, not a nan mean
    a5 = [c for c in curves if c["regime"] == "easy" and c["method"] == "a5"]
    assert [int(c["step"]) for c in a5] == [0, 10, 20, 30]
    s10 = [summary["easy"]["methods"]["a5"]["seeds"][s]["curve"][0][1] for s in range(3)]
    row10 = a5[1]
    assert (float(row10["mean"]), float(row10["min"]), float(row10["max"])) == pytest.approx(
        (np.mean(s10), min(s10), max(s10)), abs=1e-6)
    assert float(a5[0]["mean"]) == pytest.approx(np.mean([summary["easy"]["base"][s]["avg"] for s in range(3)]), abs=1e-6)

    # ... but the figure draws the reference and the 5 arms with the largest |Δ| only (a6, a7 left out)
    panels = seen["compare_curves"]
    assert len(panels) == 2
    for labels, title in panels:
        assert len(labels) == 6
        drawn = [lab.split(" (Δ")[0] for lab in labels]
        assert drawn[0] == "arm grpo | label"  # the reference first, the figure without markdown escapes
        assert sorted(drawn[1:]) == [f"arm a{i} | label" for i in range(1, 6)]
        assert "largest |Δ|" in title and "compare_curves.csv" in title


def test_curves_draw_the_suites_figure_arms_when_it_sets_them(tmp_path, monkeypatch):
    seen = _capture(monkeypatch)
    render.suite_figures(tmp_path, _summary(), _suite(figure_arms=("grpo", "a6", "a7")))
    for labels, title in seen["compare_curves"]:
        assert [lab.split(" (Δ")[0] for lab in labels] == ["arm grpo | label", "arm a6 | label", "arm a7 | label"]
        assert "figure arms" in title


def test_one_seed_arms_and_a_missing_reference_do_not_break_the_figures(tmp_path):
    s = _summary()
    s["easy"]["methods"] = {a: {"seeds": {0: v["seeds"][0]}} for a, v in s["easy"]["methods"].items()}
    del s["hard"]["methods"]["grpo"]
    s["hard"]["base"] = {}
    render.suite_figures(tmp_path, s, _suite())
    rows = _read(tmp_path / "compare_final.csv")
    assert all(r["diff_lo"] == "" for r in rows)  # one seed, or nothing to pair with: no interval
    assert all(r["diff"] == "" for r in rows if r["regime"] == "hard")
    assert not any(c["step"] == "0" for c in _read(tmp_path / "compare_curves.csv") if c["regime"] == "hard")


def test_figures_from_a_committed_summary_alone(tmp_path):
    folder = tmp_path / "testbed"
    folder.mkdir()
    shutil.copy(ROOT / "figures" / "compare_testbed" / "summary.json", folder / "summary.json")
    assert render.figures_from_summary(folder) == ["compare_final.png", "compare_curves.png"]
    for name in ("compare_final.png", "compare_curves.png", "compare_final.csv", "compare_curves.csv"):
        assert (folder / name).stat().st_size > 0, name
    final = _read(folder / "compare_final.csv")
    assert {r["regime"] for r in final} == {"normal", "normal_lr1e-4", "hard"}
    assert all(float(r["diff"]) == 0.0 for r in final if r["method"] == "grpo")


def test_a_missing_or_malformed_summary_is_named(tmp_path, capsys):
    with pytest.raises(ValueError, match=re.escape(str(tmp_path / "summary.json"))):
        render.figures_from_summary(tmp_path)
    (tmp_path / "summary.json").write_text("{not json")
    with pytest.raises(ValueError, match="summary.json: not a suite summary"):
        render.figures_from_summary(tmp_path)
    assert render.main([str(tmp_path)]) == 2
    assert str(tmp_path / "summary.json") in capsys.readouterr().err


def test_report_tables_quote_commas_and_quotes(tmp_path):
    """A report table's CSV reads back field for field, a label holding a comma and quotes included; floats at 6
    significant digits, non-finite ones empty."""
    label = 'VSR (ρ 0.3, "calibrated" σ̂)'
    render.write_csv(tmp_path / "t.csv", ["arm", "mean", "diff"], [[label, 1 / 3, float("nan")], ["grpo", 0.5, float("inf")]])
    with open(tmp_path / "t.csv", newline="", encoding="utf-8") as fh:
        assert list(csv.reader(fh)) == [["arm", "mean", "diff"], [label, "0.333333", ""], ["grpo", "0.5", ""]]
