"""Generation and scoring over a ``transformers`` causal LM, CPU or CUDA.

Sampling loop (own loop, not ``model.generate``, so behaviour log-probs are exact):

1. The distinct states of a micro-batch are **left-padded** and prefilled once
   (``position_ids`` from the attention mask, so padding never shifts positions).
   With ``share_prefix`` (opt-in), the longest token prefix common to every state of a
   micro-batch is prefilled once (batch 1) and its cache expanded to the batch before the
   differing suffixes are prefilled, left-padded *after* the shared part (``position_ids`` again
   from the mask, so each token keeps its position). Multi-turn agent prompts all start with the
   same task instruction, which is most of a test-bed Sokoban prompt. The logits equal the
   unshared path's up to float rounding (other matmul shapes), so samples can differ in rare near
   ties; the default (off) is bit-identical to before the option existed.
2. The KV cache is **expanded** ``n`` times in the batch dimension
   (``Cache.batch_repeat_interleave``): ``n`` samples of one state share one prefill instead of
   ``n`` separate prefills (``model.generate(num_return_sequences=n)`` copies the prompt first).
3. Decode step by step with the cache; each step draws from ``q`` (protocol.py) with one seeded
   ``torch.Generator`` and records ``log q`` of the drawn token. With ``static_decode`` (opt-in,
   Qwen2-family models) the prefilled cache is copied into preallocated tensors and each step runs
   :class:`~llm_harness.backends.static_decode.StaticQwen2Decoder` instead of the HF forward (no
   per-token ``torch.cat`` of the cache, no module dispatch); logits equal the HF step's up to float
   rounding.
4. Finished rows (stop token seen) are dropped from the cache once a fraction
   ``compact_fraction`` of the live rows has finished, and the loop exits as soon as every row
   has finished (**early exit**).

Departures from ``model.generate``: top-k is disabled unless asked (HF defaults to 50); only the
last position's logits are computed during prefill; samples depend on the seed *and* on how states
are grouped into micro-batches (one random stream per call).

Scoring runs the decoder once per micro-batch (right padding, no cache), gathers the hidden
states of the completion positions and evaluates the head in chunks (``scoring.py``), so a
150k vocabulary never materialises ``[B, T, V]`` logits.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from llm_harness.backends.protocol import (
    Sample,
    SamplingParams,
    ScoreResult,
    check_n,
    check_prompts,
    check_score_pairs,
    check_score_params,
)
from llm_harness.backends.sampling import sample_next_tokens
from llm_harness.backends.scoring import DEFAULT_CHUNK_BYTES, chunked_logprobs_entropy, make_workspace, rows_per_chunk
from vsr_util.checks import check_number
from vsr_util.registry import Registry

_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")

#: weights dtype name -> torch dtype.
_DTYPES: Registry[torch.dtype] = Registry("dtype", {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16})


@dataclass(frozen=True)
class HFBackendConfig:
    """Options of the transformers backend."""

    model: str = ""
    """Hugging Face name or local path given to ``from_pretrained`` (unused when a model object is passed)."""
    device: str = "auto"
    """``"cpu"``, ``"cuda"``, ``"cuda:1"``, ... or ``"auto"`` (CUDA when available)."""
    dtype: str = "float32"
    """Weights dtype when loading: ``float32``, ``bfloat16`` or ``float16``."""
    max_batch_sequences: int = 256
    """Sequences decoded together (distinct states x n); states are grouped to stay within it."""
    compact_fraction: float = 0.25
    """Drop finished rows from the KV cache once this fraction of live rows has finished (1 = never)."""
    share_prefix: bool = False
    """Prefill the token prefix common to all states of a micro-batch once (module doc, step 1);
    off by default (bit-identical sampling to the unshared path)."""
    static_decode: bool = False
    """Decode over a preallocated KV cache with the model's weights as plain tensor calls
    (:mod:`llm_harness.backends.static_decode`; Qwen2-family models only, refused otherwise); logits
    equal the HF step's up to float rounding, so samples can differ in rare near ties. Off by default."""
    packed_weights: bool = True
    """With ``static_decode``: the decoder's matmuls (and the output head's) on weight copies packed once per
    ``generate`` call for the CPU's GEMM kernels (:mod:`llm_harness.backends.packed_linear`: MKL in float32,
    bit-identical to ``F.linear`` from 5 rows; oneDNN under bf16 autocast where the CPU has native bf16);
    elsewhere (a GPU, a CPU without them) the plain matmuls. Costs one packed copy of the weights while sampling."""
    autocast_bf16: bool = False
    """Generate and score under ``torch.autocast`` to bfloat16 on the model's (float32) weights: bf16 matmuls,
    float32 softmax and sampling (the trainer's ``run.precision: bf16``)."""
    sampler: str = "multinomial"
    """How a token is drawn from its distribution (registry ``llm_harness.backends.sampling.SAMPLERS``):
    ``multinomial`` (``torch.multinomial``; the committed results' stream) or ``inverse_cdf`` (one uniform per row
    and a search of the cumulative sum: the same distribution, a different random stream, several times faster
    over a large vocabulary on the CPU)."""
    score_max_batch_tokens: int = 16384
    """Padded tokens per scoring forward pass (rows x longest sequence)."""
    score_chunk_bytes: int = DEFAULT_CHUNK_BYTES
    """Byte budget of one ``[c, V]`` logits chunk when computing log-probs / entropies."""
    pad_token_id: int | None = None
    """Padding id; default: tokenizer pad, else tokenizer/model EOS, else an error."""
    local_files_only: bool = True
    """Never download weights at run time (no network assumed); set False on a machine that may."""
    keep_score_workspace: bool = True
    """Keep the two ``[c, V]`` float32 scoring buffers (at most ``score_chunk_bytes``) between calls
    instead of allocating them on every call (large fresh buffers cost page faults on CPU)."""
    verify_head: bool = True
    """Check once that ``logits == head(decoder hidden state)`` for this model (catches soft-capping)."""

    def __post_init__(self) -> None:
        _DTYPES.check(self.dtype, "dtype")
        from llm_harness.backends.sampling import SAMPLERS

        SAMPLERS.check(self.sampler, "sampler")
        check_number("max_batch_sequences", self.max_batch_sequences, 1, integer=True)
        check_number("compact_fraction", self.compact_fraction, 0, 1, lo_open=True)
        check_number("score_max_batch_tokens", self.score_max_batch_tokens, 1, integer=True)
        check_number("score_chunk_bytes", self.score_chunk_bytes, 1, integer=True)


