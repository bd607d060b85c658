"""The study registry: name -> :class:`Study` (uniform signature; duplicates rejected).

A study is four functions over one frozen config class:

* ``collect(ctx, problems, chunk) -> (rows, counts)``: sample and verify for one chunk of
  problems; ``rows`` are dicts (one per prefix / continuation group), ``counts`` holds at least
  ``problems`` (seen) and ``eligible`` (that passed the study's filter);
* ``analyze(table, cfg) -> summary`` (JSON-ready dict); ``render(summary) -> markdown``;
* ``plot(table, summary, out_dir) -> [paths]`` (the PNG first; :func:`prefixvalue.analysis.save_figure`).

Study modules register themselves when imported; :func:`get_study` imports them all.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from vsr.registry import Registry

__all__ = ["STUDIES", "STUDY_MODULES", "Study", "get_study", "register_study", "study_names"]


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

#: Modules that define the studies (imported by :func:`get_study`).
STUDY_MODULES = (
    "prefixvalue.studies.hint_ratio",
    "prefixvalue.studies.failed_prefix",
    "prefixvalue.studies.sigma_validation",
    "prefixvalue.studies.mte_correlation",
    "prefixvalue.studies.prefix_selection",
)


def register_study(study: Study) -> Study:
    """Add ``study`` under its name; a second study with the same name is an error."""
    return STUDIES.add(study.name, study)


def _load_all() -> None:
    for mod in STUDY_MODULES:
        importlib.import_module(mod)


def study_names() -> tuple[str, ...]:
    """Registered study names: the built-in ones in :data:`STUDY_MODULES` order, then any others as registered."""
    _load_all()
    builtin = [m.rsplit(".", 1)[1].replace("_", "-") for m in STUDY_MODULES]
    return tuple(n for n in builtin if n in STUDIES) + tuple(n for n in STUDIES if n not in builtin)


def get_study(name: str) -> Study:
    """The study registered as ``name`` (ValueError listing the known names otherwise)."""
    _load_all()
    return STUDIES.lookup(name, "name")
