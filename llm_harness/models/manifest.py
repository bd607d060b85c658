"""The manifest of an imported model folder: what it was made from and the hash of every file.

``manifest.json`` is written last into the folder being built, so a folder with a manifest is
complete. It records the source GGUF (path, size, sha256, the named-model entry when there is
one), how it was converted (library versions, dtype, the round-trip check) and
``files[name] = {"sha256", "bytes"}`` for every other file. :func:`verify_folder` re-hashes the
files and refuses a folder whose contents differ from its manifest, naming each file.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

__all__ = ["FORMAT", "MANIFEST", "file_entry", "read_manifest", "sha256_file", "verify_folder"]

#: File name of the manifest inside an imported model folder.
MANIFEST = "manifest.json"
#: Format tag of the manifest (bumped when its meaning changes).
FORMAT = "vsr-toolkit/gguf-import/1"

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
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"model folder: cannot read {str(path)!r} ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("files"), dict):
        raise ValueError(f"model folder: {str(path)!r} is not a {FORMAT} manifest")
    return data


def verify_folder(folder: str | Path) -> dict[str, Any]:
    """Re-hash every file listed in ``folder``'s manifest; return the manifest when all match.

    Raises ValueError naming each missing file and each file whose size or sha256 differs (with
    both hashes), and each file present in the folder but not in the manifest.
    """
    folder = Path(folder)
    manifest = read_manifest(folder)
    problems = []
    for name, want in sorted(manifest["files"].items()):
        path = folder / name
        if not path.is_file():
            problems.append(f"{name}: missing")
            continue
        size = path.stat().st_size
        if size != want["bytes"]:
            problems.append(f"{name}: {size} bytes, manifest says {want['bytes']}")
            continue
        got = sha256_file(path)
        if got != want["sha256"]:
            problems.append(f"{name}: sha256 {got}, manifest says {want['sha256']}")
    extra = sorted(p.name for p in folder.iterdir() if p.name != MANIFEST and p.name not in manifest["files"])
    problems += [f"{name}: not in the manifest" for name in extra]
    if problems:
        raise ValueError(f"model folder: {str(folder)!r} does not match its manifest: " + "; ".join(problems))
    return manifest
