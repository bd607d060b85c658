"""Rollout-level |A| replay on verl 0.9.1: the toolkit's :class:`~llm_harness.methods.replay.ReplayPlugin`
choosing which stored TransferQueue rows join a step's actor update (Replay Alg. 1, §4).

verl 0.9.1 has no cross-step replay (its v1 ``ReplayBuffer`` is a staleness queue of rows not yet
trained on). The least invasive route is the ``vsr_sync`` trainer's advantage stage, which this
toolkit already overrides (:mod:`.trainer`): after the fresh rows' advantages are written, the
stage

1. rebuilds the fresh rows as the toolkit's groups (one per ``uid``; reward ``Σ_t rm_scores``,
   birth advantage = the row's mean advantage over its response mask — exact for outcome
   estimators, whose advantage is constant over the response) and asks the plug-in's ``compose``
   (``fresh_anchored``: every fresh row stays, ``round(r · B')`` stored rollouts are drawn
   ``∝ (|A| + ε)^α`` without replacement, units older than ``τ_max`` evicted, nothing before
   ``warmup``);
2. puts the drawn rows back into TransferQueue under new keys ``replay<t>/<birth key>`` with **every
   field as it was stored at birth** — ``advantages`` (frozen), ``old_log_probs`` (the behaviour
   policy's, the PPO ratio's denominator), ``ref_log_prob``, ``rollout_log_probs`` — and the tag
   ``replayed: True``, and appends them to the step's batch (verl clears them with the batch at the
   end of the step);
3. stores the fresh rows (all fields, on the driver's CPU) through the plug-in's ``after_step``.

Departures from the toolkit's trainer, each forced by verl and documented:

* verl's actor needs whole PPO mini-batches (``_get_required_batch_multiple``: data-parallel size
  and ``ppo_mini_batch_size · n``), so the drawn count is rounded *down* to that multiple (the
  plug-in draws in priority-key order, so the truncated draw is itself a weighted draw without
  replacement); the combined batch is re-balanced across data-parallel ranks;
* verl keeps the mini-batch *size*, so replayed rows add optimizer steps (the toolkit's trainer
  keeps the mini-batch *count*);
* ``B'`` = the rows verl trains on this step (after its own DAPO ``filter_groups`` if on), padding
  rows excluded; there is no separate zero-variance filter (all-equal groups have ``|A| = 0`` and
  priority ``ε^α``);
* only ``level: rollout`` with ``composition: fresh_anchored`` (the paper's method); the query-level
  and pool baselines run on the toolkit's trainer;
* the buffer lives in the trainer process and is not part of verl's checkpoint (a resumed run starts
  with an empty buffer and replays from its first step after ``warmup``, with a one-step buffer then);
* ``trainer.v1.sync.parameter_sync_step`` must be 1 (sub-steps of one global step would share its
  birth step and redraw the same rows; refused);
* verl's step metrics (scores, lengths, advantages) leave the replayed rows out; ``replay_*`` metrics
  describe the draw before the rounding.

Memory: ``τ_max`` steps of rows with every TransferQueue field (token ids, position ids, masks,
per-token log-probs, advantages, entropies, the raw prompt) are kept on the driver — at least
``τ_max · B · L · 40`` bytes.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Mapping, Sequence

import numpy as np
import torch

from llm_harness.methods.common import plugin_config
from llm_harness.methods.replay import PER_SAMPLE, ReplayConfig, ReplayPlugin
from llm_harness.tasks import Problem
from llm_harness.trainer.data import RolloutGroup, StartState
from llm_harness.trainer.step import Step

__all__ = ["KEY", "VerlReplay", "row_dicts"]

#: ``info[PER_SAMPLE][KEY]``: the TransferQueue key a stored rollout was born under
KEY = "verl_key"
WHERE = "algorithm.vsr.replay"


def row_dicts(rows: Any) -> list[dict[str, Any]]:
    """The rows of a fetched TensorDict as plain per-row dicts (nested / stacked tensors unbound,
    non-tensor stacks as their objects) — the inverse of verl's ``list_of_dict_to_tensordict``."""
    n = int(rows.batch_size[0])
    cols: dict[str, list[Any]] = {}
    for f in rows.keys():
        v = rows[f]
        if isinstance(v, torch.Tensor):
            vals = list(v.unbind(0))
        else:
            vals = list(v.tolist() if hasattr(v, "tolist") else v)
        if len(vals) != n:
            raise ValueError(f"{WHERE}: field {f!r} has {len(vals)} rows, expected {n}")
        cols[f] = vals
    return [{f: cols[f][i] for f in cols} for i in range(n)]


def _row_advantage(row: Mapping[str, Any]) -> float:
    adv = torch.as_tensor(row["advantages"], dtype=torch.float64)
    mask = torch.as_tensor(row["response_mask"], dtype=torch.float64)
    if adv.shape != mask.shape:
        raise ValueError(f"{WHERE}: advantages shape {tuple(adv.shape)} differs from response_mask's {tuple(mask.shape)}")
    m = float(mask.sum())
    return float((adv * mask).sum() / m) if m > 0 else 0.0


