"""Comparison records that cannot lie: the records store beside ``figures/`` (``records/compare_<suite>``), the
manifest that lists every record (fingerprint, checksums, row count), checked before a record is restored together
with the rows and their configuration; missing arms named in the report; nothing to report is an error."""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
from pathlib import Path

import pytest

from llm_harness.compare.records import (MANIFEST, RecordError, read_manifest, rebuild_manifest, records_folder,
                                         records_root, shared_records_roots, update_manifest)
from llm_harness.compare.jobs import CompareConfig, plan_jobs
from llm_harness.compare.jobs import is_done as _done
from llm_harness.compare.records import restore_record, save_record
from llm_harness.compare.runner import run
from vsr.cli import main

from test_compare import _fake_run  # noqa: E402 - the same fake runs as the report tests

ROOT = Path(__file__).resolve().parents[3]
KEY = "normal/grpo/seed0"


def _cfg(tmp_path: Path, **kw) -> CompareConfig:
    """The testbed suite laid out as the committed suites are: report in ``figures/``, records in ``records/``."""
    return CompareConfig(**{"out": tmp_path / "figures" / "compare_testbed", "seeds": 1, "steps": 3,
                            "methods": ("grpo", "vsr"), "regimes": ("normal",), **kw})


def _saved(tmp_path: Path, method: str = "grpo", steps: int = 3, fingerprint: str | None = None):
    """A finished fake run of ``method`` with its record saved, then the run folder removed (a fresh clone)."""
    cfg = _cfg(tmp_path, steps=steps)
    job = next(j for j in plan_jobs(cfg) if j.method == method)
    _fake_run(job, 0.5, 100.0)
    if fingerprint is not None:  # as a real run: done.json and the first metrics row name the trainer config
        d = Path(job.run_dir)
        info = json.loads((d / "done.json").read_text())
        (d / "done.json").write_text(json.dumps({**info, "train_fingerprint": fingerprint}))
        rows = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines()]
        rows[0]["config_fingerprint"] = fingerprint
        (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    rec = save_record(job, records_root(cfg))
    shutil.rmtree(job.run_dir)
    return cfg, job, rec


def _rewrite_gz(path: Path, rows: list[dict]) -> None:
    path.write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in rows).encode()))


def _rows(path: Path) -> list[dict]:
    return [json.loads(x) for x in gzip.decompress(path.read_bytes()).decode().splitlines()]


def _relist(root: Path, key: str) -> None:
    """Take the record's files as they are now into its manifest entry (the checksums agree again; row count kept):
    what is left to catch a bad record is the checks behind the manifest's."""
    entry = dict(read_manifest(root)[key])
    for name in ("done.json", "metrics.jsonl.gz"):
        if (root / key / name).is_file():
            entry[name] = hashlib.sha256((root / key / name).read_bytes()).hexdigest()
    entry.pop("fingerprint", None)
    update_manifest(root, key, entry)


def test_the_store_sits_beside_figures_and_a_trial_run_keeps_its_records_inside():
    assert records_folder(Path("figures/compare_agents")) == Path("records/compare_agents")
    assert records_folder(Path("/repo/figures/compare_x")) == Path("/repo/records/compare_x")
    assert records_folder(Path("/tmp/trial")) == Path("/tmp/trial/records")
    assert records_root(CompareConfig(suite="agents")) == Path("records/compare_agents")
    assert records_root(CompareConfig(suite="agents", out=Path("/tmp/t"))) == Path("/tmp/t/records")
    assert records_root(CompareConfig(suite="agents", records_dir=Path("/d/compare_agents"))) == Path("/d/compare_agents")
    siblings = ["replay_tau", "replay_priority", "replay_aes"]  # replay_ratio's (Suite.shares_records_with)
    assert shared_records_roots(CompareConfig(suite="replay_ratio")) == [Path(f"records/compare_{n}") for n in siblings]
    assert shared_records_roots(CompareConfig(suite="replay_ratio", records_dir=Path("/d/mine"))) == [
        Path(f"/d/compare_{n}") for n in siblings]


