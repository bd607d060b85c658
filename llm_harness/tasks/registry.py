"""Registry of tasks by name: ``get_task("step_arith", **params)``.

Each entry of :data:`TASK_REGISTRY` (a :class:`vsr_util.registry.Registry`) is a factory
``(**params) -> Task``; duplicates are rejected, unknown names raise ValueError listing the known ones.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, TypeVar

from llm_harness.tasks.base import Task
from vsr_util.registry import Registry

__all__ = ["TASK_REGISTRY", "available_tasks", "build_config", "get_task", "register_task"]

TaskFactory = Callable[..., Task]
F = TypeVar("F", bound=TaskFactory)

#: name -> factory taking keyword parameters and returning a :class:`Task`.
TASK_REGISTRY: Registry[TaskFactory] = Registry("task")


def register_task(name: str) -> Callable[[F], F]:
    """Decorator registering ``factory`` under ``name`` (a second registration raises)."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"name: must be a non-empty string, got {name!r}")
    return TASK_REGISTRY.register(name)  # type: ignore[return-value]


#: modules that register tasks outside this package (imported before a lookup): the text
#: environments' ``env`` task lives with the environments, which import this registry
TASK_MODULES: tuple[str, ...] = ("llm_harness.envs.task",)


def import_task_modules() -> None:
    """Import :data:`TASK_MODULES` (their ``register_task`` calls fill the registry)."""
    import importlib

    for mod in TASK_MODULES:
        importlib.import_module(mod)


def available_tasks() -> tuple[str, ...]:
    """Registered task names, sorted."""
    import_task_modules()
    return tuple(sorted(TASK_REGISTRY))


def get_task(name: str, **params: Any) -> Task:
    """Build the task registered as ``name`` with keyword ``params`` (unknown name: ValueError
    ``"name: unknown task ..."``; configs check their field first with ``TASK_REGISTRY.check``)."""
    import_task_modules()
    return TASK_REGISTRY.lookup(name, "name")(**params)


C = TypeVar("C")


def build_config(cls: type[C], params: Mapping[str, Any]) -> C:
    """``cls(**params)`` for a dataclass config, with a ValueError naming unknown fields."""
    known = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
    unknown = sorted(set(params) - set(known))
    if unknown:
        raise ValueError(f"params: unknown parameter(s) {', '.join(unknown)} for {cls.__name__}; known: {', '.join(known)}")
    return cls(**params)
