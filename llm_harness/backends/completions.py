"""The text a sampled completion is verified on (shared by the trainer, evaluation and the agents' episodes).

A sample that ended with the stop token is verified without it; any other special token stays, so a stray
``<pad>`` inside an answer makes it malformed instead of vanishing.
"""

from __future__ import annotations

from typing import Any, Sequence

__all__ = ["completion_ids", "completion_text"]


def completion_ids(token_ids: Sequence[int], stopped: bool) -> tuple[int, ...]:
    """The sampled ids a completion is verified on: ``token_ids`` without the final stop token when
    ``stopped`` (any other special token stays, so a stray ``<pad>`` inside an answer is seen)."""
    ids = tuple(token_ids)
    return ids[:-1] if stopped and ids else ids


def completion_text(codec: Any, token_ids: Sequence[int], stopped: bool) -> str:
    """Text a completion is verified on: the final stop token dropped, any other special token kept
    as text (``codec.decode``)."""
    return codec.decode(completion_ids(token_ids, stopped))
