"""Atomic, verifiable training checkpoints that load without running code from them.

Layout under ``run_dir/checkpoints`` (format 2)::

    step_000006/
        model.safetensors     the model's state_dict
        tensors.safetensors   every other tensor: optimizer moments and steps, torch CPU/CUDA RNG states
        arrays.npz            every NumPy array: NumPy's RNG key, plug-in buffers (read with allow_pickle=False)
        state.json            optimizer, scheduler, RNG and plug-in states, naming the tensors and arrays above
        meta.json             step, format version, SHA-256 of the four files above, configuration fingerprint
    latest                    text file naming the newest complete checkpoint folder

Nothing is unpickled on load: safetensors, ``np.load(..., allow_pickle=False)`` and ``json`` only
build tensors, arrays and plain values, so a crafted checkpoint can at worst be refused. (Format 1
was ``torch.save`` pickles; :func:`load_checkpoint` refuses it and names the converter,
:mod:`llm_harness.trainer.checkpoint_v1`, the one place that unpickles, for trusted files only.)

``state.json`` is JSON with four tags, each a one-key object: ``{"__tensor__": key}`` (a tensor of
``tensors.safetensors``), ``{"__ndarray__": key}`` (an array of ``arrays.npz``), ``{"__tuple__":
[...]}`` and ``{"__items__": [[k, v], ...]}`` (a dict whose keys are not all strings or include one
starting with ``__``). Torch's own state_dicts need all four; plug-in states are plain data
(:func:`check_plain`) and need only arrays.

A checkpoint is written into a hidden temporary folder, every file fsync'ed, the folder renamed
into place, and only then ``latest`` is replaced (atomically). A kill at any point leaves
``latest`` naming a complete checkpoint (or absent). :func:`load_checkpoint` refuses anything that
does not match (version, checksums, fingerprint) with a ValueError that says why.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import random
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np
import safetensors.torch
import torch

from vsr_util.atomic import is_disk_full, read_json, write_text

__all__ = [
    "FORMAT_VERSION",
    "PLAIN_ARRAY_KINDS",
    "capture_rng",
    "check_plain",
    "CorruptCheckpointError",
    "META_SUM",
    "find_resumable",
    "latest_checkpoint",
    "remove_stale_temporaries",
    "write_meta",
    "load_checkpoint",
    "read_meta",
    "read_verified",
    "restore_rng",
    "save_checkpoint",
    "step_folders",
    "folder_step",
    "tensors_to_bytes",
    "verify_files",
    "write_checkpoint",
    "write_tensors_streaming",
]

FORMAT_VERSION = 2
_FILES = ("model.safetensors", "tensors.safetensors", "arrays.npz", "state.json")
#: the parts of ``state.json`` (the model is its own file)
_PARTS = ("optim", "sched", "rng", "plugins")
_SCALARS = (type(None), bool, int, float, str)

#: ``dtype.kind`` of the NumPy arrays plain data may hold: bool, signed/unsigned int, float, complex, unicode
PLAIN_ARRAY_KINDS = "biufcU"


# ------------------------------------------------------------------------------ plain data


class CorruptCheckpointError(ValueError):
    """A checkpoint folder that is damaged (missing or altered file, unreadable meta, step mismatch):
    resume falls back to the newest intact one. Other refusals (format, fingerprint) are plain ValueErrors."""


#: the checksum of ``meta.json`` itself (the manifest covers every file, itself included)
META_SUM = "meta.json.sha256"


def check_plain(x: Any, where: str = "state") -> None:
    """Raise ValueError (naming the path, e.g. ``plugins[2].buffer[0].problem``) unless ``x`` is plain data.

    Plain data is what a checkpoint stores without code and reads back as the same value of the
    same type: ``None``, ``bool``, ``int``, ``float``, ``str`` (exactly these types: an enum member or
    ``np.float64`` would come back as a plain ``str`` / ``float``), ``list`` and ``dict`` with ``str``
    keys of plain data, and ``np.ndarray`` (not a subclass) whose dtype kind is in
    :data:`PLAIN_ARRAY_KINDS`. Tuples are not plain (JSON reads them back as lists); plug-ins
    store lists and rebuild their tuples on load.
    """
    t = type(x)
    if t in _SCALARS:
        return
    if t is np.ndarray:
        if x.dtype.kind not in PLAIN_ARRAY_KINDS:
            raise ValueError(f"{where}: array of dtype {x.dtype} is not plain data (dtype kinds {PLAIN_ARRAY_KINDS!r})")
        return
    if t is list:
        for i, v in enumerate(x):
            check_plain(v, f"{where}[{i}]")
        return
    if t is dict:
        for k, v in x.items():
            if type(k) is not str:
                raise ValueError(f"{where}: key {k!r} ({type(k).__name__}) is not a str")
            check_plain(v, f"{where}.{k}")
        return
    raise ValueError(f"{where}: {t.__name__} is not plain data (dict with str keys, list, str, int, float, bool, "
                     f"None, numpy array); convert it (see llm_harness.trainer.data for the data model's converters)")


def _encode(x: Any, where: str, tensors: dict[str, torch.Tensor], arrays: dict[str, np.ndarray]) -> Any:
    """JSON-able image of ``x`` with tensors and arrays moved out (module doc, tags)."""
    t = type(x)
    if t in _SCALARS:
        return x
    if isinstance(x, torch.Tensor):
        key = f"t{len(tensors)}"
        tensors[key] = x
        return {"__tensor__": key}
    if t is np.ndarray:
        check_plain(x, where)
        key = f"a{len(arrays)}"
        arrays[key] = x
        return {"__ndarray__": key}
    if t is list:
        return [_encode(v, f"{where}[{i}]", tensors, arrays) for i, v in enumerate(x)]
    if t is tuple:
        return {"__tuple__": [_encode(v, f"{where}[{i}]", tensors, arrays) for i, v in enumerate(x)]}
    if t is dict:
        if all(type(k) is str and not k.startswith("__") for k in x):
            return {k: _encode(v, f"{where}.{k}", tensors, arrays) for k, v in x.items()}
        return {"__items__": [[_encode(k, f"{where}.<key>", tensors, arrays), _encode(v, f"{where}.{k}", tensors, arrays)]
                              for k, v in x.items()]}
    raise ValueError(f"{where}: {t.__name__} cannot be stored in a checkpoint")


def _decode(x: Any, tensors: Mapping[str, torch.Tensor], arrays: Mapping[str, np.ndarray]) -> Any:
    """Inverse of :func:`_encode`."""
    if type(x) is list:
        return [_decode(v, tensors, arrays) for v in x]
    if type(x) is not dict:
        return x
    if len(x) == 1:
        ((tag, v),) = x.items()
        if tag == "__tensor__":
            return tensors[v]
        if tag == "__ndarray__":
            return arrays[v]
        if tag == "__tuple__":
            return tuple(_decode(e, tensors, arrays) for e in v)
        if tag == "__items__":
            return {_decode(k, tensors, arrays): _decode(e, tensors, arrays) for k, e in v}
    return {k: _decode(v, tensors, arrays) for k, v in x.items()}


# ------------------------------------------------------------------------------ file formats


def tensors_to_bytes(tensors: Mapping[str, torch.Tensor], metadata: Mapping[str, str] | None = None) -> bytes:
    """safetensors bytes of ``tensors`` (detached, on the CPU, contiguous; a tensor whose storage an
    earlier one already uses — tied weights, views of one batch — is copied, as safetensors needs)."""
    out: dict[str, torch.Tensor] = {}
    seen: set[int] = set()
    for k, v in tensors.items():
        v = v.detach().cpu().contiguous()
        ptr = v.untyped_storage().data_ptr()
        if ptr in seen and v.numel():
            v = v.clone()
        seen.add(ptr)
        out[k] = v
    return safetensors.torch.save(out, metadata=dict(metadata) if metadata else None)


#: safetensors dtype names (the format's header; ``safetensors.torch`` reads these back)
_ST_DTYPES = {torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
              torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8",
              torch.bool: "BOOL", torch.complex64: "C64"}
#: bytes written per ``write`` call while streaming one tensor (bounds nothing in memory: the tensor is a view)
_WRITE_CHUNK = 64 * 2**20


def _tensor_bytes_view(t: torch.Tensor) -> memoryview:
    """A zero-copy byte view of ``t`` (detached; moved to the CPU and made contiguous only when it is not already)."""
    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    t = t.contiguous().reshape(-1)
    if t.dtype == torch.bool:
        t = t.view(torch.uint8)
    return memoryview(t.view(torch.uint8).numpy()).cast("B") if t.numel() else memoryview(b"")


def write_tensors_streaming(tensors: Mapping[str, torch.Tensor], path: str | os.PathLike,
                            metadata: Mapping[str, str] | None = None) -> str:
    """Write ``tensors`` to ``path`` in the safetensors format one tensor at a time, fsync'ed; returns the file's SHA-256.

    No bytes object of the whole file is built (``safetensors.torch.save`` builds one, the size of every tensor
    together): each tensor is written from a zero-copy view of its storage, and the checksum is computed from the
    same views while writing. The layout is the format's: an 8-byte little-endian header length, a JSON header
    (``dtype``, ``shape``, ``data_offsets`` per tensor; ``__metadata__``) padded with spaces to 8 bytes, then the
    tensors' bytes back to back in header order; ``safetensors.torch.load_file`` reads it. Tied tensors (one
    storage under two names) are written twice, as ``safetensors`` requires of a file it reads."""
    header: dict[str, Any] = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    offset = 0
    items = list(tensors.items())
    for name, t in items:
        if t.dtype not in _ST_DTYPES:
            raise ValueError(f"checkpoint: tensor {name!r} has dtype {t.dtype}, which safetensors cannot store")
        n = t.numel() * t.element_size()
        header[name] = {"dtype": _ST_DTYPES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + n]}
        offset += n
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    digest = hashlib.sha256()
    with open(path, "wb") as fh:
        for part in (len(head).to_bytes(8, "little"), head):
            fh.write(part)
            digest.update(part)
        for _, t in items:
            view = _tensor_bytes_view(t)
            for i in range(0, len(view), _WRITE_CHUNK):
                chunk = view[i: i + _WRITE_CHUNK]
                fh.write(chunk)
                digest.update(chunk)
            del view
        fh.flush()
        os.fsync(fh.fileno())
    return digest.hexdigest()


def file_sha256(path: str | os.PathLike, chunk: int = 8 * 2**20) -> str:
    """SHA-256 of a file read in ``chunk``-byte pieces (never the whole file in memory)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while True:
            block = fh.read(chunk)
            if not block:
                return digest.hexdigest()
            digest.update(block)


