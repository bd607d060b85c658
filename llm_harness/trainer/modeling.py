"""Model and tokenizer loading for the trainer, and the training forward pass.

* :class:`CharTokenizer` — a dependency-free character tokenizer over the step-arithmetic
  alphabet (``0 <pad>``, ``1 <eos>``, then one id per character), for random tiny models in tests
  and smoke runs (the shipped test-bed models carry their own transformers tokenizer).
* :class:`Codec` — ``encode(text)`` / ``decode(ids)`` over either tokenizer kind.
* :func:`sequence_logprobs` — per-token log-probs (and full-vocabulary entropies) of the
  masked target positions under the current policy, through the backend's chunked head
  (``llm_harness.backends.scoring``), with autograd.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch

from llm_harness.backends.scoring import chunked_logprobs_entropy, rows_per_chunk
from llm_harness.tasks import ALPHABET
from llm_harness.trainer.packed_forward import packed_hidden, right_padded
from vsr_util.registry import Registry
from llm_harness.trainer.config import ModelConfig

__all__ = ["CharTokenizer", "Codec", "build_model", "sequence_logprobs"]


#: name -> alphabet of a random model's :class:`CharTokenizer` (``model.alphabet``)
ALPHABETS: Registry[str] = Registry("alphabet", {
    "arith": ALPHABET,
    "text": "\n" + "".join(chr(c) for c in range(32, 127)) + "\u221a",
})


class CharTokenizer:
    """One id per character of ``alphabet``; ids 0 and 1 are ``<pad>`` and ``<eos>``."""

    pad_token_id = 0
    eos_token_id = 1
    chat_template = None

    def __init__(self, alphabet: str = ALPHABET):
        self.alphabet = alphabet
        self._id = {c: i + 2 for i, c in enumerate(alphabet)}
        self.vocab_size = len(alphabet) + 2

    def encode_text(self, text: str) -> list[int]:
        """Ids of ``text`` (unknown characters raise ValueError)."""
        try:
            return [self._id[c] for c in text]
        except KeyError as exc:
            raise ValueError(f"text: character {exc.args[0]!r} not in the tokenizer alphabet") from None

    def decode_ids(self, ids: Sequence[int]) -> str:
        """Text of ``ids`` (``<pad>``/``<eos>`` rendered as ``\\x00``/``\\x01`` so they never vanish)."""
        return "".join(self.alphabet[i - 2] if i >= 2 else chr(i) for i in ids)


@dataclass(frozen=True)
class Codec:
    """Text <-> ids for a :class:`CharTokenizer` or a transformers tokenizer."""

    tokenizer: Any

    def encode(self, text: str) -> tuple[int, ...]:
        """Token ids of ``text`` without special tokens."""
        tok = self.tokenizer
        if hasattr(tok, "encode_text"):
            return tuple(tok.encode_text(text))
        return tuple(tok(text, add_special_tokens=False)["input_ids"])

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids`` with special tokens kept as text."""
        tok = self.tokenizer
        if hasattr(tok, "decode_ids"):
            return tok.decode_ids(list(ids))
        return tok.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)

    @property
    def pad_token_id(self) -> int:
        """Padding id (falls back to EOS)."""
        tok = self.tokenizer
        pid = getattr(tok, "pad_token_id", None)
        if pid is None:
            pid = getattr(tok, "eos_token_id", None)
        if pid is None:
            raise ValueError("tokenizer: defines neither a pad nor an EOS token")
        return int(pid)


