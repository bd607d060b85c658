"""Shared pieces of the method plug-ins: validated parameter dataclasses and step boundaries."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping, Sequence, TypeVar

__all__ = ["check_number", "plugin_config", "step_end_positions"]

T = TypeVar("T")


def check_number(name: str, v: Any, lo: float | None = None, hi: float | None = None, *, integer: bool = False,
                 lo_open: bool = False) -> None:
    """ValueError naming ``name`` unless ``v`` is a finite number (an int if ``integer``) in the range."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (integer and not isinstance(v, int)):
        raise ValueError(f"{name}: must be {'an int' if integer else 'a number'}, got {v!r}")
    if not math.isfinite(v):
        raise ValueError(f"{name}: must be finite, got {v!r}")
    if lo is not None and (v < lo or (lo_open and v == lo)):
        raise ValueError(f"{name}: must be {'>' if lo_open else '>='} {lo}, got {v!r}")
    if hi is not None and v > hi:
        raise ValueError(f"{name}: must be <= {hi}, got {v!r}")


def plugin_config(cls: type[T], params: Mapping[str, Any], plugin: str) -> T:
    """Build the frozen dataclass ``cls`` from a plug-in's params; every error names ``plugins.<plugin>.<key>``."""
    names = {f.name for f in dataclasses.fields(cls) if f.init}  # type: ignore[arg-type]
    unknown = sorted(set(params) - names)
    if unknown:
        raise ValueError(f"plugins.{plugin}: unknown key(s) {unknown}; valid keys: {sorted(names)}")
    try:
        return cls(**dict(params))
    except ValueError as exc:
        raise ValueError(f"plugins.{plugin}.{exc}") from None
    except TypeError as exc:
        raise ValueError(f"plugins.{plugin}: {exc}") from None


def step_end_positions(codec: Any, task: Any, ids: Sequence[int]) -> list[int]:
    """Token counts ``i`` (``0 < i < len(ids)``) at which a reasoning step of ``ids`` ends
    (``task.split_steps`` on the decoded text, mapped to tokens by :func:`~llm_harness.methods.mte.char_to_token_cuts`)."""
    from llm_harness.methods.mte import char_to_token_cuts, step_char_cuts

    ids = list(ids)
    text = codec.decode(ids)
    cuts = char_to_token_cuts(ids, step_char_cuts(task.split_steps(text), len(text)), codec.decode)
    return [i for i in cuts if 0 < i < len(ids)]
