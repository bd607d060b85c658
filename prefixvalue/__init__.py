"""Monte-Carlo prefix-value studies of VSR and ExTra, on any generation backend.

Five studies (registry :data:`prefixvalue.registry.STUDIES`): ``hint-ratio`` (VSR Fig. 7),
``failed-prefix`` and ``sigma-validation`` (VSR App. D.5), ``mte-correlation`` (ExTra §5.6,
App. C) and ``prefix-selection`` (ExTra Fig. 4). Each is a frozen config -> a tidy table
(parquet, written per chunk and resumable) -> a summary (JSON + markdown) and a figure.

Entry points (none needs tyro):

* ``run_study(name, cfg=None) -> Path`` — run one study, return its output folder;
* ``python -m prefixvalue <name> [--quick] [--device cuda] [--out DIR] ...``;
* ``vsr study <name>`` (built from the registry by ``vsr/cli.py``);
* ``prefixvalue.figures.make_prefixvalue_figures(out_dir, quick)`` for ``make figures``.

Importing this package is light: torch and transformers load when a study runs.
"""

from __future__ import annotations

from typing import Any

__all__ = ["StudyConfig", "make_prefixvalue_figures", "resolved_config", "run_study", "study_names"]


def __getattr__(name: str) -> Any:
    if name in ("run_study", "resolved_config"):
        from prefixvalue import runner

        return getattr(runner, name)
    if name == "study_names":
        from prefixvalue.registry import study_names

        return study_names
    if name == "StudyConfig":
        from prefixvalue.config import StudyConfig

        return StudyConfig
    if name == "make_prefixvalue_figures":
        from prefixvalue.figures import make_prefixvalue_figures

        return make_prefixvalue_figures
    raise AttributeError(f"module 'prefixvalue' has no attribute {name!r}")