def _arrays_to_bytes(arrays: Mapping[str, np.ndarray]) -> bytes:
    """``.npz`` bytes (every array already checked plain by :func:`_encode`: none needs pickle)."""
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def _read_arrays(data: bytes) -> dict[str, np.ndarray]:
    with np.load(io.BytesIO(data), allow_pickle=False) as z:  # an .npy or pickle here is refused
        return {k: z[k] for k in z.files}


# ------------------------------------------------------------------------------ RNG


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


# ------------------------------------------------------------------------------ writing


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


def _dump(data: bytes, path: Path) -> str:
    with open(path, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    return hashlib.sha256(data).hexdigest()


def write_checkpoint(final: str | os.PathLike, step: int, state: Mapping[str, Any], *, fingerprint: str,
                     extra: Mapping[str, Any] | None = None) -> Path:
    """Write the checkpoint folder ``final`` atomically (replacing it) from ``state`` =
    ``{"model", "optim", "sched", "rng", "plugins"}`` (state_dicts, :func:`capture_rng` output, plain
    plug-in states); ValueError naming the offending item if a plug-in state is not plain data."""
    final = Path(final)
    state = {**state, "plugins": list(state["plugins"])}
    check_plain(state["plugins"], "plugins")
    tensors: dict[str, torch.Tensor] = {}
    arrays: dict[str, np.ndarray] = {}
    tree = {k: _encode(state[k], k, tensors, arrays) for k in _PARTS}
    # the tensors stream to disk one at a time (checksummed while written); the small files go through bytes
    writers: dict[str, Callable[[Path], str]] = {
        "model.safetensors": lambda f: write_tensors_streaming(state["model"], f),
        "tensors.safetensors": lambda f: write_tensors_streaming(tensors, f),
        "arrays.npz": lambda f: _dump(_arrays_to_bytes(arrays), f),
        "state.json": lambda f: _dump(json.dumps(tree).encode(), f),
    }
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent))
    try:
        digests = {fname: write(tmp / fname) for fname, write in writers.items()}
        meta = {
            "format_version": FORMAT_VERSION,
            "step": int(step),
            "fingerprint": fingerprint,
            "sha256": digests,
            "n_plugins": len(state["plugins"]),
            **dict(extra or {}),
        }
        write_meta(tmp, meta)
        _fsync_dir(tmp)
        old = None
        if final.exists():  # moved aside first: a kill never leaves neither folder
            old = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".old", dir=final.parent))
            os.replace(final, old / final.name)
        os.replace(tmp, final)
        _fsync_dir(final.parent)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if is_disk_full(exc) and exc.filename is None:  # name the checkpoint, not the hidden temporary folder
            raise OSError(exc.errno, exc.strerror, str(final)) from exc
        raise
    return final