def cache_keyword(decoder: Any) -> str:
    """The keyword a decoder's ``forward`` takes its KV cache under (``cache`` or, in transformers 4-5,
    ``past_key_values``)."""
    return "cache" if "cache" in inspect.signature(decoder.forward).parameters else "past_key_values"


def new_dynamic_cache(config: Any) -> Any:
    """An empty ``DynamicCache`` for a model of ``config`` (passed explicitly: transformers 4.x returns legacy tuples
    otherwise)."""
    from transformers import DynamicCache

    if "config" in inspect.signature(DynamicCache.__init__).parameters:
        return DynamicCache(config=config)
    return DynamicCache()


def bf16_autocast(device_type: str, enabled: bool) -> Any:
    """``torch.autocast`` to bfloat16 on ``device_type`` when ``enabled``, else a no-op context."""
    import contextlib

    if not enabled:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device_type, dtype=torch.bfloat16)


def _resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device: {device!r} requested but CUDA is not available")
    return dev


def _first_id(x: Any) -> int | None:
    if x is None:
        return None
    if isinstance(x, (list, tuple)):
        return int(x[0]) if x else None
    return int(x)


def _all_ids(x: Any) -> tuple[int, ...]:
    if x is None:
        return ()
    if isinstance(x, (list, tuple)):
        return tuple(int(v) for v in x)
    return (int(x),)


def common_prefix_length(prompts: Sequence[Sequence[int]]) -> int:
    """Length of the longest token prefix shared by every prompt, capped one short of the shortest
    prompt (every row keeps at least one token of its own to prefill)."""
    if not prompts:
        return 0
    first, cap = prompts[0], min(len(p) for p in prompts) - 1
    n = 0
    while n < cap and all(p[n] == first[n] for p in prompts):
        n += 1
    return n


