"""Where a command keeps what it reads back: the records store beside ``figures/`` (``records/README.md``).

Every command that writes a report folder and resumes from its own intermediate files — ``vsr compare`` (run
records), ``vsr lab`` (probe, references, allocations), ``vsr study`` (chunks, the tidy table) — splits its output in
two: the *report* (what a person reads: ``report.md``, ``summary.json``, figures) goes to the report folder, the
*records* (what the command reads back to resume or to rebuild the report) go to :func:`store_folder` of that report
folder. One rule for all three:

* a report folder under a folder named ``figures`` keeps its records in ``records/`` beside that ``figures``, at the
  same relative path: ``figures/compare_agents`` -> ``records/compare_agents``, ``figures/lab/real`` ->
  ``records/lab/real``, ``figures/prefixvalue/hint-ratio`` -> ``records/prefixvalue/hint-ratio``;
* any other report folder (a trial run's ``--out DIR``) keeps them inside it, ``DIR/records``, so a trial never
  writes into the committed store.

The nearest enclosing ``figures`` counts (``a/figures/b/figures/c`` -> ``a/figures/b/records/c``).

Commands that kept their records beside their report before the store find them with :func:`misplaced_records`
(and refuse to start over beside them) and move them with :func:`move_into_store`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

__all__ = ["FIGURES", "STORE", "misplaced_records", "move_into_store", "store_folder"]

#: the store's folder name, beside ``figures/``
STORE = "records"
#: the name of the folder whose subfolders are committed report folders
FIGURES = "figures"


def store_folder(report_dir: str | Path) -> Path:
    """The records folder of the report folder ``report_dir`` (module doc)."""
    report_dir = Path(report_dir)
    parts = report_dir.parts
    for i in range(len(parts) - 2, -1, -1):
        if parts[i] == FIGURES:
            return Path(*parts[:i]) / STORE / Path(*parts[i + 1:]) if i else Path(STORE, *parts[i + 1:])
    return report_dir / STORE


def misplaced_records(report_dir: str | Path, names: Sequence[str], patterns: Sequence[str] = (),
                      markers: Sequence[str] | None = None) -> list[Path]:
    """The records that ``report_dir`` still holds inside, where a command kept them before the store: the entries
    ``names`` that exist there and the files matching the glob ``patterns`` (sorted), or none unless one of
    ``markers`` exists (default: any of them — a file some other command also writes, such as a ``config.yaml``,
    is left out of the markers)."""
    report_dir = Path(report_dir)
    marks = list(names) + list(patterns) if markers is None else list(markers)
    if not any((report_dir / m).exists() or any(report_dir.glob(m)) for m in marks):
        return []
    return [report_dir / n for n in names if (report_dir / n).exists()] + \
        sorted(p for pat in patterns for p in report_dir.glob(pat))


def move_into_store(report_dir: str | Path, paths: Sequence[Path], what: str) -> Path:
    """Move ``paths`` (entries of ``report_dir``: :func:`misplaced_records`) into :func:`store_folder` of
    ``report_dir``, holding the report folder's lock so no command writes it meanwhile; refused, with nothing moved,
    when the store already holds an entry of the same name (``what`` names the records in the message). Returns the
    store folder."""
    import shutil

    from vsr_util.runlock import locked_folder

    report_dir = Path(report_dir)
    store = store_folder(report_dir)
    there = [p.name for p in paths if (store / p.name).exists()]
    if there:
        raise ValueError(f"{store}: already holds {what} ({', '.join(there)}); merge them with those in {report_dir} by "
                         "hand, or delete one of the two")
    with locked_folder(report_dir, field="out"):
        store.mkdir(parents=True, exist_ok=True)
        for p in paths:
            shutil.move(str(p), str(store / p.name))
    return store