def write_meta(folder: str | os.PathLike, meta: Mapping[str, Any]) -> None:
    """Write ``meta.json`` and its checksum file :data:`META_SUM` into ``folder`` (fsync'ed)."""
    folder = Path(folder)
    data = json.dumps(dict(meta), indent=2).encode()
    _dump(data, folder / "meta.json")
    _dump((hashlib.sha256(data).hexdigest() + "\n").encode(), folder / META_SUM)


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
    name = f"step_{step:06d}"
    remove_stale_temporaries(root)  # one writer per run folder: a hidden folder here is an interrupted write's
    state = {"model": model.state_dict(), "optim": optimizer.state_dict(), "sched": scheduler.state_dict(),
             "rng": capture_rng(), "plugins": plugins}
    write_checkpoint(root / name, step, state, fingerprint=fingerprint, extra=extra)
    write_text(root / "latest", name + "\n")
    _fsync_dir(root)
    ckpts = sorted(p for p in root.iterdir() if p.is_dir() and p.name.startswith("step_"))
    for old in ckpts[:-keep]:
        if old.name != name:
            shutil.rmtree(old, ignore_errors=True)
    return root / name


# ------------------------------------------------------------------------------ reading


def latest_checkpoint(ckpt_root: str | os.PathLike) -> Path | None:
    """Folder named by ``latest`` (None when there is no ``latest`` file)."""
    root = Path(ckpt_root)
    ptr = root / "latest"
    if not ptr.is_file():
        return None
    try:
        name = ptr.read_text(encoding="utf-8").strip()
    except UnicodeDecodeError:
        raise CorruptCheckpointError(f"checkpoint: {ptr} is corrupt (not UTF-8 text)") from None
    if not name or "/" in name or name.startswith(".") or not _STEP_DIR.fullmatch(name):
        raise CorruptCheckpointError(f"checkpoint: {ptr} is corrupt (content {name!r})")
    return root / name