def _behaviour(row: Mapping[str, Any], n_tokens: int) -> np.ndarray:
    for f in ("old_log_probs", "rollout_log_probs"):
        if f in row and row[f] is not None:
            b = torch.as_tensor(row[f], dtype=torch.float64).cpu().numpy()
            if b.shape == (n_tokens,):
                return b
            raise ValueError(f"{WHERE}: {f} has shape {b.shape} for {n_tokens} response tokens")
    raise ValueError(f"{WHERE}: a row has neither old_log_probs nor rollout_log_probs (the behaviour log-probs replay needs)")


class VerlReplay:
    """The replay plug-in plus the stored rows, driven once per step by the ``vsr_sync`` trainer (module doc)."""

    def __init__(self, params: Mapping[str, Any], seed: int = 0):
        try:
            cfg = plugin_config(ReplayConfig, dict(params or {}), "replay")
        except ValueError as exc:  # name the verl config key
            raise ValueError(str(exc).replace("plugins.replay", WHERE, 1)) from None
        if cfg.level != "rollout" or cfg.composition != "fresh_anchored":
            raise ValueError(f"{WHERE}: only level=rollout with composition=fresh_anchored runs on verl "
                             f"(got level={cfg.level!r}, composition={cfg.composition!r}); the query-level and "
                             "pool baselines run on the toolkit's trainer")
        self.cfg = cfg
        self.warnings: list[str] = []
        self.ctx = SimpleNamespace(config=SimpleNamespace(seed=int(seed)), train_problems=(), warn=self.warnings.append)
        self.plugin = ReplayPlugin(cfg, self.ctx)
        self.rows: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}

    @staticmethod
    def groups(rows: Sequence[Mapping[str, Any]], keys: Sequence[str], step: int) -> list[RolloutGroup]:
        """The rows as the toolkit's groups (one per ``uid``, first-appearance order), each row's key in
        ``info[PER_SAMPLE][KEY]``."""
        by_uid: dict[str, list[int]] = {}
        for i, r in enumerate(rows):
            by_uid.setdefault(str(r["uid"]), []).append(i)
        out = []
        for uid, idx in by_uid.items():
            first = rows[idx[0]]
            prompt = [int(t) for t in torch.as_tensor(first["prompts"]).tolist()] if "prompts" in first else []
            resp = [tuple(int(t) for t in torch.as_tensor(rows[i]["responses"]).tolist()) for i in idx]
            out.append(RolloutGroup(
                StartState(tuple(prompt) or (0,), Problem(uid, "verl prompt", "")), resp,
                [_behaviour(rows[i], len(resp[j])) for j, i in enumerate(idx)],
                np.array([float(torch.as_tensor(rows[i]["rm_scores"], dtype=torch.float64).sum()) for i in idx]),
                int(step), advantages=np.array([_row_advantage(rows[i]) for i in idx]),
                info={PER_SAMPLE: {KEY: [str(keys[i]) for i in idx]}},
            ))
        return out

    def compose(self, step: int, fresh: Sequence[RolloutGroup], multiple: int) -> tuple[list[str], dict[str, float]]:
        """Birth keys of the stored rows that join step ``step`` (a multiple of ``multiple`` rows) and the metrics."""
        if isinstance(multiple, bool) or not isinstance(multiple, (int, np.integer)) or multiple < 1:
            raise ValueError(f"multiple: must be an int >= 1, got {multiple!r}")
        comp = self.plugin.compose(Step(index=int(step), fresh=tuple(fresh)), self.ctx)
        drawn = [u.info[PER_SAMPLE][KEY][0] for u in comp.replayed]
        keep = (len(drawn) // int(multiple)) * int(multiple)
        metrics = dict(comp.metrics)
        metrics["replay_drawn_rollouts"] = float(keep)
        metrics["replay_dropped_to_multiple"] = float(len(drawn) - keep)
        return drawn[:keep], metrics

    def store(self, step: int, fresh: Sequence[RolloutGroup], rows: Sequence[Mapping[str, Any]],
              tags: Sequence[Mapping[str, Any]]) -> dict[str, float]:
        """Store this step's fresh rows (all fields and tags by key), then evict what the plug-in evicted."""
        keys = [k for g in fresh for k in g.info[PER_SAMPLE][KEY]]
        if len(keys) != len(rows) or len(tags) != len(rows):
            raise ValueError(f"store: {len(keys)} keys, {len(rows)} rows and {len(tags)} tags must agree")
        for k, r, t in zip(keys, rows, tags):
            self.rows[k] = (dict(r), dict(t))
        res = self.plugin.after_step(Step(index=int(step), kept=tuple(fresh)), self.ctx)
        live = {u.info[PER_SAMPLE][KEY][0] for u in self.plugin.buffer}
        for k in [k for k in self.rows if k not in live]:
            del self.rows[k]
        return dict(res.metrics)

    def replayed_rows(self, step: int, birth_keys: Sequence[str]) -> tuple[list[str], list[dict[str, Any]], list[dict[str, Any]]]:
        """New keys, the stored rows and their tags (``replayed: True``, ``birth_step``) for ``birth_keys``."""
        missing = [k for k in birth_keys if k not in self.rows]
        if missing:
            raise KeyError(f"{WHERE}: drawn rows {missing[:3]} are not stored")
        new = [f"replay{int(step)}/{k}" for k in birth_keys]
        rows = [dict(self.rows[k][0]) for k in birth_keys]
        tags = [{**self.rows[k][1], "replayed": True, "replay_birth_key": k} for k in birth_keys]
        return new, rows, tags
