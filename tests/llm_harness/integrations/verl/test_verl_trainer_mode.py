"""The ``vsr_sync`` trainer mode's advantage stage (the one overridden method) on rows shaped as
verl's agent-loop worker stores them. TransferQueue itself is replaced by an in-memory store that
returns what verl's ``list_of_dict_to_tensordict`` builds (starting the real one on a local Ray
instance did not finish in 5 minutes on this machine); everything else is verl 0.9.1's code."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("verl")
import torch  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from transfer_queue import KVBatchMeta  # noqa: E402
from verl.trainer.ppo.v1 import trainer_base  # noqa: E402
from verl.utils.tensordict_utils import list_of_dict_to_tensordict  # noqa: E402

from llm_harness.integrations.verl import estimators  # noqa: E402
from llm_harness.integrations.verl.estimators import ESTIMATORS, NoveltyMemory  # noqa: E402
from llm_harness.integrations.verl.trainer import VSRSyncTrainer  # noqa: E402


class MemoryTQ:
    """``kv_batch_get`` / ``kv_batch_put`` over a dict of rows (the subset of TransferQueue the stage uses)."""

    def __init__(self, rows: dict[str, dict]):
        self.rows = rows

    def kv_batch_get(self, keys, partition_id, select_fields):
        return list_of_dict_to_tensordict([{k: v for k, v in self.rows[key].items() if k in select_fields} for key in keys])

    def kv_batch_put(self, keys, partition_id, fields):
        for i, key in enumerate(keys):
            for f in fields.keys():
                self.rows[key][f] = fields[f][i]
        return KVBatchMeta(partition_id=partition_id, keys=list(keys), tags=[{} for _ in keys])


def agent_rows(seed: int):
    rng = np.random.default_rng(seed)
    rows, keys = {}, []
    for g in range(3):
        prompt = [int(t) for t in rng.integers(3, 30, size=int(rng.integers(2, 6)))]
        for s in range(4):
            L = int(rng.integers(2, 9))
            resp = torch.tensor(rng.integers(3, 12, size=L))
            rm = torch.zeros(L)
            rm[-1] = float(rng.random() < 0.5)
            turns = sorted(rng.choice(np.arange(1, L + 1), size=min(2, L), replace=False).tolist())
            key = f"u{g}_{s}_0"
            keys.append(key)
            rows[key] = {"uid": f"u{g}", "prompts": torch.tensor(prompt), "responses": resp,
                         "response_mask": torch.ones(L, dtype=torch.int64), "rm_scores": rm,
                         "extra_fields": {"gigpo_turn_ends": turns, "gigpo_anchors": [f"s{t % 2}" for t in turns],
                                          "gigpo_step_rewards": [0.0] * (len(turns) - 1) + [float(rm[-1])]}}
    return rows, keys


def trainer(adv_estimator: str, **vsr):
    t = object.__new__(VSRSyncTrainer)  # the stage reads only the config (no workers are started)
    t.config = OmegaConf.create({"algorithm": {"adv_estimator": adv_estimator, "use_kl_in_reward": False, "gamma": 1.0,
                                               "lam": 1.0, "norm_adv_by_std_in_grpo": True, "vsr": vsr},
                                 "actor_rollout_ref": {"rollout": {"n": 4}}})
    return t


def padded(rows, keys, field):
    return torch.nn.utils.rnn.pad_sequence([rows[k][field] for k in keys], batch_first=True)


@pytest.mark.parametrize("name", ["vsr_extra_grpo", "vsr_gigpo", "vsr_grpo"])
def test_stage_feeds_the_estimator_its_declared_inputs_and_writes_its_advantages(monkeypatch, name):
    rows, keys = agent_rows(0)
    monkeypatch.setattr(trainer_base, "tq", MemoryTQ(rows))
    monkeypatch.setattr(estimators, "MEMORY", NoveltyMemory())
    trainer(name)._compute_advantage(KVBatchMeta(partition_id="train", keys=keys, tags=[{} for _ in keys]), metrics={})
    got = padded(rows, keys, "advantages").to(torch.float64)
    mask = padded(rows, keys, "response_mask").to(torch.float64)
    tlr = padded(rows, keys, "rm_scores").to(torch.float64)
    uids = np.array([rows[k]["uid"] for k in keys], dtype=object)
    nt = {"prompt_ids": [rows[k]["prompts"].tolist() for k in keys], "response_ids": [rows[k]["responses"].tolist() for k in keys],
          **{f: [rows[k]["extra_fields"][f] for k in keys] for f in ("gigpo_turn_ends", "gigpo_anchors", "gigpo_step_rewards")}}
    want, _ = ESTIMATORS[name](token_level_rewards=tlr, response_mask=mask, index=uids, non_tensor_batch=nt, memory=NoveltyMemory())
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=0, atol=1e-6)  # verl stores float32
    assert torch.count_nonzero(got) > 0


def test_missing_agent_loop_fields_are_named(monkeypatch):
    rows, keys = agent_rows(1)
    for r in rows.values():
        del r["extra_fields"]["gigpo_anchors"]
    monkeypatch.setattr(trainer_base, "tq", MemoryTQ(rows))
    with pytest.raises(ValueError, match="gigpo_anchors"):
        trainer("vsr_gigpo")._compute_advantage(KVBatchMeta(partition_id="train", keys=keys, tags=[{} for _ in keys]), metrics={})
