"""No module cites "SPEC §…" or "STYLE rule …".

SPEC and STYLE were working notes outside the repository, so a user cannot follow such a citation. Cite the
papers instead (e.g. "VSR App. B, Lemma B.1", "Replay §3, Eq. 1", "ExTra §5.6") or documentation
inside the repository (a module's docstring, README.md, configs/).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUFFIXES = (".py", ".md", ".yaml", ".toml")
#: the working notes cited by section, section word or number, and the style note by rule, number or file name
PATTERN = re.compile(r"SPEC ?(§|section|\d)|STYLE( ?(rules?|\d)|\.md)")
#: top-level folders never scanned: generated figures and their notes, run outputs
SKIP_TOP = {"figures", "runs", "out", "build", "dist"}

def _files() -> list[Path]:
    """The scanned files, pruning dot-folders (``.git``, ``.venv*``), caches and :data:`SKIP_TOP`."""
    this = Path(__file__).resolve()
    out = []
    for dirpath, dirnames, filenames in os.walk(ROOT):
        top = Path(dirpath) == ROOT
        dirnames[:] = [d for d in dirnames if not (d.startswith(".") or d == "__pycache__" or d.endswith(".egg-info")
                                                   or (top and d in SKIP_TOP))]
        out += [Path(dirpath) / f for f in filenames if f.endswith(SUFFIXES) and (Path(dirpath) / f).resolve() != this]
    return sorted(out)


def _hits() -> dict[str, list[str]]:
    hits: dict[str, list[str]] = {}
    for path in _files():
        rel = path.relative_to(ROOT).as_posix()
        text = path.read_text(encoding="utf-8", errors="replace")
        for no, line in enumerate(text.splitlines(), 1):
            if PATTERN.search(line):
                hits.setdefault(rel, []).append(f"{rel}:{no}: {line.strip()[:120]}")
    return hits


def test_no_module_cites_spec():
    hits = _hits()
    lines = [line for found in hits.values() for line in found]
    assert lines == [], "cite the papers or in-repo docs instead of SPEC / STYLE:\n" + "\n".join(lines)
