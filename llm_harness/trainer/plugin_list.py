"""``vsr plugins``: the registered trainer plug-ins and their parameters, read from their registrations
(:class:`~llm_harness.trainer.plugins.PluginSpec`: the parameter class with its field docstrings and defaults)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from llm_harness.trainer.plugins import PLUGINS, PluginSpec, import_plugin_modules

__all__ = ["PluginsConfig", "plugin_rows", "plugins_command"]


@dataclass(frozen=True)
class PluginsConfig:
    """Options of ``vsr plugins``."""

    name: str = ""
    """One plug-in: list its parameters with defaults and meaning; empty: every plug-in, one line each."""


def plugin_rows(spec: PluginSpec) -> list[tuple[str, str, str]]:
    """``(parameter, default, meaning)`` for every field of the plug-in's parameter class."""
    from vsr_util.config_io import field_docs

    if spec.config is None:
        return []
    docs = field_docs(spec.config)
    rows = []
    for f in dataclasses.fields(spec.config):
        default: Any = f.default if f.default is not dataclasses.MISSING else (
            f.default_factory() if f.default_factory is not dataclasses.MISSING else "(required)")  # type: ignore[misc]
        rows.append((f.name, repr(default), docs.get(f.name, "")))
    return rows


def plugins_command(cfg: PluginsConfig) -> int:
    """Print the plug-ins (``plugins: {name: {param: value}}`` in a training config) or one plug-in's parameters."""
    import_plugin_modules()
    if not cfg.name:
        width = max(len(n) for n in PLUGINS)
        for name, spec in PLUGINS.items():
            print(f"{name.ljust(width)}  {spec.summary}")
        print("\n(vsr plugins --name NAME lists a plug-in's parameters)")
        return 0
    spec = PLUGINS.lookup(cfg.name, where="name")
    print(f"plugins.{spec.name}: {spec.summary}")
    if spec.config is not None:
        print(f"parameters ({spec.config.__module__}.{spec.config.__qualname__}):")
    for param, default, doc in plugin_rows(spec):
        print(f"  {param} = {default}" + (f"  -- {doc}" if doc else ""))
    return 0
