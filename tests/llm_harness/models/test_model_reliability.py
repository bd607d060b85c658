"""Imported model folders under faults and bad input: verified where they are loaded (a flipped byte or a deleted
tokenizer file is refused by name, the verdict remembered), a truncated GGUF refused in one line, the temporaries
of a killed import removed by the next one (never a live import's), a bad ``--out`` refused before converting,
aliases (``--name``), ``vsr model list`` and the licence and provenance of the manifest."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import llm_harness.models.manifest as mf
from llm_harness.models.manifest import FORMAT, MANIFEST, VERDICT, check_model_folder, file_entry, verify_folder

REPO = Path(__file__).resolve().parents[3]
needs_gguf = pytest.mark.skipif(
    importlib.util.find_spec("gguf") is None or importlib.util.find_spec("accelerate") is None,
    reason="the GGUF reader (make real-model installs the `realmodel` extra)",
)


def _write_manifest(folder: Path, source: str = "/nowhere/tiny.gguf") -> dict:
    manifest = {"format": FORMAT, "name": "tiny", "files": {p.name: file_entry(p) for p in sorted(folder.iterdir())},
                "source": {"path": source, "file": Path(source).name, "sha256": "0" * 64, "bytes": 1, "named_model": None}}
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return manifest


@pytest.fixture
def folder(tiny_chat_folder, tmp_path):
    """A copy of the tiny chat model with an import manifest (what `vsr model import` leaves), no verdict yet."""
    out = tmp_path / "imported"
    shutil.copytree(tiny_chat_folder, out)
    _write_manifest(out)
    mf._VERIFIED.clear()
    return out


def _flip_byte(path: Path, keep_mtime: bool = False) -> None:
    st = path.stat()
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    if keep_mtime:  # the mtime put back: the verdict must still miss (the write changed the ctime)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def _count_hashes(monkeypatch) -> list:
    calls = []
    real = mf.sha256_file
    monkeypatch.setattr(mf, "sha256_file", lambda p: calls.append(Path(p).name) or real(p))
    return calls


# ---------------------------------------------------------------------------- verified where loaded
@pytest.mark.parametrize("keep_mtime", [False, True], ids=["mtime-changed", "mtime-restored"])
def test_flipped_weight_byte_is_refused_where_the_folder_is_loaded(folder, keep_mtime):
    from llm_harness.trainer.config import ModelConfig
    from llm_harness.trainer.modeling import build_model

    build_model(ModelConfig(path=str(folder)), seed=0)  # intact: loads (and the verdict is remembered)
    assert (folder / VERDICT).is_file()
    _flip_byte(folder / "model.safetensors", keep_mtime=keep_mtime)
    with pytest.raises(ValueError, match=r"^model\.path: .*model\.safetensors: checksum fails: sha256 [0-9a-f]{64}, "
                                         r"manifest says [0-9a-f]{64}.*--force"):
        build_model(ModelConfig(path=str(folder)), seed=0)


def test_verdict_is_remembered_and_missed_by_any_change(folder, monkeypatch):
    calls = _count_hashes(monkeypatch)
    assert check_model_folder(folder, "model.path")["name"] == "tiny"
    assert "model.safetensors" in calls
    calls.clear()
    check_model_folder(folder, "model.path")  # in memory
    mf._VERIFIED.clear()
    check_model_folder(folder, "model.path")  # from the verdict file beside the manifest
    assert calls == []
    (folder / "generation_config.json").write_text((folder / "generation_config.json").read_text())  # same bytes, new stat
    check_model_folder(folder, "model.path")
    assert "model.safetensors" in calls  # re-hashed, and still fine
    # a verdict file from another folder's stats, or a damaged one, is ignored, never trusted
    (folder / VERDICT).write_text('{"format": "vsr-toolkit/verified/1", "files": []}')
    mf._VERIFIED.clear()
    _flip_byte(folder / "model.safetensors")
    with pytest.raises(ValueError, match="checksum fails"):
        check_model_folder(folder, "model.path")


def test_read_only_folder_is_verified_without_a_verdict_file(folder):
    if os.geteuid() == 0:
        pytest.skip("root writes into read-only folders")
    os.chmod(folder, 0o555)
    try:
        assert check_model_folder(folder, "model") is not None
        assert not (folder / VERDICT).exists()
    finally:
        os.chmod(folder, 0o755)


def test_deleted_tokenizer_json_is_named_not_sentencepiece(folder):
    from llm_harness.trainer.config import ModelConfig
    from llm_harness.trainer.modeling import build_model

    (folder / "tokenizer.json").unlink()
    with pytest.raises(ValueError, match=r"model\.path: .*tokenizer\.json: missing \(the manifest lists it\)") as err:
        build_model(ModelConfig(path=str(folder)), seed=0)
    assert "sentencepiece" not in str(err.value)


def test_extra_or_missing_weights_and_damaged_manifest_are_refused(folder):
    (folder / "notes.txt").write_text("x")
    with pytest.raises(ValueError, match=r"notes\.txt: not in the manifest"):
        check_model_folder(folder, "model")
    (folder / "notes.txt").unlink()
    (folder / MANIFEST).write_text('{"format": "vsr-toolkit/gguf-import/1", "files": ')
    with pytest.raises(ValueError, match=r"model: cannot read .*manifest\.json"):
        check_model_folder(folder, "model")
    (folder / MANIFEST).write_text('{"format": "vsr-toolkit/gguf-import/9", "files": {}}')
    with pytest.raises(ValueError, match=r"gguf-import/9 manifest; this version reads"):
        check_model_folder(folder, "model")


def test_folders_without_an_import_manifest_load_as_before(tiny_chat_folder, tmp_path):
    from llm_harness.testbed.paths import shipped_checkpoint

    assert check_model_folder(shipped_checkpoint("mid"), "model.path") is None
    other = tmp_path / "other"
    shutil.copytree(tiny_chat_folder, other)
    (other / MANIFEST).write_text('{"format": "someone-else/1", "files": {"a": 1}}')  # not ours: left alone
    assert check_model_folder(other, "model.path") is None


# ---------------------------------------------------------------------------- import: GGUF, temporaries, --out
@pytest.fixture(scope="module")
def gguf_file(tmp_path_factory, make_gguf):
    if importlib.util.find_spec("gguf") is None:
        pytest.skip("the GGUF reader (make real-model installs the `realmodel` extra)")
    return make_gguf(tmp_path_factory.mktemp("src") / "tiny.gguf", seed=11)[1]


@needs_gguf
@pytest.mark.parametrize("keep", [200, 0.5, -1], ids=["header", "half", "last-byte"])
def test_truncated_gguf_is_one_error_naming_the_file(gguf_file, tmp_path, keep, capsys):
    from llm_harness.models.gguf_import import ImportConfig, import_model
    from vsr.cli import main

    data = gguf_file.read_bytes()
    n = keep if isinstance(keep, int) and keep > 0 else (len(data) - 1 if keep == -1 else int(len(data) * keep))
    bad = tmp_path / "cut.gguf"
    bad.write_bytes(data[:n])
    with pytest.raises(ValueError, match=rf"^source: '{bad}' is not a readable GGUF file: it is truncated or damaged"):
        import_model(ImportConfig(source=str(bad), cache_dir=str(tmp_path / "cache")))
    assert not (tmp_path / "cache").exists() or list((tmp_path / "cache").iterdir()) == []
    capsys.readouterr()
    assert main(["model", "import", "--source", str(bad), "--cache-dir", str(tmp_path / "cache")]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and f"error: source: '{bad}' is not a readable GGUF file" in err
    assert len(err.strip().splitlines()) <= 3  # the provenance warning, the error, the --debug hint


@needs_gguf
def test_bad_out_is_refused_before_converting_naming_the_right_path(gguf_file, tmp_path, monkeypatch):
    import llm_harness.models.gguf_import as gi
    from llm_harness.models.gguf_import import ImportConfig, import_model

    def no_conversion(*a, **k):
        raise AssertionError("converted before checking --out")

    monkeypatch.setattr(gi, "convert_gguf", no_conversion)
    (tmp_path / "afile").write_text("x")
    (tmp_path / "loop1").symlink_to(tmp_path / "loop2")
    (tmp_path / "loop2").symlink_to(tmp_path / "loop1")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    cases = {
        "afile/sub/m": rf"out: {tmp_path}/afile is a file, not a folder, so {tmp_path}/afile/sub/m cannot be created",
        "loop1/m": rf"out: {tmp_path}/loop1 is a symbolic link loop .*, so {tmp_path}/loop1/m cannot be created",
        "loop1": rf"out: {tmp_path}/loop1 is a symbolic link loop",
        "dangling/m": rf"out: {tmp_path}/dangling is a symbolic link to '{tmp_path}/nowhere', which does not exist",
    }
    for out, pattern in cases.items():
        with pytest.raises(ValueError, match=pattern):
            import_model(ImportConfig(source=str(gguf_file), out=str(tmp_path / out)))
    if os.geteuid() != 0:
        (tmp_path / "ro").mkdir(mode=0o555)
        with pytest.raises(ValueError, match=rf"cannot create {tmp_path}/ro/m: {tmp_path}/ro is not writable"):
            import_model(ImportConfig(source=str(gguf_file), out=str(tmp_path / "ro" / "m")))


_HOLD_TEMP = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    import llm_harness.models.gguf_import as gi
    tmp, fd = gi._locked_temp(Path(sys.argv[1]), sys.argv[2], ".tmp")
    (tmp / "model.safetensors").write_bytes(b"partial" * 1000)
    print(tmp, flush=True)
    if sys.argv[3] == "hold":
        time.sleep(600)
""")


