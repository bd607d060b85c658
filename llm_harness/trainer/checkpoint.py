"""Atomic, verifiable training checkpoints (issue 6 "Runs"; bit-identical resume on CPU).

Layout under ``run_dir/checkpoints``::

    step_000006/          model.pt optim.pt sched.pt rng.pt plugins.pt meta.json
    latest                text file naming the newest complete checkpoint folder

A checkpoint is written into a hidden temporary folder, every file fsync'ed, the folder renamed
into place, and only then ``latest`` is replaced (atomically). A kill at any point leaves
``latest`` naming a complete checkpoint (or absent). ``meta.json`` holds the step, a format
version, the SHA-256 of every file and a fingerprint of the configuration fields that must not
change across a resume; :func:`load_checkpoint` refuses anything that does not match with a
ValueError that says why.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import random
import shutil
import tempfile
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import torch

from vsr.atomic import write_text

__all__ = ["FORMAT_VERSION", "capture_rng", "latest_checkpoint", "load_checkpoint", "restore_rng", "save_checkpoint"]

FORMAT_VERSION = 1
_FILES = ("model.pt", "optim.pt", "sched.pt", "rng.pt", "plugins.pt")


def capture_rng() -> dict[str, Any]:
    """Python, NumPy and torch (CPU, and CUDA when present) global RNG states."""
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: Mapping[str, Any]) -> None:
    """Inverse of :func:`capture_rng`."""
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _dump(obj: Any, path: Path) -> str:
    buf = io.BytesIO()
    torch.save(obj, buf)
    data = buf.getvalue()
    with open(path, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    return hashlib.sha256(data).hexdigest()


def save_checkpoint(
    ckpt_root: str | os.PathLike,
    step: int,
    *,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    plugins: list[dict[str, Any]],
    fingerprint: str,
    extra: Mapping[str, Any] | None = None,
    keep: int = 2,
) -> Path:
    """Write checkpoint ``step`` (the number of completed steps) atomically; keep the newest ``keep``."""
    root = Path(ckpt_root)
    root.mkdir(parents=True, exist_ok=True)
    name = f"step_{step:06d}"
    final = root / name
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", suffix=".tmp", dir=root))
    try:
        objs = {
            "model.pt": model.state_dict(),
            "optim.pt": optimizer.state_dict(),
            "sched.pt": scheduler.state_dict(),
            "rng.pt": capture_rng(),
            "plugins.pt": plugins,
        }
        digests = {fname: _dump(obj, tmp / fname) for fname, obj in objs.items()}
        meta = {
            "format_version": FORMAT_VERSION,
            "step": int(step),
            "fingerprint": fingerprint,
            "sha256": digests,
            "n_plugins": len(plugins),
            **dict(extra or {}),
        }
        with open(tmp / "meta.json", "w") as fh:
            json.dump(meta, fh, indent=2)
            fh.flush()
            os.fsync(fh.fileno())
        _fsync_dir(tmp)
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        _fsync_dir(root)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    write_text(root / "latest", name + "\n")
    _fsync_dir(root)
    ckpts = sorted(p for p in root.iterdir() if p.is_dir() and p.name.startswith("step_"))
    for old in ckpts[:-keep]:
        if old.name != name:
            shutil.rmtree(old, ignore_errors=True)
    return final


def latest_checkpoint(ckpt_root: str | os.PathLike) -> Path | None:
    """Folder named by ``latest`` (None when there is no ``latest`` file)."""
    root = Path(ckpt_root)
    ptr = root / "latest"
    if not ptr.is_file():
        return None
    name = ptr.read_text().strip()
    if not name or "/" in name or name.startswith("."):
        raise ValueError(f"checkpoint: {ptr} is corrupt (content {name!r})")
    return root / name


def load_checkpoint(path: str | os.PathLike, *, fingerprint: str | None = None) -> dict[str, Any]:
    """Read and verify a checkpoint folder; returns ``{"meta", "model", "optim", "sched", "rng", "plugins"}``.

    Raises ValueError naming the problem: missing folder or file, unreadable ``meta.json``,
    unknown format version, checksum mismatch (a truncated or altered file), or a configuration
    fingerprint different from ``fingerprint`` (an incompatible run).
    """
    path = Path(path)
    if not path.is_dir():
        raise ValueError(f"checkpoint: {path} does not exist")
    try:
        meta = json.loads((path / "meta.json").read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"checkpoint: {path}/meta.json is missing or corrupt ({exc})") from None
    if meta.get("format_version") != FORMAT_VERSION:
        raise ValueError(f"checkpoint: {path} has format version {meta.get('format_version')!r}, expected {FORMAT_VERSION}")
    if fingerprint is not None and meta.get("fingerprint") != fingerprint:
        raise ValueError(
            f"checkpoint: {path} was written by an incompatible configuration (model/task/rollout/algo/optim/"
            f"plugins/seed differ); refusing to resume"
        )
    out: dict[str, Any] = {"meta": meta}
    for fname in _FILES:
        f = path / fname
        try:
            data = f.read_bytes()
        except OSError as exc:
            raise ValueError(f"checkpoint: {f} is missing ({exc.strerror})") from None
        if hashlib.sha256(data).hexdigest() != meta.get("sha256", {}).get(fname):
            raise ValueError(f"checkpoint: {f} is corrupt (checksum mismatch)")
        try:
            out[fname[:-3]] = torch.load(io.BytesIO(data), weights_only=False, map_location="cpu")
        except Exception as exc:  # noqa: BLE001
            raise ValueError(f"checkpoint: {f} cannot be read ({type(exc).__name__}: {exc})") from None
    return out