_STEP_DIR = re.compile(r"step_(\d{6,})")


def remove_stale_temporaries(ckpt_root: str | os.PathLike) -> list[Path]:
    """Delete the hidden ``.step_*.tmp`` / ``.old`` folders a kill during a write leaves behind; returns them."""
    root = Path(ckpt_root)
    if not root.is_dir():
        return []
    stale = [p for p in root.iterdir() if p.is_dir() and p.name.startswith(".step_") and p.suffix in (".tmp", ".old")]
    for p in stale:
        shutil.rmtree(p, ignore_errors=True)
    return stale


def step_folders(ckpt_root: str | os.PathLike) -> list[Path]:
    """The ``step_*`` checkpoint folders under ``ckpt_root``, newest first (none when it does not exist). A folder of
    that name is complete once it is there (written hidden, then renamed); whether it is intact is another check."""
    root = Path(ckpt_root)
    if not root.is_dir():
        return []
    return sorted((p for p in root.iterdir() if p.is_dir() and _STEP_DIR.fullmatch(p.name)), key=lambda p: p.name,
                  reverse=True)


def folder_step(path: str | os.PathLike) -> int | None:
    """The step a ``step_NNNNNN`` folder name states (None for another name)."""
    m = _STEP_DIR.fullmatch(Path(path).name)
    return int(m.group(1)) if m else None


