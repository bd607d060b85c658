"""vLLM backend: helpers testable without vLLM; engine tests run only where vLLM and CUDA exist.

The shared contract (test_backend_contract.py) already runs against the vLLM backend when it is
importable; nothing here fakes vLLM.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch
from backend_models import tiny_qwen2

from llm_harness.backends import HFBackend, HFBackendConfig, SamplingParams, VLLMBackend, VLLMBackendConfig
from llm_harness.backends.vllm_backend import _derived_seed, _version_tuple


def test_module_does_not_import_vllm():
    import llm_harness.backends.vllm_backend  # noqa: F401

    if "vllm" in sys.modules:
        pytest.skip("vllm was imported by someone else in this process")
    assert "vllm" not in sys.modules


def test_version_parsing():
    assert _version_tuple("0.10.2") == (0, 10, 2)
    assert _version_tuple("0.11.0rc1+cu128") == (0, 11, 0)
    assert _version_tuple("0.8.5.post1") == (0, 8, 5)
    assert _version_tuple("0.10.2") >= (0, 10, 2) > _version_tuple("0.10.1.1")


def test_per_state_seeds_are_deterministic_and_distinct():
    seeds = [_derived_seed(7, i) for i in range(1000)]
    assert seeds == [_derived_seed(7, i) for i in range(1000)]
    assert len(set(seeds)) == 1000
    assert _derived_seed(8, 0) != _derived_seed(7, 0)


def test_construction_errors_are_clear():
    with pytest.raises(ValueError, match="^scorer"):
        VLLMBackend(None, vocab_size=10, max_context=10, eos_token_ids=(), processed_logprobs=True)
    with pytest.raises(ValueError, match="^model"):
        VLLMBackend.from_config(VLLMBackendConfig())


def test_from_config_without_vllm_names_the_missing_package(tmp_path):
    if __import__("importlib").util.find_spec("vllm") is not None:
        pytest.skip("vllm is installed")
    with pytest.raises(ModuleNotFoundError, match="vllm"):
        VLLMBackend.from_config(VLLMBackendConfig(model=str(tmp_path)))


def test_load_weights_updates_generation_and_scorer(tmp_path):
    pytest.importorskip("vllm")
    if not torch.cuda.is_available():
        pytest.skip("the vLLM backend needs a CUDA device")
    model = tiny_qwen2(50, seed=0, hidden_size=64)
    model.save_pretrained(tmp_path / "m")
    backend = VLLMBackend.from_config(
        VLLMBackendConfig(model=str(tmp_path / "m"), dtype="float32", enforce_eager=True, gpu_memory_utilization=0.15,
                          scorer_device="cuda")
    )
    other = tiny_qwen2(50, seed=1, hidden_size=64)
    greedy = SamplingParams(temperature=0.0, max_new_tokens=8)
    prompt = [[3, 4, 5]]
    before = backend.generate(prompt, 1, greedy)[0][0].token_ids
    backend.load_weights(other.state_dict())
    after = backend.generate(prompt, 1, greedy)[0][0].token_ids
    want = HFBackend(other.to("cuda"), config=HFBackendConfig(pad_token_id=0)).generate(prompt, 1, greedy)[0][0]
    assert after == want.token_ids != before
    # the lazily built scorer follows the new weights too
    np.testing.assert_allclose(
        backend.score([3, 4, 5], list(after)).logprobs,
        HFBackend(other, config=HFBackendConfig(pad_token_id=0)).score([3, 4, 5], list(after)).logprobs,
        atol=1e-4,
    )


def test_weight_updates_refuse_tensor_parallel_and_a_separate_engine_process(tmp_path, monkeypatch):
    """Checked before vLLM is imported: IPC weight transfer needs one GPU and the in-process engine core."""
    with pytest.raises(ValueError, match="^tensor_parallel_size"):
        VLLMBackend.from_config(VLLMBackendConfig(model=str(tmp_path), tensor_parallel_size=2))
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "1")
    with pytest.raises(ValueError, match="^VLLM_ENABLE_V1_MULTIPROCESSING"):
        VLLMBackend.from_config(VLLMBackendConfig(model=str(tmp_path)))


def test_load_weights_is_refused_on_a_generation_only_engine():
    b = VLLMBackend(None, vocab_size=10, max_context=10, eos_token_ids=(), processed_logprobs=True,
                    scorer_config=HFBackendConfig(model="x"))
    b.allow_weight_updates = False
    with pytest.raises(ValueError, match="allow_weight_updates"):
        b.load_weights({"w": torch.zeros(1)})
