"""Study configs (resolution, identity, validation) and the resumable chunk store."""

from __future__ import annotations

import json
import math

import pytest

from prefixvalue.config import StudyConfig, config_diff, identity_dict, parse_task_params, resolve
from prefixvalue.store import ChunkStore, check_no_old_layout, move_study_records, old_layout_records, records_dir
from prefixvalue.studies.hint_ratio import HintRatioConfig
from prefixvalue.studies.prefix_selection import PrefixSelectionConfig

SIZES = {"quick": {"n_problems": 5, "chunk_problems": 2}, "full": {"n_problems": 50, "chunk_problems": 10}}


def test_resolve_fills_only_zero_sizes_and_defaults():
    q = resolve(StudyConfig(quick=True), SIZES, "validation", "demo")
    assert (q.n_problems, q.chunk_problems, q.split, q.out) == (5, 2, "validation", "runs/study/demo")
    f = resolve(StudyConfig(n_problems=7, split="test", out="/x"), SIZES, "validation", "demo")
    assert (f.n_problems, f.chunk_problems, f.split, f.out) == (7, 10, "test", "/x")


def test_identity_ignores_where_and_how_it_reports():
    a = identity_dict(HintRatioConfig(out="/a", progress=True, num_threads=2, quick=True, n_problems=3))
    b = identity_dict(HintRatioConfig(out="/b", progress=False, num_threads=0, quick=False, n_problems=3))
    assert a == b
    c = identity_dict(HintRatioConfig(n_problems=3, seed=1))
    assert config_diff(a, c) == ["seed: 0 -> 1"]
    assert a["max_difficulty"] == "inf"  # JSON has no infinities
    json.dumps(a)
    assert identity_dict(StudyConfig(n_problems=3))["__class__"] == "StudyConfig"


def test_task_params_parse_as_yaml_scalars():
    assert parse_task_params(("seed=1", "name=x", "frac=0.5")) == {"seed": 1, "name": "x", "frac": 0.5}
    with pytest.raises(ValueError, match=r"task_params\[0\]"):
        parse_task_params(("seed",))
    with pytest.raises(ValueError, match="duplicate"):
        parse_task_params(("a=1", "a=2"))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"backend": "tgi"}, "backend"),
        ({"n_problems": -1}, "n_problems"),
        ({"min_difficulty": 6.0, "max_difficulty": 5.0}, "min_difficulty"),
        ({"task_params": "seed=1"}, "task_params"),
        ({"alphas": (0.0, 1.5)}, r"alphas\[1\]"),
        ({"alphas": (0.5, 0.5)}, "distinct"),
        ({"temperature": 0.0}, "temperature"),
        ({"top_p": 0.0}, "top_p"),
        ({"n_continuations": 0}, "n_continuations"),
    ],
)
def test_bad_config_values_are_named(kwargs, match):
    with pytest.raises(ValueError, match=match):
        HintRatioConfig(**kwargs)


def test_prefix_selection_config_checks_embedder_and_filter():
    with pytest.raises(ValueError, match="embedder"):
        PrefixSelectionConfig(embedder="bert")
    with pytest.raises(ValueError, match="group_filter"):
        PrefixSelectionConfig(group_filter="some")


def test_chunk_store_round_trip_and_nan(tmp_path):
    s = ChunkStore(tmp_path, "demo", {"seed": 0})
    assert not s.done(0)
    s.save(0, [{"a": 1, "b": float("nan")}], {"problems": 2, "eligible": 1})
    s.save(1, [], {"problems": 2, "eligible": 0})
    assert s.done(0) and s.done(1) and not s.done(2)
    rows, counts = s.collect(2)
    assert rows == [{"a": 1, "b": None}]
    assert counts == {"problems": 4, "eligible": 1}
    # the same identity resumes and keeps the chunks
    assert ChunkStore(tmp_path, "demo", {"seed": 0}).done(1)


def test_chunk_store_refuses_other_config_or_study(tmp_path):
    ChunkStore(tmp_path, "demo", {"seed": 0, "n": 5}).save(0, [{"a": 1}], {"problems": 1, "eligible": 1})
    with pytest.raises(ValueError, match=r"different demo config.*changed: seed: 0 -> 1"):
        ChunkStore(tmp_path, "demo", {"seed": 1, "n": 5})
    with pytest.raises(ValueError, match="holds results of study 'demo', not 'other'"):
        ChunkStore(tmp_path, "other", {"seed": 0, "n": 5})
    s = ChunkStore(tmp_path, "demo", {"seed": 1, "n": 5}, overwrite=True)
    assert not s.done(0)
    assert json.loads((tmp_path / "records" / "study.json").read_text())["identity"] == {"seed": 1, "n": 5}


