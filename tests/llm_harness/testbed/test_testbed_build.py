"""``vsr testbed build`` in a tiny configuration: loadable checkpoints, cards, determinism."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from llm_harness.testbed.build import TestbedBuildConfig, build
from llm_harness.testbed.model import TestbedModelConfig, load_testbed

TINY = TestbedModelConfig(hidden_size=32, num_hidden_layers=1, intermediate_size=64, max_position_embeddings=160)


def _cfg(out, **kw):
    base = dict(
        out_dir=str(out), save_steps=(4, 7), save_names=("early", "late"), arch=TINY, batch_size=8, warmup_steps=2,
        log_every=4, log_eval_problems=5, card_validation_problems=5, card_validation_samples=2, card_test_problems=5,
        card_test_samples=1, card_hard_problems=3, card_hard_samples=1, max_new_tokens=40, progress=False,
    )
    base.update(kw)
    return TestbedBuildConfig(**base)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("build")
    assert build(_cfg(out)) == 0
    return out


def test_build_writes_loadable_checkpoints_with_cards(built):
    for name, step in (("early", 4), ("late", 7)):
        path = built / name
        model, tok = load_testbed(path)
        assert model.config.hidden_size == 32 and tok.eos_token_id == 2
        card = json.loads((path / "card.json").read_text())
        assert card["name"] == name and card["step"] == step and card["seed"] == 0
        assert card["build_config"]["save_steps"] == [4, 7]
        assert card["n_parameters"] == sum(p.numel() for p in model.parameters())
        assert card["seconds_per_step"] > 0
        res = card["evaluation"]["results"]
        assert set(res) == {"validation", "test", "hard"}
        assert res["validation"]["overall"]["n_samples"] == 10 and res["test"]["overall"]["n_samples"] == 5
        assert [r["n_terms"] for r in res["hard"]["by_terms"]] == [7, 8, 9]
        for split in res.values():
            o = split["overall"]
            assert 0.0 <= o["ci_low"] <= o["accuracy"] <= o["ci_high"] <= 1.0
        assert "Test-bed checkpoint" in (path / "README.md").read_text()
    log = json.loads((built / "build_log.json").read_text())
    assert [e["step"] for e in log["log"]] == [4]
    assert all("validation_accuracy" in e for e in log["log"])
    assert not any(p.name.startswith(".") for p in built.iterdir())


def test_rebuild_is_bitwise_identical_and_prefix_invariant(built, tmp_path):
    """A run that stops at step 4 (and saves nothing else) reproduces the step-4 checkpoint exactly
    (the constant schedule makes a run's prefix independent of its length)."""
    cfg = _cfg(tmp_path, save_steps=(4,), save_names=("again",), log_every=0, card_validation_problems=0,
               card_test_problems=0, card_hard_problems=0)
    torch.set_num_threads(1)
    build(cfg)
    a = load_file(built / "early" / "model.safetensors")
    b = load_file(tmp_path / "again" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    c = load_file(built / "late" / "model.safetensors")
    assert any(not torch.equal(a[k], c[k]) for k in a)


def test_config_validation(tmp_path):
    with pytest.raises(ValueError, match="save_steps"):
        _cfg(tmp_path, save_steps=(5, 3))
    with pytest.raises(ValueError, match="save_names"):
        _cfg(tmp_path, save_names=("a",))
    with pytest.raises(ValueError, match="save_names"):
        _cfg(tmp_path, save_names=("a", "a"))
    with pytest.raises(ValueError, match="save_names"):
        _cfg(tmp_path, save_names=("a", "../b"))
    with pytest.raises(ValueError, match="schedule"):
        _cfg(tmp_path, schedule="step")
    with pytest.raises(ValueError, match="lr"):
        _cfg(tmp_path, lr=0.0)
    assert _cfg(tmp_path).steps == 7
    assert set(_cfg(tmp_path, card_test_problems=0).card_plan()) == {"validation", "hard"}
