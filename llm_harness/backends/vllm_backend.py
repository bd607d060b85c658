"""Generation over ``vllm.LLM`` (SPEC §3.6): the same protocol as the HF backend, for GPUs.

vLLM is an optional extra (``pip install vsr-toolkit[gpu]``) and is imported lazily, inside the
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
* ``load_weights(state_dict)``: vLLM's native weight-transfer API (``vllm/entrypoints/rl/offline.py``:
  ``init_weight_transfer_engine`` once, then ``start_weight_update`` / ``update_weights`` /
  ``finish_weight_update``) with the ``ipc`` backend (``weight_transfer_config={"backend": "ipc"}``):
  every parameter is exported as a CUDA IPC handle (``torch.multiprocessing.reductions.reduce_tensor``)
  and rebuilt in the worker, which calls the model's ``load_weights`` with Hugging Face names. No
  state dict and no function is pickled. CUDA IPC handles hold Python classes and dtypes, which
  vLLM's msgpack transport to a separate engine process refuses without
  ``VLLM_ALLOW_INSECURE_SERIALIZATION=1`` (vLLM's own ``examples/rl/rlhf_ipc.py`` sets it for
  them); this backend instead runs the engine core in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``,
  one GPU, ``tensor_parallel_size`` 1), so ``collective_rpc`` is a direct call and nothing is
  serialized. ``reset_prefix_cache()`` runs after every load (cached KV blocks hold the old
  weights) and a refusal raises.

Untested paths (no GPU in the sessions that wrote this; ``scripts/gpu_check.sh`` runs them): the
whole generation path on vLLM 0.33; the IPC weight load (in particular rebuilding an IPC handle in
the process that exported it, which the in-process engine does, and vLLM's layer-wise reload of a
state dict with tied embeddings); ``reset_prefix_cache`` returning ``False``.

Scoring: vLLM cannot return full-vocabulary entropies (only top-k log-probs, and its prompt
log-probs are computed from the raw logits), so ``score``/``score_batch`` delegate to a
transformers model with the same weights: the trainer's policy model passed as ``scorer``, or one
loaded from the same path on first use (and kept in sync by ``load_weights``).
"""

from __future__ import annotations

