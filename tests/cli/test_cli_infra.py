"""The CLI plumbing: config files, atomic writes, the figures driver."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from vsr_util import atomic
from vsr.cli import COMMANDS, _config_type, _resolve, main
from vsr_util.config_io import from_dict, load_config, save_config, to_dict


@dataclass(frozen=True)
class Inner:
    lr: float = 1e-3
    """learning rate"""


@dataclass(frozen=True)
class Outer:
    name: str = "x"
    steps: int = 3
    tags: tuple[str, ...] = ()
    inner: Inner = field(default_factory=Inner)


def test_config_round_trip(tmp_path):
    cfg = Outer(name="run", steps=7, tags=("a", "b"), inner=Inner(lr=0.5))
    for suffix in (".yaml", ".json"):
        path = save_config(cfg, tmp_path / f"cfg{suffix}")
        assert load_config(Outer, path) == cfg
    (tmp_path / "c.toml").write_text('name = "t"\n[inner]\nlr = 2.0\n')
    assert load_config(Outer, tmp_path / "c.toml") == Outer(name="t", inner=Inner(lr=2.0))
    assert to_dict(cfg)["inner"] == {"lr": 0.5}


def test_config_errors_name_the_problem(tmp_path):
    (tmp_path / "bad.yaml").write_text("name: a\nstepz: 3\n")
    with pytest.raises(ValueError, match=r"bad.yaml: unknown key\(s\) \['stepz'\]"):
        load_config(Outer, tmp_path / "bad.yaml")
    (tmp_path / "nested.yaml").write_text("inner:\n  lr: 1\n  momentum: 2\n")
    with pytest.raises(ValueError, match=r"nested.yaml.inner: unknown key\(s\) \['momentum'\]"):
        load_config(Outer, tmp_path / "nested.yaml")
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    with pytest.raises(ValueError, match="top level .* must be a mapping"):
        load_config(Outer, tmp_path / "list.yaml")
    (tmp_path / "x.ini").write_text("")
    with pytest.raises(ValueError, match="unsupported file type"):
        load_config(Outer, tmp_path / "x.ini")
    with pytest.raises(ValueError, match="file not found"):
        load_config(Outer, tmp_path / "missing.yaml")
    with pytest.raises(ValueError, match="unknown key"):
        from_dict(Outer, {"nope": 1})


def test_atomic_write_keeps_old_file_on_failure(tmp_path):
    target = tmp_path / "r.json"
    atomic.write_json(target, {"a": 1})
    with pytest.raises(TypeError):
        atomic.write_json(target, {"a": object()})
    assert json.loads(target.read_text()) == {"a": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]  # no temp file left behind
    with pytest.raises(ValueError):
        atomic.write_json(target, {"a": float("nan")})  # NaN is refused, not written


def test_split_fields_takes_the_named_entries_at_any_depth_and_keeps_the_rest():
    doc = {"suite": "s", "wall_s": 3.0, "methods": [{"name": "a", "avg": 0.5, "step_s": 1.0}, {"name": "b", "avg": 0.4}],
           "regimes": {"r": {"seeds": {"0": {"avg": 0.5, "wall_s": 2.0, "curve": [[1, 0.2]]}}}}}
    rest, taken = atomic.split_fields(doc, {"wall_s", "step_s"}, ids=("name",))
    assert rest == {"suite": "s", "methods": [{"name": "a", "avg": 0.5}, {"name": "b", "avg": 0.4}],
                    "regimes": {"r": {"seeds": {"0": {"avg": 0.5, "curve": [[1, 0.2]]}}}}}
    assert taken == {"wall_s": 3.0, "methods": [{"name": "a", "step_s": 1.0}, None],
                     "regimes": {"r": {"seeds": {"0": {"wall_s": 2.0}}}}}
    assert atomic.split_fields({"a": [1, {"b": 2}]}, {"wall_s"}) == ({"a": [1, {"b": 2}]}, None)
    assert doc["wall_s"] == 3.0 and doc["methods"][0]["step_s"] == 1.0  # the input is left as it was


def test_write_csv_round_trips_commas_quotes_and_line_breaks(tmp_path):
    import csv

    rows = [["a,b", 'say "hi"', 'x,"y",z', "line\nbreak", None, 0.25, float("nan")], ["plain", "", " ", "'", 1, True, 1e-7]]
    path = atomic.write_csv(tmp_path / "t.csv", ["h,1", 'h"2', "h3", "h4", "h5", "h6", "h7"], rows, na_rep="")
    with open(path, newline="", encoding="utf-8") as fh:
        back = list(csv.reader(fh))
    assert back == [["h,1", 'h"2', "h3", "h4", "h5", "h6", "h7"],
                    ["a,b", 'say "hi"', 'x,"y",z', "line\nbreak", "", "0.25", ""], ["plain", "", " ", "'", "1", "True", "1e-07"]]
    assert path.read_bytes().splitlines()[1].startswith(b'"a,b","say ""hi""","x,""y"",z"')
    assert [p.name for p in tmp_path.iterdir()] == ["t.csv"]  # atomic: no temp file left behind


