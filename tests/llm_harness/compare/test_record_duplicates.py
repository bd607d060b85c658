"""A record that sibling suites share is kept once: the other suites' manifests point at it
(``llm_harness.compare.records``, "Pointers"), a pointer is checked against its own checksums when followed, and the
committed record folders hold no byte-identical copies."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from llm_harness.compare.records import MANIFEST, RecordError, dedupe, manifest_entry, read_manifest, records_root
from llm_harness.compare.jobs import CompareConfig, plan_jobs
from llm_harness.compare.jobs import is_done as _done
from llm_harness.compare.records import restore_record, save_record
from vsr_util.runlock import LOCK_NAME

from test_compare import _fake_run  # noqa: E402 - the same fake runs as the report tests

ROOT = Path(__file__).resolve().parents[3]
KEY = "normal/grpo/seed0"


def test_the_committed_records_hold_no_byte_identical_copies():
    """Every file under ``records/compare_*`` (manifests aside) is there once: a sibling suite's run is referenced by
    a pointer, not copied (a new copy fails here, naming both files)."""
    seen: dict[str, Path] = {}
    pairs = []
    files = sorted(p for p in (ROOT / "records").glob("compare_*/**/*") if p.is_file() and p.name not in (MANIFEST, LOCK_NAME))
    assert files
    for p in files:
        h = hashlib.sha256(p.read_bytes()).hexdigest()
        if h in seen:
            pairs.append(f"{seen[h].relative_to(ROOT)} == {p.relative_to(ROOT)}")
        else:
            seen[h] = p
    assert not pairs, f"{len(pairs)} byte-identical record file(s) (keep one, point at it: records.dedupe):\n" + "\n".join(pairs[:20])


def _suite(tmp_path: Path, name: str) -> CompareConfig:
    """Suite ``name``'s options as the committed suites are laid out: report ``figures/compare_<name>``, records in the
    store, ``records/compare_<name>``."""
    return CompareConfig(out=tmp_path / "figures" / f"compare_{name}", seeds=1, steps=3, methods=("grpo",),
                         regimes=("normal",))


def _job(cfg: CompareConfig):
    return next(j for j in plan_jobs(cfg) if j.method == "grpo")


def _trained(tmp_path: Path, name: str = "a"):
    """Suite ``name`` trained the GRPO job and kept its record; its run folder is gone (a fresh clone)."""
    cfg = _suite(tmp_path, name)
    job = _job(cfg)
    _fake_run(job, 0.5, 100.0)
    save_record(job, records_root(cfg))
    shutil.rmtree(job.run_dir)
    return cfg, job


def _pointed(tmp_path: Path):
    """Suite a trained the job; suite b restored it from a and saved it: a pointer in b's manifest."""
    a, ja = _trained(tmp_path, "a")
    b = _suite(tmp_path, "b")
    jb = _job(b)
    assert jb.fingerprint == ja.fingerprint  # the same job under another suite's folder
    assert not restore_record(jb, records_root(b)) and restore_record(jb, records_root(a))
    save_record(jb, records_root(b), [records_root(a)])
    return a, b, jb


def test_a_record_a_sibling_holds_is_saved_as_a_pointer(tmp_path):
    a, b, jb = _pointed(tmp_path)
    assert not (records_root(b) / KEY).exists()  # no copy
    entry = read_manifest(records_root(b))[KEY]
    assert entry == {"in": "../compare_a", **read_manifest(records_root(a))[KEY]}
    assert set(entry) == {"in", "fingerprint", "done.json", "metrics.jsonl.gz", "rows"}
    assert save_record(jb, records_root(b), [records_root(a)]) == records_root(a) / KEY  # again: unchanged
    assert read_manifest(records_root(b))[KEY] == entry
    from llm_harness.compare.records import rebuild_manifest

    assert rebuild_manifest(records_root(b)) == 1 and read_manifest(records_root(b))[KEY] == entry  # pointers kept
    # without the sibling (or another run's bytes): a copy, as before
    c = _suite(tmp_path, "c")
    save_record(jb, records_root(c))
    assert manifest_entry(records_root(c) / KEY) == read_manifest(records_root(c))[KEY]


