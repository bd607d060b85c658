"""The ``vsr_sync`` trainer mode: verl's synchronous v1 trainer whose advantage stage hands the
toolkit's estimators the per-row inputs they declare (docs/scaling-out.md; ``trainer.v1.trainer_mode=vsr_sync``).

verl 0.9.1's ``PPOTrainer._compute_advantage`` fetches a fixed list of fields from TransferQueue
and calls the estimator with rewards, mask and uid only. ExTra's novelty needs the prompt and
response tokens, GiGPO each turn's end, anchor and step reward (:mod:`.estimators`). This is the
one method overridden for the estimators (registered with verl's ``register_trainer``): for an estimator of :data:`~.estimators.ESTIMATORS` with a non-empty ``needs``, it
fetches ``prompts`` / ``responses`` (unpadded, as ``prompt_ids`` / ``response_ids``) and the agent
loop's ``extra_fields``, and passes them as ``non_tensor_batch``; every other estimator goes
through verl's own method unchanged. The steps around the estimator (KL in reward, rollout
correction, writing ``advantages``/``returns`` back) follow verl 0.9.1's method line by line.
Departure: every output row is a sample of its uid's group; verl's GRPO path instead scores only
the last output of an agent loop that returns several (``compute_advantage_for_multi_trajectories``)
— the toolkit's agent loops return one output per session.

Everywhere else the mode is verl's ``sync`` (``_build_replay_buffer`` sets the name back: verl
0.9.1 compares ``trainer_mode`` with ``"sync"`` to choose its staleness buffer, refills and TQ
checkpointing). With ``algorithm.vsr.replay.*`` set, the same stage then runs rollout-level |A| replay
(:mod:`.rollout_replay`): stored rows with their birth advantages and behaviour log-probs join the
batch before the actor update, and the fresh rows are stored; verl's step metrics are computed over
the step's own rows (``_compute_metrics``). Any estimator composes with it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict
from transfer_queue import KVBatchMeta
from verl.protocol import DataProto
from verl.trainer.ppo.ray_trainer import apply_kl_penalty
from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_add_to_batch
from verl.trainer.ppo.v1 import trainer_base
from verl.trainer.ppo.v1.trainer_base import register_trainer
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
from verl.utils.tensordict_utils import list_of_dict_to_tensordict
from verl.workers.utils.padding import response_to_nested

from llm_harness.integrations.verl.estimators import ESTIMATORS, vsr_params as _vsr_params
from llm_harness.integrations.verl.rollout_replay import KEY, PER_SAMPLE, VerlReplay, row_dicts

__all__ = ["REGISTERED", "VSRSyncTrainer", "audit_rows", "estimator_inputs"]

MODE = "vsr_sync"
REGISTERED = (MODE,)
_BASE_FIELDS = ["uid", "response_mask", "rm_scores", "rollout_log_probs", "old_log_probs", "ref_log_prob", "values"]


def estimator_inputs(needs: tuple[str, ...], rows: Any) -> dict[str, np.ndarray]:
    """``non_tensor_batch`` of the declared ``needs`` from fetched rows (a TensorDict with nested
    ``prompts``/``responses`` and per-row ``extra_fields`` dicts): object arrays of plain lists."""
    n = rows.batch_size[0]
    out: dict[str, np.ndarray] = {}
    for k in needs:
        arr = np.empty(n, dtype=object)
        if k in ("prompt_ids", "response_ids"):
            t = rows["prompts" if k == "prompt_ids" else "responses"]
            arr[:] = [x.tolist() for x in t.unbind(0)]
        else:
            extra = rows["extra_fields"] if "extra_fields" in rows.keys() else None
            vals = [] if extra is None else [e.get(k) if isinstance(e, dict) else None for e in extra]
            if not vals or any(v is None for v in vals):
                if k in ESTIMATOR_OPTIONAL:
                    continue
                raise ValueError(f"{MODE}: the agent loop wrote no extra_fields[{k!r}] for some rows")
            arr[:] = vals
        out[k] = arr
    return out


#: the fields of a row the audit records (``extra_fields`` too where the agent loop wrote them)
AUDIT_FIELDS = ["uid", "prompts", "responses", "response_mask", "rm_scores", "advantages", "old_log_probs"]


def _plain(v: Any) -> Any:
    if isinstance(v, torch.Tensor):
        return v.tolist()
    if isinstance(v, np.ndarray):
        return v.tolist()
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return v


def _listed(v: Any) -> list:
    """A non-tensor column of fetched rows as a list (TensorDict's stacks have ``tolist``; others iterate)."""
    return v.tolist() if hasattr(v, "tolist") else list(v)


def audit_rows(rows: Any, keys: list[str], tags: list[dict]) -> list[dict[str, Any]]:
    """Plain records of fetched TransferQueue rows (``AUDIT_FIELDS`` as nested tensors, ``extra_fields`` dicts):
    ``key``, ``tags``, ``uid``, ``prompt_ids``, ``response_ids``, ``response_mask``, ``reward`` (Σ rm_scores),
    ``advantages`` and ``old_log_probs`` (per response token) and ``extra`` (the agent loop's fields)."""
    names = {"prompts": "prompt_ids", "responses": "response_ids"}
    cols: dict[str, list] = {}
    for f in AUDIT_FIELDS:
        if f in rows.keys():
            v = rows[f]
            cols[names.get(f, f)] = [x.tolist() for x in v.unbind(0)] if isinstance(v, torch.Tensor) else _listed(v)
    extra = _listed(rows["extra_fields"]) if "extra_fields" in rows.keys() else [None] * len(keys)
    out = []
    for i, key in enumerate(keys):
        rec = {"key": key, "tags": _plain(dict(tags[i]))}
        rec.update({k: _plain(v[i]) for k, v in cols.items()})
        if "rm_scores" in rec:
            rec["reward"] = float(sum(rec.pop("rm_scores")))
        rec["extra"] = _plain(extra[i]) if isinstance(extra[i], dict) else {}
        out.append(rec)
    return out


#: inputs an estimator may do without (GiGPO's penalties)
ESTIMATOR_OPTIONAL = {"gigpo_penalties"}


@register_trainer(MODE)
class VSRSyncTrainer(PPOTrainerSync):
    """``PPOTrainerSync`` with an advantage stage that feeds the toolkit's estimators (module doc)."""

    def _build_replay_buffer(self):
        """Run as verl's ``sync`` mode everywhere else: verl 0.9.1 branches on ``trainer_mode == "sync"``
        (its staleness buffer, refills, TQ checkpointing, in-flight re-issue), so the name is set back
        before those branches are taken; ``parameter_sync_step`` is read from ``trainer.v1.sync``."""
        self.trainer_mode = "sync"
        self.parameter_sync_step = self.config.trainer.v1.get("sync", {}).get("parameter_sync_step", 1)
        return super()._build_replay_buffer()

    def _compute_metrics(self, batch, metrics, timing_raw, global_steps, epoch):
        """verl's step metrics over the step's own rows: replayed rows (tag ``replayed``) are left out of the
        score / length / advantage statistics (they are counted under ``vsr_replay/*``); TQ still clears them."""
        own = [k for k, tag in zip(batch.keys, batch.tags) if not tag.get("replayed", False)]
        if len(own) < len(batch.keys):
            metrics["vsr_replay/rows_in_update"] = float(len(batch.keys) - len(own))
            batch = batch.select_keys(own)
        return super()._compute_metrics(batch, metrics, timing_raw, global_steps, epoch)

    def _compute_advantage(self, batch, metrics: dict):
        batch = self._estimate(batch, metrics)
        replay = self._replay()
        batch = batch if replay is None else self._replay_stage(replay, batch, metrics)
        audit = _vsr_params(self.config.algorithm).audit_dir
        if audit:
            self._audit(Path(audit), batch)
        return batch

    def _audit(self, folder: Path, batch) -> None:
        """``algorithm.vsr.audit_dir``: this step's trained rows and the VSR buffer's summary as
        ``step_<global step>.json`` (written atomically; the rows are read back from TransferQueue)."""
        import ray

        from llm_harness.integrations.verl.prefix_buffer import ACTOR_NAME
        from vsr_util.atomic import json_safe, write_json

        tq = trainer_base.tq
        try:
            rows = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=AUDIT_FIELDS + ["extra_fields"])
        except Exception:  # no agent loop wrote extra_fields
            rows = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=AUDIT_FIELDS)
        out = {"global_step": int(self.global_steps), "adv_estimator": str(self.config.algorithm.adv_estimator),
               "rows": audit_rows(rows, list(batch.keys), list(batch.tags)), "prefix_buffer": None}
        try:
            out["prefix_buffer"] = ray.get(ray.get_actor(ACTOR_NAME).summary.remote())
        except ValueError:  # no VSR agent loop in this run
            pass
        folder.mkdir(parents=True, exist_ok=True)
        write_json(folder / f"step_{int(self.global_steps)}.json", json_safe(out))

    # ---------------------------------------------------------------- rollout-level replay

    def _replay(self) -> VerlReplay | None:
        """The replay stage of ``algorithm.vsr.replay`` (built on first use), or ``None`` when not configured."""
        if not hasattr(self, "_vsr_replay"):
            raw = dict(_vsr_params(self.config.algorithm).replay) or None
            seed = self.config.get("data", {}).get("seed", 0) if hasattr(self.config, "get") else 0
            if raw is not None and int(getattr(self, "parameter_sync_step", 1) or 1) > 1:
                raise ValueError("algorithm.vsr.replay: needs trainer.v1.sync.parameter_sync_step = 1 (the sub-steps of one "
                                 f"global step would share its birth step and redraw the same rows; got {self.parameter_sync_step})")
            self._vsr_replay = None if raw is None else VerlReplay(raw, seed=int(seed or 0))
        return self._vsr_replay

    def _replay_multiple(self) -> int:
        """verl's required batch multiple (data-parallel size, PPO mini-batch · n), as ``_balance_batch`` computes it."""
        wg = self.actor_rollout_wg
        info = wg._dispatch_info.get("actor") or wg._query_dispatch_info("actor")
        wg._dispatch_info["actor"] = info
        return int(self._get_required_batch_multiple(max(info) + 1))

    def _replay_stage(self, replay: VerlReplay, batch, metrics: dict):
        """Draw stored rows into this step's batch, then store its fresh rows (:mod:`.rollout_replay`)."""
        tq = trainer_base.tq
        t = int(self.global_steps) - 1
        real = [i for i, tag in enumerate(batch.tags) if not tag.get("is_padding", False)]
        keys = [batch.keys[i] for i in real]
        if not keys:
            return batch
        rows = row_dicts(tq.kv_batch_get(keys=keys, partition_id=batch.partition_id))
        fresh = replay.groups(rows, keys, t)
        drawn, m = replay.compose(t, fresh, self._replay_multiple())
        new_keys, new_rows, new_tags = replay.replayed_rows(t, drawn)  # before storing evicts this step's oldest
        by_key = dict(zip(keys, rows))
        ordered = [k for g in fresh for k in g.info[PER_SAMPLE][KEY]]
        tag_of = dict(zip(batch.keys, batch.tags))
        m.update(replay.store(t, fresh, [by_key[k] for k in ordered], [tag_of[k] for k in ordered]))
        if m.get("replay_active") and m["replay_dropped_to_multiple"] > 0 and not drawn:
            replay.warnings.append(f"step {t}: {int(m['replay_dropped_to_multiple'])} drawn rows are fewer than verl's batch "
                                   f"multiple; nothing replayed (lower actor.ppo_mini_batch_size)")
            import logging

            logging.getLogger(__name__).warning("vsr_replay: %s", replay.warnings[-1])
        m["replay_warnings"] = float(len(replay.warnings))
        metrics.update({f"vsr_replay/{k}": v for k, v in m.items()})
        if not drawn:
            return batch
        out = tq.kv_batch_put(keys=new_keys, partition_id=batch.partition_id, fields=list_of_dict_to_tensordict(new_rows),
                              tags=new_tags)
        combined = KVBatchMeta(partition_id=batch.partition_id, keys=list(batch.keys) + list(out.keys),
                               tags=list(batch.tags) + list(new_tags))
        return self._balance_batch(combined, metrics=metrics, logging_prefix="vsr_replay/global_seqlen")

    # ---------------------------------------------------------------- the estimator

    def _estimate(self, batch, metrics: dict):
        algo = self.config.algorithm
        est = ESTIMATORS.get(str(algo.adv_estimator))
        needs = tuple(getattr(est, "needs", ()) or ())
        if est is None or not needs:
            return super()._compute_advantage(batch, metrics)
        tq = trainer_base.tq
        extra = ["prompts", "responses"] if {"prompt_ids", "response_ids"} & set(needs) else []
        extra += ["extra_fields"] if set(needs) - {"prompt_ids", "response_ids"} else []
        raw = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=_BASE_FIELDS + extra)
        nt_inputs = estimator_inputs(needs, raw)
        response_mask = raw["response_mask"]
        data = DataProto(batch=raw.select(*[k for k in _BASE_FIELDS if k in raw.keys()]).to_padded_tensor())
        data.batch["token_level_scores"] = data.batch["rm_scores"]
        data.non_tensor_batch["uid"] = np.array(data.batch.pop("uid").tolist(), dtype=object)
        # 1. KL penalty in the reward (verl 0.9.1, unchanged)
        if algo.use_kl_in_reward:
            data, kl_metrics = apply_kl_penalty(data, kl_ctrl=self.kl_ctrl_in_reward, kl_penalty=algo.kl_penalty)
            metrics.update(kl_metrics)
        else:
            data.batch["token_level_rewards"] = data.batch["token_level_scores"]
        # 2. rollout correction (verl 0.9.1, unchanged)
        rc = algo.get("rollout_correction", None)
        bypass = rc and rc.get("bypass_mode", False)
        rollout_correction = rc is not None and "rollout_log_probs" in data.batch and not bypass
        if rollout_correction:
            data, is_metrics = compute_rollout_correction_and_add_to_batch(data, rc)
            metrics.update(is_metrics)
        # 3. the toolkit's estimator, with its declared inputs
        adv, ret = est(token_level_rewards=data.batch["token_level_rewards"], response_mask=data.batch["response_mask"],
                       index=data.non_tensor_batch["uid"], config=algo, non_tensor_batch=nt_inputs)
        data.batch["advantages"], data.batch["returns"] = adv, ret
        # 4. write back (verl 0.9.1, unchanged)
        fields = ["advantages", "returns"]
        if algo.use_kl_in_reward:
            fields.append("token_level_rewards")
        if rollout_correction:
            fields.append("response_mask")
            if "rollout_is_weights" in data.batch:
                fields.append("rollout_is_weights")
        output = TensorDict({f: response_to_nested(data.batch[f], response_mask) for f in fields}, batch_size=len(batch))
        return tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id, fields=output)