def test_write_csv_formats_floats_maps_rows_by_header_and_keeps_line_ends(tmp_path):
    path = atomic.write_csv(tmp_path / "m.csv", ["a", "b"], [{"a": 1 / 3, "b": float("nan")}, {"b": "x"}],
                            float_format=atomic.CSV_FLOAT_FORMAT, lineterminator="\r\n")
    assert path.read_bytes() == b"a,b\r\n0.333333333333,nan\r\n,x\r\n"
    with pytest.raises(ValueError, match="outside the header"):
        atomic.write_csv(tmp_path / "m.csv", ["a"], [{"a": 1, "c": 2}])
    assert atomic.csv_text(["a"], [{"a": 1, "c": 2}], ignore_extra=True) == "a\n1\n"


@pytest.mark.parametrize("float_format", [None, "%.6g", atomic.CSV_FLOAT_FORMAT])
def test_write_frame_csv_writes_what_pandas_to_csv_writes(tmp_path, float_format):
    import numpy as np
    import pandas as pd

    frame = pd.DataFrame({"f": [0.1, np.nan, np.inf, -0.0, 1e16, 1 / 3],
                          "f32": np.array([0.1, np.nan, 2.5, 1e-7, 3, 7], dtype=np.float32),
                          "i": [1, 2, 3, 4, 5, 6], "b": [True, False, True, True, False, True],
                          "o": ["a,b", 'q"x', "l\nm", None, 0.1, 3], "mix": ["x", 1 / 3, 2.0, True, np.nan, "y"]})
    frame.to_csv(tmp_path / "pandas.csv", index=False, float_format=float_format)
    atomic.write_frame_csv(tmp_path / "ours.csv", frame, float_format=float_format)
    assert (tmp_path / "ours.csv").read_bytes() == (tmp_path / "pandas.csv").read_bytes()


def _figure():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    return fig


def test_save_figure_writes_the_png_only_by_default_and_closes(tmp_path):
    import matplotlib.pyplot as plt

    fig = _figure()
    paths = atomic.save_figure(fig, tmp_path / "sub", "curve", dpi=50)
    assert [p.name for p in paths] == ["curve.png"] and paths[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in (tmp_path / "sub").iterdir()] == ["curve.png"]  # no PDF, no temp files left
    assert not plt.fignum_exists(fig.number)