def test_chunk_store_keeps_records_in_the_store_and_overwrite_clears_both_folders(tmp_path):
    fig = tmp_path / "figures" / "prefixvalue" / "demo"
    s = ChunkStore(fig, "demo", {"seed": 0})
    store = tmp_path / "records" / "prefixvalue" / "demo"
    assert s.records_dir == store == records_dir(fig) and s.chunk_dir == store / "chunks"
    assert (store / "study.json").is_file() and fig.is_dir() and not (fig / "study.json").exists()
    s.save(0, [{"a": 1}], {"problems": 1, "eligible": 1})
    (store / "results.parquet").write_bytes(b"table")
    for name in ("summary.json", "summary.md", "timings.json"):
        (fig / name).write_text("{}")
    (fig / "demo.png").write_bytes(b"png")
    assert ChunkStore(fig, "demo", {"seed": 0}).done(0)  # resumes
    ChunkStore(fig, "demo", {"seed": 1}, overwrite=True)
    assert not (store / "chunks" / "00000.json").exists() and not (store / "results.parquet").exists()
    assert {p.name for p in fig.iterdir()} == {"demo.png"}  # the summary built from the records went with them
    assert records_dir(tmp_path / "trial") == tmp_path / "trial" / "records"


def test_records_left_in_the_report_folder_are_refused_and_moved(tmp_path):
    fig = tmp_path / "figures" / "real_model" / "demo"
    fig.mkdir(parents=True)
    (fig / "config.yaml").write_text("seed: 0\n")
    (fig / "summary.json").write_text("{}")
    assert old_layout_records(fig) == []  # a config and a report alone (a model card, say) are no study's records
    check_no_old_layout(fig)
    with pytest.raises(ValueError, match="no study records"):
        move_study_records(fig)
    (fig / "study.json").write_text(json.dumps({"format": 1, "study": "demo", "identity": {"seed": 0}}))
    (fig / "results.parquet").write_bytes(b"table")
    (fig / "chunks").mkdir()
    (fig / "chunks" / "00000.json").write_text("{}")
    store = tmp_path / "records" / "real_model" / "demo"
    for refused in (lambda: ChunkStore(fig, "demo", {"seed": 0}), lambda: ChunkStore(fig, "demo", {"seed": 0}, overwrite=True),
                    lambda: check_no_old_layout(fig)):
        with pytest.raises(ValueError) as err:
            refused()
        msg = str(err.value)
        assert f"{fig} holds a study's records (study.json, config.yaml, chunks/, results.parquet)" in msg
        assert f"they belong in {store} now" in msg
        assert f"python -c \"from prefixvalue.store import move_study_records; move_study_records({str(fig)!r})\"" in msg
    assert not store.exists() and (fig / "chunks" / "00000.json").is_file()  # nothing written, nothing discarded
    store.mkdir(parents=True)
    (store / "study.json").write_text("{}")
    with pytest.raises(ValueError, match=r"already holds study records \(study.json\); merge them"):
        move_study_records(fig)
    (store / "study.json").unlink()
    assert move_study_records(fig) == store
    assert {p.name for p in store.iterdir()} == {"study.json", "config.yaml", "chunks", "results.parquet"}
    assert {p.name for p in fig.iterdir()} - {".vsr.lock"} == {"summary.json"}
    s = ChunkStore(fig, "demo", {"seed": 0})  # the moved records resume
    assert s.done(0) and (store / "results.parquet").read_bytes() == b"table"


def test_resolve_keeps_infinite_bounds_finite_elsewhere():
    cfg = resolve(HintRatioConfig(quick=True), SIZES, "validation", "x")
    assert cfg.min_difficulty == 5.0 and math.isinf(cfg.max_difficulty)


def test_a_damaged_chunk_names_its_file_and_the_cli_flag(tmp_path):
    s = ChunkStore(tmp_path, "demo", {"seed": 0})
    s.save(0, [{"a": 1}], {"problems": 1})
    path = s._path(0)
    path.write_bytes(path.read_bytes()[:10])  # truncated by a full disk or a kill
    with pytest.raises(ValueError, match=r"chunk file .*damaged \(JSONDecodeError.*--overwrite"):
        s.load(0)
    path.write_bytes(b"\xff\xfe")
    with pytest.raises(ValueError, match=r"damaged \(UnicodeDecodeError"):
        s.collect(1)
    with pytest.raises(ValueError, match="--overwrite"):
        ChunkStore(tmp_path, "demo", {"seed": 1})


def test_task_params_that_build_the_same_task_are_the_same_identity():
    from prefixvalue.config import config_diff

    old = {"task": "arith_ladder", "task_params": [], "n_problems": 4}
    # the default spelled out (a committed lenient study resumed after strict became the chat default)
    assert config_diff(old, {**old, "task_params": ["answer_mode=lenient"]}) == []
    assert config_diff(old, {**old, "task_params": ["answer_mode=strict"]}) == ["task_params: [] -> ['answer_mode=strict']"]
    # another task with the same strings is compared on its own terms; unbuildable params fall back to the strings
    assert config_diff({**old, "task": "step_arith"}, {**old, "task": "step_arith", "task_params": ["seed=0"]}) == []
    assert config_diff(old, {**old, "task_params": ["answer_mode=nope"]}) != []
