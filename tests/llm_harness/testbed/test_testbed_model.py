"""The test-bed Qwen2 model: shape, determinism of initialisation, save/load through from_pretrained."""

from __future__ import annotations

import pytest
import torch

from llm_harness.testbed.build import save_checkpoint
from llm_harness.testbed.model import TestbedModelConfig, load_testbed, make_model, n_parameters
from llm_harness.testbed.tokenizer import build_tokenizer

TINY = TestbedModelConfig(hidden_size=32, num_hidden_layers=1, intermediate_size=64, max_position_embeddings=64)


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


def test_default_shape_is_about_one_million_parameters(tok):
    model = make_model(TestbedModelConfig(), tok, seed=0)
    cfg = model.config
    assert type(model).__name__ == "Qwen2ForCausalLM"
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads, cfg.num_key_value_heads) == (128, 4, 4, 2)
    assert cfg.tie_word_embeddings and model.lm_head.weight is model.model.embed_tokens.weight
    assert cfg.vocab_size == len(tok) == 23 and cfg.max_position_embeddings >= 256
    # embeddings 23*128 + 4 blocks x (attention 128*(128+64+64)+biases + o 128*128 + MLP 3*128*512 + 2 norms) + final norm
    per_block = 128 * 256 + 256 + 128 * 128 + 3 * 128 * 512 + 2 * 128
    assert n_parameters(model) == 23 * 128 + 4 * per_block + 128 == 988_160
    assert (cfg.pad_token_id, cfg.bos_token_id, cfg.eos_token_id) == (0, 1, 2)
    assert model.generation_config.eos_token_id == 2


def test_initialisation_depends_only_on_the_seed(tok):
    torch.manual_seed(99)
    a = make_model(TINY, tok, seed=5)
    torch.rand(10)
    b = make_model(TINY, tok, seed=5)
    c = make_model(TINY, tok, seed=6)
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert any(not torch.equal(sa[k], sc[k]) for k in sa)


def test_save_and_load_round_trip(tok, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = make_model(TINY, tok, seed=0).eval()
    path = save_checkpoint(model, tok, tmp_path / "ckpt")
    assert (path / "model.safetensors").is_file() and (path / "tokenizer.json").is_file()
    assert not any(p.name.startswith(".") for p in tmp_path.iterdir())  # no temporary folder left
    ids = torch.tensor([tok.encode("Q:12+30=?\n12+30=42")])
    with torch.no_grad():
        want = model(input_ids=ids).logits
    m2, t2 = load_testbed(path)
    assert not m2.training
    with torch.no_grad():
        assert torch.equal(m2(input_ids=ids).logits, want)
    assert t2.encode("Q:12+30=?\n") == tok.encode("Q:12+30=?\n")
    # the plain transformers path works too (what real models use)
    m3 = AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
    t3 = AutoTokenizer.from_pretrained(path, local_files_only=True)
    with torch.no_grad():
        assert torch.equal(m3.eval()(input_ids=ids).logits, want)
    assert t3.eos_token_id == 2
    # saving again replaces the folder
    save_checkpoint(make_model(TINY, tok, seed=1), tok, path)
    m4, _ = load_testbed(path)
    with torch.no_grad():
        assert not torch.equal(m4(input_ids=ids).logits, want)


def test_bad_inputs(tok, tmp_path):
    with pytest.raises(ValueError, match="path"):
        load_testbed(tmp_path / "missing")
    with pytest.raises(ValueError, match="seed"):
        make_model(TINY, tok, seed=-1)
    with pytest.raises(ValueError, match="hidden_size"):
        TestbedModelConfig(hidden_size=30, num_attention_heads=4)
    with pytest.raises(ValueError, match="num_key_value_heads"):
        TestbedModelConfig(num_attention_heads=4, num_key_value_heads=3)
    with pytest.raises(ValueError, match="num_hidden_layers"):
        TestbedModelConfig(num_hidden_layers=0)
