"""Model, task and sampling plumbing shared by the studies (:mod:`prefixvalue`; backends: :mod:`llm_harness.backends`).

* :func:`build_context` loads the model through a generation backend (``hf`` or ``vllm``), its
  tokenizer and the task, and checks that the tokenizer can encode every character the task
  uses (:func:`check_tokenizer_covers`).
* :func:`select_problems` applies the difficulty filter with a clear error when nothing is left.
* The studies use the trainer's data model: a prefix state is a
  :class:`~llm_harness.trainer.data.StartState` (:meth:`StudyContext.state`), its continuations a
  :class:`~llm_harness.trainer.data.RolloutGroup`. :meth:`StudyContext.sample` draws ``n``
  continuations of *many* states in **one** ``backend.generate`` call through the trainer's own
  sampling path (:func:`llm_harness.trainer.rollout.sample_groups`: per-state budgets, the
  model-context cap, verification of ``prefix + continuation`` by the trainer's
  :class:`~llm_harness.trainer.rollout.SafeVerifier`). The HF backend prefills each distinct state
  once and repeats its KV cache ``n`` times; vLLM shares the prefix through prefix caching.
* every generate call gets its own seed, ``vsr_util.seeding.derive_seed(study seed, study name, role,
  chunk)`` (the project's one seed derivation), so results do not depend on which calls ran
  before (resumption).

Backend-agnostic: only ``GenerationBackend.generate`` / ``score_batch`` are used, except the
policy embedder of the prefix-selection study, which needs the transformers model
(:func:`policy_model`).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Sequence

from llm_harness.tasks import Problem, Task
from llm_harness.trainer.data import RolloutGroup, StartState

from llm_harness.tasks.coverage import check_answer_format, check_tokenizer_covers, task_characters
from prefixvalue.config import StudyConfig, parse_task_params

__all__ = [
    "StudyContext",
    "build_context",
    "check_tokenizer_covers",
    "policy_model",
    "resolve_model",
    "select_problems",
    "task_characters",
    "unknown_model_message",
]


def resolve_model(model: str, field: str = "model") -> str:
    """The folder (or offline Hugging Face name) a study's ``--model`` names, verified where it is loaded.

    A shipped test-bed name (``low``/``mid``/``high``) first; then :func:`llm_harness.models.gguf_import.resolve_model_folder`
    (a registered real model such as ``smollm2-135m-instruct``, imported into the cache; an existing path; the name
    given with ``vsr model import --name``). A folder must hold ``config.json`` and, when it has an import manifest,
    match it (:func:`llm_harness.models.manifest.check_model_folder`). A ``namespace/name`` in the local Hugging Face
    cache is returned as given (loaded offline). Anything else is refused, listing the names it could have been."""
    from llm_harness.models.gguf_import import resolve_model_folder
    from llm_harness.models.manifest import check_model_folder
    from llm_harness.testbed.paths import SHIPPED_CHECKPOINTS, shipped_checkpoint

    if model in SHIPPED_CHECKPOINTS:
        return str(shipped_checkpoint(model))
    path = resolve_model_folder(model, field)
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ValueError(f"{field}: {str(path)!r} is not a saved model folder (no config.json)")
        check_model_folder(path, field)
        return str(path)
    if path.exists():
        raise ValueError(f"{field}: {str(path)!r} is a file, not a model folder (give the folder that holds config.json; "
                         "a GGUF file is imported first with `vsr model import --source FILE`)")
    if _in_hub_cache(model):
        return model
    raise ValueError(unknown_model_message(model, field))


def _in_hub_cache(name: str) -> bool:
    """Whether ``name`` is a ``namespace/name`` whose ``config.json`` is in the local Hugging Face cache."""
    import re

    if not re.fullmatch(r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*", name):
        return False
    try:
        from huggingface_hub import try_to_load_from_cache

        return isinstance(try_to_load_from_cache(name, "config.json"), str)
    except Exception:  # an invalid id, no hub package: not a cached model
        return False


def unknown_model_message(model: str, field: str = "model") -> str:
    """``<field>: ...`` for a model argument that names nothing: what it could have been (test-bed checkpoints,
    registered models, imported models' names) and the closest of those names."""
    import difflib

    from llm_harness.models.named import MODELS
    from llm_harness.testbed.paths import SHIPPED_CHECKPOINTS

    try:
        from llm_harness.models.cache import read_aliases

        aliases = sorted(read_aliases())
    except (OSError, ValueError):  # a damaged alias file is named where an alias is resolved
        aliases = []
    names = [*SHIPPED_CHECKPOINTS, *MODELS, *aliases]
    close = difflib.get_close_matches(model, names, n=1, cutoff=0.6)
    looks_like_path = any(c in model for c in "/\\") or model.startswith((".", "~"))
    what = (f"no folder {model!r}" if looks_like_path
            else f"{model!r} is neither a model folder nor a known model name")
    return (f"{field}: {what}; give a model folder, a test-bed checkpoint ({', '.join(SHIPPED_CHECKPOINTS)}), a registered "
            f"model ({', '.join(MODELS)}; `vsr model import`) or an imported model's name "
            f"({', '.join(aliases) if aliases else 'none recorded; `vsr model import --name`'})"
            + (f"; did you mean {close[0]!r}?" if close else ""))


@dataclass
class StudyContext:
    """Everything a study's data collection needs (plus ``codec`` and ``verifier``, built from these)."""

    cfg: StudyConfig
    """The resolved study config."""
    backend: Any
    """A ``GenerationBackend`` (``HFBackend`` or ``VLLMBackend``)."""
    tokenizer: Any
    """The model's tokenizer (encode/decode through :attr:`codec`)."""
    task: Task
    """The task (prompts, verification, step splitting)."""

    def __post_init__(self) -> None:
        from llm_harness.trainer.modeling import Codec
        from llm_harness.trainer.rollout import SafeVerifier

        self.codec = Codec(self.tokenizer)
        # the trainer's verifier (its default deadline): a grader error or timeout is reward 0, warned on stderr
        self.verifier = SafeVerifier(self.task, warn=lambda msg: print(f"warning: {msg}", file=sys.stderr))
        self._prompt_cache: dict[str, tuple[int, ...]] = {}

    def prompt_ids(self, problem: Problem) -> tuple[int, ...]:
        """Token ids of the rendered prompt (cached per problem)."""
        ids = self._prompt_cache.get(problem.id)
        if ids is None:
            ids = self.codec.encode(self.task.render_prompt(problem, self.tokenizer))
            self._prompt_cache[problem.id] = ids
        return ids

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids`` (special tokens kept as text)."""
        return self.codec.decode(ids)

    def state(self, problem: Problem, prefix_ids: Sequence[int] = ()) -> StartState:
        """The start state: ``problem``'s prompt followed by the response prefix ``prefix_ids``."""
        return StartState(self.prompt_ids(problem), problem, tuple(prefix_ids))

    def sample(self, states: Sequence[StartState], n: int, *, temperature: float, top_p: float,
               seed: int) -> list[RolloutGroup]:
        """``n`` verified continuations of every state from ONE ``generate`` call with ``seed``:
        :func:`~llm_harness.trainer.rollout.sample_groups` with the study's response budget, capped
        by the model context. ``result[i]`` is the group of ``states[i]`` (``states[i].n`` unset)."""
        from llm_harness.trainer.rollout import sample_groups

        if not states:
            raise ValueError("states: must not be empty")
        if any(s.n is not None for s in states):
            raise ValueError("states: the studies sample every state of a call with one n (state.n must be None)")
        groups, _ = sample_groups(states, backend=self.backend, codec=self.codec, verifier=self.verifier, n_default=n,
                                  temperature=temperature, top_p=top_p, max_new_tokens=self.cfg.response_budget,
                                  seed=seed, max_context=self.backend.max_context)
        return groups

    def close(self) -> None:
        """Release the verifier's thread pool."""
        self.verifier.close()


def policy_model(backend: Any):
    """The transformers model behind ``backend`` (HF backend: its model; vLLM: its scorer's)."""
    model = getattr(backend, "model", None)
    if model is None and hasattr(backend, "scorer"):
        model = backend.scorer.model
    if model is None:
        raise ValueError(f"backend: {type(backend).__name__} exposes no transformers model for embeddings")
    return model


def load_backend(cfg: StudyConfig) -> tuple[Any, Any]:
    """``(backend, tokenizer)`` for ``cfg.model`` on ``cfg.backend`` (weights read from disk only)."""
    from llm_harness.backends import HFBackend, HFBackendConfig

    path = resolve_model(cfg.model)
    hf_cfg = HFBackendConfig(model=path, device=cfg.device, dtype=cfg.dtype, max_batch_sequences=cfg.max_batch_sequences)
    if cfg.backend == "hf":
        try:
            backend = HFBackend.from_pretrained(path, config=hf_cfg)
        except OSError as exc:
            raise ValueError(f"model: cannot load {cfg.model!r} offline ({exc})") from None
        if backend.tokenizer is None:
            raise ValueError(f"model: {path!r} has no tokenizer saved beside it")
        return backend, backend.tokenizer
    from llm_harness.backends import VLLMBackend, VLLMBackendConfig
    from transformers import AutoTokenizer

    from llm_harness.tasks.coverage import keep_unknown_token

    tokenizer = keep_unknown_token(AutoTokenizer.from_pretrained(path, local_files_only=True))
    backend = VLLMBackend.from_config(
        # the scorer's dtype for the engine too, never vLLM's "auto" (an fp32 model would run in bf16)
        VLLMBackendConfig(model=path, dtype=cfg.dtype, scorer_device=cfg.device, scorer_dtype=cfg.dtype)
    )
    return backend, tokenizer


def build_context(cfg: StudyConfig, *, backend: Any = None, tokenizer: Any = None) -> StudyContext:
    """Load the task and model of ``cfg`` (or use the given backend/tokenizer) and check coverage."""
    from llm_harness.tasks import get_task

    task = get_task(cfg.task, **parse_task_params(cfg.task_params))
    if backend is None:
        backend, tokenizer = load_backend(cfg)
    elif tokenizer is None:
        raise ValueError("tokenizer: required when a backend is passed")
    check_answer_format(task, tokenizer)
    ctx = StudyContext(cfg=cfg, backend=backend, tokenizer=tokenizer, task=task)
    split = task.check_split(cfg.split)
    check_tokenizer_covers(ctx.codec, task_characters(task, task.problems(split)[:50], tokenizer), task.name)
    return ctx


def select_problems(task: Task, split: str, n_problems: int, min_difficulty: float, max_difficulty: float) -> tuple[Problem, ...]:
    """The first ``n_problems`` problems of ``split`` whose difficulty lies in the given range.

    Raises ValueError naming the filter and the counts when no problem passes it.
    """
    probs = task.problems(task.check_split(split))
    if not probs:
        raise ValueError(f"split: split {split!r} of task {task.name!r} holds no problems")
    bounded = min_difficulty > float("-inf") or max_difficulty < float("inf")

    def keep(p: Problem) -> bool:
        if not bounded:
            return True
        return p.difficulty is not None and min_difficulty <= p.difficulty <= max_difficulty

    kept = [p for p in probs if keep(p)]
    if not kept:
        diffs = sorted({p.difficulty for p in probs if p.difficulty is not None})
        seen = f"difficulties present: {diffs[0]:g}..{diffs[-1]:g}" if diffs else "no problem has a difficulty"
        raise ValueError(
            f"min_difficulty: the difficulty filter [{min_difficulty:g}, {max_difficulty:g}] keeps 0 of "
            f"{len(probs)} problems of split {split!r} ({seen})"
        )
    return tuple(kept[:n_problems])
