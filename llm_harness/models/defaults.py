"""What a command should default to for a given model: the test bed keeps each command's own defaults, a chat
model gets the arithmetic ladder with the budgets its card and studies use.

The shipped test-bed checkpoints speak the character task (``step_arith``: ``A:<n>`` answers, 160-token
responses in the studies, the 5-6-term chains). A pretrained chat model scores 0 there by construction (it is
never asked for ``A:<n>``); its task is the arithmetic ladder (``llm_harness.tasks.arith_ladder``) with a
48-token response for generation (the budget of ``figures/real_model/card``) and 64 tokens for the prefix-value
studies (``figures/real_model``), every level of the test split, read by the strict verifier (a declared final
answer only, with the instruction to declare one: ``arith_ladder.STRICT_READER``) unless the task parameters set
``answer_mode``.

:func:`model_defaults` classifies a command's model argument **without loading it** (a registered name, an
alias of the cache or a folder: its tokenizer files say whether it has a chat template) and returns the
defaults; the CLI (``vsr.vocabulary``) turns them into flags the user did not give and says so in one line.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CHAT_MODEL", "ModelDefaults", "folder_has_chat_template", "model_defaults"]


@dataclass(frozen=True)
class ModelDefaults:
    """Defaults a model carries for the commands that use it."""

    kind: str
    """``"chat model"`` (these defaults apply) or ``"test bed"`` (each command keeps its own)."""
    task: str
    """The task a command runs when none is given."""
    max_new_tokens: int
    """Response budget of generation (``vsr train``'s rollouts, ``vsr eval``)."""
    study_budget: int
    """Response budget of the prefix-value studies (prefix + continuation)."""
    study_split: str
    """Split the studies draw their problems from."""
    study_min_difficulty: float
    """The studies' difficulty floor (0: every level of the ladder)."""
    quick_problems: int
    """Problems of a ``--quick`` study (a few minutes on 2 CPU cores with this model's longer responses)."""
    train_config: str
    """Training config giving the rollout settings of ``vsr lab`` / ``vsr advise``."""
    reader: str = ""
    """``module:function`` completing the default task's ``key=value`` parameters where the user's do not choose
    the reader (``train``, ``eval``, the studies); empty: none."""


#: The defaults of a pretrained chat model (SmolLM2-135M-Instruct's measured budgets; any chat model the same).
CHAT_MODEL = ModelDefaults(kind="chat model", task="arith_ladder", max_new_tokens=48, study_budget=64,
                           study_split="test", study_min_difficulty=0.0, quick_problems=20,
                           train_config="configs/real_smollm2_lab.yaml",
                           reader="llm_harness.tasks.arith_ladder:with_strict_reader")


def folder_has_chat_template(folder: str | Path) -> bool:
    """True iff the model folder's tokenizer carries a chat template (``chat_template.jinja`` or a non-empty
    ``chat_template`` in ``tokenizer_config.json``), read from the files without loading the tokenizer."""
    folder = Path(folder)
    if (folder / "chat_template.jinja").is_file() or (folder / "chat_template.json").is_file():
        return True
    cfg = folder / "tokenizer_config.json"
    if not cfg.is_file() or cfg.stat().st_size > 64 << 20:
        return False
    try:
        data = json.loads(cfg.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False  # the loader reports a damaged file, naming it
    return isinstance(data, dict) and bool(data.get("chat_template"))


def model_defaults(model: str) -> ModelDefaults | None:
    """:data:`CHAT_MODEL` when ``model`` (a command's model argument) names a chat model — a registered named
    model, an alias of the cache or a folder whose tokenizer has a chat template — else ``None`` (the test bed,
    a random model, a name that resolves to nothing yet: the command's own defaults, and its own error)."""
    from llm_harness.models.cache import TESTBED_NAMES, resolve_alias
    from llm_harness.models.named import MODELS

    if not isinstance(model, str) or not model or model in TESTBED_NAMES:
        return None
    if model in MODELS:  # every registered model is an instruction-tuned chat model
        return CHAT_MODEL
    path = Path(model).expanduser()
    if not path.exists():
        try:
            path = resolve_alias(model) or path
        except ValueError:
            return None  # a dangling alias: the loader names it
    return CHAT_MODEL if path.is_dir() and folder_has_chat_template(path) else None