def test_an_intact_record_is_restored_and_listed_in_the_manifest(tmp_path):
    cfg, job, rec = _saved(tmp_path)
    assert records_root(cfg) == tmp_path / "records" / "compare_testbed" and rec == records_root(cfg) / KEY
    data = json.loads((records_root(cfg) / MANIFEST).read_text())
    entry = data["records"][KEY]
    assert data["format"] == 2 and list(entry) == ["fingerprint", "done.json", "metrics.jsonl.gz", "rows"]
    assert entry["fingerprint"] == job.fingerprint and entry["rows"] == 3
    assert entry["done.json"] == hashlib.sha256((rec / "done.json").read_bytes()).hexdigest()
    assert restore_record(job, records_root(cfg)) and _done(job)
    assert not list((tmp_path / "figures").rglob("*.gz"))  # figures/ holds reports (and ignored runs), not records


def test_a_record_missing_from_the_manifest_is_refused_naming_it(tmp_path, capsys):
    cfg, job, rec = _saved(tmp_path)
    root = records_root(cfg)
    data = json.loads((root / MANIFEST).read_text())
    del data["records"][KEY]
    (root / MANIFEST).write_text(json.dumps(data))
    assert not restore_record(job, root) and not _done(job)
    out = capsys.readouterr().out
    assert f"record not used, the job trains again: {rec / 'done.json'}: not in {root / MANIFEST}" in out
    assert "rebuild_manifest" in out
    with pytest.raises(RecordError, match=r"not in .*manifest\.json.*refusing \(--no-retrain\)"):
        restore_record(job, root, retrain=False)
    (root / MANIFEST).unlink()  # no manifest at all: the same
    assert not restore_record(job, root)
    assert f"{rec / 'done.json'}: not in {root / MANIFEST}" in capsys.readouterr().out
    assert rebuild_manifest(root) == 1 and restore_record(job, root)  # listed again by hand: used


def test_a_tampered_record_is_refused_naming_the_file(tmp_path, capsys):
    cfg, job, rec = _saved(tmp_path)
    info = json.loads((rec / "done.json").read_text())
    (rec / "done.json").write_text(json.dumps({**info, "wall_s": 0.5}))  # still this job's config: would be restored
    assert not restore_record(job, records_root(cfg)) and not _done(job)
    assert (f"record not used, the job trains again: {rec / 'done.json'}: bytes differ from the checksum in "
            f"{records_root(cfg) / MANIFEST}") in capsys.readouterr().out


def test_a_manifest_that_lists_another_fingerprint_is_caught(tmp_path, capsys):
    cfg, job, rec = _saved(tmp_path)
    entry = read_manifest(records_root(cfg))[KEY]
    update_manifest(records_root(cfg), KEY, {**entry, "fingerprint": "0123456789abcdef"})
    assert not restore_record(job, records_root(cfg))
    assert f"{rec / 'done.json'}: job fingerprint '{job.fingerprint}', but " in capsys.readouterr().out


def test_a_resumed_run_keeps_the_finished_records(tmp_path, capsys):
    """A suite run in two parts: the second (one more seed, on a fresh clone) restores the first part's records and
    leaves their files and manifest entries as they were, adding the new seed's."""
    first = _cfg(tmp_path, report_only=True)
    for j in plan_jobs(first):
        _fake_run(j, 0.5, 100.0)
    assert run(first) == 0
    root = records_root(first)
    files = {p: p.read_bytes() for p in root.rglob("*") if p.is_file() and p.name != ".vsr.lock"}
    listed = read_manifest(root)
    assert len(listed) == 3 and set(files) - {root / MANIFEST}
    shutil.rmtree(first.runs_root)  # a fresh clone
    second = _cfg(tmp_path, seeds=2, report_only=True)
    for j in plan_jobs(second):
        if j.seed == 1:
            _fake_run(j, 0.6, 100.0)
    capsys.readouterr()
    assert run(second) == 0
    assert f"3 finished run(s) restored from {root}" in capsys.readouterr().out
    assert all(p.read_bytes() == b for p, b in files.items() if p.name != MANIFEST)
    now = read_manifest(root)
    assert {k: now[k] for k in listed} == listed and len(now) == 6


