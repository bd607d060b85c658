"""The loss pass with each group's prompt run once (``run.group_prompt_once``).

Why: a GRPO batch holds ``G`` rows per start state, and every row repeats its state's context (prompt, and for
a prefix restart the prefix) before its first trained token. The plain pass runs that context through the
decoder ``G`` times; here each distinct context runs once and its key/value cache is selected to the rows that
share it (Replay §3, Eq. 1: the group shares its prompt by construction, so nothing is approximated).

Row ``b``'s context is ``input_ids[b, :c_b]`` with ``c_b = f_b + 1``, where ``f_b`` is the first position whose
target ``input_ids[b, f_b + 1]`` is trained (``loss_mask[b, f_b] = 1``). Rows with equal contexts form a
context group::

    prefill  the U distinct contexts, right-padded to [U, C]              (decoder, one pass)
    hidden   at column c_b - 1 of row b's context -> target f_b           (the first trained token)
    select   the cache's U rows to the B rows (``batch_select_indices``: autograd flows to each context once
             per row, as in the plain pass)
    continue input_ids[b, c_b:len_b] right-padded to [B, R] on that cache, positions c_b.., mask
             [context mask of b's group | b's own mask]                  -> targets c_b, c_b + 1, ...

The result is the plain pass's hidden states at every trained position (other positions are zero) up to float
summation order, for any decoder whose ``forward`` takes ``position_ids``, a 2-D ``attention_mask`` over cache
plus new tokens and a ``DynamicCache`` (tests: Qwen2 and Llama, log-probs and gradients against the plain pass).
Rows must be right-padded (ones from column 0, then zeros), as :func:`llm_harness.trainer.data.build_batch`
makes them; :func:`group_rows` refuses others.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["ContextGroups", "group_rows", "group_shared_hidden"]


@dataclass(frozen=True)
class ContextGroups:
    """Rows grouped by their context (module doc). Tensors on the batch's device."""

    first: torch.Tensor
    """``c_b`` per row: context length (0 for a row without any trained target; such rows are skipped)."""
    group: torch.Tensor
    """Context-group index per row (-1 for skipped rows)."""
    leader: torch.Tensor
    """``[U]``: a row holding each group's context."""
    lengths: torch.Tensor
    """Real tokens per row (its attention-mask sum)."""

    @property
    def n_groups(self) -> int:
        return int(self.leader.shape[0])


def group_rows(input_ids: torch.Tensor, attention_mask: torch.Tensor, loss_mask: torch.Tensor) -> ContextGroups:
    """Group the rows of a right-padded batch by context (module doc); ValueError on other layouts."""
    if input_ids.dim() != 2 or attention_mask.shape != input_ids.shape:
        raise ValueError(f"input_ids {tuple(input_ids.shape)} / attention_mask {tuple(attention_mask.shape)}: "
                         "expected the same [rows, columns] shape")
    B, L = input_ids.shape
    if loss_mask.shape != (B, L - 1):
        raise ValueError(f"loss_mask: expected shape {(B, L - 1)}, got {tuple(loss_mask.shape)}")
    lengths = attention_mask.sum(dim=1)
    cols = torch.arange(L, device=input_ids.device)[None]
    if not torch.equal(attention_mask != 0, cols < lengths[:, None]):
        raise ValueError("attention_mask: the group-shared pass needs right-padded rows (ones from column 0, then zeros)")
    padded = (loss_mask > 0) & (cols[:, 1:] >= lengths[:, None])  # a target that is not a real token
    if bool(padded.any()):
        b, j = (int(v) for v in padded.nonzero()[0])
        raise ValueError(f"loss_mask: row {b} trains target {j + 1}, a padding position (the row has {int(lengths[b])} "
                         "real tokens)")
    has = (loss_mask > 0).any(dim=1)
    first = torch.where(has, (loss_mask > 0).to(torch.int64).argmax(dim=1) + 1, torch.zeros_like(lengths))
    ids = input_ids.tolist()
    key_of: dict[tuple[int, ...], int] = {}
    group, leader = [], []
    for b, c in enumerate(first.tolist()):
        if c == 0:
            group.append(-1)
            continue
        key = tuple(ids[b][:c])
        g = key_of.setdefault(key, len(key_of))
        if g == len(leader):
            leader.append(b)
        group.append(g)
    dev = input_ids.device
    return ContextGroups(first=first, group=torch.tensor(group, dtype=torch.long, device=dev),
                         leader=torch.tensor(leader, dtype=torch.long, device=dev), lengths=lengths)


def group_shared_hidden(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                        loss_mask: torch.Tensor) -> torch.Tensor:
    """Final hidden states ``[B, L - 1, hidden]`` at every trained position (``loss_mask`` 1; zeros elsewhere)
    with each context run once (module doc); autograd flows through the model's parameters."""
    groups = group_rows(input_ids, attention_mask, loss_mask)
    decoder = model.get_decoder()
    B, L = input_ids.shape
    dev = input_ids.device
    rows = (groups.group >= 0).nonzero().squeeze(1)  # rows with a trained target
    if rows.numel() == 0:
        hidden = decoder.get_input_embeddings().weight.new_zeros((B, L - 1, model.config.hidden_size))
        return hidden
    ctx_len = groups.first[groups.leader]  # [U]
    C = int(ctx_len.max())
    ctx_cols = torch.arange(C, device=dev)[None]
    ctx_mask = (ctx_cols < ctx_len[:, None]).to(attention_mask.dtype)  # [U, C], right-padded
    ctx_ids = torch.where(ctx_mask.bool(), input_ids[groups.leader, :C], input_ids.new_zeros(()))
    from llm_harness.backends.hf_backend import cache_keyword, new_dynamic_cache

    cache = new_dynamic_cache(model.config)
    kw = cache_keyword(decoder)
    pre = decoder(input_ids=ctx_ids, attention_mask=ctx_mask, position_ids=ctx_cols.expand(ctx_ids.shape[0], -1),
                  use_cache=True, **{kw: cache})  # fills ``cache`` in place
    g = groups.group[rows]
    c = groups.first[rows]
    first_hidden = pre.last_hidden_state[g, c - 1]  # [B', hidden]: the first trained target of each row
    # the continuation: row b's tokens after its context, right-padded
    rest = groups.lengths[rows] - c  # [B'] (>= 0)
    R = int(rest.max())
    H = first_hidden.shape[-1]
    out = first_hidden.new_zeros((B, L - 1, H))
    out = out.index_put((rows, c - 1), first_hidden)
    if R == 0:
        return out
    cache.batch_select_indices(g)
    r_cols = torch.arange(R, device=dev)[None]
    r_mask = r_cols < rest[:, None]  # [B', R]
    src = (c[:, None] + r_cols).clamp(max=L - 1)
    r_ids = torch.where(r_mask, input_ids[rows[:, None], src], input_ids.new_zeros(()))
    mask = torch.cat([ctx_mask[g], r_mask.to(attention_mask.dtype)], dim=1)  # [B', C + R]
    pos = c[:, None] + r_cols
    h = decoder(input_ids=r_ids, attention_mask=mask, position_ids=pos, use_cache=True,
                **{kw: cache}).last_hidden_state  # [B', R, hidden]
    # continuation column j of row b is absolute position c_b + j, i.e. the hidden of target c_b + j (< L - 1)
    keep = r_mask & (pos < L - 1)
    bi, ji = keep.nonzero(as_tuple=True)
    return out.index_put((rows[bi], pos[bi, ji]), h[bi, ji])
