"""Command-line entry point of the studies without tyro.

``vsr study <name>`` (tyro) is built by ``vsr/cli.py`` from the study registry itself (one command per module of
:mod:`prefixvalue.studies`, running :func:`prefixvalue.runner.run_study`); this module adds
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
from vsr_util.config_io import field_docs

__all__ = ["build_parser", "main", "parse_config"]


# ------------------------------------------------------------------ argparse (no tyro)


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
        docs = field_docs(study.config_cls)
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
