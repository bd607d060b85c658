"""A comparison run's *record*: where it is kept (the records store), saving it as the run finishes, restoring it into
a run folder, and the checks that make it trustworthy before it is restored (``runner`` module doc, "Records").
:func:`save_record` and :func:`restore_record` are the I/O; :func:`records_root` and :func:`shared_records_roots` the
paths; everything else here is checking. ``records/README.md`` documents the format for readers without the code.

**The store.** The records of the committed suites live in ``records/`` at the top of the repository, beside
``figures/``: one folder per suite, ``records/compare_<suite>/`` (:func:`records_folder` maps a report folder to
it: a report folder inside a folder named ``figures``, such as the default ``figures/compare_<suite>``, keeps its
records in ``<that figures folder>/../records/<report folder name>``; a report folder anywhere else, ``--out DIR`` or
``--quick``, keeps them inside, ``DIR/records``, so a trial run never writes into the committed store;
``--records-dir`` names the folder outright). ``figures/`` holds only what a report command writes.

A record is ``<suite's records folder>/<regime>/<method>/seed<k>/`` holding ``done.json`` and, for a training job,
``metrics.jsonl.gz``. The folder's ``manifest.json`` lists every record: its job fingerprint, the SHA-256 of each
file and the number of metric rows, written when the record is saved. A record is refused (a :class:`RecordError`
naming the file and the reason; the job trains again, or is left out of a ``--report-only`` report) when

* it is not in the manifest (a folder copied or added by hand, or no manifest at all);
* a file's bytes differ from the manifest (edited, truncated, swapped for another arm's file);
* ``done.json``'s fingerprint is not the one the manifest lists;
* the metrics are not a complete gzip stream of JSON lines (the line is named);
* the rows are not one per training step, ``0 .. steps-1`` (a record holding 2 of 3 rows);
* the rows' ``config_fingerprint`` (written by the trainer into the first row) differs from the
  ``train_fingerprint`` in ``done.json``: the metrics belong to another configuration.

**Pointers.** Suites that share arms (``Suite.shares_records_with``) run some of the same jobs. A record one suite
restored from a sibling is not copied into its own folder: its manifest entry *points* at the sibling's records folder
instead, ``{"in": "../compare_<sibling>", "fingerprint": ..., "done.json": <sha256>, "metrics.jsonl.gz": <sha256>,
"rows": n}`` (``in`` is relative to the folder of the manifest that holds the entry), and no file of the record is in
the suite's own folder. :func:`follow_pointer` checks the sibling's files against the checksums of the pointing entry,
so a sibling record replaced later (another config) or damaged is named and not used. A pointer leads to a folder that
holds the files, never to another pointer, and no suite writes into a sibling's folder. :func:`dedupe` turns the
byte-identical copies that sibling suites kept before pointers existed into pointers to one copy.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import zlib
from pathlib import Path
from typing import Any, Callable, Sequence

from llm_harness.compare.jobs import CompareConfig, Job, is_done, matches
from llm_harness.compare.suite import SUITES
from llm_harness.trainer.runlog import parse_jsonl
from vsr_util.atomic import atomic_path, read_json, write_json
from vsr_util.store import STORE, store_folder

__all__ = ["FORMAT", "MANIFEST", "POINTER", "STORE", "RecordError", "check_listed", "check_not_in_report_folder", "dedupe",
           "drop_files", "follow_pointer", "is_pointer", "manifest_entry", "move_to_store", "pointer_entry", "read_manifest",
           "rebuild_manifest", "record_dir", "record_key", "records_folder", "records_root", "relocate_manifest",
           "report_bad_record", "restore_record", "save_record", "shared_records_roots", "update_manifest", "verify_record"]

#: the records store's folder name: ``records/`` beside ``figures/`` (module doc, "The store")
#: the manifest file in a suite's records folder
MANIFEST = "manifest.json"
#: the manifest's format: 2 lists each record's job fingerprint (1 did not; its entries are read as they are and get
#: the fingerprint when the record is saved again)
FORMAT = 2
_FILES = ("done.json", "metrics.jsonl.gz")
#: the key of a manifest entry that points at a sibling suite's records root (module doc, "Pointers")
POINTER = "in"


class RecordError(ValueError):
    """A record that must not be used (module doc)."""


# ---------------------------------------------------------------------------------------------------------- the store


def records_folder(report_dir: str | Path) -> Path:
    """The records folder of the suite whose report goes to ``report_dir`` (module doc, "The store";
    :func:`vsr_util.store.store_folder`, the rule the lab and the studies share): for a report folder under a folder
    named ``figures`` (``figures/compare_<suite>``), the same path under ``records/`` beside that ``figures`` folder;
    for any other report folder, ``<report_dir>/records``."""
    return store_folder(report_dir)


def records_root(cfg: CompareConfig) -> Path:
    """Where a ``vsr compare`` call keeps and restores its suite's records: ``--records-dir`` when given, else
    :func:`records_folder` of its report folder (``records/compare_<suite>`` for the committed suites)."""
    return Path(cfg.records_dir) if cfg.records_dir is not None else records_folder(cfg.report_dir)


def shared_records_roots(cfg: CompareConfig) -> list[Path]:
    """The records folders of the suites this one shares runs with (``Suite.shares_records_with``): beside
    ``--records-dir`` when it is given (``DIR/../compare_<sibling>``), else those of their report folders beside this
    suite's (:func:`records_folder` of ``<report dir>/../compare_<sibling>``: ``records/compare_<sibling>`` for the
    committed suites)."""
    names = SUITES[cfg.suite].shares_records_with
    if cfg.records_dir is not None:
        return [Path(cfg.records_dir).parent / f"compare_{name}" for name in names]
    return [records_folder(cfg.report_dir.parent / f"compare_{name}") for name in names]


def check_not_in_report_folder(cfg: CompareConfig) -> None:
    """Refuse a call whose suite's records are still inside its ``figures/`` report folder (``<report dir>/records``,
    where ``vsr compare`` kept them before the store), naming the folder and the command that moves them
    (:func:`move_to_store`): left there they would be neither restored nor kept, and the suite would train again."""
    old = cfg.report_dir / STORE
    if cfg.records_dir is None and old != records_root(cfg) and (old / MANIFEST).is_file():
        raise RecordError(f"{old}: records inside the report folder, where vsr compare kept them before the records "
                          f"store; move them to {records_root(cfg)} (their pointers rewritten): python -c \"from "
                          f"llm_harness.compare.records import move_to_store; move_to_store('{cfg.report_dir}')\"")


def move_to_store(report_dir: str | Path) -> Path:
    """Move the records a ``figures/`` report folder holds inside (``<report_dir>/records``, the layout before the
    store) to its records folder in the store (:func:`records_folder`), holding the folder's lock: the manifest's
    pointers are rewritten to lead to the same sibling suites' folders in the store (their checksums unchanged) and
    the manifest is written in the current format (:data:`FORMAT`, each entry's job fingerprint added from a
    ``done.json`` whose checksum is the entry's). Refused (:class:`RecordError`) when there is nothing to move or
    the store already has a folder for it. Returns the new folder."""
    from vsr_util.runlock import LOCK_NAME, locked_folder

    report_dir = Path(report_dir)
    old, new = report_dir / STORE, records_folder(report_dir)
    if old == new or not (old / MANIFEST).is_file():
        raise RecordError(f"{old / MANIFEST}: not found, or already the store's folder; nothing to move")
    if new.exists() and {p.name for p in new.iterdir()} - {LOCK_NAME}:
        raise RecordError(f"{new}: the store already has records of this suite; merge the two folders by hand")
    with locked_folder(old, field="records"):
        new.parent.mkdir(parents=True, exist_ok=True)
        (new / LOCK_NAME).unlink(missing_ok=True)
        if new.exists():
            new.rmdir()
        os.replace(old, new)
        relocate_manifest(new, old)
    return new


def relocate_manifest(root: str | Path, was: str | Path) -> int:
    """Rewrite the manifest of records folder ``root``, which was at ``was`` (:func:`move_to_store`): each pointer
    leads to :func:`records_folder` of the report folder its target belonged to (``<report dir>/records``, the
    layout before the store: ``figures/compare_<sibling>/records`` becomes ``records/compare_<sibling>``), and
    each entry without a fingerprint gets ``done.json``'s when that file's checksum is the entry's. The checksums
    are kept as they are (nothing is re-blessed). Returns the number of pointers rewritten."""
    root, was = Path(root), Path(was)
    records, moved = read_manifest(root), 0
    for key, entry in list(records.items()):
        homes = [root / key]
        if is_pointer(entry):
            before = Path(os.path.normpath(was / entry[POINTER]))  # where it led from the old place
            after = records_folder(before.parent) if before.name == STORE else before
            entry = pointer_entry(root, after, entry)
            moved += 1
            homes = [after / key, before / key]  # a sibling not moved yet still holds the files at the old place
        done = next((h / "done.json" for h in homes if (h / "done.json").is_file()), None)
        if "fingerprint" not in entry and done is not None and _sha256(done) == entry.get("done.json"):
            fp = _fingerprint(done)
            if fp is not None:
                head = {POINTER: entry[POINTER]} if is_pointer(entry) else {}
                entry = {**head, "fingerprint": fp, **{k: v for k, v in entry.items() if k != POINTER}}
        records[key] = entry
    _write_manifest(root, records)
    return moved


# ------------------------------------------------------------------------------------------------------ the manifest


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _rebuild_command(root: Path) -> str:
    """The command that rebuilds ``root``'s manifest from its record folders (:func:`rebuild_manifest`)."""
    return f"python -c \"from llm_harness.compare.records import rebuild_manifest; rebuild_manifest('{root}')\""


def read_manifest(root: str | Path) -> dict[str, Any]:
    """``{record key: entry}`` of a records root (empty when there is no manifest); :class:`RecordError` naming the
    file (and the line of a JSON syntax error) for a manifest that is not an object of entry objects."""
    path = Path(root) / MANIFEST
    if not path.is_file():
        return {}
    fix = ("restore it (a committed suite's: git checkout records/) or, for records you trust, rebuild it: "
           + _rebuild_command(Path(root)))
    try:
        data = read_json(path)
    except json.JSONDecodeError as exc:
        raise RecordError(f"{path}:{exc.lineno}: not a JSON manifest ({exc.msg} at column {exc.colno}); {fix}") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise RecordError(f"{path}: not a JSON manifest ({exc}); {fix}") from None
    if not isinstance(data, dict) or not isinstance(data.get("records"), dict):
        raise RecordError(f"{path}: expected an object with a 'records' mapping; {fix}")
    bad = next((k for k, e in data["records"].items() if not isinstance(e, dict)), None)
    if bad is not None:
        raise RecordError(f"{path}: the entry of {bad!r} is {type(data['records'][bad]).__name__}, not an object; {fix}")
    return data["records"]


def _fingerprint(done: Path) -> str | None:
    """The job fingerprint in a ``done.json`` (``None`` when it has none or does not read)."""
    try:
        info = read_json(done)
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    fp = info.get("fingerprint") if isinstance(info, dict) else None
    return fp if isinstance(fp, str) else None


def manifest_entry(rec: str | Path) -> dict[str, Any]:
    """The manifest entry of a record folder as it is now: the job fingerprint (``done.json``'s), the files' checksums
    and the metrics' row count."""
    rec = Path(rec)
    fp = _fingerprint(rec / "done.json") if (rec / "done.json").is_file() else None
    entry: dict[str, Any] = {} if fp is None else {"fingerprint": fp}
    entry.update({name: _sha256(rec / name) for name in _FILES if (rec / name).is_file()})
    if (rec / "metrics.jsonl.gz").is_file():
        entry["rows"] = len(_rows(rec / "metrics.jsonl.gz"))
    return entry


def update_manifest(root: str | Path, key: str, entry: dict[str, Any]) -> None:
    """Set ``key``'s entry in ``root``'s manifest (atomic rewrite; the suite's lock makes this the one writer)."""
    records = read_manifest(root)
    if records.get(key) == entry:
        return
    records[key] = entry
    _write_manifest(Path(root), records)


def _write_manifest(root: Path, records: dict[str, Any]) -> None:
    write_json(Path(root) / MANIFEST, {"format": FORMAT, "records": dict(sorted(records.items()))})


def rebuild_manifest(root: str | Path) -> int:
    """Write ``root``'s manifest from every record folder under it as it is now (for records saved before
    manifests existed; only run it on records you trust), keeping the pointer entries of an existing manifest
    whose key has no folder. Returns the number of records."""
    root = Path(root)
    records = {str(d.parent.relative_to(root)): manifest_entry(d.parent) for d in sorted(root.glob("*/*/seed*/done.json"))}
    try:
        old = read_manifest(root)
    except RecordError:
        old = {}
    records.update({k: e for k, e in old.items() if is_pointer(e) and k not in records})
    _write_manifest(root, records)
    return len(records)


def is_pointer(entry: Any) -> bool:
    """Whether a manifest entry points at a sibling suite's records root (module doc, "Pointers")."""
    return isinstance(entry, dict) and POINTER in entry


def pointer_entry(root: str | Path, target_root: str | Path, entry: dict[str, Any]) -> dict[str, Any]:
    """The entry of ``root``'s manifest that points at the record ``entry`` (checksums, rows) held in
    ``target_root``: ``in`` is ``target_root`` relative to ``root``, with forward slashes."""
    rel = Path(os.path.relpath(Path(target_root).absolute(), Path(root).absolute())).as_posix()
    return {POINTER: rel, **{k: v for k, v in entry.items() if k != POINTER}}


def _pointer_root(root: Path, entry: dict[str, Any]) -> Path:
    rel = entry.get(POINTER)
    if not isinstance(rel, str) or not rel or Path(rel).is_absolute() or os.path.normpath(rel) == ".":
        raise RecordError(f"{root / MANIFEST}: pointer {rel!r} is not a relative path to another records folder")
    return Path(os.path.normpath(root / rel))


def follow_pointer(root: str | Path, key: str, entry: dict[str, Any]) -> Path:
    """The record folder that ``root``'s pointer ``entry`` for ``key`` leads to, after checking its files against
    the entry's checksums (not the sibling's manifest: a sibling that replaced its record since is caught here).
    Raises :class:`RecordError` naming the pointing manifest and the sibling's file."""
    root = Path(root)
    here = root / key
    stray = [here / n for n in _FILES if (here / n).is_file()]
    if stray:
        raise RecordError(f"{stray[0]}: a file beside the entry of {root / MANIFEST} that points at "
                          f"{entry.get(POINTER)!r} for {key} (a copy added by hand?); delete one of them")
    sib = _pointer_root(root, entry)
    if not sib.is_dir():
        raise RecordError(f"{root / MANIFEST}: its entry for {key} points at {sib}, which does not exist (the sibling "
                          "suite's records folder must sit beside this one; a fresh clone has it)")
    rec = sib / key
    for name in _FILES:
        want, path = entry.get(name), rec / name
        if want is None and path.is_file():
            raise RecordError(f"{path}: not in the entry of {root / MANIFEST} that points at it (the sibling suite's "
                              f"record of {key} was replaced, e.g. by a run of another config)")
        if want is not None and (not path.is_file() or _sha256(path) != want):
            what = (f"missing, but {root / MANIFEST} points at it" if not path.is_file()
                    else f"bytes differ from the checksum in {root / MANIFEST}, which points at it")
            raise RecordError(f"{path}: {what} (the sibling suite's record of {key} was replaced, e.g. by a run of "
                              "another config, or damaged)")
    return rec


def _prune(folder: Path, root: Path) -> None:
    """Remove ``folder`` and its parents up to (not including) ``root`` while they are empty."""
    while folder != root and folder.is_dir() and not any(folder.iterdir()):
        folder.rmdir()
        folder = folder.parent


def drop_files(root: str | Path, key: str) -> None:
    """Delete the files of ``root``'s record ``key`` (and the folders that leaves empty); the manifest is the
    caller's."""
    root = Path(root)
    for name in _FILES:
        (root / key / name).unlink(missing_ok=True)
    _prune(root / key, root)


def dedupe(roots: Sequence[str | Path], order: Callable[[Path, str], Any] | None = None) -> list[tuple[Path, Path]]:
    """Keep one copy of every record that several of ``roots`` (suites that share records with each other) hold
    byte for byte, the same ``done.json`` and ``metrics.jsonl.gz``: each other holder's files are deleted and its
    manifest entry becomes a pointer to the kept copy (module doc, "Pointers"); a pointer that led to a removed copy
    is led to the kept one. The copy kept is the one with the smallest ``order(root, key)`` (e.g. the suite that
    trained it first), then the first of ``roots``. Every record handled must match its own manifest entry (else
    :class:`RecordError`, before anything is changed). Every root's folder lock (:mod:`vsr_util.runlock`, the one
    ``vsr compare`` holds on its records folder) is held for the whole call, taken in sorted order: a suite running
    on one of them refuses this call (:class:`~vsr_util.runlock.FolderBusyError`) instead of racing its manifest.
    Returns ``(removed copy, kept copy)`` per removed copy."""
    import contextlib

    from vsr_util.runlock import locked_folder

    roots = [Path(r) for r in roots]
    missing = [str(r) for r in roots if not r.is_dir()]
    if missing:
        raise RecordError(f"records folder(s) not found: {missing}")
    with contextlib.ExitStack() as stack:
        for r in sorted({os.path.realpath(r) for r in roots}):
            stack.enter_context(locked_folder(r, field="records"))
        return _dedupe_locked(roots, order)


def _agrees(listed: dict[str, Any], entry: dict[str, Any]) -> bool:
    """Whether manifest entry ``listed`` describes a record whose entry is now ``entry`` (a format-1 entry, without a
    fingerprint, agrees on the rest)."""
    return listed == entry or ("fingerprint" not in listed and listed == {k: v for k, v in entry.items() if k != "fingerprint"})


def _dedupe_locked(roots: list[Path], order: Callable[[Path, str], Any] | None) -> list[tuple[Path, Path]]:
    manifests = {r: read_manifest(r) for r in roots}
    held: dict[str, list[tuple[Path, dict[str, Any]]]] = {}
    for r in roots:
        for d in sorted(r.glob("*/*/seed*/done.json")):
            key = d.parent.relative_to(r).as_posix()
            entry, listed = manifest_entry(d.parent), manifests[r].get(key)
            if listed is None or is_pointer(listed) or not _agrees(listed, entry):
                why = "no entry" if listed is None else "a pointer" if is_pointer(listed) else "checksums differ"
                raise RecordError(f"{d.parent}: its files do not match {r / MANIFEST} ({why}); fix the manifest "
                                  "before deduplicating")
            held.setdefault(key, []).append((r, entry))
    removed: list[tuple[Path, Path]] = []
    for key in sorted(held):
        same: dict[str, list[Path]] = {}
        for r, entry in held[key]:
            same.setdefault(json.dumps(entry, sort_keys=True), []).append(r)
        for text, rs in same.items():
            if len(rs) < 2:
                continue
            keep = min(rs, key=lambda r: (order(r, key) if order is not None else 0, roots.index(r)))
            entry = json.loads(text)
            for r in rs:
                if r != keep:
                    manifests[r][key] = pointer_entry(r, keep, entry)
                    removed.append((r / key, keep / key))
            gone = {os.path.normpath(r) for r in rs if r != keep}
            for r in roots:  # an older pointer at a copy about to be removed: to the kept copy
                e = manifests[r].get(key)
                if (r not in rs and is_pointer(e) and os.path.normpath(_pointer_root(r, e)) in gone
                        and {k: v for k, v in e.items() if k != POINTER} == entry):
                    manifests[r][key] = pointer_entry(r, keep, e)
    for r in roots:  # each root's manifest first, then its files (one root at a time: one writer per folder)
        mine = [old for old, _ in removed if old.parent.parent.parent == r]
        if manifests[r] != read_manifest(r):
            _write_manifest(r, manifests[r])
        for rec in mine:
            drop_files(r, rec.relative_to(r).as_posix())
    return removed


def _rows(gz: Path) -> list[dict[str, Any]]:
    try:
        data = gzip.decompress(gz.read_bytes())
        data.decode("utf-8")
    except (EOFError, OSError, zlib.error, UnicodeDecodeError) as exc:
        raise RecordError(f"{gz}: not a complete gzip file of UTF-8 text ({type(exc).__name__}: {exc})") from None
    rows = []
    for no, row, why in parse_jsonl(data):
        if row is None:
            raise RecordError(f"{gz}: line {no} is not a JSON object ({why})")
        rows.append(row)
    return rows


def check_listed(rec: str | Path, *, key: str, root: str | Path, manifest: dict[str, Any]) -> None:
    """Raise :class:`RecordError` naming the file unless record folder ``rec`` is what ``root``'s manifest (read as
    ``manifest``) lists for ``key``: an entry exists, each file's bytes have the entry's checksum, no file the entry
    lacks is there, and ``done.json``'s fingerprint is the entry's. ``rec`` is ``root/key``, or the sibling's folder
    a pointer entry leads to."""
    rec, root = Path(rec), Path(root)
    entry = manifest.get(key)
    if entry is None:
        raise RecordError(f"{rec / 'done.json'}: not in {root / MANIFEST} (a record copied or added by hand, or saved "
                          f"by a run that stopped before listing it); delete the record to retrain its job, or list "
                          f"the folder's records if you trust them: {_rebuild_command(root)}")
    for name in _FILES:
        want, path = entry.get(name), rec / name
        if want is None and path.is_file():
            raise RecordError(f"{path}: not in the entry of {root / MANIFEST} for {key} (a file added by hand?)")
        if want is not None and (not path.is_file() or _sha256(path) != want):
            raise RecordError(f"{path}: {'missing' if not path.is_file() else 'bytes differ from'} the checksum in "
                              f"{root / MANIFEST} (damaged, or replaced by another run's file)")
    want = entry.get("fingerprint")
    if want is not None and (rec / "done.json").is_file():
        got = _fingerprint(rec / "done.json")
        if got != want:
            raise RecordError(f"{rec / 'done.json'}: job fingerprint {got!r}, but {root / MANIFEST} lists {want!r} for {key}")


def verify_record(rec: str | Path, info: dict[str, Any], *, key: str, manifest: dict[str, Any],
                  steps: int | None) -> None:
    """Raise :class:`RecordError` unless record folder ``rec`` (whose parsed ``done.json`` is ``info``, and which
    passed :func:`check_listed` against ``manifest``) holds complete metrics of its run (module doc): a complete gzip
    stream of JSON lines, one row per training step (the manifest's row count), all of ``done.json``'s training
    configuration; ``steps`` is the job's training length (``None``: an evaluation-only job, nothing to check)."""
    rec = Path(rec)
    entry = manifest.get(key) or {}
    gz = rec / "metrics.jsonl.gz"
    if steps is None:
        return
    if not gz.is_file():
        raise RecordError(f"{rec}: a training run's record without metrics.jsonl.gz")
    rows = _rows(gz)
    if entry.get("rows") is not None and entry["rows"] != len(rows):
        raise RecordError(f"{gz}: {len(rows)} rows, the manifest says {entry['rows']}")
    found = [r.get("step") for r in rows]
    if found != list(range(steps)):
        raise RecordError(f"{gz}: {len(rows)} metric rows for a {steps}-step run (steps "
                          f"{found[:3]}{'...' if len(found) > 3 else ''}); expected one row per step 0..{steps - 1}")
    fps = {r["config_fingerprint"] for r in rows if "config_fingerprint" in r}
    want = info.get("train_fingerprint")
    if len(fps) > 1 or (want is not None and fps and fps != {want}):
        raise RecordError(f"{gz}: metrics of configuration {sorted(fps)} under a done.json of configuration {want!r}")


# ---------------------------------------------------------------------------------------------- saving and restoring


def record_dir(records_root: Path, job: Job) -> Path:
    return Path(records_root) / job.regime / job.method / f"seed{job.seed}"


def record_key(job: Job) -> str:
    return f"{job.regime}/{job.method}/seed{job.seed}"


def save_record(job: Job, records_root: Path, shared_roots: tuple[Path, ...] | list[Path] = ()) -> Path:
    """Keep a finished run's ``done.json`` and gzipped ``metrics.jsonl`` under ``records_root`` (module doc,
    "Records") and their checksums in the root's manifest (:mod:`.records`); files already holding the same
    bytes are left alone. A record that one of ``shared_roots`` (the sibling suites' records roots) already holds,
    the same ``done.json`` and metrics, and that passes :func:`.records.verify_record` there, is not copied: the
    manifest entry points at it (a stale record of this job in ``records_root`` is deleted). Returns the record
    folder (the sibling's, for a pointer)."""
    src, dest = Path(job.run_dir), record_dir(records_root, job)
    key = record_key(job)
    done = (src / "done.json").read_bytes()
    metrics = src / "metrics.jsonl"
    if not (dest / "done.json").is_file() or (dest / "done.json").read_bytes() != done or not _same_metrics(dest, metrics):
        held = _held_by(job, done, metrics.read_bytes() if metrics.is_file() else None, records_root, shared_roots)
        if held is not None:
            sib_root, entry = held
            update_manifest(records_root, key, pointer_entry(records_root, sib_root, entry))
            drop_files(records_root, key)
            return record_dir(sib_root, job)
        gz = dest / "metrics.jsonl.gz"
        if metrics.is_file():
            with atomic_path(gz) as tmp:  # mtime 0: the same run gives the same bytes
                with open(tmp, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as fh:
                    fh.write(metrics.read_bytes())
        elif gz.exists():
            gz.unlink()
        with atomic_path(dest / "done.json") as tmp:  # last: a record is complete once done.json is there
            tmp.write_bytes(done)
    update_manifest(records_root, key, manifest_entry(dest))
    return dest


def _same_metrics(dest: Path, metrics: Path) -> bool:
    """Whether the record's gzipped metrics hold the run's ``metrics.jsonl`` bytes (absent both: the same); a damaged
    or edited ``.gz`` is not, so :func:`save_record` rewrites it instead of taking its checksum into the manifest."""
    gz = dest / "metrics.jsonl.gz"
    if not metrics.is_file():
        return not gz.exists()
    try:
        return gz.is_file() and gzip.decompress(gz.read_bytes()) == metrics.read_bytes()
    except (OSError, EOFError, zlib.error):
        return False


def _held_by(job: Job, done: bytes, metrics: bytes | None, records_root: Path,
             shared_roots: tuple[Path, ...] | list[Path]) -> tuple[Path, dict[str, Any]] | None:
    """The first sibling records root holding this run's record (the same ``done.json`` bytes, metrics that
    decompress to the same bytes) that passes :func:`.records.verify_record` there, and the record's manifest
    entry; the root the current pointer leads to is tried first. ``None``: keep a copy."""
    key = record_key(job)
    roots = [Path(r) for r in shared_roots]
    try:
        mine = read_manifest(records_root).get(key)
    except RecordError:
        mine = None
    if is_pointer(mine) and isinstance(mine["in"], str):
        now = (Path(records_root) / mine["in"]).resolve()
        roots.sort(key=lambda r: 0 if r.resolve() == now else 1)
    for root in roots:
        rec = record_dir(root, job)
        gz = rec / "metrics.jsonl.gz"
        try:
            if not (rec / "done.json").is_file() or (rec / "done.json").read_bytes() != done:
                continue
            if (metrics is None) != (not gz.is_file()) or (metrics is not None and gzip.decompress(gz.read_bytes()) != metrics):
                continue
            theirs = read_manifest(root).get(key)
            if theirs is None or is_pointer(theirs):
                continue  # a pointer leads to files, never to another pointer; an unlisted record is not used
            check_listed(rec, key=key, root=root, manifest={key: theirs})
            verify_record(rec, json.loads(done), key=key, manifest={key: theirs},
                          steps=None if job.method == "base" else int(job.mapping.get("steps", 0)))
        except (OSError, ValueError, EOFError):  # RecordError is a ValueError: a damaged sibling record is not used
            continue
        return root, manifest_entry(rec)
    return None


def restore_record(job: Job, records_root: Path, *, retrain: bool = True,
                   pointer_errors: list[RecordError] | None = None, report_only: bool = False) -> bool:
    """Put a job's record back into its run folder when the job is not finished there, the record is what the
    manifest lists (:func:`check_listed`, checked first: a record the manifest lacks or lists with other bytes is named
    whatever it holds), its config matches the job (:func:`matches`) and it passes :func:`verify_record`; returns
    whether it did.
    A manifest entry that points at a sibling suite's record (:mod:`.records`, "Pointers") is followed, the
    sibling's files checked against this manifest's checksums first. An unfinished run in the folder is replaced.
    A damaged or mismatched record is named and left unused (the job retrains), or refused with
    :class:`.records.RecordError` when ``retrain`` is false. With ``pointer_errors`` (a list), a pointer that cannot
    be followed is appended there instead, and ``False`` returned: the caller tries the sibling roots and reports
    it only if none restores the job. ``report_only``: nothing trains, and the line naming a damaged record says so.
    """
    rec = record_dir(records_root, job)
    key = record_key(job)
    if is_done(job) or not ((rec / "done.json").is_file() or (Path(records_root) / MANIFEST).is_file()):
        return False
    try:
        manifest = read_manifest(records_root)
    except RecordError as e:
        return report_bad_record(e, retrain, report_only)
    if is_pointer(manifest.get(key)):
        try:
            rec = follow_pointer(records_root, key, manifest[key])
        except RecordError as e:
            if pointer_errors is not None:
                pointer_errors.append(e)
                return False
            return report_bad_record(e, retrain, report_only)
    if not (rec / "done.json").is_file():
        return False
    try:  # the manifest first: a record it does not list, or lists with other bytes, is named whatever it holds
        check_listed(rec, key=key, root=records_root, manifest=manifest)
    except RecordError as e:
        return report_bad_record(e, retrain, report_only)
    try:
        info = read_json(rec / "done.json")
    except (ValueError, UnicodeDecodeError) as e:
        return report_bad_record(RecordError(f"{rec / 'done.json'}: not JSON ({e})"), retrain, report_only)
    if not isinstance(info, dict):
        return report_bad_record(RecordError(f"{rec / 'done.json'}: not a JSON object"), retrain, report_only)
    if not matches(info, job, rec):
        return False
    steps = None if job.method == "base" else int(job.mapping.get("steps", 0))
    try:
        verify_record(rec, info, key=key, manifest=manifest, steps=steps)
    except RecordError as e:
        return report_bad_record(e, retrain, report_only)
    d = Path(job.run_dir)
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    if (rec / "metrics.jsonl.gz").is_file():
        with atomic_path(d / "metrics.jsonl") as tmp:
            tmp.write_bytes(gzip.decompress((rec / "metrics.jsonl.gz").read_bytes()))
    with atomic_path(d / "done.json") as tmp:
        tmp.write_bytes((rec / "done.json").read_bytes())
    return True


def report_bad_record(err: RecordError, retrain: bool, report_only: bool = False) -> bool:
    """Refuse (``retrain`` false) or name a record that is not used, and what happens to its job instead."""
    if not retrain:
        raise RecordError(f"{err}; refusing (--no-retrain); delete the record to retrain the job") from None
    then = "the job is left out of the report (--report-only trains nothing)" if report_only else "the job trains again"
    print(f"vsr compare: record not used, {then}: {err}", flush=True)
    return False
