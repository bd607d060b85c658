"""The lab's output folder under faults and bad input: another lab's results are refused, not overwritten (``vsr study``
refuses the same), ``--overwrite`` discards them; a damaged probe, reference or allocation file is named; ``vsr advise
--out`` is checked before the probe. One tiny lab run (2 prompts, one allocation) is shared by every case."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from llm_harness.lab.config import LabConfig
from llm_harness.lab.run import move_lab_records, records_dir, reanalyze_lab, run_lab

ROOT = Path(__file__).resolve().parents[3]
POOL = ROOT / "figures" / "compare_vsr_regime" / "pool.json"
RECORDS = ("probe.json", "reference_pool.json", "reference_pool.npy", "alloc_uniform.json")
REPORT = ("summary.json", "report.md")


def _cfg(out: Path, **kw) -> LabConfig:
    base = dict(train_config=str(ROOT / "configs" / "regime_grpo.yaml"), pool=str(POOL), prompts=2, alphas=(0.5,),
                probe_samples=4, score_samples=0, groups=2, group_size=2, batches=2, blocks=2, reference_batches=2,
                heldout=2, allocations=("uniform",), out=str(out), progress=False)
    base.update(kw)
    return LabConfig(**base)


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """A finished tiny lab folder (seed 0), made once."""
    import torch

    out = tmp_path_factory.mktemp("lab") / "done"
    cwd, threads = os.getcwd(), torch.get_num_threads()
    os.chdir(ROOT)  # the training config names the test-bed checkpoint by a repository path
    torch.set_num_threads(1)
    try:
        run_lab(_cfg(out))
    finally:
        os.chdir(cwd)
        torch.set_num_threads(threads)
    return out


@pytest.fixture
def lab(finished, tmp_path, monkeypatch) -> Path:
    """A copy of the finished lab to damage or rerun (cwd: the repository)."""
    monkeypatch.chdir(ROOT)
    out = tmp_path / "lab"
    shutil.copytree(finished, out, ignore=shutil.ignore_patterns(".vsr.lock"))
    return out


def _contents(out: Path) -> dict[str, bytes]:
    rec = records_dir(out)
    return {**{f: (rec / f).read_bytes() for f in RECORDS}, **{f: (out / f).read_bytes() for f in REPORT}}


def test_the_folder_of_another_lab_is_refused_before_the_model_loads(lab, monkeypatch):
    import llm_harness.lab.engine as engine_mod

    identity = json.loads((records_dir(lab) / "lab.json").read_text())["identity"]
    assert identity["seed"] == 0 and identity["prompts"] == 2 and identity["model"].endswith("checkpoints/low")
    before = _contents(lab)
    monkeypatch.setattr(engine_mod, "LabEngine", lambda *a, **k: pytest.fail("the model was loaded"))
    with pytest.raises(ValueError, match=rf"^out: {records_dir(lab)} holds the results of another lab \(changed: prompts: 2 -> 3; "
                                         r"seed: 0 -> 1\); choose another output folder or pass --overwrite"):
        run_lab(_cfg(lab, seed=1, prompts=3))
    assert _contents(lab) == before


def test_overwrite_discards_the_other_labs_results(lab):
    before = _contents(lab)
    run_lab(_cfg(lab, seed=1, overwrite=True))
    assert json.loads((records_dir(lab) / "lab.json").read_text())["identity"]["seed"] == 1
    assert (records_dir(lab) / "probe.json").read_bytes() != before["probe.json"]
    assert json.loads((lab / "summary.json").read_text())["config"]["seed"] == 1


def test_a_folder_without_lab_json_is_judged_by_its_probe(lab):
    """A lab folder written before ``lab.json`` existed (the committed ones): another lab's probe is refused after the
    model loads, before anything is written; the same lab resumes and records its identity."""
    (records_dir(lab) / "lab.json").unlink()
    before = _contents(lab)
    with pytest.raises(ValueError, match=r"holds the results of another lab: its probe.json was made from other problems "
                                         r"or settings .*--overwrite"):
        run_lab(_cfg(lab, seed=1))
    assert _contents(lab) == before and not (records_dir(lab) / "lab.json").exists()
    run_lab(_cfg(lab))
    assert _contents(lab)["probe.json"] == before["probe.json"]  # reused, not recomputed
    assert json.loads((records_dir(lab) / "lab.json").read_text())["identity"]["seed"] == 0


def test_a_changed_knob_is_still_the_same_lab(lab):
    before = _contents(lab)
    run_lab(_cfg(lab, batches=3))  # batches: the allocation is recomputed, the probe and references kept
    after = _contents(lab)
    assert after["probe.json"] == before["probe.json"] and after["reference_pool.npy"] == before["reference_pool.npy"]
    assert after["alloc_uniform.json"] != before["alloc_uniform.json"]


def test_records_go_to_the_store_and_the_report_to_out(finished, tmp_path, monkeypatch):
    """A report folder under ``figures/`` keeps its records at the same path under ``records/`` beside it; a trial
    folder keeps them inside; ``--reanalyze`` reads them from there and rebuilds the report byte for byte."""
    assert records_dir(finished) == finished / "records"
    assert {f.name for f in finished.iterdir()} >= set(REPORT) and not (finished / "probe.json").exists()
    assert records_dir(tmp_path / "figures" / "lab" / "real") == tmp_path / "records" / "lab" / "real"
    monkeypatch.chdir(ROOT)
    out = tmp_path / "figures" / "lab" / "x"
    shutil.copytree(finished, out, ignore=shutil.ignore_patterns(".vsr.lock", "records"))
    shutil.copytree(records_dir(finished), records_dir(out), ignore=shutil.ignore_patterns(".vsr.lock"))
    before = (out / "summary.json").read_bytes(), (out / "report.md").read_bytes()
    reanalyze_lab(out)
    assert ((out / "summary.json").read_bytes(), (out / "report.md").read_bytes()) == before


def test_records_left_in_the_report_folder_are_refused_until_moved(finished, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    out = tmp_path / "figures" / "lab" / "old"
    shutil.copytree(finished, out, ignore=shutil.ignore_patterns(".vsr.lock", "records"))
    for f in records_dir(finished).iterdir():  # the layout before the store: records beside the report
        if f.is_file() and f.name != ".vsr.lock":
            shutil.copyfile(f, out / f.name)
    for call in (lambda: run_lab(_cfg(out)), lambda: reanalyze_lab(out)):
        with pytest.raises(ValueError, match=r"holds a lab's records \(.*probe.json.*\) from before they moved to the "
                                             r"records store; move them to .*records/lab/old with .*move_lab_records"):
            call()
    moved = move_lab_records(out)
    assert {p.name for p in moved} >= {"probe.json", "alloc_uniform.json", "lab.json"}
    assert all(p.parent == tmp_path / "records" / "lab" / "old" for p in moved) and not (out / "probe.json").exists()
    before = (out / "summary.json").read_bytes()
    reanalyze_lab(out)
    assert (out / "summary.json").read_bytes() == before


def test_another_commands_summary_is_not_overwritten(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    out = tmp_path / "study"
    out.mkdir()
    (out / "summary.json").write_text(json.dumps({"study": "hint-ratio", "curve": []}))
    with pytest.raises(ValueError, match=r"holds a summary.json that is not a lab's"):
        run_lab(_cfg(out))
    assert json.loads((out / "summary.json").read_text())["study"] == "hint-ratio"


def _truncate_list(path: Path, key: str) -> None:
    doc = json.loads(path.read_text())
    doc[key] = doc[key][:-1]
    path.write_text(json.dumps(doc))


def _drop_key(path: Path, key: str) -> None:
    doc = json.loads(path.read_text())
    del doc[key]
    path.write_text(json.dumps(doc))


@pytest.mark.parametrize("name, damage", [
    ("probe.json", lambda p: _truncate_list(p, "n")),
    ("probe.json", lambda p: p.write_text("[1, 2]")),
    ("probe.json", lambda p: p.write_bytes(b'{"format": 3, "fingerprint": "\xff')),
    ("reference_pool.npy", lambda p: p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])),
    ("reference_pool.npy", lambda p: np.save(p, np.zeros(3, dtype=np.float32))),
    ("reference_pool.json", lambda p: _drop_key(p, "moments")),
    ("alloc_uniform.json", lambda p: _drop_key(p, "cost")),
], ids=["probe-array-short", "probe-not-an-object", "probe-not-utf8", "npy-truncated", "npy-wrong-length",
        "reference-no-moments", "alloc-no-cost"])
def test_a_damaged_result_file_is_named(lab, name, damage):
    damage(records_dir(lab) / name)
    with pytest.raises(ValueError, match=rf"^out: {records_dir(lab) / name} is damaged \(.*\); delete it to recompute that step"):
        run_lab(_cfg(lab))


def test_lab_cli_refuses_another_lab_in_one_line(lab, capsys):
    from vsr.cli import main

    args = ["lab", "--train-config", str(ROOT / "configs" / "regime_grpo.yaml"), "--pool", str(POOL), "--prompts", "2",
            "--alphas", "0.5", "--probe-samples", "4", "--score-samples", "0", "--groups", "2", "--group-size", "2",
            "--batches", "2", "--blocks", "2", "--reference-batches", "2", "--heldout", "2", "--allocations", "uniform",
            "--out", str(lab), "--no-progress", "--seed", "5"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "holds the results of another lab (changed: seed: 0 -> 5)" in err and "Traceback" not in err


# ---------------------------------------------------------------------------- vsr advise --out
@pytest.mark.parametrize("where, expect", [
    ("folder", r"^out: .*/results is a folder, not a file; give a file path"),
    ("under-file", r"^out: .*/notes.txt is a file, not a folder, so .*/notes.txt/advise.json cannot be written"),
])
def test_advise_checks_out_before_the_probe(tmp_path, monkeypatch, where, expect):
    import llm_harness.lab.advise as advise_mod

    monkeypatch.setattr(advise_mod, "advise", lambda cfg: pytest.fail("the probe ran"))
    if where == "folder":
        out = tmp_path / "results"
        out.mkdir()
    else:
        (tmp_path / "notes.txt").write_text("keep me")
        out = tmp_path / "notes.txt" / "advise.json"
    with pytest.raises(ValueError, match=expect):
        advise_mod.advise_command(advise_mod.AdviseConfig(out=str(out), progress=False))
    assert where == "folder" or (tmp_path / "notes.txt").read_text() == "keep me"


def test_advise_out_in_a_new_folder_is_accepted(tmp_path, monkeypatch):
    import llm_harness.lab.advise as advise_mod

    res = {"rows": [], "recommendation": "x", "wall_s": 1.0, "probe_wall_s": {}, "prompts": 2, "prefix_states": 0,
           "prompt_pass_rate": 0.5, "prompt_mixed_share": 0.5, "model": "m", "task": "t"}
    monkeypatch.setattr(advise_mod, "advise", lambda cfg: res)
    out = tmp_path / "new" / "advise.json"
    assert advise_mod.advise_command(advise_mod.AdviseConfig(out=str(out), progress=False)) == 0
    assert json.loads(out.read_text())["recommendation"] == "x" and out.with_suffix(".txt").is_file()