class HFBackend:
    """``GenerationBackend`` over a ``transformers`` causal LM (module doc)."""

    name = "hf"

    def __init__(self, model: Any, tokenizer: Any = None, *, config: HFBackendConfig = HFBackendConfig()):
        self.config = config
        self._packs = None  # packed weights of the current generate call (static decode)
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.device = next(model.parameters()).device
        cfg = model.config
        self._decoder = model.get_decoder() if hasattr(model, "get_decoder") else getattr(model, model.base_model_prefix)
        if self._decoder is None or self._decoder is model:
            raise ValueError(f"model: cannot find the decoder of {type(model).__name__} (need a *ForCausalLM model)")
        self._head = model.get_output_embeddings()
        if self._head is None:
            raise ValueError(f"model: {type(model).__name__} has no output embedding (lm_head)")
        self._softcap = getattr(cfg, "final_logit_softcapping", None)
        self._cache_kw = cache_keyword(self._decoder)
        self._vocab_size = int(self._head.weight.shape[0])
        max_ctx = getattr(cfg, "max_position_embeddings", None) or getattr(cfg, "n_positions", None)
        if max_ctx is None:
            raise ValueError(f"model: config of {type(model).__name__} states no context length (max_position_embeddings)")
        self._max_context = int(max_ctx)
        gen_cfg = getattr(model, "generation_config", None)
        # EOS as model.generate sees it: generation config, then model config, then tokenizer
        self.eos_token_ids: tuple[int, ...] = (
            _all_ids(getattr(gen_cfg, "eos_token_id", None))
            or _all_ids(getattr(cfg, "eos_token_id", None))
            or _all_ids(getattr(tokenizer, "eos_token_id", None))
        )
        self.pad_token_id = self._resolve_pad(config.pad_token_id, tokenizer, cfg)
        self._workspace: tuple[torch.Tensor, torch.Tensor] | None = None
        if config.static_decode:
            from llm_harness.backends.static_decode import supports

            why = supports(model)
            if why is not None:
                raise ValueError(f"static_decode: not available for this model ({why}); set it to false")
        if config.verify_head:
            self._check_head()

    # ------------------------------------------------------------------ construction helpers

    @classmethod
    def from_pretrained(cls, name_or_path: str, *, config: HFBackendConfig | None = None) -> "HFBackend":
        """Load model (and tokenizer when one is saved alongside) with ``from_pretrained``. A local folder with an
        import manifest (``vsr model import``) is verified against it first (a damaged file is refused, naming it)."""
        import transformers

        local = Path(name_or_path)
        if local.is_dir():
            from llm_harness.models.manifest import check_model_folder

            check_model_folder(local, "model")
        config = config or HFBackendConfig(model=name_or_path)
        device = _resolve_device(config.device)
        # transformers >= 5 calls the dtype argument `dtype`; 4.x calls it `torch_dtype`
        dtype_kw = "dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype"
        model = transformers.AutoModelForCausalLM.from_pretrained(
            name_or_path, local_files_only=config.local_files_only, **{dtype_kw: _DTYPES[config.dtype]}
        ).to(device)
        tokenizer = None  # token-id-only use (e.g. a custom character tokenizer saved elsewhere)
        # A local folder without tokenizer files would otherwise yield a default, empty tokenizer.
        if not local.is_dir() or any((local / f).exists() for f in _TOKENIZER_FILES):
            try:
                from llm_harness.tasks.coverage import keep_unknown_token

                tokenizer = keep_unknown_token(transformers.AutoTokenizer.from_pretrained(
                    name_or_path, local_files_only=config.local_files_only
                ))
            except (OSError, ValueError, TypeError, KeyError):
                tokenizer = None
        return cls(model, tokenizer, config=config)

    @classmethod
    def from_config(cls, config: HFBackendConfig) -> "HFBackend":
        """``from_pretrained(config.model)``."""
        if not config.model:
            raise ValueError("model: HFBackendConfig.model is empty (give a Hugging Face name or a local path)")
        return cls.from_pretrained(config.model, config=config)

    def _resolve_pad(self, explicit: int | None, tokenizer: Any, cfg: Any) -> int:
        candidates = [
            ("pad_token_id", explicit),
            ("tokenizer.pad_token_id", getattr(tokenizer, "pad_token_id", None)),
            ("tokenizer.eos_token_id", _first_id(getattr(tokenizer, "eos_token_id", None))),
            ("model.config.pad_token_id", _first_id(getattr(cfg, "pad_token_id", None))),
            ("model EOS", self.eos_token_ids[0] if self.eos_token_ids else None),
        ]
        for _, pid in candidates:
            if pid is not None:
                pid = int(pid)
                if not 0 <= pid < self._vocab_size:
                    raise ValueError(f"pad_token_id: {pid} outside [0, {self._vocab_size})")
                return pid
        raise ValueError(
            "tokenizer: has no pad token and neither the tokenizer nor the model defines an EOS token; "
            "pass HFBackendConfig(pad_token_id=...)"
        )

    def _check_head(self) -> None:
        ids = torch.arange(min(4, self._vocab_size), device=self.device)[None] % self._vocab_size
        with torch.inference_mode():
            full = self.model(input_ids=ids).logits.float()
            mine = self._logits(self._decoder(input_ids=ids).last_hidden_state).float()
        scale = float(full.abs().max()) + 1.0
        if not torch.allclose(full, mine, atol=1e-3 * scale, rtol=1e-3):
            raise ValueError(
                f"model: {type(self.model).__name__} logits are not lm_head(decoder output) "
                f"(max difference {float((full - mine).abs().max()):.3g}); this backend does not support it"
            )

    # ------------------------------------------------------------------ properties

    @property
    def vocab_size(self) -> int:
        return self._vocab_size

    @property
    def max_context(self) -> int:
        return self._max_context

    # ------------------------------------------------------------------ model pieces

    def _autocast(self) -> Any:
        """bf16 autocast on the model's device when ``config.autocast_bf16``, else a no-op context."""
        return bf16_autocast(self.device.type, self.config.autocast_bf16)

    def _logits(self, h: torch.Tensor, head: Any = None) -> torch.Tensor:
        z = (head or self._head)(h)
        if self._softcap:
            z = torch.tanh(z / self._softcap) * self._softcap
        return z

    def _new_cache(self) -> Any:
        return new_dynamic_cache(self.model.config)

    def _decode(self, ids: torch.Tensor, mask: torch.Tensor, pos: torch.Tensor, cache: Any):
        out = self._decoder(
            input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True, **{self._cache_kw: cache}
        )
        new_cache = getattr(out, "cache", None)
        if new_cache is None:
            new_cache = out.past_key_values
        return out.last_hidden_state, new_cache

    # ------------------------------------------------------------------ generation

    def _stop_ids(self, sampling: SamplingParams) -> tuple[int, ...]:
        stop = set(sampling.stop_token_ids)
        if not sampling.ignore_eos:
            stop.update(self.eos_token_ids)
        for t in stop:
            if not 0 <= t < self._vocab_size:
                raise ValueError(f"stop_token_ids: token id {t} outside [0, {self._vocab_size})")
        return tuple(sorted(stop))

    def generate(self, prompt_ids: Sequence[Sequence[int]], n: int, sampling: SamplingParams) -> list[list[Sample]]:
        """``n`` samples per state; ``result[i][j]`` continues ``prompt_ids[i]`` (new tokens only)."""
        if not isinstance(sampling, SamplingParams):
            raise ValueError(f"sampling: must be a SamplingParams, got {type(sampling).__name__}")
        n = check_n(n)
        prompts = check_prompts(
            prompt_ids, vocab_size=self._vocab_size, max_context=self._max_context, max_new_tokens=sampling.max_new_tokens
        )
        stop = self._stop_ids(sampling)
        gen = torch.Generator(device=self.device)
        gen.manual_seed(int(sampling.seed))
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
        per_batch = max(1, self.config.max_batch_sequences // n)
        results: list[list[Sample] | None] = [None] * len(prompts)
        if self.config.static_decode and self.config.packed_weights:
            from llm_harness.backends.packed_linear import PackCache

            self._packs = PackCache()  # one packing per call: the weights change between calls (training)
        try:
            with torch.inference_mode(), self._autocast():
                for start in range(0, len(order), per_batch):
                    idx = order[start : start + per_batch]
                    for i, samples in zip(idx, self._generate_batch([prompts[i] for i in idx], n, sampling, stop, gen)):
                        results[i] = samples
        finally:
            self._packs = None  # the packed copies are freed with the call
        return results  # type: ignore[return-value]

    def _generate_batch(
        self, prompts: list[list[int]], n: int, sampling: SamplingParams, stop: tuple[int, ...], gen: torch.Generator
    ) -> list[list[Sample]]:
        dev = self.device
        b = len(prompts)
        shared = common_prefix_length(prompts) if self.config.share_prefix and b > 1 else 0
        cache = self._new_cache()
        if shared:  # prefill the common prefix once, then expand its cache to the batch
            pre = torch.tensor([prompts[0][:shared]], dtype=torch.long, device=dev)
            ones = torch.ones_like(pre)
            _, cache = self._decode(pre, ones, torch.arange(shared, device=dev)[None], cache)
            cache.batch_repeat_interleave(b)
        width = max(len(p) for p in prompts) - shared
        ids = torch.full((b, width), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((b, width), dtype=torch.long)
        for r, p in enumerate(prompts):
            ids[r, width - len(p) + shared :] = torch.tensor(p[shared:], dtype=torch.long)
            mask[r, width - len(p) + shared :] = 1
        ids, mask = ids.to(dev), mask.to(dev)
        pos = (mask.cumsum(-1) - 1).clamp_min(0) + shared
        if shared:
            mask = torch.cat([mask.new_ones((b, shared)), mask], dim=1)
        hidden, cache = self._decode(ids, mask, pos, cache)
        logits = self._logits(hidden[:, -1])
        next_pos = pos[:, -1] + 1
        if n > 1:  # share the prefill: repeat the cache, not the prompt
            cache.batch_repeat_interleave(n)
            logits = logits.repeat_interleave(n, dim=0)
            mask = mask.repeat_interleave(n, dim=0)
            next_pos = next_pos.repeat_interleave(n, dim=0)
        rows = b * n
        t_max = sampling.max_new_tokens
        fast = None
        if self.config.static_decode:
            from llm_harness.backends.static_decode import StaticQwen2Decoder

            fast = StaticQwen2Decoder.from_cache(self.model, cache, t_max, self._packs)
            cache = None
        out_tok = torch.zeros((rows, t_max), dtype=torch.long, device=dev)
        out_lp = torch.zeros((rows, t_max), dtype=torch.float32, device=dev)
        length = torch.zeros(rows, dtype=torch.long, device=dev)
        stopped = torch.zeros(rows, dtype=torch.bool, device=dev)
        row_of = torch.arange(rows, device=dev)  # live row -> output row
        done = torch.zeros(rows, dtype=torch.bool, device=dev)  # per live row
        stop_t = torch.tensor(stop, dtype=torch.long, device=dev) if stop else None
        for t in range(t_max):
            tok, lp = sample_next_tokens(logits, sampling, gen, sampler=self.config.sampler)
            live = ~done
            rows_live = row_of[live]
            out_tok[rows_live, t] = tok[live]
            out_lp[rows_live, t] = lp[live].float()
            length[rows_live] += 1
            if stop_t is not None:
                hit = live & torch.isin(tok, stop_t)
                stopped[row_of[hit]] = True
                done = done | hit
            if t == t_max - 1:
                break
            n_done = int(done.sum())
            if n_done == done.shape[0]:
                break  # early exit: every sequence has finished
            if n_done > 0 and n_done >= self.config.compact_fraction * done.shape[0]:
                keep = torch.nonzero(~done).squeeze(-1)
                if fast is not None:
                    fast.select(keep)
                else:
                    cache.batch_select_indices(keep)
                mask, next_pos, row_of, tok = mask[keep], next_pos[keep], row_of[keep], tok[keep]
                done = done[keep]
            mask = torch.cat([mask, mask.new_ones((mask.shape[0], 1))], dim=1)
            if fast is not None:
                logits = self._logits(fast.step(tok, next_pos, mask), fast.head)
            else:
                hidden, cache = self._decode(tok[:, None], mask, next_pos[:, None], cache)
                logits = self._logits(hidden[:, -1])
            next_pos = next_pos + 1
        tok_np, lp_np = out_tok.cpu().numpy(), out_lp.cpu().numpy()
        len_np, stop_np = length.cpu().numpy(), stopped.cpu().numpy()
        out: list[list[Sample]] = []
        for i in range(b):
            samples = []
            for j in range(n):
                r = i * n + j
                k = int(len_np[r])
                samples.append(
                    Sample(
                        token_ids=tuple(int(v) for v in tok_np[r, :k]),
                        sampling_logprobs=tuple(float(v) for v in lp_np[r, :k]),
                        finish_reason="stop" if stop_np[r] else "length",
                    )
                )
            out.append(samples)
        return out

    # ------------------------------------------------------------------ scoring

    def score(
        self,
        context_ids: Sequence[int],
        completion_ids: Sequence[int],
        *,
        temperature: float = 1.0,
        top_k: int = 0,
        top_p: float = 1.0,
        with_entropy: bool = True,
    ) -> ScoreResult:
        """Teacher-forced ``log q`` and full-vocabulary entropies of ``completion_ids`` (protocol.py)."""
        return self.score_batch(
            [context_ids], [completion_ids], temperature=temperature, top_k=top_k, top_p=top_p, with_entropy=with_entropy
        )[0]

    def score_batch(
        self,
        context_ids: Sequence[Sequence[int]],
        completion_ids: Sequence[Sequence[int]],
        *,
        temperature: float = 1.0,
        top_k: int = 0,
        top_p: float = 1.0,
        with_entropy: bool = True,
    ) -> list[ScoreResult]:
        """``score`` for many pairs: right-padded micro-batches of at most ``score_max_batch_tokens``."""
        check_score_params(temperature, top_k, top_p)
        ctxs, comps = check_score_pairs(
            context_ids, completion_ids, vocab_size=self._vocab_size, max_context=self._max_context
        )
        truncated = top_k > 0 or top_p < 1.0
        chunk = rows_per_chunk(self._vocab_size, self.config.score_chunk_bytes, truncated=truncated)
        order = sorted(range(len(ctxs)), key=lambda i: len(ctxs[i]) + len(comps[i]))
        results: list[ScoreResult | None] = [None] * len(ctxs)
        with torch.inference_mode(), self._autocast():
            start = 0
            while start < len(order):
                # grow the micro-batch while rows x longest stays within the token budget
                stop = start + 1
                while stop < len(order):
                    longest = len(ctxs[order[stop]]) + len(comps[order[stop]])
                    if (stop - start + 1) * longest > self.config.score_max_batch_tokens:
                        break
                    stop += 1
                idx = order[start:stop]
                for i, res in zip(idx, self._score_batch([ctxs[i] for i in idx], [comps[i] for i in idx],
                                                         temperature, top_k, top_p, with_entropy, chunk)):
                    results[i] = res
                start = stop
        return results  # type: ignore[return-value]

    def _score_batch(self, ctxs, comps, temperature, top_k, top_p, with_entropy, chunk) -> list[ScoreResult]:
        dev = self.device
        seqs = [c + y for c, y in zip(ctxs, comps)]
        b, width = len(seqs), max(len(s) for s in seqs)
        ids = torch.full((b, width), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((b, width), dtype=torch.long)
        for r, s in enumerate(seqs):
            ids[r, : len(s)] = torch.tensor(s, dtype=torch.long)
            mask[r, : len(s)] = 1
        rows, cols, targets = [], [], []
        for r, (c, y) in enumerate(zip(ctxs, comps)):
            # position p predicts token p + 1: completion token k sits at len(c) + k
            rows.extend([r] * len(y))
            cols.extend(range(len(c) - 1, len(c) - 1 + len(y)))
            targets.extend(y)
        if not targets:
            return [ScoreResult(np.zeros(0), np.zeros(0) if with_entropy else None) for _ in seqs]
        ids, mask = ids.to(dev), mask.to(dev)
        pos = torch.arange(width, device=dev)[None].expand(b, width)
        hidden = self._decoder(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=False).last_hidden_state
        h = hidden[torch.tensor(rows, device=dev), torch.tensor(cols, device=dev)]
        del hidden
        workspace = None
        if self.config.keep_score_workspace and not (top_k > 0 or top_p < 1.0):
            rows = min(chunk, h.shape[0])
            if self._workspace is None or self._workspace[0].shape[0] < rows:
                self._workspace = make_workspace(min(chunk, max(rows, 64)), self._vocab_size, dev)
            workspace = self._workspace
        lp, ent = chunked_logprobs_entropy(
            h,
            self._head if not self._softcap else self._logits,
            torch.tensor(targets, dtype=torch.long, device=dev),
            workspace=workspace,
            chunk_size=chunk,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            with_entropy=with_entropy,
        )
        lp_np = lp.double().cpu().numpy()
        ent_np = ent.double().cpu().numpy() if ent is not None else None
        out, k = [], 0
        for y in comps:
            m = len(y)
            out.append(ScoreResult(lp_np[k : k + m].copy(), ent_np[k : k + m].copy() if ent_np is not None else None))
            k += m
        return out
