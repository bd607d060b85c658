"""Shared pieces of the method plug-ins: validated parameter dataclasses and step boundaries."""

from __future__ import annotations

from typing import Any, Mapping, Sequence, TypeVar

from vsr_util.checks import check_number
from vsr_util.config_io import from_dict

__all__ = ["check_number", "plugin_config", "step_end_positions"]

T = TypeVar("T")


def plugin_config(cls: type[T], params: Mapping[str, Any], plugin: str) -> T:
    """Build the frozen dataclass ``cls`` from a plug-in's params (unknown keys refused); every
    error names ``plugins.<plugin>.<key>``."""
    where = f"plugins.{plugin}"
    try:
        return from_dict(cls, dict(params), where=where)
    except ValueError as exc:
        msg = str(exc)
        raise ValueError(msg if msg.startswith(where) else f"{where}.{msg}") from None


def step_end_positions(codec: Any, task: Any, ids: Sequence[int]) -> list[int]:
    """Token counts ``i`` (``0 < i < len(ids)``) at which a reasoning step of ``ids`` ends
    (``task.split_steps`` on the decoded text, mapped to tokens by :func:`~llm_harness.methods.mte.char_to_token_cuts`)."""
    from llm_harness.methods.mte import char_to_token_cuts, step_char_cuts

    ids = list(ids)
    text = codec.decode(ids)
    cuts = char_to_token_cuts(ids, step_char_cuts(task.split_steps(text), len(text)), codec.decode)
    return [i for i in cuts if 0 < i < len(ids)]
