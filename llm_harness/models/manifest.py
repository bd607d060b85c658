"""The manifest of an imported model folder: what it was made from and the hash of every file.

``manifest.json`` is written last into the folder being built, so a folder with a manifest is
complete. It records the source GGUF (path, size, sha256, the named-model entry when there is
one), how it was converted (library versions, dtype, the round-trip check) and
``files[name] = {"sha256", "bytes"}`` for every other file. :func:`verify_folder` re-hashes the
files and refuses a folder whose contents differ from its manifest, naming each file.

A folder is verified where it is *loaded* too (:func:`check_model_folder`: ``vsr train`` / ``eval``
``--model``, the studies), and hashing a few hundred MB on every load would cost seconds, so a
successful verification is remembered: keyed by the ``(size, mtime_ns, ctime_ns, inode, device)`` of
every file in the folder, in memory and in a small hidden file beside the manifest (:data:`VERDICT`,
written atomically; skipped when the folder is read-only). Any change to any file (a write changes its
ctime even when its mtime is put back) misses the remembered verdict and the folder is hashed again.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any
from vsr_util.atomic import read_json

__all__ = [
    "FORMAT", "MANIFEST", "VERDICT", "check_model_folder", "file_entry", "read_manifest", "record_verdict", "sha256_file",
    "verify_folder", "verify_folder_cached",
]

#: File name of the manifest inside an imported model folder.
MANIFEST = "manifest.json"
#: Format tag of the manifest (bumped when its meaning changes).
FORMAT = "vsr-toolkit/gguf-import/1"
#: Hidden file beside the manifest recording the last successful verification (module doc); it and its
#: temporaries (``VERDICT.<pid>.tmp``) are the only files a folder may hold beyond its manifest.
VERDICT = ".vsr-verified.json"
_VERDICT_FORMAT = "vsr-toolkit/verified/1"
#: in-memory verdicts: (resolved folder, stat key) -> manifest
_VERIFIED: dict[tuple[str, tuple], dict[str, Any]] = {}

_BLOCK = 1 << 20


def sha256_file(path: str | Path) -> str:
    """Hex sha256 of a file's bytes, read in 1 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(_BLOCK), b""):
            h.update(block)
    return h.hexdigest()


def file_entry(path: str | Path) -> dict[str, Any]:
    """``{"sha256", "bytes"}`` of one file."""
    path = Path(path)
    return {"sha256": sha256_file(path), "bytes": path.stat().st_size}