def test_a_record_missing_a_row_is_named_and_retrained_or_refused(tmp_path, capsys):
    cfg, job, rec = _saved(tmp_path)
    gz = rec / "metrics.jsonl.gz"
    _rewrite_gz(gz, _rows(gz)[:2])  # 2 of 3 rows, a valid gzip
    assert not restore_record(job, records_root(cfg)) and not _done(job)
    out = capsys.readouterr().out
    assert f"record not used, the job trains again: {gz}: bytes differ from the checksum" in out
    _relist(records_root(cfg), KEY)  # the checksums agree again: the manifest's row count catches it
    assert not restore_record(job, records_root(cfg))
    assert f"{gz}: 2 rows, the manifest says 3" in capsys.readouterr().out
    rebuild_manifest(records_root(cfg))  # the row count agrees too: the steps check catches it
    assert not restore_record(job, records_root(cfg))
    assert "2 metric rows for a 3-step run" in capsys.readouterr().out
    with pytest.raises(RecordError, match=r"2 metric rows for a 3-step run.*refusing \(--no-retrain\)"):
        restore_record(job, records_root(cfg), retrain=False)


def test_another_arms_metrics_under_this_arms_done_json_are_caught(tmp_path, capsys):
    cfg, grpo, rec = _saved(tmp_path, "grpo", fingerprint="aaaa")
    _, vsr, vrec = _saved(tmp_path, "vsr", fingerprint="bbbb")
    shutil.copyfile(vrec / "metrics.jsonl.gz", rec / "metrics.jsonl.gz")
    assert not restore_record(grpo, records_root(cfg))
    assert "bytes differ from the checksum" in capsys.readouterr().out
    _relist(records_root(cfg), KEY)  # a manifest that agrees with the swap: the configuration check catches it
    assert not restore_record(grpo, records_root(cfg))
    assert "metrics of configuration ['bbbb'] under a done.json of configuration 'aaaa'" in capsys.readouterr().out
    assert restore_record(vsr, records_root(cfg))  # the other arm's own record is fine


@pytest.mark.parametrize("damage", ["truncated", "not gzip", "not json"])
def test_a_damaged_file_is_named_instead_of_a_traceback(tmp_path, capsys, damage):
    cfg, job, rec = _saved(tmp_path)
    gz = rec / "metrics.jsonl.gz"
    if damage == "truncated":
        gz.write_bytes(gz.read_bytes()[:-9])
    elif damage == "not gzip":
        gz.write_text("hello")
    else:
        (rec / "done.json").write_text("{broken")
    named = rec / "done.json" if damage == "not json" else gz
    assert not restore_record(job, records_root(cfg))
    assert f"record not used, the job trains again: {named}: bytes differ from the checksum" in capsys.readouterr().out
    _relist(records_root(cfg), KEY)  # listed as it is now: the file's own check names it
    assert not restore_record(job, records_root(cfg))
    out = capsys.readouterr().out
    assert f"record not used, the job trains again: {named}: " in out
    assert ("not JSON" if damage == "not json" else "not a complete gzip file") in out


