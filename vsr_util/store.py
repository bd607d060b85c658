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
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["FIGURES", "STORE", "store_folder"]

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