def read_manifest(folder: str | Path) -> dict[str, Any]:
    """The parsed manifest of ``folder`` (ValueError when absent, unreadable or of another format)."""
    path = Path(folder) / MANIFEST
    if not path.is_file():
        raise ValueError(f"model folder: {str(folder)!r} has no {MANIFEST} (not a folder written by `vsr model import`)")
    try:
        data = read_json(path)
    except (OSError, ValueError) as exc:
        raise ValueError(f"model folder: cannot read {str(path)!r} ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("files"), dict):
        raise ValueError(f"model folder: {str(path)!r} is not a {FORMAT} manifest")
    return data


def _is_verdict_file(name: str) -> bool:
    return name == VERDICT or (name.startswith(VERDICT + ".") and name.endswith(".tmp"))


def _reimport_hint(manifest: dict[str, Any], folder: Path) -> str:
    src = manifest.get("source") if isinstance(manifest.get("source"), dict) else {}
    source = manifest.get("name") if src.get("named_model") else src.get("path")
    if not source:
        return "re-import it with `vsr model import --force`"
    return f"re-import it with `vsr model import --source {source} --out {folder} --force`"


def verify_folder(folder: str | Path, *, field: str = "model folder", advice: str | None = None) -> dict[str, Any]:
    """Re-hash every file listed in ``folder``'s manifest; return the manifest when all match.

    Raises ValueError (prefixed with ``field``) naming each missing file, each file whose size or
    sha256 differs from the manifest (with both hashes) and each file present in the folder but not
    in the manifest, then ``advice`` (default: the command that re-imports the folder). A success is remembered
    (:func:`record_verdict`) when no file changed meanwhile.
    """
    folder = Path(folder)
    key = _stat_key(folder)
    manifest = read_manifest(folder)
    problems = []
    for name, want in sorted(manifest["files"].items()):
        path = folder / name
        if not path.is_file():
            problems.append(f"{path}: missing (the manifest lists it)")
            continue
        size = path.stat().st_size
        if size != want["bytes"]:
            problems.append(f"{path}: {size} bytes, manifest says {want['bytes']}")
            continue
        got = sha256_file(path)
        if got != want["sha256"]:
            problems.append(f"{path}: checksum fails: sha256 {got}, manifest says {want['sha256']}")
    extra = sorted(p.name for p in folder.iterdir()
                   if p.name != MANIFEST and p.name not in manifest["files"] and not _is_verdict_file(p.name))
    problems += [f"{folder / name}: not in the manifest" for name in extra]
    if problems:
        raise ValueError(f"{field}: {str(folder)!r} does not match its manifest ({MANIFEST}): " + "; ".join(problems)
                         + (f"; the folder is damaged: {_reimport_hint(manifest, folder)}" if advice is None else advice))
    if key is not None and key == _stat_key(folder):
        record_verdict(folder, manifest, key)
    return manifest


def _stat_key(folder: Path) -> tuple | None:
    """``(name, size, mtime_ns, ctime_ns, inode, device)`` of every entry of ``folder`` but the verdict files,
    sorted (``None`` when the folder cannot be listed or an entry cannot be stat'ed)."""
    rows = []
    try:
        with os.scandir(folder) as it:
            for entry in it:
                if _is_verdict_file(entry.name):
                    continue
                st = os.stat(entry.path)
                rows.append((entry.name, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev))
    except OSError:
        return None
    return tuple(sorted(rows))


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: alive, another user's
        return True
    return True


def record_verdict(folder: str | Path, manifest: dict[str, Any], key: tuple | None = None) -> None:
    """Remember that ``folder`` (stat ``key``, default: its stat now) matches ``manifest``: in memory, and in
    :data:`VERDICT` when the folder is writable (written atomically, only when it changes)."""
    folder = Path(folder)
    key = _stat_key(folder) if key is None else key
    if key is None:
        return
    if len(_VERIFIED) > 64:
        _VERIFIED.clear()
    _VERIFIED[(str(folder.resolve()), key)] = manifest
    text = json.dumps({"format": _VERDICT_FORMAT, "files": [list(r) for r in key]}) + "\n"
    path = folder / VERDICT
    try:
        if path.is_file() and path.read_text() == text:
            return
        for old in folder.glob(f"{VERDICT}.*.tmp"):  # left by a writer that died
            pid = old.name[len(VERDICT) + 1:-len(".tmp")]
            if pid.isdigit() and not _pid_alive(int(pid)):
                old.unlink(missing_ok=True)
        tmp = folder / f"{VERDICT}.{os.getpid()}.tmp"
        tmp.write_text(text)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except OSError:  # a read-only folder: the verdict stays in memory only
        try:
            (folder / f"{VERDICT}.{os.getpid()}.tmp").unlink(missing_ok=True)
        except OSError:
            pass


def _remembered(folder: Path, key: tuple) -> dict[str, Any] | None:
    hit = _VERIFIED.get((str(folder.resolve()), key))
    if hit is not None:
        return hit
    try:
        data = read_json(folder / VERDICT)
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("format") != _VERDICT_FORMAT or not isinstance(data.get("files"), list):
        return None
    if tuple(tuple(r) if isinstance(r, list) else r for r in data["files"]) != key:
        return None
    manifest = read_manifest(folder)
    _VERIFIED[(str(folder.resolve()), key)] = manifest
    return manifest


def verify_folder_cached(folder: str | Path, *, field: str = "model folder", advice: str | None = None) -> dict[str, Any]:
    """:func:`verify_folder`, hashing only when no remembered verdict matches the folder's files as they are now
    (module doc). Raises ValueError naming each damaged, missing or extra file."""
    folder = Path(folder)
    key = _stat_key(folder)
    if key is not None:
        hit = _remembered(folder, key)
        if hit is not None:
            return hit
    return verify_folder(folder, field=field, advice=advice)


def check_model_folder(folder: str | Path, field: str) -> dict[str, Any] | None:
    """Verify a model folder where it is loaded: a folder with an import manifest (``vsr model import``) must match
    it (:func:`verify_folder_cached`; ValueError naming each damaged or missing file, tokenizer files included)
    and its manifest is returned; a folder without one (a training checkpoint, the test bed) gives ``None``.
    A ``manifest.json`` of another kind (not a ``vsr-toolkit/gguf-import/`` format) is not this module's and is
    left alone; one that cannot be read is refused."""
    folder = Path(folder)
    path = folder / MANIFEST
    if not os.path.lexists(path):
        return None
    try:
        data = read_json(path)
    except (OSError, ValueError) as exc:
        raise ValueError(f"{field}: cannot read {str(path)!r} ({exc}); the folder's manifest is damaged: re-import it "
                         "with `vsr model import --force`") from None
    tag = data.get("format") if isinstance(data, dict) else None
    if not (isinstance(tag, str) and tag.startswith(FORMAT.rsplit("/", 1)[0] + "/")):
        return None
    if tag != FORMAT:
        raise ValueError(f"{field}: {str(path)!r} is a {tag} manifest; this version reads {FORMAT}: re-import the folder "
                         "with `vsr model import --force`")
    return verify_folder_cached(folder, field=field)