def find_resumable(ckpt_root: str | os.PathLike, *, fingerprint: str | None = None,
                   validate: Any = None) -> tuple[Path, dict[str, Any], list[str]]:
    """The newest intact checkpoint under ``ckpt_root``: ``(path, load_checkpoint(path), skipped)``.

    Tries every ``step_*`` folder newest first (a folder of another name that ``latest`` points to before them); a damaged one
    (:class:`CorruptCheckpointError`) is skipped and described in ``skipped``. Other refusals (format 1,
    a different fingerprint) raise at once: falling back would silently resume something else.
    ValueError when nothing intact is left (naming every damaged folder) or there is no checkpoint.
    ``validate(path, checkpoint)``, when given, is part of "intact": it may load the checkpoint's states
    and raise :class:`CorruptCheckpointError` for damage the files' checksums cannot see (a buffered
    environment snapshot saved damaged), and the next older checkpoint is tried.
    """
    root = Path(ckpt_root)
    skipped: list[str] = []
    order: list[Path] = []
    try:
        named = latest_checkpoint(root)
        if named is not None and not _STEP_DIR.fullmatch(named.name):
            order.append(named)  # a folder outside the step_* naming: only the pointer knows it
    except CorruptCheckpointError as exc:
        skipped.append(str(exc))
    # every step_* folder newest first, not the pointer's first: an interrupt between a checkpoint's rename and the
    # pointer's update leaves ``latest`` one checkpoint behind
    order += step_folders(root)
    for path in order:
        try:
            ck = load_checkpoint(path, fingerprint=fingerprint)
            if validate is not None:
                validate(path, ck)
            return path, ck, skipped
        except CorruptCheckpointError as exc:
            skipped.append(f"{path.name}: {exc}" if validate is not None and path.name not in str(exc) else str(exc))
    if skipped:
        raise CorruptCheckpointError("checkpoint: no intact checkpoint left in " + f"{root}: " + "; ".join(skipped))
    raise ValueError(f"run.resume: no checkpoint in {root}")


def read_meta(path: str | os.PathLike) -> dict[str, Any]:
    """``meta.json`` of checkpoint folder ``path`` (ValueError if the folder or the file is missing or unreadable)."""
    path = Path(path)
    if not path.is_dir():
        raise CorruptCheckpointError(f"checkpoint: {path} does not exist")
    try:
        meta = read_json(path / "meta.json")
    except (OSError, ValueError) as exc:
        raise CorruptCheckpointError(f"checkpoint: {path}/meta.json is missing or corrupt ({exc})") from None
    if not isinstance(meta, dict):
        raise CorruptCheckpointError(f"checkpoint: {path}/meta.json is corrupt (not an object)")
    return meta


def read_verified(path: str | os.PathLike, meta: Mapping[str, Any], files: tuple[str, ...]) -> dict[str, bytes]:
    """The bytes of ``files`` in ``path``, each checked against its SHA-256 in ``meta`` (ValueError if
    a file is missing or altered)."""
    path = Path(path)
    sums = meta.get("sha256") if isinstance(meta.get("sha256"), dict) else {}
    out = {}
    for fname in files:
        f = path / fname
        try:
            data = f.read_bytes()
        except OSError as exc:
            raise CorruptCheckpointError(f"checkpoint: {f} is missing ({exc.strerror})") from None
        if hashlib.sha256(data).hexdigest() != sums.get(fname):
            raise CorruptCheckpointError(f"checkpoint: {f} is corrupt (checksum mismatch)")
        out[fname] = data
    return out


