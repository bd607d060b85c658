"""Incremental, resumable result storage of a study (interrupted runs resume).

Layout of a study's output folder::

    study.json            identity of the resolved config (what must match to resume)
    config.yaml           the resolved config (loadable with ``vsr study <name> --config``)
    chunks/00003.json     rows + filter counts of chunk 3 (written atomically when it completes)
    results.parquet       the tidy table: all chunks' rows in chunk order
    summary.json/.md      the analysis; <figure>.png (a PDF too with VSR_FIGURE_FORMATS=png,pdf)
    timings.json          the collection's wall time (``collect_seconds``; not committed: ``.gitignore``)

A chunk is done iff its JSON file exists; files are only ever replaced atomically
(``vsr_util.atomic``), so an interrupted run leaves complete chunks only and a rerun of the same
config continues with the first missing chunk. A rerun whose config differs (outside
``NON_IDENTITY_FIELDS``) is refused with the list of differing fields, unless the folder holds nothing
computed yet (only ``study.json`` and ``config.yaml`` of a run refused before its first chunk).

The table is written as parquet only, with no CSV twin: parquet is what the code reads back
(``--reanalyze`` rebuilds a summary and figure from it, and the committed study folders under
``figures/`` hold no chunks, so it is their only copy of the rows), and it keeps the column types
a CSV loses: ``correct_bits`` (``"0110"``) would come back from ``pd.read_csv`` as the integer 110.
Read it with ``pandas.read_parquet(out / "results.parquet")``; export a CSV from that if you need one.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any, Mapping, Sequence

from vsr_util.atomic import TIMINGS_FILE, atomic_path, read_json, write_json

from prefixvalue.config import config_diff

__all__ = ["ChunkStore", "resizable", "strict_json", "write_table"]

_FORMAT = 1


def strict_json(v: Any) -> Any:
    """Strict-JSON value (chunk files, summaries): NaN/inf floats -> None, numpy scalars -> Python scalars."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: strict_json(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [strict_json(x) for x in v]
    if hasattr(v, "item") and not isinstance(v, (str, bytes)):
        try:
            return strict_json(v.item())
        except (ValueError, TypeError):
            return v
    return v


def resizable(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Whether two study identities differ only in ``n_problems`` (same chunk size): :class:`ChunkStore` then
    keeps the chunks both sizes share instead of refusing the folder."""
    keys = (set(old) | set(new)) - {"n_problems"}
    return (all(old.get(k) == new.get(k) for k in keys) and "n_problems" in old and "n_problems" in new
            and old["n_problems"] != new["n_problems"] and int(new.get("chunk_problems") or 0) > 0)


class ChunkStore:
    """Chunked rows of one study in ``out_dir`` (module doc)."""

    def __init__(self, out_dir: str | Path, study: str, identity: Mapping[str, Any], *, overwrite: bool = False):
        self.out_dir = Path(out_dir)
        self.study = study
        self.identity = dict(identity)
        self.chunk_dir = self.out_dir / "chunks"
        manifest = self.out_dir / "study.json"
        if manifest.is_file() and not overwrite and self._holds_results():
            try:
                old = read_json(manifest)
            except (OSError, ValueError) as exc:
                raise ValueError(f"out: {manifest} is unreadable ({exc}); pass --overwrite (overwrite=True in Python) to start over") from None
            if old.get("study") != study:
                raise ValueError(
                    f"out: {self.out_dir} holds results of study {old.get('study')!r}, not {study!r}; "
                    "choose another output folder or pass --overwrite (overwrite=True in Python)"
                )
            old_id = old.get("identity", {})
            diff = config_diff(old_id, self.identity)
            if diff and resizable(old_id, self.identity):
                self._keep_common_chunks(old_id["n_problems"], self.identity["n_problems"],
                                         int(self.identity["chunk_problems"]))
                diff = []
            if diff:
                raise ValueError(
                    f"out: {self.out_dir} holds results of a different {study} config, so they cannot be resumed "
                    f"(changed: {'; '.join(diff)}); choose another output folder or pass --overwrite (overwrite=True in Python) to discard them"
                )
        elif overwrite and self.out_dir.exists():
            shutil.rmtree(self.chunk_dir, ignore_errors=True)
            for name in ("results.parquet", "summary.json", "summary.md", TIMINGS_FILE):
                (self.out_dir / name).unlink(missing_ok=True)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        write_json(manifest, {"format": _FORMAT, "study": study, "identity": self.identity})

    def _holds_results(self) -> bool:
        """Whether the folder holds anything computed (a chunk, the table, a summary). A ``study.json`` alone (a run
        refused before its first chunk, e.g. for a model that does not fit the task) is taken over by any config."""
        return (any(self.chunk_dir.glob("*.json")) if self.chunk_dir.is_dir() else False) or any(
            (self.out_dir / name).exists() for name in ("results.parquet", "summary.json"))

    def _keep_common_chunks(self, n_old: int, n_new: int, size: int) -> None:
        """A study grown or shrunk in ``n_problems``: the problems are the split's first ones in a fixed order
        (``engine.select_problems``) and every seed derives from the chunk index or the problem, so a chunk
        whose span of problems is the same under both sizes holds exactly what a fresh run would compute; the
        others (the old last chunk, chunks past the new end) are removed, and so is the stale analysis."""
        for c in range(max(0, -(-int(n_old) // size))):
            same = min(int(n_old), (c + 1) * size) == min(int(n_new), (c + 1) * size) and c * size < int(n_new)
            if not same:
                self._path(c).unlink(missing_ok=True)
        for name in ("results.parquet", "summary.json", "summary.md", TIMINGS_FILE):
            (self.out_dir / name).unlink(missing_ok=True)

    def _path(self, chunk: int) -> Path:
        return self.chunk_dir / f"{chunk:05d}.json"

    def done(self, chunk: int) -> bool:
        """True iff ``chunk`` was completed by this or an earlier run."""
        return self._path(chunk).is_file()

    def save(self, chunk: int, rows: Sequence[Mapping[str, Any]], counts: Mapping[str, int]) -> None:
        """Atomically record a completed chunk."""
        write_json(self._path(chunk), {"chunk": chunk, "counts": strict_json(dict(counts)), "rows": [strict_json(dict(r)) for r in rows]})

    def load(self, chunk: int) -> tuple[list[dict[str, Any]], dict[str, int]]:
        """``(rows, counts)`` of a completed chunk."""
        path = self._path(chunk)
        try:
            data = json.loads(path.read_bytes().decode("utf-8"))
            return data["rows"], data["counts"]
        except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as exc:
            raise ValueError(f"out: chunk file {path} is damaged ({type(exc).__name__}: {exc}); delete it to recompute "
                             "that chunk, or pass --overwrite to start the study over") from None

    def collect(self, n_chunks: int) -> tuple[list[dict[str, Any]], dict[str, int]]:
        """All rows of chunks ``0..n_chunks-1`` in order, and their summed filter counts."""
        rows: list[dict[str, Any]] = []
        totals: dict[str, int] = {}
        for c in range(n_chunks):
            r, counts = self.load(c)
            rows.extend(r)
            for k, v in counts.items():
                totals[k] = totals.get(k, 0) + int(v)
        return rows, totals


def write_table(table, out_dir: str | Path, stem: str = "results") -> Path:
    """Write a pandas DataFrame as ``<stem>.parquet`` (atomically; no CSV twin, module doc) and return its path."""
    path = Path(out_dir) / f"{stem}.parquet"
    with atomic_path(path) as tmp:
        table.to_parquet(tmp, index=False)
    return path