def _temp_by_process(parent: Path, hold: bool):
    proc = subprocess.Popen([sys.executable, "-c", _HOLD_TEMP, str(parent), "m-0123456789ab", "hold" if hold else "exit"],
                            stdout=subprocess.PIPE, text=True, cwd=REPO)
    return proc, Path(proc.stdout.readline().strip())


def test_stale_temporaries_are_removed_and_live_ones_kept(tmp_path):
    from llm_harness.models.gguf_import import remove_stale_temporaries

    dead_proc, dead = _temp_by_process(tmp_path, hold=False)
    dead_proc.wait(timeout=60)
    live_proc, live = _temp_by_process(tmp_path, hold=True)
    try:
        old = time.time() - 3 * 86400
        os.utime(live, (old, old))  # an old temporary whose writer still holds it stays
        legacy = tmp_path / ".m-0123456789ab.k3j4h5g6.tmp"  # before temporaries carried a pid: by age and contents
        legacy.mkdir()
        (legacy / "config.json").write_text("{}")
        young_legacy = tmp_path / ".n-0123456789ab.aaaabbbb.tmp"
        young_legacy.mkdir()
        (young_legacy / "config.json").write_text("{}")
        foreign = tmp_path / ".backup-0123456789ab.20240101.tmp"  # a user's folder that looks like one
        foreign.mkdir()
        (foreign / "notes.txt").write_text("mine")
        for p in (legacy, legacy / "config.json", foreign, foreign / "notes.txt"):
            os.utime(p, (old, old))
        removed = remove_stale_temporaries(tmp_path)
        assert sorted(removed) == sorted([dead, legacy])
        assert live.is_dir() and young_legacy.is_dir() and foreign.is_dir()
    finally:
        live_proc.kill()
        live_proc.wait()
    assert remove_stale_temporaries(tmp_path) == [live]  # its writer died