def verify_files(path: str | os.PathLike, meta: Mapping[str, Any], files: tuple[str, ...]) -> None:
    """Check each of ``files`` in ``path`` against its SHA-256 in ``meta``, reading it in pieces
    (:class:`CorruptCheckpointError` if one is missing or altered)."""
    path = Path(path)
    sums = meta.get("sha256") if isinstance(meta.get("sha256"), dict) else {}
    for fname in files:
        f = path / fname
        try:
            digest = file_sha256(f)
        except OSError as exc:
            raise CorruptCheckpointError(f"checkpoint: {f} is missing ({exc.strerror})") from None
        if digest != sums.get(fname):
            raise CorruptCheckpointError(f"checkpoint: {f} is corrupt (checksum mismatch)")


#: file -> reader of a verified checkpoint file (tensors read from the file itself as writable copies — the optimizer
#: updates its moments in place —, the small files through bytes)
_FILE_READERS: dict[str, Callable[[Path], Any]] = {
    "model.safetensors": safetensors.torch.load_file,
    "tensors.safetensors": safetensors.torch.load_file,
    "arrays.npz": lambda f: _read_arrays(f.read_bytes()),
    "state.json": lambda f: json.loads(f.read_bytes()),
}


def _verify_meta(path: Path, meta: Mapping[str, Any]) -> None:
    """``meta.json`` matches its checksum file and its step matches the folder name (else corrupt)."""
    try:
        want = (path / META_SUM).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        raise CorruptCheckpointError(f"checkpoint: {path / META_SUM} is missing or corrupt") from None
    if hashlib.sha256((path / "meta.json").read_bytes()).hexdigest() != want:
        raise CorruptCheckpointError(f"checkpoint: {path}/meta.json is corrupt (checksum mismatch)")
    named = folder_step(path)
    if named is not None and named != meta.get("step"):
        raise CorruptCheckpointError(f"checkpoint: {path}/meta.json says step {meta.get('step')!r}, the folder is step {named}")


def load_checkpoint(path: str | os.PathLike, *, fingerprint: str | None = None) -> dict[str, Any]:
    """Read and verify a checkpoint folder; returns ``{"meta", "model", "optim", "sched", "rng", "plugins"}``.

    Raises ValueError naming the problem: missing folder or file, unreadable ``meta.json``, a
    format-1 (pickle) checkpoint (with the command that converts a trusted one), unknown format
    version, checksum mismatch (a truncated or altered file), a file that does not parse as its
    format, plug-in states that are not plain data, or a configuration fingerprint different from
    ``fingerprint`` (an incompatible run). Reads no pickle.
    """
    path = Path(path)
    meta = read_meta(path)
    version = meta.get("format_version")
    if version == 1:
        raise ValueError(
            f"checkpoint: {path} is in format 1 (torch.save pickles), which is not read because unpickling runs any "
            f"code the files contain; if you trust where it came from, convert it with "
            f"`vsr checkpoint convert --path {path} --trust` and resume again"
        )
    if version != FORMAT_VERSION:
        raise ValueError(f"checkpoint: {path} has format version {version!r}, expected {FORMAT_VERSION}")
    _verify_meta(path, meta)
    if fingerprint is not None and meta.get("fingerprint") != fingerprint:
        raise ValueError(
            f"checkpoint: {path} was written by an incompatible configuration (model/task/rollout/algo/optim/"
            f"plugins/seed differ); refusing to resume"
        )
    verify_files(path, meta, _FILES)
    parsed: dict[str, Any] = {}
    for fname in _FILES:
        try:
            parsed[fname] = _FILE_READERS[fname](path / fname)
        except Exception as exc:  # noqa: BLE001  (whatever a malformed file raises)
            raise CorruptCheckpointError(f"checkpoint: {path / fname} cannot be read ({type(exc).__name__}: {exc})") from None
    tree = parsed["state.json"]
    try:
        parts = {k: _decode(tree[k], parsed["tensors.safetensors"], parsed["arrays.npz"]) for k in _PARTS}
        if type(parts["plugins"]) is not list:
            raise ValueError("plugins: not a list")
        check_plain(parts["plugins"], "plugins")
    except (KeyError, TypeError, ValueError) as exc:
        raise CorruptCheckpointError(f"checkpoint: {path / 'state.json'} cannot be read ({type(exc).__name__}: {exc})") from None
    return {"meta": meta, "model": parsed["model.safetensors"], **parts}
