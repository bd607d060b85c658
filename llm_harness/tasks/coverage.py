"""Can a tokenizer represent a task's text, and will the model be asked for the answer format the verifier
reads? One check at the edge of every entry point that pairs a model with a task (train, eval, compare, the
lab, the studies): a mismatch is refused before any work, naming the characters or the format, instead of
training on silently dropped characters or scoring every sample 0.
"""

from __future__ import annotations

from typing import Any, Sequence

from llm_harness.tasks.base import Problem, Task

__all__ = ["check_answer_format", "check_task_encodable", "check_tokenizer_covers", "keep_unknown_token", "task_characters"]


def task_characters(task: Task, problems: Sequence[Problem], tokenizer: Any = None) -> str:
    """Characters the model must be able to read and write for ``task``.

    Step arithmetic declares its alphabet; other tasks: every character of the rendered prompts
    and expert solutions of ``problems``.
    """
    if getattr(task, "name", "") == "step_arith":
        from llm_harness.tasks import ALPHABET

        extra = getattr(getattr(task, "config", None), "instruction", "") or ""  # in the chat message only
        return ALPHABET + "".join(sorted(set(extra) - set(ALPHABET)))
    chars: set[str] = set()
    for p in problems:
        chars.update(task.render_prompt(p, tokenizer))
        if p.solution:
            chars.update(p.solution)
    return "".join(sorted(chars))


def check_tokenizer_covers(codec: Any, chars: str, task_name: str) -> None:
    """Raise ValueError naming every character of ``chars`` that ``codec`` cannot round-trip.

    A character passes when ``decode(encode(ch)) == ch`` (an unknown-token id, a dropped
    character or an encoding error all fail), so a model/task mismatch is caught before any
    sampling instead of silently producing wrong answers.
    """
    missing = []
    for ch in chars:
        try:
            ok = codec.decode(codec.encode(ch)) == ch
        except (ValueError, KeyError, TypeError):
            ok = False
        if not ok:
            missing.append(ch)
    if missing:
        shown = ", ".join(repr(c) for c in missing)
        raise ValueError(
            f"tokenizer: cannot encode {len(missing)} character(s) used by task {task_name!r}: {shown} "
            "(the model's tokenizer does not match the task; pick a model trained on this task's alphabet)"
        )


def check_answer_format(task: Task, tokenizer: Any) -> None:
    """Refuse a chat model (a tokenizer with a chat template, :func:`~llm_harness.tasks.base.has_chat_template`) on a
    task whose verifier needs an answer format its chat messages do not ask for (``task.needs_answer_format``):
    every sample would score 0 without a word. Models without a chat template (the test bed's character models)
    render the task's plain prompt, the format they were trained on, and pass."""
    from llm_harness.tasks.base import has_chat_template

    need = getattr(task, "needs_answer_format", "") or ""
    if need and has_chat_template(tokenizer):
        name = getattr(task, "name", type(task).__name__)
        hint = (" or give the task an instruction that states the format (task parameter instruction=...)"
                if name == "step_arith" else "")
        raise ValueError(
            f"task: {name!r} cannot be scored on a chat model (its tokenizer has a chat template): {need}, so every "
            f"sample would score 0; use a task whose prompt asks for its answer format (arith_ladder, math), a "
            f"test-bed model (low, mid, high){hint}"
        )


def check_task_encodable(codec: Any, task: Task, problems: Sequence[Problem], tokenizer: Any = None) -> None:
    """:func:`check_answer_format` (when ``tokenizer`` is given), then :func:`check_tokenizer_covers` over
    :func:`task_characters` of the first 50 ``problems``."""
    check_answer_format(task, tokenizer)
    check_tokenizer_covers(codec, task_characters(task, list(problems)[:50], tokenizer), getattr(task, "name", type(task).__name__))


def keep_unknown_token(tokenizer: Any) -> Any:
    """Make a loaded tokenizer map characters it cannot encode to its ``<unk>`` token instead of dropping them.

    transformers 5 loads a ``qwen2`` checkpoint's tokenizer as ``Qwen2Tokenizer``, which rebuilds a
    byte-level BPE from the vocabulary without its unknown token: a character outside the
    vocabulary silently disappears (the test bed's character models are such checkpoints). When the
    tokenizer declares an ``unk_token`` and its BPE model has none, this restores it; any other
    tokenizer (byte-fallback BPE of real models, the trainer's character tokenizer) is unchanged.
    Returns ``tokenizer``.
    """
    unk = getattr(tokenizer, "unk_token", None)
    backend = getattr(tokenizer, "backend_tokenizer", None)
    model = getattr(backend, "model", None)
    if unk and model is not None and hasattr(model, "unk_token") and getattr(model, "unk_token", None) is None:
        model.unk_token = unk
    return tokenizer
