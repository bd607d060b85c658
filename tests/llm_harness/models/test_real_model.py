"""The real SmolLM2-135M-Instruct (``make real-model``): imported, it answers "2 + 3" with its chat
template and loads through the project's ordinary model loading. Skipped when the wheel, ``gguf`` or
``accelerate`` is not installed; importing it the first time takes ~40 s (into the default cache,
where ``make real-model`` puts it), later runs verify the cached folder in ~1 s."""

from __future__ import annotations

import importlib.util
import json

import pytest

from llm_harness.models.named import MODELS

NAME = "smollm2-135m-instruct"
ENTRY = MODELS[NAME]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        any(importlib.util.find_spec(m) is None for m in (ENTRY.package, "gguf", "accelerate")),
        reason=f"the real model is not installed (make real-model: {ENTRY.distribution} {ENTRY.version}, gguf, accelerate)",
    ),
]


@pytest.fixture(scope="module")
def folder():
    from llm_harness.models.gguf_import import ImportConfig, import_model

    return import_model(ImportConfig(source=NAME))


@pytest.fixture(scope="module")
def backend(folder):
    from llm_harness.backends import HFBackend, HFBackendConfig

    return HFBackend.from_pretrained(str(folder), config=HFBackendConfig(model=str(folder), device="cpu"))


def test_manifest_records_the_pinned_source_and_the_rope_fix(folder):
    from llm_harness.models.manifest import verify_folder

    manifest = verify_folder(folder)
    assert manifest["source"]["sha256"] == ENTRY.sha256
    assert manifest["source"]["named_model"]["licence"] == "Apache-2.0"
    assert manifest["conversion"]["roundtrip_logits_max_abs_diff"] == 0.0
    config = json.loads((folder / "config.json").read_text())
    assert config["rope_theta"] == 100_000.0  # the GGUF's llama.rope.freq_base, not the 10,000 fallback
    assert (config["num_hidden_layers"], config["hidden_size"], config["vocab_size"]) == (30, 576, 49_152)


def test_tokenizer_splits_digits_like_smollm2(backend):
    # the GGUF names SmolLM2's pre-tokenizer ("smollm": one token per digit), which transformers maps to plain
    # byte-level BPE; the vocabulary has no multi-digit or space+digit token, so digits still come out one by one
    tok = backend.tokenizer
    assert tok.convert_ids_to_tokens(tok(" 2024 + 13", add_special_tokens=False)["input_ids"]) == ["Ġ", "2", "0", "2", "4", "Ġ+", "Ġ", "1", "3"]


def test_greedy_two_plus_three_with_the_chat_template(backend):
    from llm_harness.backends.protocol import SamplingParams
    from llm_harness.tasks import get_task
    from llm_harness.trainer.modeling import Codec

    task = get_task("arith_ladder", levels=("add",))
    problem = next(p for split in task.splits for p in task.problems(split) if p.prompt == "What is 2 + 3?")
    prompt = task.render_prompt(problem, backend.tokenizer)
    assert prompt.startswith("<|im_start|>system\n") and prompt.endswith("<|im_start|>assistant\n")
    codec = Codec(backend.tokenizer)
    (sample,), = backend.generate([list(codec.encode(prompt))], 1, SamplingParams(temperature=0.0, max_new_tokens=24))
    text = codec.decode(sample.token_ids)
    assert sample.finish_reason == "stop" and "5" in text, text
    assert task.verify(problem, text.removesuffix("<|im_end|>")).correct


def test_loads_through_the_trainer_and_the_studies(folder, backend):
    import torch

    from llm_harness.trainer.config import ModelConfig
    from llm_harness.trainer.modeling import build_model
    from prefixvalue.config import StudyConfig
    from prefixvalue.engine import build_context

    model, tok = build_model(ModelConfig(path=str(folder)), seed=0)
    assert type(model).__name__ == "LlamaForCausalLM" and tok.chat_template is not None
    ids = torch.tensor([tok("What is 2 + 3?", add_special_tokens=False)["input_ids"]])
    with torch.inference_mode():
        assert torch.equal(model(input_ids=ids).logits, backend.model(input_ids=ids).logits)
    ctx = build_context(StudyConfig(model=str(folder), task="arith_ladder", split="test"), backend=backend, tokenizer=tok)
    try:
        assert ctx.task.render_prompt(ctx.task.problems("test")[0], tok).startswith("<|im_start|>system")
    finally:
        ctx.close()


def test_vsr_eval_takes_the_folder_as_model_path(folder, tmp_path):
    from vsr.cli import main

    out = tmp_path / "eval"
    rc = main(["eval", "--model.path", str(folder), "--task.name", "arith_ladder", "--n-problems", "2", "--k", "2",
               "--max-new-tokens", "8", "--out-dir", str(out)])
    assert rc == 0
    result = json.loads((out / "eval.json").read_text())
    assert (result["n_problems"], result["k"]) == (2, 2) and 0.0 <= result["avg_at_k"] <= 1.0
    assert (out / "eval.md").read_text().startswith("# Evaluation (2 problems x 2 samples)")


def test_static_decode_samples_what_the_hf_step_samples(backend):
    """SmolLM2 is a Llama: the static-KV decode step (``backends.static_decode``) runs it and draws the same tokens."""
    from llm_harness.backends import HFBackend, HFBackendConfig, SamplingParams
    from llm_harness.backends.static_decode import supports
    from llm_harness.tasks import get_task
    from llm_harness.trainer.modeling import Codec

    assert supports(backend.model) is None
    tok = backend.tokenizer
    task = get_task("arith_ladder")
    prompts = [list(Codec(tok).encode(task.render_prompt(p, tok))) for p in task.problems("test")[:3]]
    sp = SamplingParams(temperature=1.0, max_new_tokens=16, seed=3)
    cfg = dict(pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id)
    a = HFBackend(backend.model, tok, config=HFBackendConfig(**cfg)).generate(prompts, 2, sp)
    b = HFBackend(backend.model, tok, config=HFBackendConfig(static_decode=True, **cfg)).generate(prompts, 2, sp)
    for ra, rb in zip(a, b):
        for sa, sb in zip(ra, rb):
            assert sa.token_ids == sb.token_ids
            assert max(abs(x - y) for x, y in zip(sa.sampling_logprobs, sb.sampling_logprobs)) < 1e-4
