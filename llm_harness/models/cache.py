"""The model cache: where imported folders live, the short names (aliases) given to them, and ``vsr model list``.

``vsr model import --name NAME`` records ``NAME -> folder`` in ``<cache>/aliases.json`` (the cache, not the
code, holds aliases: :data:`llm_harness.models.named.MODELS` is the registry of models the toolkit knows how
to fetch). Every command that loads a model resolves its model argument with :func:`llm_harness.models.gguf_import.resolve_model_folder`:
a registered name is imported (verified) into the cache, a path that exists is itself, and an alias of the
default cache is its folder. A path that exists wins over an alias of the same spelling.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vsr_util.atomic import read_json

__all__ = [
    "ALIASES",
    "ListConfig",
    "check_alias_name",
    "default_cache_dir",
    "list_command",
    "list_models",
    "read_aliases",
    "record_alias",
    "resolve_alias",
]

#: File of the aliases inside the cache folder.
ALIASES = "aliases.json"
_ALIAS_FORMAT = "vsr-toolkit/model-aliases/1"
_ALIAS_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def default_cache_dir() -> Path:
    """``$VSR_CACHE_DIR/models``, else ``$XDG_CACHE_HOME/vsr-toolkit/models``, else ``~/.cache/vsr-toolkit/models``."""
    if os.environ.get("VSR_CACHE_DIR"):
        return Path(os.environ["VSR_CACHE_DIR"]).expanduser() / "models"
    base = Path(os.environ["XDG_CACHE_HOME"]).expanduser() if os.environ.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return base / "vsr-toolkit" / "models"


#: the shipped test-bed checkpoints' names (``llm_harness.testbed.paths.SHIPPED_CHECKPOINTS``, which sits above this
#: layer; a test holds the two equal): an alias may not shadow them
TESTBED_NAMES = ("low", "mid", "high")


def check_alias_name(name: str, field: str = "name") -> None:
    """Refuse an alias that could be read as something else: a path (``/``), a registered model name or a
    shipped test-bed checkpoint (``low``/``mid``/``high``), or one outside ``[A-Za-z0-9._-]`` (at most 64)."""
    from llm_harness.models.named import MODELS

    if not isinstance(name, str) or not _ALIAS_RE.fullmatch(name) or name in (".", ".."):
        raise ValueError(f"{field}: {name!r} is not a model alias: use 1-64 letters, digits, '.', '_' or '-', "
                         "starting with a letter or digit")
    if name in MODELS:
        raise ValueError(f"{field}: {name!r} is already a registered model name ({', '.join(MODELS)}); choose another")
    if name in TESTBED_NAMES:
        raise ValueError(f"{field}: {name!r} names a shipped test-bed checkpoint ({', '.join(TESTBED_NAMES)}); choose another")
    if name.endswith(".gguf"):
        raise ValueError(f"{field}: {name!r} reads as a GGUF file name; choose a name without the .gguf suffix")


def _read_raw(cache: Path) -> dict[str, dict[str, Any]]:
    path = cache / ALIASES
    if not path.is_file():
        return {}
    try:
        data = read_json(path)
    except (OSError, ValueError) as exc:
        raise ValueError(f"model alias: cannot read {str(path)!r} ({exc}); fix or delete it (aliases are re-made by "
                         "`vsr model import --name`)") from None
    if not isinstance(data, dict) or data.get("format") != _ALIAS_FORMAT or not isinstance(data.get("aliases"), dict):
        raise ValueError(f"model alias: {str(path)!r} is not a {_ALIAS_FORMAT} file; fix or delete it")
    return {n: r for n, r in data["aliases"].items() if isinstance(r, dict) and isinstance(r.get("folder"), str)}


def read_aliases(cache_dir: str | Path | None = None) -> dict[str, dict[str, Any]]:
    """``{alias: {"folder", "source", "sha256", "created"}}`` of ``cache_dir`` (default: :func:`default_cache_dir`);
    ``folder`` is absolute. No file gives ``{}``; a damaged one raises ValueError naming it."""
    cache = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
    return {n: {**r, "folder": str(cache / r["folder"])} for n, r in _read_raw(cache).items()}  # relative: inside the cache


def record_alias(cache_dir: str | Path, name: str, folder: str | Path, *, source: str, sha256: str,
                 force: bool = False) -> bool:
    """Record ``name -> folder`` in ``cache_dir``'s alias file (under a lock, written atomically). Returns True
    when it changed. An alias that names another folder is refused unless ``force`` (then it is moved)."""
    import fcntl

    from vsr_util.atomic import write_json

    check_alias_name(name)
    cache = Path(cache_dir).expanduser().absolute()
    folder = Path(folder).absolute()
    cache.mkdir(parents=True, exist_ok=True)
    fd = os.open(cache / "aliases.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # a few ms: the read-modify-write of concurrent imports
        raw = _read_raw(cache)
        old = {**raw[name], "folder": str(cache / raw[name]["folder"])} if name in raw else None
        if old is not None and Path(old["folder"]) == folder:
            return False
        if old is not None and not force:
            raise ValueError(f"name: the alias {name!r} already names {old['folder']} (imported from {old.get('source', '?')}); "
                             "choose another --name, or pass --force to move it")
        try:
            stored = str(folder.relative_to(cache))
        except ValueError:
            stored = str(folder)
        raw[name] = {"folder": stored, "source": source, "sha256": sha256, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        write_json(cache / ALIASES, {"format": _ALIAS_FORMAT, "aliases": dict(sorted(raw.items()))})
        return True
    finally:
        os.close(fd)


def resolve_alias(name: str, cache_dir: str | Path | None = None, *, field: str = "model") -> Path | None:
    """The folder the alias ``name`` names in ``cache_dir`` (default cache), ``None`` when it is not an alias.
    An alias whose folder is gone raises ValueError naming both."""
    if not isinstance(name, str) or not _ALIAS_RE.fullmatch(name):
        return None
    rec = read_aliases(cache_dir).get(name)
    if rec is None:
        return None
    folder = Path(rec["folder"])
    if not folder.is_dir():
        raise ValueError(f"{field}: the alias {name!r} names {folder}, which no longer exists; re-import it with "
                         f"`vsr model import --source {rec.get('source', '<gguf>')} --name {name} --force`")
    return folder


# ---------------------------------------------------------------------------- vsr model list
@dataclass(frozen=True)
class ListConfig:
    """``vsr model list``: the models of the cache, their aliases, sources, hashes and licences."""

    cache_dir: str = ""
    """Root of the model cache; empty = ``$VSR_CACHE_DIR/models``, else ``$XDG_CACHE_HOME/vsr-toolkit/models``,
    else ``~/.cache/vsr-toolkit/models``."""


def _row(folder: Path, names: list[str]) -> dict[str, str]:
    from llm_harness.models.manifest import MANIFEST, read_manifest

    row = {"name": ", ".join(names) or folder.name, "folder": str(folder), "source": "?", "sha256": "?", "licence": "?"}
    if not folder.is_dir():
        return {**row, "status": "folder missing"}
    if not (folder / MANIFEST).is_file():
        return {**row, "status": f"no {MANIFEST}"}
    try:
        m = read_manifest(folder)
    except ValueError:
        return {**row, "status": f"unreadable {MANIFEST}"}
    src = m.get("source") or {}
    named = src.get("named_model") or {}
    row["name"] = ", ".join(dict.fromkeys([m.get("name", folder.name), *names]))
    row["source"] = f"{m.get('name')} ({named.get('distribution')} {named.get('version')})" if named else str(src.get("path", "?"))
    row["sha256"] = str(src.get("sha256", "?"))
    row["licence"] = str(m.get("licence") or named.get("licence") or "unknown")
    return {**row, "status": "ok"}


def list_models(cache_dir: str | Path | None = None) -> list[dict[str, str]]:
    """One row per imported folder of the cache (and per folder outside it that an alias names):
    ``name`` (the import name and its aliases), ``folder``, ``source``, ``sha256`` (of the source GGUF),
    ``licence``, ``status`` (``ok``, ``folder missing``, ...). Nothing is hashed."""
    cache = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
    aliases = read_aliases(cache)
    by_folder: dict[str, list[str]] = {}
    for name, rec in sorted(aliases.items()):
        by_folder.setdefault(str(Path(rec["folder"])), []).append(name)
    folders = sorted(p for p in cache.iterdir() if p.is_dir() and not p.name.startswith(".")) if cache.is_dir() else []
    rows = [_row(p, by_folder.pop(str(p), [])) for p in folders]
    rows += [_row(Path(f), names) for f, names in sorted(by_folder.items())]
    return rows


def list_command(cfg: ListConfig) -> int:
    """``vsr model list``: print the cache's models as a table (``name``, ``folder``, ``source``, ``sha256``, ``licence``)."""
    cache = Path(cfg.cache_dir).expanduser() if cfg.cache_dir else default_cache_dir()
    rows = list_models(cache)
    if not rows:
        print(f"no imported models in {cache} (import one with `vsr model import`)")
        return 0
    cols = ("name", "folder", "source", "sha256", "licence", "status")
    width = {c: max(len(c), *(len(r[c]) for r in rows)) for c in cols[:-1]}
    print("  ".join(c.upper().ljust(width.get(c, 0)) for c in cols).rstrip())
    for r in rows:
        print("  ".join(r[c].ljust(width.get(c, 0)) for c in cols).rstrip())
    return 0