def build_model(cfg: ModelConfig, seed: int) -> tuple[Any, Any]:
    """``(model, tokenizer)``: a checkpoint folder, or a random tiny Qwen2 with :class:`CharTokenizer`."""
    import transformers

    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[cfg.dtype]
    device = cfg.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if cfg.random_init:
        tok = CharTokenizer(ALPHABETS.lookup(cfg.alphabet, where="model.alphabet"))
        mcfg = transformers.Qwen2Config(
            vocab_size=tok.vocab_size,
            hidden_size=cfg.hidden_size,
            num_hidden_layers=cfg.num_layers,
            num_attention_heads=cfg.num_heads,
            num_key_value_heads=max(1, cfg.num_heads // 2) if cfg.num_heads % 2 == 0 else cfg.num_heads,
            intermediate_size=2 * cfg.hidden_size,
            max_position_embeddings=cfg.max_context,
            eos_token_id=tok.eos_token_id,
            pad_token_id=tok.pad_token_id,
            bos_token_id=tok.eos_token_id,
            tie_word_embeddings=True,
        )
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = transformers.Qwen2ForCausalLM(mcfg)
        model.generation_config.eos_token_id = tok.eos_token_id
        return model.to(device=device, dtype=dtype), tok
    from pathlib import Path

    from llm_harness.models.gguf_import import resolve_model_folder

    # a registered real model (`vsr model import NAME`: its verified folder in the cache), a path, or an alias
    # recorded by `vsr model import --name`
    path = resolve_model_folder(cfg.path, "model.path")
    if not path.is_absolute() and not path.exists():
        # a repository-relative path (configs/ name checkpoints as llm_harness/testbed/...)
        alt = Path(__file__).resolve().parents[2] / path
        path = alt if alt.exists() else path
    if not (path / "config.json").is_file():
        raise ValueError(f"model.path: {cfg.path!r} is not a saved model folder (no config.json)")
    check_safetensors_folder(path, "model.path")
    kw = "dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype"
    model = transformers.AutoModelForCausalLM.from_pretrained(path, local_files_only=True, **{kw: dtype}).to(device)
    from llm_harness.tasks.coverage import keep_unknown_token

    tok = keep_unknown_token(transformers.AutoTokenizer.from_pretrained(path, local_files_only=True))
    return model, tok


#: weight files that are pickles: loading one can run arbitrary code
_PICKLED_WEIGHTS = ("pytorch_model.bin", "pytorch_model.bin.index.json", "tf_model.h5", "model.ckpt.index", "flax_model.msgpack")


def check_safetensors_folder(path: Any, field: str) -> None:
    """Refuse a model folder whose weights are not safetensors, before transformers sees it: its pickle loader
    would either refuse with advice to set ``weights_only=False`` (which runs whatever the pickle holds) or load
    it. The message names the file and a safe conversion. A folder written by ``vsr model import`` must match its
    manifest (every file hashed once, the verdict remembered): a damaged or missing file is refused by name."""
    from pathlib import Path

    from llm_harness.models.manifest import check_model_folder

    path = Path(path)
    check_model_folder(path, field)
    if any(path.glob("*.safetensors")) or (path / "model.safetensors.index.json").is_file():
        return
    found = [n for n in _PICKLED_WEIGHTS if (path / n).is_file()]
    if found:
        raise ValueError(
            f"{field}: {path} holds {found[0]}, not safetensors; this toolkit loads safetensors only (a pickled "
            "checkpoint can run code when loaded). If you trust the file, convert it once: "
            "`python -c \"from transformers import AutoModelForCausalLM as M; "
            f"M.from_pretrained('{path}').save_pretrained('{path}-safetensors')\"` and pass that folder")
    raise ValueError(f"{field}: {path} has config.json but no *.safetensors weights")


def _shared_length(input_ids: torch.Tensor, loss_mask: torch.Tensor) -> int:
    """Tokens common to every row before any row's first target (0 for one row or a row without targets)."""
    from llm_harness.backends.hf_backend import common_prefix_length

    if input_ids.shape[0] < 2 or not bool((loss_mask > 0).any(dim=1).all()):
        return 0
    first = int((loss_mask > 0).to(torch.int64).argmax(dim=1).min())  # hidden position of the earliest target
    return common_prefix_length(input_ids[:, : first + 1].tolist())


def sequence_logprobs(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    loss_mask: torch.Tensor,
    *,
    temperature: float = 1.0,
    top_p: float = 1.0,
    with_entropy: bool = True,
    chunk_bytes: int = 64 * 2**20,
    share_prefix: bool = False,
    packed: bool = False,
    group_prompt: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(logprobs[B, L-1], entropies[B, L-1] | None)`` of targets ``input_ids[:, 1:]``, filled only
    where ``loss_mask`` is 1 (0 elsewhere). Only masked positions go through the output head.

    ``share_prefix`` (rows right-padded, as ``build_batch`` makes them): the ``n`` tokens common to
    every row before its first target run through the decoder once, their cache is expanded to the
    ``B`` rows and ``input_ids[:, n:]`` runs on it (positions ``n..``; gradients flow into the shared
    part once per row, as without sharing). Multi-turn rows all start with the task instruction;
    the result equals the unshared pass up to float rounding.

    ``packed`` (Qwen2-family models): :func:`~llm_harness.trainer.packed_forward.packed_hidden`, the decoder on
    the real tokens only, when the rows are right-padded (else the HF forward); not with ``share_prefix``.

    ``group_prompt``: each distinct context (the tokens before a row's first target: a group's prompt, or prompt
    and prefix) runs through the decoder once for all rows that share it
    (:func:`~llm_harness.trainer.group_prompt.group_shared_hidden`), when the rows are right-padded; an alternative
    to ``share_prefix``. With ``packed`` as well (Qwen2-family models): both at once
    (:func:`~llm_harness.trainer.packed_group.packed_group_hidden`)."""
    if share_prefix and (packed or group_prompt):
        raise ValueError("sequence_logprobs: share_prefix is an alternative to packed and group_prompt; pass one")
    decoder = model.get_decoder()
    head = model.get_output_embeddings()
    n = _shared_length(input_ids, loss_mask) if share_prefix else 0
    if group_prompt and packed and right_padded(attention_mask):
        from llm_harness.trainer.packed_group import packed_group_hidden

        hidden = packed_group_hidden(model, input_ids, attention_mask, loss_mask)
    elif group_prompt and right_padded(attention_mask):
        from llm_harness.trainer.group_prompt import group_shared_hidden

        hidden = group_shared_hidden(model, input_ids, attention_mask, loss_mask)
    elif packed and right_padded(attention_mask):
        hidden = packed_hidden(model, input_ids, attention_mask)[:, :-1]
    elif n == 0:
        hidden = decoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state[:, :-1]
    else:
        from llm_harness.backends.hf_backend import cache_keyword

        cache_kw = cache_keyword(decoder)
        pre = decoder(input_ids=input_ids[:1, :n], use_cache=True)
        cache = getattr(pre, "cache", None)
        cache = pre.past_key_values if cache is None else cache
        cache.batch_repeat_interleave(input_ids.shape[0])
        pos = torch.arange(n, input_ids.shape[1], device=input_ids.device)[None].expand(input_ids.shape[0], -1)
        rest = decoder(input_ids=input_ids[:, n:], attention_mask=attention_mask, position_ids=pos, use_cache=True,
                       **{cache_kw: cache}).last_hidden_state[:, :-1]
        # positions < n carry no target: pad them so the selection below sees the usual [B, L-1] layout
        hidden = torch.cat([rest.new_zeros((rest.shape[0], n, rest.shape[2])), rest], dim=1)
    sel = loss_mask > 0
    h = hidden[sel]
    y = input_ids[:, 1:][sel]
    chunk = rows_per_chunk(int(head.weight.shape[0]), chunk_bytes, truncated=top_p < 1.0)
    lp, ent = chunked_logprobs_entropy(
        h, head, y, chunk_size=chunk, temperature=temperature, top_p=top_p, with_entropy=with_entropy, checkpoint=False
    )
    out = torch.zeros(loss_mask.shape, dtype=lp.dtype, device=lp.device)
    out = out.masked_scatter(sel, lp)
    ent_out = None
    if ent is not None:
        ent_out = torch.zeros(loss_mask.shape, dtype=ent.dtype, device=ent.device).masked_scatter(sel, ent.detach())
    return out, ent_out