import os
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
    """Options of the vLLM backend."""

    model: str = ""
    """Hugging Face name or local path of the model (weights are read from disk; no download here)."""
    dtype: str = "auto"
    """vLLM weights dtype (``auto``, ``bfloat16``, ``float16``, ``float32``)."""
    gpu_memory_utilization: float = 0.5
    """Fraction of GPU memory vLLM may take (leave room for the trainer)."""
    max_model_len: int | None = None
    """Context length; default: the model's own."""
    tensor_parallel_size: int = 1
    """Tensor-parallel GPUs."""
    enable_prefix_caching: bool = True
    """Reuse KV blocks of shared prefixes (states of one group share their prompt)."""
    enforce_eager: bool = False
    """Disable CUDA graphs (slower; faster start-up)."""
    seed: int = 0
    """Engine seed (per-request seeds come from ``SamplingParams.seed``)."""
    allow_weight_updates: bool = True
    """Configure vLLM's IPC weight-transfer engine so ``load_weights`` works (engine core in this
    process; needs ``tensor_parallel_size`` 1). False: a generation-only engine in its own process."""
    scorer_device: str = "auto"
    """Device of the transformers model used for ``score`` when none is passed."""
    scorer_dtype: str = "float32"
    """Dtype of that scorer model."""


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
        """False when the engine was started without the IPC weight-transfer engine (``load_weights`` refuses)."""
        self._transfer_ready = False

    @classmethod
    def from_config(cls, config: VLLMBackendConfig, *, scorer: HFBackend | None = None) -> "VLLMBackend":
        """Start ``vllm.LLM`` for ``config.model`` (imports vLLM here, not at module import)."""
        if not config.model:
            raise ValueError("model: VLLMBackendConfig.model is empty (give a Hugging Face name or a local path)")
        if config.allow_weight_updates:
            if config.tensor_parallel_size != 1:
                raise ValueError("tensor_parallel_size: weight updates use CUDA IPC on one GPU; set allow_weight_updates: "
                                 "false for a tensor-parallel, generation-only engine")
            if os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING", "0") != "0":
                raise ValueError("VLLM_ENABLE_V1_MULTIPROCESSING: weight updates need the engine core in this process "
                                 "(unset it or set 0); see the module doc")
            os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        import transformers
        import vllm

        processed = _version_tuple(vllm.__version__) >= MIN_VERSION_PROCESSED_LOGPROBS
        kwargs: dict[str, Any] = dict(
            model=config.model,
            dtype=config.dtype,
            seed=config.seed,
            gpu_memory_utilization=config.gpu_memory_utilization,
            tensor_parallel_size=config.tensor_parallel_size,
            enable_prefix_caching=config.enable_prefix_caching,
            enforce_eager=config.enforce_eager,
            skip_tokenizer_init=True,
        )
        if config.max_model_len is not None:
            kwargs["max_model_len"] = config.max_model_len
        if processed:
            kwargs["logprobs_mode"] = "processed_logprobs"
        if config.allow_weight_updates:
            if not hasattr(vllm.LLM, "init_weight_transfer_engine"):
                raise ValueError(f"allow_weight_updates: vLLM {vllm.__version__} has no native weight-transfer API "
                                 "(LLM.init_weight_transfer_engine); install the gpu extra (vllm==0.33.*)")
            kwargs["weight_transfer_config"] = {"backend": "ipc"}
        llm = vllm.LLM(**kwargs)
        hf_cfg = transformers.AutoConfig.from_pretrained(config.model)
        eos: tuple[int, ...] = ()
        try:
            gen_cfg = transformers.GenerationConfig.from_pretrained(config.model)
            eos = _as_ids(gen_cfg.eos_token_id)
        except OSError:
            pass
        eos = eos or _as_ids(getattr(hf_cfg, "eos_token_id", None))
        vocab = int(getattr(hf_cfg, "vocab_size"))
        max_ctx = config.max_model_len or int(getattr(hf_cfg, "max_position_embeddings"))
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
        return backend

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
        params = [
            VSamplingParams(
                n=n,
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
        outputs = self.llm.generate(
            [TokensPrompt(prompt_token_ids=p) for p in prompts], sampling_params=params, use_tqdm=False
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
            if len(samples) != n:
                raise RuntimeError(f"prompt_ids[{i}]: vLLM returned {len(samples)} samples, expected {n}")
            results.append(samples)
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
        """Copy trainer weights (HF parameter names) into the vLLM model through vLLM's weight-transfer
        API (IPC handles, module doc); reset the prefix cache; keep the owned scorer in sync."""
        if not state_dict:
            raise ValueError("state_dict: must not be empty")
        if not self.allow_weight_updates:
            raise ValueError("load_weights: this engine was started with allow_weight_updates=False")
        import torch
        from torch.multiprocessing.reductions import reduce_tensor

        if not torch.cuda.is_available():
            raise RuntimeError("load_weights: CUDA IPC weight transfer needs a CUDA device")
        device = torch.device("cuda", torch.cuda.current_device())
        if not self._transfer_ready:
            self.llm.init_weight_transfer_engine({"init_info": {"packed": False}})
            self._transfer_ready = True
        uuid = str(torch.cuda.get_device_properties(device).uuid)
        names, dtypes, shapes, handles, keep = [], [], [], [], []
        for name, v in state_dict.items():
            t = v.detach().to(device).contiguous()  # kept alive until the worker has loaded it
            keep.append(t)
            names.append(name)
            dtypes.append(str(t.dtype).split(".")[-1])
            shapes.append(list(t.shape))
            handles.append({uuid: reduce_tensor(t)[1]})
        self.llm.start_weight_update()
        self.llm.update_weights({"update_info": {"names": names, "dtype_names": dtypes, "shapes": shapes,
                                                 "ipc_handles": handles}})
        self.llm.finish_weight_update()
        torch.cuda.synchronize(device)
        del keep
        if self.llm.reset_prefix_cache() is False:
            raise RuntimeError("load_weights: vLLM refused to reset its prefix cache (requests still running?); cached "
                               "KV blocks computed with the old weights would be reused")
        if self._owns_scorer and self._scorer is not None:
            self._scorer.model.load_state_dict(dict(state_dict), strict=True)


def _as_ids(x: Any) -> tuple[int, ...]:
    if x is None:
        return ()
    if isinstance(x, (list, tuple)):
        return tuple(int(v) for v in x)
    return (int(x),)