def test_a_pointer_is_followed_on_restore(tmp_path, capsys):
    a, b, jb = _pointed(tmp_path)
    shutil.rmtree(b.runs_root)
    capsys.readouterr()
    assert restore_record(jb, records_root(b)) and _done(jb)
    assert "record not used" not in capsys.readouterr().out
    assert (Path(jb.run_dir) / "done.json").read_bytes() == (records_root(a) / KEY / "done.json").read_bytes()


def test_a_stale_copy_is_replaced_by_the_pointer(tmp_path):
    """b had kept a record of another run of the job (other bytes); it restores a's and points at it, and its own
    stale files go."""
    a, ja = _trained(tmp_path, "a")
    b = _suite(tmp_path, "b")
    jb = _job(b)
    _fake_run(jb, 0.4, 90.0)
    save_record(jb, records_root(b))
    shutil.rmtree(jb.run_dir)
    (records_root(b) / KEY / "done.json").write_text("{}")  # not this job's record any more (another config)
    from llm_harness.compare.records import update_manifest

    update_manifest(records_root(b), KEY, manifest_entry(records_root(b) / KEY))
    assert not restore_record(jb, records_root(b)) and restore_record(jb, records_root(a))
    save_record(jb, records_root(b), [records_root(a)])
    assert not (records_root(b) / KEY).exists() and read_manifest(records_root(b))[KEY]["in"] == "../compare_a"


@pytest.mark.parametrize("change", ["replaced", "removed"])
def test_a_sibling_record_replaced_since_is_named_and_not_used(tmp_path, capsys, change):
    a, b, jb = _pointed(tmp_path)
    shutil.rmtree(b.runs_root)
    done = records_root(a) / KEY / "done.json"
    if change == "replaced":  # a reran the job with another config: its record is a different one now
        info = json.loads(done.read_text())
        done.write_text(json.dumps({**info, "wall_s": 2.0}))
    else:
        done.unlink()
    capsys.readouterr()
    assert not restore_record(jb, records_root(b)) and not _done(jb)
    out = capsys.readouterr().out
    assert f"record not used, the job trains again: {done}: " in out and str(records_root(b) / MANIFEST) in out
    with pytest.raises(RecordError, match=r"records/compare_a/normal/grpo/seed0/done\.json.*records/compare_b/manifest\.json"
                                          r".*refusing \(--no-retrain\)"):
        restore_record(jb, records_root(b), retrain=False)


def test_a_broken_pointer_is_left_to_the_caller_when_asked(tmp_path, capsys):
    """The runner tries the suite's own root first: a pointer it cannot follow is handed back (no message, no
    refusal even with --no-retrain) so that a sibling root can still restore the job; the runner reports it only
    when none does."""
    a, b, jb = _pointed(tmp_path)
    shutil.rmtree(b.runs_root)
    (records_root(a) / KEY / "done.json").unlink()
    capsys.readouterr()
    errors: list = []
    assert not restore_record(jb, records_root(b), retrain=False, pointer_errors=errors)
    assert capsys.readouterr().out == "" and len(errors) == 1 and isinstance(errors[0], RecordError)
    assert str(records_root(b) / MANIFEST) in str(errors[0])


def test_a_copy_beside_a_pointer_is_refused(tmp_path, capsys):
    a, b, jb = _pointed(tmp_path)
    shutil.rmtree(b.runs_root)
    shutil.copytree(records_root(a) / KEY, records_root(b) / KEY)
    assert not restore_record(jb, records_root(b))
    assert "a file beside the entry" in capsys.readouterr().out


