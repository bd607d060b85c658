"""The text a policy reads at each turn of an episode (VSR App. D.3).

One format for the multi-turn rollout engine, the CPU test-bed agents' SFT data and evaluation,
so the policy trained on demonstrations sees at training time exactly what it sees when acting::

    <instruction>
    O:<observation t−W>
    A:<action t−W>
    ...
    O:<observation t>
    A:

``W`` (``window``) is the number of previous turns kept; ``0`` keeps none (the current observation
only), ``None`` keeps all. The policy's reply continues after ``A:``; for a test-bed agent it is the
bare action word followed by EOS, for an instruct model anything :func:`~llm_harness.envs.base.parse_action`
accepts (e.g. ``<action>up</action>``). A turn whose action was invalid is shown with the reply
the policy gave (as one line of printable characters, :func:`llm_harness.envs.episodes.shown_reply`),
so the policy can see its own mistake. A chat template, when the tokenizer has
one, wraps the whole text as one user message (:func:`render_agent_prompt` does not apply it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from vsr_util.registry import Registry

__all__ = ["REPLY_FORMATS", "Turn", "render_agent_prompt", "with_reply_format"]

#: reply format name -> the sentence appended to the task instruction (``env`` task's ``reply_format``).
#: ``word``: nothing (the test-bed agents reply the bare action word, as fine-tuned); ``tagged``: an
#: instruct model is told the ``<action>WORD</action>`` format ``parse_action`` reads, thinking allowed
#: before it (verl-agent's Sokoban prompt asks for the same tags).
REPLY_FORMATS: Registry[str] = Registry("reply format")
REPLY_FORMATS.add("word", "")
REPLY_FORMATS.add("tagged", "Think briefly if you like, then give exactly one action as <action>WORD</action>, "
                            "where WORD is one of the actions.")


def with_reply_format(instruction: str, reply_format: str = "word") -> str:
    """``instruction`` followed by the reply format's sentence (:data:`REPLY_FORMATS`; ``word`` adds nothing)."""
    note = REPLY_FORMATS.lookup(reply_format, "reply_format")
    return f"{instruction.rstrip()} {note}" if note else instruction

OBS_TAG = "O:"
ACT_TAG = "A:"


@dataclass(frozen=True)
class Turn:
    """One played turn: what the policy saw and what it replied."""

    observation: str
    action: str


def render_agent_prompt(instruction: str, turns: Sequence[Turn], observation: str, *, window: int | None = 2) -> str:
    """The prompt of the next turn: instruction, the last ``window`` turns, the current observation
    and the open action tag (module doc). ``window`` must be ``None`` or an int ``>= 0``."""
    if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window < 0):
        raise ValueError(f"window: must be None or an int >= 0, got {window!r}")
    kept = list(turns) if window is None else (list(turns)[-window:] if window else [])
    lines = [instruction.rstrip("\n")]
    for t in kept:
        lines.append(f"{OBS_TAG}{t.observation.rstrip(chr(10))}")
        lines.append(f"{ACT_TAG}{t.action.strip()}")
    lines.append(f"{OBS_TAG}{observation.rstrip(chr(10))}")
    return "\n".join(lines) + "\n" + ACT_TAG