@needs_gguf
def test_import_killed_mid_write_leaves_a_temporary_the_next_import_removes(gguf_file, tmp_path):
    from llm_harness.models.gguf_import import ImportConfig, import_model

    cache = tmp_path / "cache"
    script = textwrap.dedent(f"""
        import time
        import llm_harness.models.gguf_import as gi
        def slow(src, out_dir):
            (out_dir / "model.safetensors").write_bytes(b"x" * 100000)
            print("writing", flush=True)
            time.sleep(600)
        gi.convert_gguf = slow
        gi.import_model(gi.ImportConfig(source={str(gguf_file)!r}, cache_dir={str(cache)!r}))
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=REPO)
    try:
        assert proc.stdout.readline().strip() == "writing"
        left = [p for p in cache.iterdir() if p.name.startswith(".")]
        assert len(left) == 1 and left[0].name.endswith(".tmp") and f".{proc.pid}-" in left[0].name
        # while the import runs, another import into the same cache leaves its temporary alone
        assert import_model(ImportConfig(source=str(gguf_file), out=str(cache / "other"))).is_dir()
        assert left[0].is_dir()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert left[0].is_dir()  # kill -9: nothing cleaned up
    folder = import_model(ImportConfig(source=str(gguf_file), cache_dir=str(cache)))
    assert not left[0].exists()
    assert not [p for p in cache.iterdir() if p.name.startswith(".")]
    verify_folder(folder)


# ---------------------------------------------------------------------------- aliases, list, licence, provenance
@needs_gguf
def test_name_alias_is_accepted_by_model_path_and_listed(gguf_file, tmp_path, monkeypatch, capsys):
    from llm_harness.models.cache import read_aliases
    from llm_harness.models.gguf_import import ImportConfig, import_model
    from llm_harness.trainer.config import ModelConfig
    from llm_harness.trainer.modeling import build_model
    from vsr.cli import main

    monkeypatch.setenv("VSR_CACHE_DIR", str(tmp_path / "vc"))
    folder = import_model(ImportConfig(source=str(gguf_file), name="tiny-chat", licence="MIT"))
    assert read_aliases()["tiny-chat"]["folder"] == str(folder)
    model, tok = build_model(ModelConfig(path="tiny-chat"), seed=0)
    assert model.config.model_type == "llama" and tok("the")["input_ids"]
    capsys.readouterr()
    assert main(["model", "list"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["NAME", "FOLDER", "SOURCE", "SHA256", "LICENCE", "STATUS"]
    sha = json.loads((folder / MANIFEST).read_text())["source"]["sha256"]
    assert any("tiny-chat" in line and str(folder) in line and str(gguf_file) in line and sha in line and " MIT " in line
               for line in out[1:])
    # the same name for another folder: refused, then moved with --force
    other = tmp_path / "elsewhere"
    with pytest.raises(ValueError, match=rf"alias 'tiny-chat' already names {folder}.*--force"):
        import_model(ImportConfig(source=str(gguf_file), out=str(other), name="tiny-chat"))
    import_model(ImportConfig(source=str(gguf_file), out=str(other), name="tiny-chat", force=True))
    assert read_aliases()["tiny-chat"]["folder"] == str(other)
    shutil.rmtree(other)
    with pytest.raises(ValueError, match=rf"model\.path: the alias 'tiny-chat' names {other}, which no longer exists"):
        build_model(ModelConfig(path="tiny-chat"), seed=0)


@pytest.mark.parametrize("name,why", [("mid", "shipped test-bed"), ("smollm2-135m-instruct", "registered model name"),
                                      ("a/b", "not a model alias"), ("-x", "not a model alias"), ("m.gguf", "GGUF file name")])
def test_bad_alias_names_are_refused(name, why):
    from llm_harness.models.gguf_import import ImportConfig

    with pytest.raises(ValueError, match=why):
        ImportConfig(source="x.gguf", name=name)


def test_model_list_of_an_empty_cache(tmp_path, capsys):
    from vsr.cli import main

    assert main(["model", "list", "--cache-dir", str(tmp_path / "none")]) == 0
    assert "no imported models in" in capsys.readouterr().out


@needs_gguf
def test_licence_and_provenance_of_a_path_source(gguf_file, tmp_path, capsys):
    from llm_harness.models.gguf_import import ImportConfig, import_model
    from llm_harness.models.manifest import sha256_file

    capsys.readouterr()
    bare = import_model(ImportConfig(source=str(gguf_file), out=str(tmp_path / "bare")))
    err = capsys.readouterr().err
    assert "warning: no --sha256 given: the provenance of" in err and "unverified" in err
    assert "warning: no --licence given" in err and "'unknown'" in err
    m = json.loads((bare / MANIFEST).read_text())
    assert m["licence"] == "unknown"
    assert m["provenance"] == {"kind": "path", "sha256_checked": False, "sha256_checked_against": None, "licence_from": "unknown"}
    given = import_model(ImportConfig(source=str(gguf_file), out=str(tmp_path / "given"), licence="Apache-2.0",
                                      sha256=sha256_file(gguf_file)))
    assert "warning" not in capsys.readouterr().err
    m = json.loads((given / MANIFEST).read_text())
    assert m["licence"] == "Apache-2.0"
    assert m["provenance"] == {"kind": "path", "sha256_checked": True, "sha256_checked_against": "--sha256", "licence_from": "--licence"}


@needs_gguf
def test_licence_of_a_registered_model_comes_from_the_registry(tmp_path, monkeypatch, make_gguf, capsys):
    from llm_harness.models.gguf_import import ImportConfig, import_model
    from llm_harness.models.manifest import sha256_file
    from llm_harness.models.named import MODELS, NamedModel

    pkg = tmp_path / "vsr_fake_licenced_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("raise ImportError('must not be imported')\n")
    _, path = make_gguf(pkg / "m.gguf", seed=12)
    monkeypatch.syspath_prepend(str(tmp_path))
    entry = NamedModel(distribution="vsr-fake", version="1.0", package="vsr_fake_licenced_pkg", filename="m.gguf",
                       sha256=sha256_file(path), licence="CC-BY-4.0", maintainer="nobody", upstream="none", install="pip install vsr-fake")
    MODELS.add("test-licenced-model", entry)
    try:
        with pytest.raises(ValueError, match="registered with the licence 'CC-BY-4.0'"):
            ImportConfig(source="test-licenced-model", licence="MIT")
        capsys.readouterr()
        folder = import_model(ImportConfig(source="test-licenced-model", cache_dir=str(tmp_path / "cache")))
        assert "warning" not in capsys.readouterr().err
        m = json.loads((folder / MANIFEST).read_text())
        assert m["licence"] == "CC-BY-4.0"
        assert m["provenance"]["kind"] == "registered" and m["provenance"]["sha256_checked_against"] == "registry"
    finally:
        MODELS.remove("test-licenced-model")


def test_reserved_alias_names_are_the_shipped_checkpoints():
    from llm_harness.models.cache import TESTBED_NAMES
    from llm_harness.testbed.paths import SHIPPED_CHECKPOINTS

    assert TESTBED_NAMES == SHIPPED_CHECKPOINTS
