"""Config dataclasses to and from YAML / TOML / JSON files, validated at the edge.

``load_config(Cls, path)`` rejects unknown keys (naming them and the file) and builds nested
dataclasses; ``save_config(cfg, path)`` writes the resolved config beside every result.

A file may start from another: ``extends: other.yaml`` (path relative to the file) loads that
file first and deep-merges this one over it (mappings merge key by key, anything else is
replaced); chains are followed and cycles are refused.
"""

from __future__ import annotations

import dataclasses
import json
import os
import typing
from pathlib import Path
from typing import Any, TypeVar

from vsr.atomic import write_text

T = TypeVar("T")


def deep_merge(base: dict, over: dict) -> dict:
    """``over`` merged into a copy of ``base``: nested mappings merge, other values replace."""
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = v
    return out


def read_mapping(path: str | os.PathLike, _seen: tuple[Path, ...] = ()) -> dict:
    """The mapping of a config file with its ``extends:`` chain resolved (module doc)."""
    path = Path(path).resolve()
    if path in _seen:
        raise ValueError(f"config: 'extends' cycle through {path}")
    data = _read_mapping(path)
    parent = data.pop("extends", None)
    if parent is None:
        return data
    if not isinstance(parent, str) or not parent:
        raise ValueError(f"config: 'extends' in {path} must be a file path, got {parent!r}")
    return deep_merge(read_mapping(path.parent / parent, _seen + (path,)), data)


def _read_mapping(path: Path) -> dict:
    if not path.is_file():
        raise ValueError(f"config: file not found: {path}")
    text = path.read_text()
    suffix = path.suffix.lower()
    try:
        if suffix in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text)
        elif suffix == ".toml":
            import tomllib

            data = tomllib.loads(text)
        elif suffix == ".json":
            data = json.loads(text)
        else:
            raise ValueError(f"config: unsupported file type {suffix!r} for {path} (use .yaml, .toml or .json)")
    except ValueError:
        raise
    except Exception as exc:
        raise ValueError(f"config: cannot parse {path}: {exc}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ValueError(f"config: top level of {path} must be a mapping, got {type(data).__name__}")
    return data


def from_dict(cls: type[T], data: dict, *, where: str = "config") -> T:
    """Build dataclass ``cls`` from a mapping, recursing into nested dataclass fields."""
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls!r} is not a dataclass")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {unknown} for {cls.__name__}; valid keys: {sorted(fields)}")
    kwargs: dict[str, Any] = {}
    for name, value in data.items():
        ftype = hints[name]
        if dataclasses.is_dataclass(ftype) and isinstance(value, dict):
            value = from_dict(ftype, value, where=f"{where}.{name}")
        elif typing.get_origin(ftype) is tuple and isinstance(value, list):
            value = tuple(value)
        kwargs[name] = value
    return cls(**kwargs)


def load_config(cls: type[T], path: str | os.PathLike) -> T:
    """Read a YAML/TOML/JSON file into dataclass ``cls``."""
    path = Path(path)
    return from_dict(cls, read_mapping(path), where=str(path))


def to_dict(cfg: Any) -> dict:
    """Dataclass to plain dict (tuples become lists, paths become strings)."""

    def conv(v):
        if dataclasses.is_dataclass(v):
            return {f.name: conv(getattr(v, f.name)) for f in dataclasses.fields(v)}
        if isinstance(v, (list, tuple)):
            return [conv(x) for x in v]
        if isinstance(v, dict):
            return {k: conv(x) for k, x in v.items()}
        if isinstance(v, Path):
            return str(v)
        return v

    return conv(cfg)


def save_config(cfg: Any, path: str | os.PathLike) -> Path:
    """Atomically write the resolved config as YAML (``.yaml``) or JSON (anything else)."""
    path = Path(path)
    data = to_dict(cfg)
    if path.suffix.lower() in (".yaml", ".yml"):
        import yaml

        text = yaml.safe_dump(data, sort_keys=False)
    else:
        text = json.dumps(data, indent=2) + "\n"
    return write_text(path, text)
