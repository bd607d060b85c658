"""Incremental, resumable result storage of a study (interrupted runs resume).

A study splits its output in two (:mod:`vsr_util.store`, ``records/README.md``): the *records*, what it reads back
to resume or to rebuild its report, go to the records folder of its output folder (:func:`records_dir`,
``vsr_util.store.store_folder``: ``figures/prefixvalue/<study>`` -> ``records/prefixvalue/<study>``,
``figures/real_model/<study>`` -> ``records/real_model/<study>``, any other ``--out DIR`` -> ``DIR/records``);
the *report*, what a person reads, stays in the output folder itself::

    <records folder>/
      study.json          identity of the resolved config (what must match to resume)
      config.yaml         the resolved config (loadable with ``vsr study <name> --config``)
      chunks/00003.json   rows + filter counts of chunk 3 (written atomically when it completes; not committed)
      results.parquet     the tidy table: all chunks' rows in chunk order (what ``--reanalyze`` reads)
    <out>/
      summary.json/.md    the analysis; <figure>.png (a PDF too with VSR_FIGURE_FORMATS=png,pdf)
      timings.json        the collection's wall time (``collect_seconds``; not committed: ``.gitignore``)

A chunk is done iff its JSON file exists; files are only ever replaced atomically
(``vsr_util.atomic``), so an interrupted run leaves complete chunks only and a rerun of the same
config continues with the first missing chunk. A rerun whose config differs (outside
``NON_IDENTITY_FIELDS``) is refused with the list of differing fields, unless the folder holds nothing
computed yet (only ``study.json`` and ``config.yaml`` of a run refused before its first chunk).

Before the records store a study kept its records inside its output folder (``<out>/study.json``, ``chunks/``,
``results.parquet``). Such a folder is refused (:func:`check_no_old_layout`), naming it and the command that moves
the records where they now belong (:func:`move_study_records`): left there they would be neither resumed from nor
reanalysed, and the study would sample everything again.

The table is written as parquet only, with no CSV twin: parquet is what the code reads back
(``--reanalyze`` rebuilds a summary and figure from it, and the committed studies' records hold no chunks, so it is
their only copy of the rows), and it keeps the column types a CSV loses: ``correct_bits`` (``"0110"``) would come
back from ``pd.read_csv`` as the integer 110. Read it with
``pandas.read_parquet(records_dir(out) / "results.parquet")``; export a CSV from that if you need one.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any, Mapping, Sequence

from vsr_util.atomic import TIMINGS_FILE, atomic_path, read_json, write_json
from vsr_util.store import misplaced_records, move_into_store, store_folder

from prefixvalue.config import config_diff

__all__ = ["RECORD_FILES", "REPORT_FILES", "ChunkStore", "check_no_old_layout", "move_study_records",
           "old_layout_records", "records_dir", "resizable", "strict_json", "write_table"]

_FORMAT = 1

#: what a study reads back, kept in its records folder (:func:`records_dir`; module doc)
RECORD_FILES = ("study.json", "config.yaml", "chunks", "results.parquet")
#: the report's files that depend on the records (removed with them by ``overwrite`` and by a resize)
REPORT_FILES = ("summary.json", "summary.md", TIMINGS_FILE)
#: what marks a study's records inside its output folder, where a study kept them before the records store
_OLD_LAYOUT = ("study.json", "chunks", "results.parquet")


def records_dir(out: str | Path) -> Path:
    """The records folder of the study whose report goes to ``out``: :func:`vsr_util.store.store_folder`
    (``figures/prefixvalue/<study>`` -> ``records/prefixvalue/<study>``; any other ``DIR`` -> ``DIR/records``)."""
    return store_folder(out)


def old_layout_records(out: str | Path) -> list[Path]:
    """The study records that ``out`` holds inside, where a study kept them before the records store
    (``study.json``, ``chunks/``, ``results.parquet``, and ``config.yaml`` beside any of them); empty when none."""
    return misplaced_records(out, RECORD_FILES, markers=_OLD_LAYOUT)


def _move_command(out: Path) -> str:
    return f"python -c \"from prefixvalue.store import move_study_records; move_study_records({str(out)!r})\""


def check_no_old_layout(out: str | Path, field: str = "out") -> None:
    """Refuse an output folder that still holds a study's records inside (:func:`old_layout_records`), naming the
    folder, where they belong now and the command that moves them (:func:`move_study_records`): left there they would
    be neither resumed from nor reanalysed, and the study would silently sample everything again."""
    out = Path(out)
    old = old_layout_records(out)
    if old:
        names = ", ".join(p.name + ("/" if p.is_dir() else "") for p in old)
        raise ValueError(
            f"{field}: {out} holds a study's records ({names}) inside the report folder, where vsr study kept them "
            f"before the records store; they belong in {records_dir(out)} now and are not read from here. Move them "
            f"there: {_move_command(out)} (or delete them to start the study over)")


def move_study_records(out: str | Path) -> Path:
    """Move the records a study's output folder ``out`` holds inside (:func:`old_layout_records`: ``study.json``,
    ``config.yaml``, ``chunks/``, ``results.parquet``) to its records folder (:func:`records_dir`), holding the output
    folder's lock; the report (summaries, figures, ``timings.json``) stays. Refused when there is nothing to move or
    the records folder already holds any of those files. Returns the records folder."""
    out = Path(out)
    old = old_layout_records(out)
    if not old:
        raise ValueError(f"{out}: no study records ({', '.join(_OLD_LAYOUT)}) inside; nothing to move")
    return move_into_store(out, old, "study records")


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
    """Chunked rows of one study whose report goes to ``out_dir``, kept in its records folder :attr:`records_dir`
    (module doc). An ``out_dir`` that still holds records inside (the layout before the store) is refused
    (:func:`check_no_old_layout`)."""

    def __init__(self, out_dir: str | Path, study: str, identity: Mapping[str, Any], *, overwrite: bool = False):
        self.out_dir = Path(out_dir)
        self.records_dir = records_dir(self.out_dir)
        self.study = study
        self.identity = dict(identity)
        check_no_old_layout(self.out_dir)
        self.chunk_dir = self.records_dir / "chunks"
        manifest = self.records_dir / "study.json"
        if manifest.is_file() and not overwrite and self._holds_results():
            try:
                old = read_json(manifest)
            except (OSError, ValueError) as exc:
                raise ValueError(f"out: {manifest} is unreadable ({exc}); pass --overwrite (overwrite=True in Python) to start over") from None
            if old.get("study") != study:
                raise ValueError(
                    f"out: {self.out_dir} holds results of study {old.get('study')!r}, not {study!r} (its records: "
                    f"{self.records_dir}); choose another output folder or pass --overwrite (overwrite=True in Python)"
                )
            old_id = old.get("identity", {})
            diff = config_diff(old_id, self.identity)
            if diff and resizable(old_id, self.identity):
                self._keep_common_chunks(old_id["n_problems"], self.identity["n_problems"],
                                         int(self.identity["chunk_problems"]))
                diff = []
            if diff:
                raise ValueError(
                    f"out: {self.out_dir} holds results of a different {study} config (its records: "
                    f"{self.records_dir}), so they cannot be resumed "
                    f"(changed: {'; '.join(diff)}); choose another output folder or pass --overwrite (overwrite=True in Python) to discard them"
                )
        elif overwrite:
            self._discard_results()
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.records_dir.mkdir(parents=True, exist_ok=True)
        write_json(manifest, {"format": _FORMAT, "study": study, "identity": self.identity})

    def _discard_results(self) -> None:
        """Remove every chunk, the table and the report's summary and timings (``overwrite``)."""
        shutil.rmtree(self.chunk_dir, ignore_errors=True)
        self._discard_analysis()

    def _discard_analysis(self) -> None:
        """Remove the table (records) and the summary and timings built from it (report)."""
        (self.records_dir / "results.parquet").unlink(missing_ok=True)
        for name in REPORT_FILES:
            (self.out_dir / name).unlink(missing_ok=True)

    def _holds_results(self) -> bool:
        """Whether the study holds anything computed (a chunk or the table in its records, a summary in its report).
        A ``study.json`` alone (a run refused before its first chunk, e.g. for a model that does not fit the task) is
        taken over by any config."""
        return ((any(self.chunk_dir.glob("*.json")) if self.chunk_dir.is_dir() else False)
                or (self.records_dir / "results.parquet").exists() or (self.out_dir / "summary.json").exists())

    def _keep_common_chunks(self, n_old: int, n_new: int, size: int) -> None:
        """A study grown or shrunk in ``n_problems``: the problems are the split's first ones in a fixed order
        (``engine.select_problems``) and every seed derives from the chunk index or the problem, so a chunk
        whose span of problems is the same under both sizes holds exactly what a fresh run would compute; the
        others (the old last chunk, chunks past the new end) are removed, and so is the stale analysis."""
        for c in range(max(0, -(-int(n_old) // size))):
            same = min(int(n_old), (c + 1) * size) == min(int(n_new), (c + 1) * size) and c * size < int(n_new)
            if not same:
                self._path(c).unlink(missing_ok=True)
        self._discard_analysis()

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
    """Write a pandas DataFrame as ``<stem>.parquet`` into ``out_dir`` (a study: its records folder,
    :attr:`ChunkStore.records_dir`; atomically; no CSV twin, module doc) and return its path."""
    path = Path(out_dir) / f"{stem}.parquet"
    with atomic_path(path) as tmp:
        table.to_parquet(tmp, index=False)
    return path
