"""The study registry: name -> :class:`Study` (uniform signature; duplicates rejected).

A study is four functions over one frozen config class:

* ``collect(ctx, problems, chunk) -> (rows, counts)``: sample and verify for one chunk of
  problems; ``rows`` are dicts (one per prefix / continuation group), ``counts`` holds at least
  ``problems`` (seen) and ``eligible`` (that passed the study's filter);
* ``analyze(table, cfg) -> summary`` (JSON-ready dict); ``render(summary) -> markdown``;
* ``plot(table, summary, out_dir) -> [paths]`` (the PNG first; :func:`prefixvalue.analysis.save_figure`).

Study modules register themselves when imported; :func:`get_study` imports them all (every module of
:data:`STUDY_PACKAGE`; the file name is the study's name).
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from vsr_util.registry import Registry

__all__ = ["STUDIES", "STUDY_PACKAGE", "Study", "get_study", "register_study", "study_modules", "study_name", "study_names",
           "study_summary"]


@dataclass(frozen=True)
class Study:
    """One prefix-value study (:mod:`prefixvalue`)."""

    name: str
    """CLI name (``vsr study <name>``)."""
    title: str
    """One-line description (paper figure / section it reproduces)."""
    config_cls: type
    """Its frozen config dataclass (a ``StudyConfig`` subclass)."""
    default_split: str
    """Split used when the config leaves ``split`` empty."""
    sizes: Mapping[str, Mapping[str, Any]]
    """``{"quick": {...}, "full": {...}}``: values for size fields left at 0."""
    eligibility: str
    """The problem filter applied during collection, in words (for the no-eligible-problem error)."""
    collect: Callable
    """``(ctx, problems, chunk) -> (rows, counts)``."""
    analyze: Callable
    """``(table, cfg) -> summary dict``."""
    render: Callable
    """``(summary) -> markdown text``."""
    plot: Callable
    """``(table, summary, out_dir) -> list of written figure paths``."""


#: name -> Study.
STUDIES: Registry[Study] = Registry("study")

#: The package whose every module defines one study; the module's file name, dashed, is the study's name (the only
#: place a study's name is written).
STUDY_PACKAGE = "prefixvalue.studies"


def study_name(module: str) -> str:
    """A study module's name as the CLI spells it: ``prefixvalue.studies.hint_ratio`` -> ``hint-ratio``."""
    return module.rsplit(".", 1)[-1].replace("_", "-")


def study_modules() -> dict[str, str]:
    """``name -> module`` of every study module in :data:`STUDY_PACKAGE`, found on disk without importing them (the
    CLI lists the studies without loading torch), in name order."""
    import pkgutil

    pkg = importlib.import_module(STUDY_PACKAGE)
    mods = sorted(f"{STUDY_PACKAGE}.{i.name}" for i in pkgutil.iter_modules(pkg.__path__) if not i.name.startswith("_"))
    return {study_name(m): m for m in mods}


def study_summary(name: str) -> str:
    """The first sentence of study ``name``'s module docstring (read from its file, not imported): the CLI's help."""
    import ast
    import importlib.util

    spec = importlib.util.find_spec(f"{STUDY_PACKAGE}.{name.replace('-', '_')}")
    if spec is None or spec.origin is None:
        raise ValueError(f"study: unknown study {name!r}; registered: {sorted(study_modules())}")
    with open(spec.origin, encoding="utf-8") as fh:  # type: ignore[union-attr, arg-type]
        doc = ast.get_docstring(ast.parse(fh.read())) or name
    first = " ".join(doc.split("\n\n")[0].split())
    end = re.search(r"\?\s|(?<!App)(?<!Fig)(?<!Eq)(?<!Sec)(?<!Tab)\.\s(?=[A-Z*])", first + " ")
    if end is None:
        return first
    head, tail = first[: end.start() + 1], first[end.start() + 1:].lstrip()
    if tail.startswith("(") and ")" in tail:  # the paper reference after a question: "...? (ExTra §5.6, Fig. 4)"
        head += " " + tail[: tail.index(")") + 1]
    return head


def register_study(study: Study) -> Study:
    """Add ``study`` under its name; a second study with the same name is an error."""
    return STUDIES.add(study.name, study)


def _load_all() -> None:
    for mod in study_modules().values():
        importlib.import_module(mod)


def study_names() -> tuple[str, ...]:
    """Registered study names: those of :data:`STUDY_PACKAGE` in name order, then any others as registered."""
    _load_all()
    builtin = list(study_modules())
    return tuple(n for n in builtin if n in STUDIES) + tuple(n for n in STUDIES if n not in builtin)


def get_study(name: str) -> Study:
    """The study registered as ``name`` (ValueError listing the known names otherwise)."""
    _load_all()
    return STUDIES.lookup(name, "name")
