"""Comparison records that cannot lie: checksums, row counts and configuration checked
before a record is restored; missing arms named in the report; nothing to report is an error."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from llm_harness.compare.records import MANIFEST, RecordError, read_manifest, rebuild_manifest
from llm_harness.compare.jobs import CompareConfig, plan_jobs
from llm_harness.compare.jobs import is_done as _done
from llm_harness.compare.records import restore_record, save_record
from llm_harness.compare.runner import run
from vsr.cli import main

from test_compare import _fake_run  # noqa: E402 - the same fake runs as the report tests


def _saved(tmp_path: Path, method: str = "grpo", steps: int = 3, fingerprint: str | None = None):
    """A finished fake run of ``method`` with its record saved, then the run folder removed (a fresh clone)."""
    cfg = CompareConfig(out=tmp_path, seeds=1, steps=steps, methods=("grpo", "vsr"), regimes=("normal",))
    job = next(j for j in plan_jobs(cfg) if j.method == method)
    _fake_run(job, 0.5, 100.0)
    if fingerprint is not None:  # as a real run: done.json and the first metrics row name the trainer config
        d = Path(job.run_dir)
        info = json.loads((d / "done.json").read_text())
        (d / "done.json").write_text(json.dumps({**info, "train_fingerprint": fingerprint}))
        rows = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines()]
        rows[0]["config_fingerprint"] = fingerprint
        (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    rec = save_record(job, cfg.records_root)
    shutil.rmtree(job.run_dir)
    return cfg, job, rec


def _rewrite_gz(path: Path, rows: list[dict]) -> None:
    path.write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in rows).encode()))


def _rows(path: Path) -> list[dict]:
    return [json.loads(x) for x in gzip.decompress(path.read_bytes()).decode().splitlines()]


def test_an_intact_record_is_restored_and_listed_in_the_manifest(tmp_path):
    cfg, job, rec = _saved(tmp_path)
    entry = read_manifest(cfg.records_root)["normal/grpo/seed0"]
    assert entry["rows"] == 3 and set(entry) == {"done.json", "metrics.jsonl.gz", "rows"}
    assert restore_record(job, cfg.records_root) and _done(job)


def test_a_record_missing_a_row_is_named_and_retrained_or_refused(tmp_path, capsys):
    cfg, job, rec = _saved(tmp_path)
    gz = rec / "metrics.jsonl.gz"
    _rewrite_gz(gz, _rows(gz)[:2])  # 2 of 3 rows, a valid gzip
    assert not restore_record(job, cfg.records_root) and not _done(job)
    out = capsys.readouterr().out
    assert f"record not used, the job trains again: {gz}: bytes differ from the manifest" in out
    (cfg.records_root / MANIFEST).unlink()  # without the manifest, the row count still catches it
    assert not restore_record(job, cfg.records_root)
    assert "2 metric rows for a 3-step run" in capsys.readouterr().out
    with pytest.raises(RecordError, match=r"2 metric rows for a 3-step run.*refusing \(--no-retrain\)"):
        restore_record(job, cfg.records_root, retrain=False)


def test_another_arms_metrics_under_this_arms_done_json_are_caught(tmp_path, capsys):
    cfg, grpo, rec = _saved(tmp_path, "grpo", fingerprint="aaaa")
    _, vsr, vrec = _saved(tmp_path, "vsr", fingerprint="bbbb")
    shutil.copyfile(vrec / "metrics.jsonl.gz", rec / "metrics.jsonl.gz")
    assert not restore_record(grpo, cfg.records_root)
    assert "bytes differ from the manifest's checksum" in capsys.readouterr().out
    (cfg.records_root / MANIFEST).unlink()  # an old record without checksums: the configuration check catches it
    assert not restore_record(grpo, cfg.records_root)
    assert "metrics of configuration ['bbbb'] under a done.json of configuration 'aaaa'" in capsys.readouterr().out
    assert restore_record(vsr, cfg.records_root)  # the other arm's own record is fine


@pytest.mark.parametrize("damage", ["truncated", "not gzip", "not json"])
def test_a_damaged_file_is_named_instead_of_a_traceback(tmp_path, capsys, damage):
    cfg, job, rec = _saved(tmp_path)
    (cfg.records_root / MANIFEST).unlink()
    gz = rec / "metrics.jsonl.gz"
    if damage == "truncated":
        gz.write_bytes(gz.read_bytes()[:-9])
    elif damage == "not gzip":
        gz.write_text("hello")
    else:
        (rec / "done.json").write_text("{broken")
    assert not restore_record(job, cfg.records_root)
    out = capsys.readouterr().out
    named = rec / "done.json" if damage == "not json" else gz
    assert f"record not used, the job trains again: {named}: " in out
    assert ("not JSON" if damage == "not json" else "not a complete gzip file") in out


def test_the_committed_records_pass_their_manifests():
    """Every committed suite's records match the checksums and row counts its manifest lists; every entry that
    points at a sibling suite's record (records module doc, "Pointers") leads into a suite it shares records with,
    to files with the entry's checksums."""
    from llm_harness.compare.records import follow_pointer, is_pointer, manifest_entry
    from llm_harness.compare.suite import SUITES

    roots = sorted((Path(__file__).resolve().parents[3] / "figures").glob("compare_*/records"))
    assert roots
    for root in roots:
        listed = read_manifest(root)
        copies = sorted(k for k, e in listed.items() if not is_pointer(e))
        found = sorted(str(d.parent.relative_to(root)) for d in root.glob("*/*/seed*/done.json"))
        assert copies == found, root
        for key in found[:: max(1, len(found) // 20)]:  # a sample: the full check is the restore itself
            assert manifest_entry(root / key) == listed[key], root / key
        siblings = {f"compare_{s}" for s in SUITES[root.parent.name.removeprefix("compare_")].shares_records_with}
        for key, entry in listed.items():
            if is_pointer(entry):
                suite_dir = follow_pointer(root, key, entry).parents[3]  # <sibling>/records/<regime>/<method>/seed<k>
                assert suite_dir.name in siblings and suite_dir.parent == root.parent.parent, (root, key, entry["in"])


def test_rebuild_manifest_lists_every_record(tmp_path):
    cfg, job, rec = _saved(tmp_path)
    (cfg.records_root / MANIFEST).unlink()
    assert rebuild_manifest(cfg.records_root) == 1
    assert "normal/grpo/seed0" in read_manifest(cfg.records_root)


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
