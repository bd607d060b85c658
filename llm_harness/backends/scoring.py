"""Exact per-token log-probs and full-vocabulary entropies in bounded memory (ExTra §4.2 entropy).

Given final hidden states ``h[N, H]`` of the positions that predict a completion, the output
head ``W[V, H]`` and the completion tokens ``y[N]``, compute for every position ``t``::

    z_t  = (W h_t) / T                           # logits, float32
    lp_t = log q(y_t)                            # q as in protocol.py (top-k/top-p optional)
    H_t  = -Σ_v softmax(z_t)_v log softmax(z_t)_v   # full vocabulary, untruncated

without materialising the ``[N, V]`` logits: positions are processed in chunks of ``c`` rows,
and each chunk holds only its own ``[c, V]`` logits. With ``m = max_v z``, ``y = z - m``,
``e = exp(y)``, ``s = Σ e``: ``lp = z_y - m - log s`` and ``H = log s - (Σ e·y) / s`` — the shifted
form avoids the cancellation of ``logsumexp(z) - E[z]`` at large logits.

Peak memory (beyond ``h`` and the weights):

* inference (no autograd, no truncation — what ``score`` uses): two ``[c, V]`` float32 buffers,
  ``z`` and ``e``, allocated once per call and reused by every chunk (``8·c·V`` bytes; plus a
  ``[c, V]`` 16-bit head output when the head is not float32);
* with autograd or top-k/top-p truncation: fresh tensors per chunk, about ``c·V·(4+4+4+2)``
  bytes, plus ``c·V·(4+8+2+4)`` for the sort of the truncation.

``rows_per_chunk`` turns a byte budget into ``c`` with the constants ``BYTES_PER_ENTRY`` (10) and
``BYTES_PER_ENTRY_TRUNCATED`` (18 more); they cover the inference path with room to spare.
Example: V = 152,064 and the default 256 MiB budget give c = 176 rows; scoring 8 sequences of
1,024 tokens would otherwise need a 5 GB ``[B, T, V]`` float32 logits tensor.

Speed note: chunking over positions re-reads the head weight once per chunk, so chunks should not
be tiny (on CPU ``c`` below ~64 rows is measurably slower); the extra work of the entropy itself is
a few elementwise passes over ``[c, V]`` (O(N·V)) next to the O(N·V·H) head product.

With autograd enabled and ``checkpoint=True`` (the default when ``h`` requires grad), each chunk
is recomputed in the backward pass (``torch.utils.checkpoint``) so training memory stays bounded
too.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch.utils.checkpoint import checkpoint as _checkpoint

from llm_harness.backends.sampling import truncate_logits
from vsr_util.checks import check_number

#: Default byte budget for one chunk's ``[c, V]`` working set.
DEFAULT_CHUNK_BYTES = 256 * 2**20

#: Bytes per (row, vocab entry) in one chunk: z (fp32) + e (fp32) + a 16-bit head output.
BYTES_PER_ENTRY = 4 + 4 + 2
#: Extra bytes per entry when top-k/top-p truncation sorts the row.
BYTES_PER_ENTRY_TRUNCATED = 4 + 8 + 2 + 4


def rows_per_chunk(vocab_size: int, max_chunk_bytes: int = DEFAULT_CHUNK_BYTES, *, truncated: bool = False) -> int:
    """Rows ``c`` such that one chunk's ``[c, V]`` working set stays within ``max_chunk_bytes`` (>= 1)."""
    check_number("vocab_size", vocab_size, 1, integer=True)
    check_number("max_chunk_bytes", max_chunk_bytes, 1, integer=True)
    per_row = vocab_size * (BYTES_PER_ENTRY + (BYTES_PER_ENTRY_TRUNCATED if truncated else 0))
    return max(1, int(max_chunk_bytes) // per_row)


def _truncated(top_k: int, top_p: float) -> bool:
    return top_k > 0 or top_p < 1.0


def _chunk_stats(
    h: torch.Tensor,
    y: torch.Tensor,
    head: Callable[[torch.Tensor], torch.Tensor],
    temperature: float,
    top_k: int,
    top_p: float,
    with_entropy: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Autograd-friendly chunk (fresh tensors, no in-place on tracked values)."""
    z = head(h).float()
    if temperature != 1.0:
        z = z / temperature
    z_y = z.gather(-1, y[:, None]).squeeze(-1)
    if _truncated(top_k, top_p):
        zt = truncate_logits(z, top_k, top_p)
        lp = zt.gather(-1, y[:, None]).squeeze(-1) - torch.logsumexp(zt, dim=-1)
        del zt
        if not with_entropy:
            return lp, lp.new_zeros(())
    # The max only shifts the exponent; its gradient cancels exactly, so it is detached.
    m = z.detach().amax(dim=-1, keepdim=True)
    y_shift = z - m
    e = torch.exp(y_shift)
    s = e.sum(dim=-1)
    log_s = torch.log(s)
    if not _truncated(top_k, top_p):
        lp = z_y - m.squeeze(-1) - log_s
    if not with_entropy:
        return lp, lp.new_zeros(())
    ent = log_s - (e * y_shift).sum(dim=-1) / s
    return lp, ent


def _chunk_stats_inplace(
    h: torch.Tensor,
    y: torch.Tensor,
    head: Callable[[torch.Tensor], torch.Tensor],
    temperature: float,
    with_entropy: bool,
    z_buf: torch.Tensor,
    e_buf: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """No-grad, untruncated chunk computed in two reused ``[c, V]`` buffers.

    Fresh multi-megabyte tensors cost page faults on every allocation (on CPU this dominated the
    exp itself), so the logits and the exponentials are written into buffers allocated once per
    call; an ``nn.Linear`` head without bias writes its output straight into the buffer.
    """
    c = h.shape[0]
    z, e = z_buf[:c], e_buf[:c]
    weight = getattr(head, "weight", None)
    if (
        isinstance(head, torch.nn.Linear)
        and head.bias is None
        and weight.dtype == torch.float32
        and h.dtype == torch.float32
    ):
        torch.mm(h, weight.t(), out=z)
    else:
        z.copy_(head(h))
    if temperature != 1.0:
        z.div_(temperature)
    z_y = z.gather(-1, y[:, None]).squeeze(-1)
    m = z.amax(dim=-1, keepdim=True)
    z.sub_(m)
    torch.exp(z, out=e)
    s = e.sum(dim=-1)
    log_s = torch.log(s)
    lp = z_y - m.squeeze(-1) - log_s
    if not with_entropy:
        return lp, lp.new_zeros(())
    ent = log_s - e.mul_(z).sum(dim=-1) / s
    return lp, ent


def chunked_logprobs_entropy(
    hidden: torch.Tensor,
    head: Callable[[torch.Tensor], torch.Tensor],
    targets: torch.Tensor,
    *,
    chunk_size: int,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    with_entropy: bool = True,
    checkpoint: bool | None = None,
    workspace: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per-position ``(logprobs[N], entropies[N])`` from ``hidden[N, H]`` and ``targets[N]`` (module doc).

    ``head`` maps ``[c, H] -> [c, V]`` logits (the model's output embedding). ``chunk_size`` is
    the number of positions per chunk (see ``rows_per_chunk``). Outputs are float32;
    ``entropies`` is None when ``with_entropy`` is False. ``checkpoint`` (default: whether
    autograd will track ``hidden``) recomputes each chunk in backward to keep memory bounded.
    ``workspace`` (from ``make_workspace``) supplies the two inference buffers so that repeated
    calls do not allocate (and page-fault) them again; it is used when it is large enough.
    """
    if hidden.ndim != 2:
        raise ValueError(f"hidden: expected 2 dimensions [N, H], got shape {tuple(hidden.shape)}")
    if targets.ndim != 1 or targets.shape[0] != hidden.shape[0]:
        raise ValueError(f"targets: expected shape ({hidden.shape[0]},), got {tuple(targets.shape)}")
    check_number("chunk_size", chunk_size, 1, integer=True)
    check_number("temperature", temperature, 0, lo_open=True)
    n = hidden.shape[0]
    if checkpoint is None:
        checkpoint = torch.is_grad_enabled() and hidden.requires_grad
    # without autograd, untruncated chunks reuse two preallocated [c, V] buffers
    fast = not torch.is_grad_enabled() and not _truncated(top_k, top_p) and n > 0
    if fast:
        rows = min(chunk_size, n)
        vocab = _vocab_of(head, hidden[:1])
        if workspace is not None and _fits(workspace, rows, vocab, hidden.device):
            z_buf, e_buf = workspace
        else:
            z_buf, e_buf = make_workspace(rows, vocab, hidden.device)
    lps, ents = [], []
    for start in range(0, n, chunk_size):
        h = hidden[start : start + chunk_size]
        y = targets[start : start + chunk_size]
        if fast:
            lp, ent = _chunk_stats_inplace(h, y, head, temperature, with_entropy, z_buf, e_buf)
        elif checkpoint:
            lp, ent = _checkpoint(_chunk_stats, h, y, head, temperature, top_k, top_p, with_entropy, use_reentrant=False)
        else:
            lp, ent = _chunk_stats(h, y, head, temperature, top_k, top_p, with_entropy)
        lps.append(lp)
        ents.append(ent)
    if n == 0:
        empty = hidden.new_zeros((0,), dtype=torch.float32)
        return empty, (empty.clone() if with_entropy else None)
    lp_all = torch.cat(lps)
    return lp_all, (torch.cat(ents) if with_entropy else None)


def _vocab_of(head: Callable[[torch.Tensor], torch.Tensor], h1: torch.Tensor) -> int:
    """Output size of ``head`` (from its weight when it has one, else from one evaluated row)."""
    if isinstance(head, torch.nn.Linear):
        return int(head.out_features)
    with torch.no_grad():
        return int(head(h1).shape[-1])


def make_workspace(rows: int, vocab: int, device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """The two ``[rows, vocab]`` float32 buffers of the inference path (``8·rows·vocab`` bytes)."""
    z = torch.empty((rows, vocab), dtype=torch.float32, device=device)
    return z, torch.empty_like(z)


def _fits(ws: tuple[torch.Tensor, torch.Tensor], rows: int, vocab: int, device: torch.device) -> bool:
    z, e = ws
    return (
        z.shape[0] >= rows
        and e.shape[0] >= rows
        and z.shape[1] == vocab == e.shape[1]
        and z.dtype == torch.float32 == e.dtype
        and z.device == device == e.device
    )
