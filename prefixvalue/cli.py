"""Command-line entry points of the studies.

* ``vsr study <name>`` (tyro, wired in ``vsr/cli.py``): one function per study taking its frozen
  config — :func:`hint_ratio`, :func:`failed_prefix`, :func:`sigma_validation`,
  :func:`mte_correlation`, :func:`prefix_selection`.
* ``python -m prefixvalue <name> [--quick] [--device cuda] [--out DIR] ...`` (:func:`main`):
  plain ``argparse`` built from the same dataclass fields, for machines without tyro (the GPU
  check).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import typing
from typing import Any, Sequence

from prefixvalue.runner import run_study
from prefixvalue.studies.failed_prefix import FailedPrefixConfig
from prefixvalue.studies.hint_ratio import HintRatioConfig
from prefixvalue.studies.mte_correlation import MTECorrelationConfig
from prefixvalue.studies.prefix_selection import PrefixSelectionConfig
from prefixvalue.studies.sigma_validation import SigmaValidationConfig

__all__ = ["build_parser", "failed_prefix", "hint_ratio", "main", "mte_correlation", "prefix_selection",
           "sigma_validation"]


def hint_ratio(cfg: HintRatioConfig) -> int:
    """``vsr study hint-ratio``: VSR Fig. 7, continuation success vs hint ratio α."""
    run_study("hint-ratio", cfg)
    return 0


def failed_prefix(cfg: FailedPrefixConfig) -> int:
    """``vsr study failed-prefix``: VSR D.5, failed vs successful prefixes by position."""
    run_study("failed-prefix", cfg)
    return 0


def sigma_validation(cfg: SigmaValidationConfig) -> int:
    """``vsr study sigma-validation``: VSR D.5, predicted σ̂ vs empirical continuation std."""
    run_study("sigma-validation", cfg)
    return 0


def mte_correlation(cfg: MTECorrelationConfig) -> int:
    """``vsr study mte-correlation``: ExTra §5.6, prefix metrics vs Monte-Carlo value."""
    run_study("mte-correlation", cfg)
    return 0


def prefix_selection(cfg: PrefixSelectionConfig) -> int:
    """``vsr study prefix-selection``: ExTra Fig. 4, pass@k by prefix-selection rule."""
    run_study("prefix-selection", cfg)
    return 0


# ------------------------------------------------------------------ argparse (no tyro)


def _field_docs(cls: type) -> dict[str, str]:
    """Attribute docstrings (the string literal after each field) of ``cls`` and its bases."""
    import ast
    import inspect
    import textwrap

    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError):
            continue
        body = tree.body[0].body  # type: ignore[attr-defined]
        for a, b in zip(body, body[1:]):
            if isinstance(a, ast.AnnAssign) and isinstance(a.target, ast.Name) and isinstance(b, ast.Expr) \
                    and isinstance(b.value, ast.Constant) and isinstance(b.value.value, str):
                docs[a.target.id] = " ".join(b.value.value.split())
    return docs


def _add_field(group: argparse._ArgumentGroup, f: dataclasses.Field, hint: Any, doc: str) -> None:
    flag = "--" + f.name.replace("_", "-")
    default = f.default
    help_text = f"{doc} (default: {default!r})".replace("%", "%%")
    if hint is bool:
        group.add_argument(flag, dest=f.name, action=argparse.BooleanOptionalAction, default=None, help=help_text)
        return
    origin = typing.get_origin(hint)
    if origin is tuple:
        args = [a for a in typing.get_args(hint) if a is not Ellipsis]
        elem = args[0] if args else str
        group.add_argument(flag, dest=f.name, nargs="*", type=elem, default=None, help=help_text)
        return
    conv = {int: int, float: float, str: str}.get(hint, str)
    group.add_argument(flag, dest=f.name, type=conv, default=None, help=help_text)


def build_parser() -> argparse.ArgumentParser:
    """``python -m prefixvalue`` parser: one sub-command per study, options from its config fields."""
    from prefixvalue.registry import get_study, study_names

    parser = argparse.ArgumentParser(prog="python -m prefixvalue",
                                     description="Monte-Carlo prefix-value studies of VSR and ExTra.")
    sub = parser.add_subparsers(dest="study", required=True, metavar="STUDY")
    for name in study_names():
        study = get_study(name)
        p = sub.add_parser(name, help=study.title.replace("%", "%%"), description=study.title.replace("%", "%%"))
        docs = _field_docs(study.config_cls)
        hints = typing.get_type_hints(study.config_cls)
        group = p.add_argument_group("options")
        for f in dataclasses.fields(study.config_cls):
            _add_field(group, f, hints[f.name], docs.get(f.name, ""))
    return parser


def parse_config(argv: Sequence[str]) -> tuple[str, Any]:
    """``(study name, config)`` from command-line arguments."""
    from prefixvalue.registry import get_study

    args = build_parser().parse_args(list(argv))
    study = get_study(args.study)
    kwargs = {}
    for f in dataclasses.fields(study.config_cls):
        v = getattr(args, f.name, None)
        if v is None:
            continue
        kwargs[f.name] = tuple(v) if isinstance(v, list) else v
    for k in ("min_difficulty", "max_difficulty"):
        if isinstance(kwargs.get(k), float) and math.isnan(kwargs[k]):
            raise SystemExit(f"{k}: must not be NaN")
    return args.study, study.config_cls(**kwargs)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m prefixvalue <study> [options]``: run one study; print where the results are."""
    name, cfg = parse_config(sys.argv[1:] if argv is None else argv)
    out = run_study(name, cfg)
    print(f"results: {out}")
    return 0
