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
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        col = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise ValueError(f"config: {path}:{line}: not UTF-8 (byte {raw[exc.start]:#04x} at column {col}); "
                         "save the file as UTF-8") from None
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
    except json.JSONDecodeError as exc:
        raise ValueError(f"config: {path}:{exc.lineno}: not valid JSON ({exc.msg} at column {exc.colno})") from None
    except ValueError as exc:
        if type(exc).__name__ == "TOMLDecodeError":  # its message carries the line and column
            raise ValueError(f"config: {path}: not valid TOML ({exc})") from None
        raise
    except Exception as exc:
        mark = getattr(exc, "problem_mark", None)  # YAML errors know where they are
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        raise ValueError(f"config: cannot parse {where}: {exc}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        kind = {"list": "a list (JSON array / YAML sequence)"}.get(type(data).__name__, type(data).__name__)
        raise ValueError(f"config: top level of {path} must be a mapping of section -> fields, got {kind}")
    return data


def from_dict(cls: type[T], data: dict, *, where: str = "config") -> T:
    """Build dataclass ``cls`` from a mapping, recursing into nested dataclass fields.

    A nested section must be a mapping (``optim: 5``, ``optim:`` (null) and ``rollout: [1, 2]`` are
    refused naming the section); a ValueError raised while validating a section is re-raised with
    the section's dotted path in front of the field it names (``optim.lr: must be > 0``).
    """
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls!r} is not a dataclass")
    if not isinstance(data, dict):
        raise ValueError(f"{where}: must be a mapping of {cls.__name__} fields, got {type(data).__name__} {data!r}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {unknown} for {cls.__name__}; valid keys: {sorted(fields)}")
    kwargs: dict[str, Any] = {}
    for name, value in data.items():
        ftype = hints[name]
        if dataclasses.is_dataclass(ftype):
            value = from_dict(ftype, value, where=_join(where, name))
        elif typing.get_origin(ftype) is tuple and isinstance(value, list):
            value = tuple(value)
        kwargs[name] = value
    try:
        return cls(**kwargs)
    except ValueError as exc:
        raise ValueError(_prefixed(where, str(exc))) from None


#: the ``where`` of a top-level mapping given without a file (no prefix in messages)
_ROOT = "config"


def _join(where: str, name: str) -> str:
    """Dotted path of field ``name`` inside section ``where`` (``where`` may start with a file path)."""
    return name if where == _ROOT else f"{where}.{name}"


def _prefixed(where: str, msg: str) -> str:
    """``msg`` with the section path ``where`` in front of the field it names, unless already there."""
    head = msg.split(":", 1)[0]
    if where == _ROOT or head == where or head.startswith(where + ".") or " " in head:
        return msg
    return f"{where}.{msg}"


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


def config_diff(old: Any, new: Any, *, ignore: tuple[str, ...] = (), prefix: str = "") -> list[tuple[str, Any, Any]]:
    """``[(dotted field, old value, new value)]`` where two config mappings differ (top-level keys in
    ``ignore`` skipped; a key missing on one side counts as ``None``)."""
    out: list[tuple[str, Any, Any]] = []
    if isinstance(old, dict) and isinstance(new, dict):
        for k in sorted(set(old) | set(new), key=str):
            if not prefix and k in ignore:
                continue
            out += config_diff(old.get(k), new.get(k), prefix=f"{prefix}{k}.")
        return out
    norm = (lambda v: list(v) if isinstance(v, tuple) else v)
    if norm(old) != norm(new):
        out.append((prefix.rstrip("."), old, new))
    return out


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