def test_the_committed_records_pass_their_manifests():
    """Every committed suite's records live in the store (``records/compare_<suite>``, none under ``figures/``) and
    match the fingerprints, checksums and row counts its manifest lists; every entry that points at a sibling suite's
    record (records module doc, "Pointers") leads into a suite it shares records with, in the store, to files with
    the entry's checksums."""
    from llm_harness.compare.records import check_listed, follow_pointer, is_pointer, manifest_entry
    from llm_harness.compare.suite import SUITES

    roots = sorted((ROOT / "records").glob("compare_*"))
    assert roots
    assert not list((ROOT / "figures").glob("**/records/manifest.json"))
    for root in roots:
        assert (ROOT / "figures" / root.name / "report.md").is_file(), root  # each store folder has its report
        listed = read_manifest(root)
        assert json.loads((root / MANIFEST).read_text())["format"] == 2, root
        copies = sorted(k for k, e in listed.items() if not is_pointer(e))
        found = sorted(str(d.parent.relative_to(root)) for d in root.glob("*/*/seed*/done.json"))
        assert copies == found, root
        for key in found[:: max(1, len(found) // 20)]:  # a sample: the full check is the restore itself
            assert manifest_entry(root / key) == listed[key], root / key
        siblings = {f"compare_{s}" for s in SUITES[root.name.removeprefix("compare_")].shares_records_with}
        for key, entry in listed.items():
            assert "fingerprint" in entry, (root, key)
            if is_pointer(entry):
                rec = follow_pointer(root, key, entry)
                check_listed(rec, key=key, root=root, manifest=listed)
                suite_dir = rec.parents[2]  # records/<sibling>/<regime>/<method>/seed<k>
                assert suite_dir.name in siblings and suite_dir.parent == root.parent, (root, key, entry["in"])


def test_rebuild_manifest_lists_every_record(tmp_path):
    cfg, job, rec = _saved(tmp_path)
    (records_root(cfg) / MANIFEST).unlink()
    assert rebuild_manifest(records_root(cfg)) == 1
    assert KEY in read_manifest(records_root(cfg))


def test_records_left_inside_a_figures_report_folder_are_refused_then_moved_to_the_store(tmp_path, monkeypatch, capsys):
    """The layout before the store: ``figures/compare_<suite>/records`` with pointers ``../../compare_<sibling>/records``.
    ``vsr compare`` refuses to start (it would neither restore nor keep them) naming the folder and the command;
    :func:`move_to_store` moves them, rewrites the pointers and lists the fingerprints; then they restore."""
    from llm_harness.compare.records import is_pointer, move_to_store

    cfg, job, rec = _saved(tmp_path, "grpo")
    _saved(tmp_path, "vsr")
    store, vkey = records_root(cfg), "normal/vsr/seed0"
    entries = read_manifest(store)
    other = tmp_path / "records" / "compare_replay"  # a sibling already in the store holds the vsr record
    (other / vkey).parent.mkdir(parents=True)
    shutil.move(store / vkey, other / vkey)
    update_manifest(other, vkey, entries[vkey])
    legacy = tmp_path / "figures" / "compare_testbed" / "records"
    shutil.move(store, legacy)
    bare = {k: {f: v for f, v in e.items() if f != "fingerprint"} for k, e in entries.items()}  # the format-1 entries
    (legacy / MANIFEST).write_text(json.dumps({"format": 1, "records": {
        KEY: bare[KEY], vkey: {"in": "../../compare_replay/records", **bare[vkey]}}}))
    monkeypatch.chdir(tmp_path)
    rel = CompareConfig(**{**cfg.__dict__, "out": Path("figures/compare_testbed"), "report_only": True})
    with pytest.raises(RecordError, match=r"figures/compare_testbed/records: records inside the report folder.*"
                                          r"move_to_store\('figures/compare_testbed'\)"):
        run(rel)
    assert not (tmp_path / "records" / "compare_testbed").exists()
    assert move_to_store("figures/compare_testbed") == Path("records/compare_testbed")
    assert not legacy.exists() and (store / KEY / "done.json").is_file()
    now = read_manifest(store)
    assert now[KEY] == entries[KEY] and is_pointer(now[vkey]) and now[vkey] == {"in": "../compare_replay", **entries[vkey]}
    with pytest.raises(RecordError, match="nothing to move"):
        move_to_store("figures/compare_testbed")
    capsys.readouterr()
    assert run(rel) == 0
    assert "2 finished run(s) restored from records/compare_testbed (1 of them through its pointers" in capsys.readouterr().out


def test_missing_arms_are_listed_and_nothing_to_report_is_an_error(tmp_path, capsys):
    cfg = CompareConfig(out=tmp_path, seeds=2, steps=4, methods=("grpo", "vsr"), regimes=("normal",), report_only=True)
    with pytest.raises(ValueError, match="no finished run of suite 'testbed'.*nothing to report; run it without --report-only"):
        run(cfg)
    assert not (tmp_path / "report.md").exists()
    rc = main(["compare", "--out", str(tmp_path / "empty"), "--report-only", "--regimes", "normal"])
    assert rc == 2 and "nothing to report" in capsys.readouterr().err
    jobs = plan_jobs(cfg)
    for j in jobs:
        if not (j.method == "vsr" and j.seed == 1):
            _fake_run(j, 0.5, 100.0)
    assert run(cfg) == 0
    out = capsys.readouterr().out
    # the report covers the whole suite (a run in parts keeps one report), so every arm without a finished run is listed
    planned = plan_jobs(CompareConfig(out=tmp_path, seeds=2, steps=4))
    n_missing = len(planned) - 5
    assert f"{n_missing} of {len(planned)} planned run(s) are missing from the report (failed or not run): " in out
    assert "normal/vsr (seed 1)" in out
    report = (tmp_path / "report.md").read_text()
    assert f"**Incomplete: {n_missing} planned run(s) have no finished result" in report and "`normal/vsr/seed1`" in report
    missing = json.loads((tmp_path / "summary.json").read_text())["missing"]
    assert len(missing) == n_missing and "normal/vsr/seed1" in missing and "normal/grpo/seed1" not in missing
