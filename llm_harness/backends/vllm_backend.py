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
  state do not depend on the other states in the call.
* ``load_weights(state_dict)``: vLLM >= 0.8 (V1 engine) exposes ``LLM.apply_model(fn)``, which
  runs ``fn(model)`` in every worker; ``fn`` calls the vLLM model's ``load_weights`` (an iterable
  of ``(name, tensor)`` with Hugging Face parameter names). When the engine runs in a separate
  process this ships a function, which vLLM only allows with
  ``VLLM_ALLOW_INSECURE_SERIALIZATION=1`` (set by ``from_config`` when
  ``allow_weight_updates``). Older engines (V0) are reached through
  ``llm.llm_engine.model_executor.driver_worker.model_runner.model``. The prefix cache is reset
  after every load: cached KV blocks were computed with the old weights.

Scoring: vLLM cannot return full-vocabulary entropies (only top-k log-probs, and its prompt
log-probs are computed from the raw logits), so ``score``/``score_batch`` delegate to a
transformers model with the same weights: the trainer's policy model passed as ``scorer``, or one
loaded from the same path on first use (and kept in sync by ``load_weights``).
"""

from __future__ import annotations

import functools
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
    """Set ``VLLM_ALLOW_INSECURE_SERIALIZATION=1`` so ``load_weights`` can reach worker processes."""
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


def _load_weights_into(items: list, model: Any) -> None:
    """Runs inside a vLLM worker (``LLM.apply_model``)."""
    model.load_weights(weights=items)


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

    @classmethod
    def from_config(cls, config: VLLMBackendConfig, *, scorer: HFBackend | None = None) -> "VLLMBackend":
        """Start ``vllm.LLM`` for ``config.model`` (imports vLLM here, not at module import)."""
        if not config.model:
            raise ValueError("model: VLLMBackendConfig.model is empty (give a Hugging Face name or a local path)")
        if config.allow_weight_updates:
            os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")
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
        return cls(
            llm,
            vocab_size=vocab,
            max_context=max_ctx,
            eos_token_ids=eos,
            processed_logprobs=processed,
            scorer=scorer,
            scorer_config=scorer_config,
        )

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
        """Copy trainer weights (HF parameter names) into the vLLM model; reset the prefix cache."""
        if not state_dict:
            raise ValueError("state_dict: must not be empty")
        if hasattr(self.llm, "apply_model"):
            # crosses a process boundary in the V1 engine: send CPU tensors
            items = [(k, v.detach().to("cpu")) for k, v in state_dict.items()]
            self.llm.apply_model(functools.partial(_load_weights_into, items))
        else:
            items = [(k, v.detach()) for k, v in state_dict.items()]
            self.llm.llm_engine.model_executor.driver_worker.model_runner.model.load_weights(items)
        self.llm.reset_prefix_cache()
        if self._owns_scorer and self._scorer is not None:
            self._scorer.model.load_state_dict(dict(state_dict), strict=True)


def _as_ids(x: Any) -> tuple[int, ...]:
    if x is None:
        return ()
    if isinstance(x, (list, tuple)):
        return tuple(int(v) for v in x)
    return (int(x),)
