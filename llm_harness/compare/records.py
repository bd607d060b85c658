"""Checks that make a comparison record trustworthy before it is restored (``runner`` module doc, "Records").

A record is ``<records root>/<regime>/<method>/seed<k>/`` holding ``done.json`` and, for a training job,
``metrics.jsonl.gz``. The root's ``manifest.json`` lists, per record, the SHA-256 of each file and the
number of metric rows, written when the record is saved. :func:`verify_record` refuses a record (with a
:class:`RecordError` naming the file and the reason) when

* a file's bytes differ from the manifest (edited, truncated, swapped for another arm's file);
* the metrics are not a complete gzip stream of JSON lines (the line is named);
* the rows are not one per training step, ``0 .. steps-1`` (a record holding 2 of 3 rows);
* the rows' ``config_fingerprint`` (written by the trainer into the first row) differs from the
  ``train_fingerprint`` in ``done.json``: the metrics belong to another configuration.

A record without a manifest entry (written before manifests existed) gets every check but the checksums.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import zlib
from pathlib import Path
from typing import Any

from llm_harness.trainer.runlog import parse_jsonl
from vsr.atomic import write_json

__all__ = ["MANIFEST", "RecordError", "manifest_entry", "read_manifest", "rebuild_manifest", "update_manifest",
           "verify_record"]

#: the manifest file in a records root
MANIFEST = "manifest.json"
_FILES = ("done.json", "metrics.jsonl.gz")


class RecordError(ValueError):
    """A record that must not be used (module doc)."""


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def read_manifest(root: str | Path) -> dict[str, Any]:
    """``{record key: entry}`` of a records root (empty when there is no manifest)."""
    path = Path(root) / MANIFEST
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as exc:
        raise RecordError(f"{path}: not a JSON manifest ({exc}); delete it to check the records without checksums") from None
    if not isinstance(data, dict) or not isinstance(data.get("records"), dict):
        raise RecordError(f"{path}: expected an object with a 'records' mapping")
    return data["records"]


def manifest_entry(rec: str | Path) -> dict[str, Any]:
    """The manifest entry of a record folder as it is now: checksums and row count."""
    rec = Path(rec)
    entry: dict[str, Any] = {name: _sha256(rec / name) for name in _FILES if (rec / name).is_file()}
    if (rec / "metrics.jsonl.gz").is_file():
        entry["rows"] = len(_rows(rec / "metrics.jsonl.gz"))
    return entry


def update_manifest(root: str | Path, key: str, entry: dict[str, Any]) -> None:
    """Set ``key``'s entry in ``root``'s manifest (atomic rewrite; the suite's lock makes this the one writer)."""
    records = read_manifest(root)
    if records.get(key) == entry:
        return
    records[key] = entry
    write_json(Path(root) / MANIFEST, {"format": 1, "records": dict(sorted(records.items()))})


def rebuild_manifest(root: str | Path) -> int:
    """Write ``root``'s manifest from every record folder under it as it is now (for records saved before
    manifests existed; only run it on records you trust). Returns the number of records."""
    root = Path(root)
    records = {str(d.parent.relative_to(root)): manifest_entry(d.parent) for d in sorted(root.glob("*/*/seed*/done.json"))}
    write_json(root / MANIFEST, {"format": 1, "records": records})
    return len(records)


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


def verify_record(rec: str | Path, info: dict[str, Any], *, key: str, manifest: dict[str, Any],
                  steps: int | None) -> None:
    """Raise :class:`RecordError` unless record folder ``rec`` (whose parsed ``done.json`` is ``info``) passes every
    check of the module doc; ``steps`` is the job's training length (``None``: an evaluation-only job)."""
    rec = Path(rec)
    entry = manifest.get(key)
    if entry is not None:
        for name in _FILES:
            want, path = entry.get(name), rec / name
            if want is None and path.is_file():
                raise RecordError(f"{path}: not in the manifest of {rec.parent.parent.parent} (a file added by hand?)")
            if want is not None and (not path.is_file() or _sha256(path) != want):
                raise RecordError(f"{path}: {'missing' if not path.is_file() else 'bytes differ from'} the manifest's "
                                  f"checksum (damaged, or replaced by another run's file)")
    gz = rec / "metrics.jsonl.gz"
    if steps is None:
        return
    if not gz.is_file():
        raise RecordError(f"{rec}: a training run's record without metrics.jsonl.gz")
    rows = _rows(gz)
    if entry is not None and entry.get("rows") is not None and entry["rows"] != len(rows):
        raise RecordError(f"{gz}: {len(rows)} rows, the manifest says {entry['rows']}")
    found = [r.get("step") for r in rows]
    if found != list(range(steps)):
        raise RecordError(f"{gz}: {len(rows)} metric rows for a {steps}-step run (steps "
                          f"{found[:3]}{'...' if len(found) > 3 else ''}); expected one row per step 0..{steps - 1}")
    fps = {r["config_fingerprint"] for r in rows if "config_fingerprint" in r}
    want = info.get("train_fingerprint")
    if len(fps) > 1 or (want is not None and fps and fps != {want}):
        raise RecordError(f"{gz}: metrics of configuration {sorted(fps)} under a done.json of configuration {want!r}")
