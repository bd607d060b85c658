"""GGUF import: a tiny Llama written by the ``gguf`` library comes back with identical logits, the
folder is published atomically, reused after verification, and refused when a hash differs."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from llm_harness.models.gguf_import import ImportConfig, add_top_level_rope_theta, import_model, resolve_source
from llm_harness.models.manifest import MANIFEST, sha256_file, verify_folder
from llm_harness.models.named import MODELS, NamedModel, locate_named_gguf

pytest.importorskip("gguf", reason="the GGUF reader (make real-model installs the `realmodel` extra)")
pytest.importorskip("accelerate", reason="transformers' GGUF loader needs accelerate (the `realmodel` extra)")

PROBE = "the 12 is he<|im_end|> and 7 + 5"


@pytest.fixture(scope="module", params=[True, False], ids=["tied", "untied"])
def source(request, tmp_path_factory, make_gguf):
    """``(source model, its GGUF file)``: tied and untied output heads."""
    return make_gguf(tmp_path_factory.mktemp("gguf") / f"tiny-{request.param}.gguf", seed=3, tie=request.param)


@pytest.fixture(scope="module")
def imported(source, tmp_path_factory):
    """The folder imported from ``source`` into a fresh cache."""
    _, path = source
    return import_model(ImportConfig(source=str(path), cache_dir=str(tmp_path_factory.mktemp("cache"))))


def _logits(model, tokenizer, text=PROBE):
    import torch

    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    with torch.inference_mode():
        return model(input_ids=torch.tensor([ids])).logits


def test_imported_logits_equal_the_source_models(source, imported):
    # F32 tensors: dequantisation is the identity, so the folder must hold exactly the source model
    import torch
    import transformers

    model, _ = source
    loaded = transformers.AutoModelForCausalLM.from_pretrained(imported, local_files_only=True)
    tok = transformers.AutoTokenizer.from_pretrained(imported, local_files_only=True)
    assert tok.convert_ids_to_tokens(tok(PROBE, add_special_tokens=False)["input_ids"])[:2] == ["t", "he"]
    assert torch.equal(_logits(model, tok), _logits(loaded, tok))
    assert loaded.config.tie_word_embeddings == model.config.tie_word_embeddings


def test_folder_contents_and_rope_theta_fix(imported, source):
    _, path = source
    config = json.loads((imported / "config.json").read_text())
    assert config["rope_theta"] == 50_000.0 == config["rope_parameters"]["rope_theta"]
    assert "quantization_config" not in config
    assert config["architectures"] == ["LlamaForCausalLM"]
    names = {p.name for p in imported.iterdir()}
    assert {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json", MANIFEST} <= names
    assert not any(n.endswith((".bin", ".pt", ".pth", ".pkl")) for n in names)  # safetensors only
    manifest = verify_folder(imported)
    assert manifest["source"]["sha256"] == sha256_file(path)
    assert manifest["conversion"]["roundtrip_logits_max_abs_diff"] == 0.0
    assert manifest["conversion"]["gguf_tensor_types"] == {"F32": len(__import__("gguf").GGUFReader(str(path)).tensors)}
    assert imported.name == f"{path.stem.lower()}-{manifest['source']['sha256'][:12]}"
    assert not [p for p in imported.parent.iterdir() if p.name.startswith(".")]  # no temporary folder left


def test_chat_template_renders_through_the_task(imported):
    import transformers

    from llm_harness.tasks import get_task

    tok = transformers.AutoTokenizer.from_pretrained(imported, local_files_only=True)
    task = get_task("arith_ladder", levels=("add",), n_test=1)
    problem = task.problems("test")[0]
    text = task.render_prompt(problem, tok)
    assert text == f"<|im_start|>user\n{problem.prompt}<|im_end|>\n<|im_start|>assistant\n"


def test_second_import_reuses_the_verified_folder(source, imported):
    _, path = source
    before = {p.name: p.stat().st_mtime_ns for p in imported.iterdir()}
    again = import_model(ImportConfig(source=str(path), cache_dir=str(imported.parent)))
    assert again == imported
    assert {p.name: p.stat().st_mtime_ns for p in imported.iterdir()} == before


def test_corrupt_cached_folder_is_refused_naming_the_file(source, tmp_path):
    _, path = source
    out = import_model(ImportConfig(source=str(path), out=str(tmp_path / "m")))
    cfg = out / "generation_config.json"
    cfg.write_text(cfg.read_text() + " ")
    with pytest.raises(ValueError, match=r"generation_config\.json: .*manifest says .*--force"):
        import_model(ImportConfig(source=str(path), out=str(out)))
    # --force rebuilds it (and the rebuilt folder verifies)
    assert import_model(ImportConfig(source=str(path), out=str(out), force=True)) == out
    verify_folder(out)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_expected_hash_mismatch_names_file_and_both_hashes(source, tmp_path):
    _, path = source
    wrong = "0" * 64
    with pytest.raises(ValueError, match=rf"{path.name}.*sha256 {sha256_file(path)}, expected {wrong}"):
        import_model(ImportConfig(source=str(path), sha256=wrong, out=str(tmp_path / "m")))
    assert not (tmp_path / "m").exists()


def test_out_folder_from_another_source_is_refused(source, tmp_path, make_gguf):
    _, path = source
    _, other = make_gguf(tmp_path / "other.gguf", seed=4)
    out = import_model(ImportConfig(source=str(other), out=str(tmp_path / "m")))
    with pytest.raises(ValueError, match="was imported from a GGUF with sha256"):
        import_model(ImportConfig(source=str(path), out=str(out)))


def test_failed_conversion_leaves_no_folder(tmp_path, monkeypatch, make_gguf):
    import llm_harness.models.gguf_import as gi

    _, path = make_gguf(tmp_path / "t.gguf", seed=5)

    def boom(src, out_dir):
        (out_dir / "model.safetensors").write_bytes(b"partial")
        raise ValueError("source: simulated crash mid-conversion")

    monkeypatch.setattr(gi, "convert_gguf", boom)
    with pytest.raises(ValueError, match="simulated crash"):
        import_model(ImportConfig(source=str(path), cache_dir=str(tmp_path / "cache")))
    assert list((tmp_path / "cache").iterdir()) == []


def test_existing_foreign_folder_is_not_overwritten(source, tmp_path):
    _, path = source
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "notes.txt").write_text("mine")
    for force in (False, True):
        with pytest.raises(ValueError, match="is not a folder written by `vsr model import`"):
            import_model(ImportConfig(source=str(path), out=str(tmp_path / "m"), force=force))
    assert (tmp_path / "m" / "notes.txt").read_text() == "mine"


def test_not_a_gguf_file_is_refused(tmp_path):
    bad = tmp_path / "x.gguf"
    bad.write_bytes(b"PK\x03\x04 not gguf")
    with pytest.raises(ValueError, match=r"not a GGUF file"):
        resolve_source(str(bad))
    with pytest.raises(ValueError, match=r"not a file nor a registered model name \(smollm2-135m-instruct"):
        resolve_source("no-such-model")


def test_named_model_missing_package_says_what_to_install(monkeypatch):
    entry = NamedModel(distribution="vsr-no-such-dist", version="9.9", package="vsr_no_such_pkg_xyz", filename="m.gguf",
                       sha256="a" * 64, licence="MIT", maintainer="nobody", upstream="none", install="pip install vsr-no-such-dist")
    MODELS.add("test-missing-model", entry)
    try:
        with pytest.raises(ValueError, match=r"'vsr-no-such-dist' 9\.9, which is not installed; install it with: pip install"):
            locate_named_gguf("test-missing-model")
    finally:
        MODELS.remove("test-missing-model")


def test_named_model_hash_mismatch_names_file_and_hashes(tmp_path, monkeypatch, make_gguf):
    # a fake installed package holding a file that is not the pinned one
    pkg = tmp_path / "vsr_fake_gguf_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("raise ImportError('must not be imported')\n")
    _, path = make_gguf(pkg / "m.gguf", seed=6)
    monkeypatch.syspath_prepend(str(tmp_path))
    entry = NamedModel(distribution="vsr-fake", version="1.0", package="vsr_fake_gguf_pkg", filename="m.gguf",
                       sha256="b" * 64, licence="MIT", maintainer="nobody", upstream="none", install="pip install vsr-fake")
    MODELS.add("test-fake-model", entry)
    try:
        with pytest.raises(ValueError, match=rf"m\.gguf' has sha256 {sha256_file(path)}, but 'test-fake-model'.*pinned to {'b' * 64}"):
            import_model(ImportConfig(source="test-fake-model", cache_dir=str(tmp_path / "cache")))
    finally:
        MODELS.remove("test-fake-model")


def test_add_top_level_rope_theta():
    cfg = {"rope_parameters": {"rope_theta": 1e5, "rope_type": "default"}}
    assert add_top_level_rope_theta(cfg) and cfg["rope_theta"] == 1e5
    assert not add_top_level_rope_theta(cfg)  # already there
    per_type = {"rope_parameters": {"full_attention": {"rope_theta": 1e6}}}
    assert not add_top_level_rope_theta(per_type) and "rope_theta" not in per_type
    with pytest.raises(ValueError, match="disagrees"):
        add_top_level_rope_theta({"rope_theta": 1e4, "rope_parameters": {"rope_theta": 1e5}})


def test_default_cache_dir_honours_environment(monkeypatch, tmp_path):
    from llm_harness.models.gguf_import import default_cache_dir

    monkeypatch.setenv("VSR_CACHE_DIR", str(tmp_path / "v"))
    assert default_cache_dir() == tmp_path / "v" / "models"
    monkeypatch.delenv("VSR_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert default_cache_dir() == tmp_path / "x" / "vsr-toolkit" / "models"


def test_cli_prints_the_folder(source, imported, capsys):
    from vsr.cli import main

    _, path = source
    assert main(["model", "import", "--source", str(path), "--cache-dir", str(imported.parent)]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == str(imported)
    assert main(["model", "import", "--source", str(path), "--sha256", "1" * 64, "--out", os.devnull + "-x"]) == 2
    assert "expected 1111" in capsys.readouterr().err