def test_save_figure_adds_a_byte_stable_pdf_when_the_environment_asks(tmp_path, monkeypatch):
    monkeypatch.setenv("VSR_FIGURE_FORMATS", " pdf, PNG,pdf ")  # case, spaces and repeats ignored; PNG first
    paths = atomic.save_figure(_figure(), tmp_path / "sub", "curve", dpi=50)
    assert [p.name for p in paths] == ["curve.png", "curve.pdf"]
    assert paths[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and paths[1].read_bytes()[:5] == b"%PDF-"
    assert sorted(p.name for p in (tmp_path / "sub").iterdir()) == ["curve.pdf", "curve.png"]  # no temp files left
    first = [p.read_bytes() for p in paths]
    time.sleep(1.1)  # a PDF creation date would differ by now
    again = atomic.save_figure(_figure(), tmp_path / "sub", "curve", dpi=50)
    assert [p.read_bytes() for p in again] == first  # the same figure, the same bytes: a rebuilt report leaves no diff
    # an explicit formats= wins over the variable
    assert [p.name for p in atomic.save_figure(_figure(), tmp_path / "x", "c", dpi=50, formats=("png",))] == ["c.png"]
    assert [p.name for p in (tmp_path / "x").iterdir()] == ["c.png"]


@pytest.mark.parametrize("value, why", [("png,svg", r"unknown format\(s\) \['svg'\]"), ("pdf", r"png is missing \(reports link the PNG\)")])
def test_figure_formats_variable_is_validated(tmp_path, monkeypatch, value, why):
    import matplotlib.pyplot as plt

    monkeypatch.setenv("VSR_FIGURE_FORMATS", value)
    fig = _figure()
    with pytest.raises(ValueError, match=rf"VSR_FIGURE_FORMATS='{value}': {why}; give a comma list of png, pdf"):
        atomic.save_figure(fig, tmp_path, "curve")
    plt.close(fig)
    assert list(tmp_path.iterdir()) == []


def test_every_command_resolves_to_a_dataclass_entry_point():
    for name, spec in COMMANDS.items():
        fn = _resolve(spec)
        assert _config_type(fn) is not None, name


def test_config_file_feeds_a_command(tmp_path, capsys):
    (tmp_path / "tc.yaml").write_text("cases: 2\nseed: 5\nonly: [lemma_b1]\nprogress: false\n")
    rc = main(["theory", "check", "--config", str(tmp_path / "tc.yaml")])
    out = capsys.readouterr().out
    assert rc == 0 and "lemma_b1_trace_variance" in out and "(1 checks x 2 cases)" in out
    # command-line flags override the file
    rc = main(["theory", "check", "--config", str(tmp_path / "tc.yaml"), "--cases", "3"])
    assert rc == 0 and "(1 checks x 3 cases)" in capsys.readouterr().out


def test_figures_driver_quick(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("VSR_FIGURE_FORMATS", "png,pdf")  # one variable asks every figure job for a PDF too
    rc = main(["figures", "--out", str(tmp_path), "--only", "theory", "--quick"])
    assert rc == 0
    for ext in ("png", "pdf", "json", "md"):
        assert (tmp_path / "theory" / f"theory_check.{ext}").stat().st_size > 0
    rows = json.loads((tmp_path / "theory" / "theory_check.json").read_text())
    assert all(r["passed"] for r in rows) and all(r["cases"] == 20 for r in rows)
    with pytest.raises(SystemExit, match="unknown figure"):
        main(["figures", "--out", str(tmp_path), "--only", "nope"])


def test_config_extends_deep_merges_and_refuses_cycles(tmp_path):
    from llm_harness.trainer.config import TrainConfig
    from vsr_util.config_io import load_config, read_mapping

    (tmp_path / "base.yaml").write_text("seed: 3\nrollout: {group_size: 4, max_new_tokens: 32}\nplugins: {vsr: {rho: 0.5}}\n")
    (tmp_path / "mid.yaml").write_text("extends: base.yaml\nrollout: {group_size: 6}\nplugins: {vsr: {window: 2}}\n")
    (tmp_path / "top.yaml").write_text("extends: mid.yaml\nsteps: 7\n")
    cfg = load_config(TrainConfig, tmp_path / "top.yaml")
    assert (cfg.seed, cfg.steps, cfg.rollout.group_size, cfg.rollout.max_new_tokens) == (3, 7, 6, 32)
    assert cfg.plugins == {"vsr": {"rho": 0.5, "window": 2}}
    (tmp_path / "a.yaml").write_text("extends: b.yaml\n")
    (tmp_path / "b.yaml").write_text("extends: a.yaml\n")
    with pytest.raises(ValueError, match="cycle"):
        read_mapping(tmp_path / "a.yaml")
    (tmp_path / "c.yaml").write_text("extends: missing.yaml\n")
    with pytest.raises(ValueError, match="not found"):
        read_mapping(tmp_path / "c.yaml")