def test_dedupe_keeps_exactly_one_copy(tmp_path):
    """Three sibling roots hold the same record (and a fourth record only one of them holds, and another run of the
    job in c): the copy of the root ``order`` ranks first stays, the other holders point at it, a pointer that led to
    a removed copy is led to the kept one, a record held once is untouched, and a second pass changes nothing."""
    a, ja = _trained(tmp_path, "a")
    roots = {n: records_root(_suite(tmp_path, n)) for n in "abcd"}
    for n in "bc":
        shutil.copytree(roots["a"] / KEY, roots[n] / KEY)
        shutil.copyfile(roots["a"] / MANIFEST, roots[n] / MANIFEST)
    # d points at c's copy (saved as a pointer before this pass)
    from llm_harness.compare.records import pointer_entry, update_manifest

    update_manifest(roots["d"], KEY, pointer_entry(roots["d"], roots["c"], read_manifest(roots["a"])[KEY]))
    # a record only c holds
    other = CompareConfig(out=tmp_path / "figures" / "compare_c", seeds=2, steps=3, methods=("grpo",), regimes=("normal",))
    j1 = next(j for j in plan_jobs(other) if j.method == "grpo" and j.seed == 1)
    _fake_run(j1, 0.6, 100.0)
    save_record(j1, roots["c"])
    files = lambda: sorted(p for r in roots.values() for p in r.rglob("*") if p.is_file() and p.name not in (MANIFEST, LOCK_NAME))  # noqa: E731
    before = {p: p.read_bytes() for p in files()}

    rank = {roots["b"]: 0}  # b "trained it first"
    removed = dedupe([roots["a"], roots["b"], roots["c"], roots["d"]], order=lambda r, key: rank.get(r, 1))
    assert sorted(removed) == sorted([(roots["a"] / KEY, roots["b"] / KEY), (roots["c"] / KEY, roots["b"] / KEY)])
    assert [p for p in files() if p.parent.name == "seed0"] == [roots["b"] / KEY / "done.json",
                                                                roots["b"] / KEY / "metrics.jsonl.gz"]
    assert (roots["c"] / "normal/grpo/seed1/done.json").is_file()  # held once: kept
    assert all(before[p] == p.read_bytes() for p in files())
    kept = read_manifest(roots["b"])[KEY]
    for n in "acd":
        assert read_manifest(roots[n])[KEY] == {"in": "../compare_b", **kept}, n
    assert not (roots["a"] / "normal").exists()  # emptied folders go
    # every suite still restores the record, through its pointer
    for n in "abcd":
        job = _job(_suite(tmp_path, n))
        assert restore_record(job, roots[n], retrain=False) and _done(job), n
    assert dedupe(list(roots.values())) == []


def test_dedupe_refuses_records_that_do_not_match_their_manifest(tmp_path):
    a, ja = _trained(tmp_path, "a")
    b = records_root(_suite(tmp_path, "b"))
    shutil.copytree(records_root(a) / KEY, b / KEY)
    shutil.copyfile(records_root(a) / MANIFEST, b / MANIFEST)
    (b / KEY / "done.json").write_text("{}")
    with pytest.raises(RecordError, match="do not match .*manifest.json .*checksums differ"):
        dedupe([records_root(a), b])
    assert (records_root(a) / KEY / "done.json").is_file()  # nothing changed


def test_saving_again_repairs_a_damaged_gz_instead_of_taking_its_checksum(tmp_path):
    a = _suite(tmp_path, "a")
    ja = _job(a)
    _fake_run(ja, 0.5, 100.0)
    save_record(ja, records_root(a))
    gz = records_root(a) / KEY / "metrics.jsonl.gz"
    good = gz.read_bytes()
    gz.write_bytes(good[:-7])  # truncated after the record was saved
    save_record(ja, records_root(a))  # the run folder is still there: saving again rewrites the damaged file
    assert gz.read_bytes() == good
    assert read_manifest(records_root(a))[KEY]["metrics.jsonl.gz"] == __import__("hashlib").sha256(good).hexdigest()


def test_a_suite_whose_records_folder_is_held_is_refused(tmp_path):
    """Two `vsr compare` of one suite with different run folders share its records manifest: the second is refused
    (before, only the run folder was locked and both rewrote the manifest)."""
    from llm_harness.compare.runner import run
    from vsr_util.runlock import FolderBusyError, locked_folder

    cfg = _suite(tmp_path, "a")
    with locked_folder(records_root(cfg), field="records"):
        with pytest.raises(FolderBusyError):
            run(cfg)


def test_dedupe_is_refused_while_a_suite_holds_one_of_the_records_folders(tmp_path):
    from vsr_util.runlock import FolderBusyError, locked_folder

    a, ja = _trained(tmp_path, "a")
    b = records_root(_suite(tmp_path, "b"))
    shutil.copytree(records_root(a) / KEY, b / KEY)
    shutil.copyfile(records_root(a) / MANIFEST, b / MANIFEST)
    with locked_folder(b, field="records"):  # as `vsr compare` holds it while it runs
        with pytest.raises(FolderBusyError):
            dedupe([records_root(a), b])
    assert (b / KEY / "done.json").is_file()  # nothing changed
    assert len(dedupe([records_root(a), b])) == 1  # once the suite is done
    with pytest.raises(RecordError, match="not found"):
        dedupe([records_root(a), tmp_path / "nowhere"])
