"""Config dataclasses to and from YAML / TOML / JSON files, validated at the edge.

``load_config(Cls, path)`` rejects unknown keys (naming them and the file) and builds nested
dataclasses; ``save_config(cfg, path)`` writes the resolved config beside every result.

A file may start from another: ``extends: other.yaml`` (path relative to the file) loads that
file first and deep-merges this one over it (mappings merge key by key, anything else is
replaced); chains are followed and cycles are refused.

Every file is checked before it is parsed: it must be a regular file (not a folder, FIFO or device:
nothing is opened that could block), not empty, and at most :data:`MAX_CONFIG_BYTES`. A mapping key
given twice (YAML or JSON; TOML refuses it itself) is refused naming both lines rather than the
second silently replacing the first, and YAML aliases may not expand beyond :data:`MAX_CONFIG_NODES`
values (a "billion laughs" document is refused before any object is built).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import stat
import typing
from pathlib import Path
from typing import Any, TypeVar

from vsr_util.atomic import read_bounded, write_text

T = TypeVar("T")

#: the largest config file read, in bytes (hand-written configs are a few KB; parsing is slow beyond this)
MAX_CONFIG_BYTES = 2 * 1024 * 1024
#: the most values (mappings, lists, scalars, keys) a YAML config may hold, every use of an alias
#: (``*name``) counted as a full copy of its anchor
MAX_CONFIG_NODES = 200_000


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
    """The top-level mapping of one config file (no ``extends`` resolved), checked at the edge (module doc)."""
    _check_is_config_file(path, _stat_or_none(path))
    suffix = path.suffix.lower()
    if suffix not in _PARSERS:
        raise ValueError(f"config: unsupported file type {suffix!r} for {path} (use .yaml, .toml or .json)")
    text = _decode(path, _read_bounded(path))
    try:
        data = _PARSERS[suffix](text, path)
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


_FILE_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
               (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def _stat_or_none(path: Path) -> os.stat_result | None:
    """``os.stat(path)``, or ``None`` when nothing is there (a dangling link, a missing folder on the way)."""
    try:
        return os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None


def _check_is_config_file(path: Path, st: os.stat_result | None) -> None:
    """Refuse a config path that is missing, a folder, or not a regular file (a FIFO, ``/dev/null``),
    naming it; ``st`` is its ``stat`` (``None``: it does not exist). Nothing is opened."""
    if st is None:
        raise ValueError(f"config: file not found: {path}")
    if stat.S_ISDIR(st.st_mode):
        raise ValueError(f"config: {path} is a folder, not a config file; give a .yaml, .toml or .json file")
    if not stat.S_ISREG(st.st_mode):
        kind = next((name for test, name in _FILE_KINDS if test(st.st_mode)), "not a regular file")
        raise ValueError(f"config: {path} is {kind}, not a regular file; give a .yaml, .toml or .json file")


def _read_bounded(path: Path) -> bytes:
    """The bytes of config file ``path``: refused when empty or over :data:`MAX_CONFIG_BYTES` (naming its
    size and the limit) before anything is parsed. Opened without blocking, and checked again once open
    (the path may have been replaced by a FIFO since it was looked at)."""
    raw, st = read_bounded(path, MAX_CONFIG_BYTES, _check_is_config_file)
    if st.st_size > MAX_CONFIG_BYTES or len(raw) > MAX_CONFIG_BYTES:
        size = max(len(raw), st.st_size)
        raise ValueError(f"config: {path} is {size:,} bytes, over the {MAX_CONFIG_BYTES:,}-byte limit for a config "
                         "file (hand-written configs are a few KB); a config holds settings, not data")
    if not raw:
        raise ValueError(f"config: {path} is empty (0 bytes); a config file needs at least one section")
    return raw


def _decode(path: Path, raw: bytes) -> str:
    """``raw`` as UTF-8, or a ``ValueError`` naming the file, line and column of the first bad byte."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        col = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise ValueError(f"config: {path}:{line}: not UTF-8 (byte {raw[exc.start]:#04x} at column {col}); "
                         "save the file as UTF-8") from None


def _parse_toml(text: str, path: Path) -> Any:
    """A TOML document (``tomllib`` already refuses a key given twice, naming its line)."""
    import tomllib

    return tomllib.loads(text)


def _parse_json(text: str, path: Path) -> Any:
    """A JSON document whose objects may not repeat a key (:func:`_json_object`)."""
    import json.scanner

    decoder = json.JSONDecoder(object_pairs_hook=list)
    decoder.parse_object = functools.partial(_json_object, path=path)
    decoder.scan_once = json.scanner.py_make_scanner(decoder)  # the C scanner would bypass parse_object
    return decoder.decode(text)


def _json_object(s_and_end: tuple[str, int], *args: Any, path: Path) -> tuple[dict, int]:
    """The JSON object starting just before ``s_and_end[1]`` as a dict, refusing a key given twice with the
    lines of its first two occurrences (the scanner's ``parse_object``, with ``object_pairs_hook=list``)."""
    pairs, end = json.decoder.JSONObject(s_and_end, *args)
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            text, start = s_and_end
            lines = _json_key_lines(text, start, end, key)
            raise ValueError(_duplicate_message(path, key, lines[0], lines[1]))
        seen.add(key)
    return dict(pairs), end


def _json_key_lines(text: str, start: int, end: int, key: str) -> list[int]:
    """The line numbers where ``key`` is a key of the JSON object ``text[start:end]`` (``start`` just after
    its opening brace), nested objects skipped."""
    lines, depth, i = [], 0, start
    while i < end:
        ch = text[i]
        if ch == '"':
            value, j = json.decoder.scanstring(text, i + 1)
            colon = json.decoder.WHITESPACE.match(text, j).end()
            if depth == 0 and value == key and text[colon:colon + 1] == ":":
                lines.append(text.count("\n", 0, i) + 1)
            i = j
            continue
        depth += (ch in "{[") - (ch in "}]")
        i += 1
    return lines


def _duplicate_message(path: Path, key: str, first: int, second: int) -> str:
    """The error for a mapping key given twice in config file ``path``."""
    return (f"config: {path}: key {key!r} is given twice (lines {first} and {second}); the second would silently "
            "replace the first: keep one")


def _parse_yaml(text: str, path: Path) -> Any:
    """A YAML document, read with :func:`_yaml_loader` (duplicate keys and alias bombs refused)."""
    loader = _yaml_loader()(text)
    loader.config_path = path
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


@functools.lru_cache(maxsize=None)
def _yaml_loader() -> type:
    """A safe YAML loader (libyaml's when installed) that checks the composed node graph before building
    any object: a mapping key given twice is refused naming both lines, and a document that would expand
    to more than :data:`MAX_CONFIG_NODES` values through its aliases (or refers to itself) is refused."""
    import yaml

    base = yaml.CSafeLoader if getattr(yaml, "__with_libyaml__", False) else yaml.SafeLoader

    class ConfigLoader(base):  # type: ignore[misc, valid-type]
        config_path: Path = Path("<config>")

        def get_single_data(self) -> Any:
            node = self.get_single_node()
            if node is None:
                return None
            _check_yaml_nodes(node, self.config_path)
            return self.construct_document(node)

    return ConfigLoader


def _yaml_children(node: Any) -> list:
    """The nodes directly under a YAML node (keys and values of a mapping, items of a sequence)."""
    if isinstance(node.value, list):
        return [n for item in node.value for n in (item if isinstance(item, tuple) else (item,))]
    return []


def _yaml_place(root: Any, target: Any) -> str:
    """The dotted place of node ``target`` in the YAML graph under ``root`` (its shortest path; "" for the
    root), for error messages."""
    import collections

    import yaml

    seen: set[int] = set()
    queue: collections.deque[tuple[Any, str]] = collections.deque([(root, "")])
    while queue:
        node, where = queue.popleft()
        if node is target:
            return where
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            queue.extend((value, _join_place(where, key)) for key, value in node.value)
        elif isinstance(node, yaml.SequenceNode):
            queue.extend((item, f"{where}[{i}]") for i, item in enumerate(node.value))
    return ""


def _join_place(where: str, key: Any) -> str:
    """The dotted place of the value under ``key`` (a YAML key node) inside ``where``."""
    name = key.value if isinstance(key.value, str) else "?"
    return f"{where}.{name}" if where else name


def _check_yaml_nodes(root: Any, path: Path) -> None:
    """Walk the composed YAML graph once (an alias is the node of its anchor, visited once): refuse duplicate
    keys (:func:`_check_yaml_keys`), a self-referring alias, and more than :data:`MAX_CONFIG_NODES` values once
    every alias is expanded. Linear in the size of the file, however far the aliases would expand."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, finished = stack.pop()
        nid = id(node)
        if finished:
            open_nodes.discard(nid)
            sizes[nid] = 1 + sum(sizes[id(child)] for child in _yaml_children(node))
            if sizes[nid] > MAX_CONFIG_NODES:
                where = _yaml_place(root, node) or "the document"
                raise ValueError(f"config: {path}:{node.start_mark.line + 1}: {where} holds more than "
                                 f"{MAX_CONFIG_NODES:,} values (each *alias counted as a copy of its &anchor); "
                                 "a config this large is refused: write the values out, or use fewer aliases")
            continue
        if nid in sizes:
            continue
        if nid in open_nodes:
            raise ValueError(f"config: {path}:{node.start_mark.line + 1}: {_yaml_place(root, node)} contains an alias of "
                             "itself (a recursive structure); a config must be a tree of values")
        _check_yaml_keys(node, root, path)
        open_nodes.add(nid)
        stack.append((node, True))
        stack.extend((child, False) for child in _yaml_children(node))


def _check_yaml_keys(node: Any, root: Any, path: Path) -> None:
    """Refuse a YAML mapping node (under document ``root``) whose plain keys repeat, naming the key's dotted
    place and both lines (merge keys ``<<`` are not keys: what they bring in may be overridden)."""
    import yaml

    if not isinstance(node, yaml.MappingNode):
        return
    first_line: dict[tuple[str, str], int] = {}
    for key, _ in node.value:
        if not isinstance(key, yaml.ScalarNode) or key.tag == "tag:yaml.org,2002:merge":
            continue
        ident = (key.tag, key.value)
        line = key.start_mark.line + 1
        if ident in first_line:
            raise ValueError(_duplicate_message(path, _join_place(_yaml_place(root, node), key),
                                                first_line[ident], line))
        first_line[ident] = line


#: how each config file type is parsed, by suffix
_PARSERS = {".yaml": _parse_yaml, ".yml": _parse_yaml, ".toml": _parse_toml, ".json": _parse_json}


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


def field_docs(cls: type) -> dict[str, str]:
    """Attribute docstrings (the string literal after each field) of ``cls`` and its bases."""
    import ast
    import inspect
    import textwrap

    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError):
            continue
        body = tree.body[0].body  # type: ignore[attr-defined]
        for a, b in zip(body, body[1:]):
            if isinstance(a, ast.AnnAssign) and isinstance(a.target, ast.Name) and isinstance(b, ast.Expr) \
                    and isinstance(b.value, ast.Constant) and isinstance(b.value.value, str):
                docs[a.target.id] = " ".join(b.value.value.split())
    return docs
