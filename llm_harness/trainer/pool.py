"""A fixed training-prompt pool: the file format and what a run needs to train on one (VSR §4.1, App. D.2).

The pool file (:func:`write_pool`) is plain JSON: the task, its parameters, the split, the problem ids in
order, the selection settings and the success histogram; a run names it with ``task.pool`` and trains on
exactly those problems (:func:`load_pool`, :func:`restrict_to_pool`), so prompts recur ``steps × B / size``
times over a run instead of never. Selecting a pool builds a trainer, so it lives above the trainer, in
:mod:`llm_harness.pool_selection` (``vsr pool select``).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Collection, Mapping, Sequence

from vsr_util.atomic import read_json, write_json

__all__ = ["POOL_FORMAT", "load_pool", "pool_digest", "restrict_to_pool", "write_pool"]

POOL_FORMAT = "vsr-prompt-pool/1"


def write_pool(path: str | Path, doc: Mapping[str, Any]) -> Path:
    """Write a pool document atomically (refuses an empty pool: a run could not train on it)."""
    if not doc.get("ids"):
        raise ValueError(f"pool: no candidate qualified ({doc.get('stats')}); examine more candidates or allow more successes")
    return write_json(path, dict(doc))


def pool_digest(path: str | Path) -> str:
    """sha256 of a pool file's bytes (part of a comparison job's fingerprint)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def load_pool(path: str | Path, *, task: str, task_params: Mapping[str, Any], split: str,
              params_outside: Collection[str] = ()) -> list[str]:
    """The problem ids of a pool file, checked against the run's task, parameters and split; parameters named in
    ``params_outside`` (:meth:`llm_harness.tasks.base.Task.params_outside`: they leave the split's problems as they
    are, e.g. another split's size) may differ."""
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"task.pool: {p} does not exist (select one with `vsr pool select`)")
    try:
        doc = read_json(p)
    except (UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"task.pool: {p} is not a JSON pool file ({exc})") from None
    if not isinstance(doc, dict) or doc.get("format") != POOL_FORMAT:
        raise ValueError(f"task.pool: {p} is not a {POOL_FORMAT} file")
    for key, want in (("task", task), ("split", split)):
        if doc.get(key) != want:
            raise ValueError(f"task.pool: {p} was selected for {key} {doc.get(key)!r}, the run uses {want!r}")
    def counted(params: Mapping[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in dict(params).items() if k not in params_outside}

    if counted(doc.get("task_params") or {}) != counted(task_params):
        raise ValueError(f"task.pool: {p} was selected with task.params {doc.get('task_params')}, the run uses {dict(task_params)}")
    ids = doc.get("ids")
    if not isinstance(ids, list) or not ids or not all(isinstance(i, str) for i in ids):
        raise ValueError(f"task.pool: {p} has no list of problem ids")
    if len(set(ids)) != len(ids):
        raise ValueError(f"task.pool: {p} lists a problem twice")
    return ids


def restrict_to_pool(problems: Sequence[Any], ids: Sequence[str], *, where: str = "task.pool") -> list[Any]:
    """The problems named by ``ids``, in the pool's order (ValueError naming the first missing ids)."""
    by_id = {p.id: p for p in problems}
    missing = [i for i in ids if i not in by_id]
    if missing:
        raise ValueError(f"{where}: {len(missing)} pool problem(s) are not in the training split, e.g. {missing[:3]}")
    return [by_id[i] for i in ids]


