"""scripts/real_model_readers.py: the five studies' headlines under both verifiers, from their summaries."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("real_model_readers", ROOT / "scripts" / "real_model_readers.py")
readers = importlib.util.module_from_spec(spec)
spec.loader.exec_module(readers)


def test_every_study_gets_its_lenient_and_strict_headlines(tmp_path):
    for study in readers.STUDIES:  # the committed lenient summaries, and a "strict" copy with one number changed
        for name in (study, f"{study}-strict"):
            (tmp_path / name).mkdir()
            shutil.copy(ROOT / "figures" / "real_model" / study / "summary.json", tmp_path / name / "summary.json")
    strict = tmp_path / "hint-ratio-strict" / "summary.json"
    s = json.loads(strict.read_text())
    s["curve"][0]["mean"] = 0.5
    strict.write_text(json.dumps(s))
    assert readers.main(["--root", str(tmp_path)]) == 0
    table = json.loads((tmp_path / "readers.json").read_text())
    assert list(table) == list(readers.STUDIES)
    row = next(k for k in table["hint-ratio"]["lenient"] if k.startswith("success at"))
    assert table["hint-ratio"]["lenient"][row].startswith("0.11 /") and table["hint-ratio"]["strict"][row].startswith("0.50 /")
    assert table["sigma-validation"]["lenient"] == table["sigma-validation"]["strict"]
    md = (tmp_path / "readers.md").read_text()
    assert md.count("\n| ") == 2 + sum(len(v["lenient"]) for v in table.values())  # header, rule, one line per row


def test_a_root_without_pairs_is_refused(tmp_path):
    (tmp_path / "hint-ratio").mkdir()
    with pytest.raises(SystemExit, match="no study has both"):
        readers.main(["--root", str(tmp_path)])
