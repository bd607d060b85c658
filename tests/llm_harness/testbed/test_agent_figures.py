"""The agents' continuation figure: built from the shipped cards alone, every plotted number in its CSV."""

from __future__ import annotations

import csv
import json

from llm_harness.testbed.figures import CURVE_COLUMNS, continuation_rows, make_agent_figures
from llm_harness.testbed.paths import CHECKPOINT_DIR


def test_figure_and_csv_from_cards(tmp_path):
    fake = tmp_path / "ckpt"
    rows = [{"alpha": a, "mean_prefix": 2 * a, "n_seeds": 4, "samples_per_seed": 8, "success": a / 2, "ci_low": 0.0,
             "ci_high": 1.0, "groups_all_fail": 1 - a, "groups_mixed": a, "groups_all_success": 0.0, "mean_length": 3.0,
             "invalid_rate": 0.0} for a in (0.0, 0.5)]
    for name, step in (("low", 1), ("mid", 2)):
        (fake / "sokoban" / name).mkdir(parents=True)
        card = {"step": step, "agent": {"level_label": "sokoban"}, "evaluation": {"continuation": rows}}
        (fake / "sokoban" / name / "card.json").write_text(json.dumps(card))
    pngs = make_agent_figures(tmp_path / "out", checkpoint_dir=fake)
    assert [p.name for p in pngs] == ["continuation_sokoban.png"] and not (tmp_path / "out" / "continuation_sokoban.pdf").exists()
    with open(tmp_path / "out" / "continuation_sokoban.csv") as fh:
        got = list(csv.DictReader(fh))
    assert tuple(got[0]) == CURVE_COLUMNS and len(got) == 4
    assert [(r["checkpoint"], float(r["alpha"])) for r in got] == [("low", 0.0), ("low", 0.5), ("mid", 0.0), ("mid", 0.5)]


def test_shipped_rows_match_the_cards():
    rows = continuation_rows(CHECKPOINT_DIR, "sokoban")
    for r in rows:
        card = json.loads((CHECKPOINT_DIR / "sokoban" / r["checkpoint"] / "card.json").read_text())
        ref = next(c for c in card["evaluation"]["continuation"] if c["alpha"] == r["alpha"])
        assert r["success"] == ref["success"] and r["step"] == card["step"]
