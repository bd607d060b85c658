"""Rollout-level |A| replay in the ``vsr_sync`` trainer's advantage stage (verl 0.9.1's own advantage
code, TransferQueue replaced by an in-memory store as in ``test_verl_trainer_mode``): stored rows come
back with every birth field, drawn by the toolkit's priority, evicted by age, after warm-up, in
whole verl mini-batches."""

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
from llm_harness.integrations.verl.estimators import NoveltyMemory  # noqa: E402
from llm_harness.integrations.verl.rollout_replay import VerlReplay, row_dicts  # noqa: E402
from llm_harness.integrations.verl.trainer import VSRSyncTrainer  # noqa: E402

FIELDS = ("input_ids", "position_ids", "prompts", "responses", "response_mask", "rm_scores", "old_log_probs")


class MemoryTQ:
    """``kv_batch_get`` / ``kv_batch_put`` (with tags) over a dict of rows."""

    def __init__(self):
        self.rows: dict[str, dict] = {}
        self.tags: dict[str, dict] = {}

    def kv_batch_get(self, keys, partition_id, select_fields=None):
        return list_of_dict_to_tensordict([{k: v for k, v in self.rows[key].items() if select_fields is None or k in select_fields}
                                           for key in keys])

    def kv_batch_put(self, keys, partition_id, fields=None, tags=None):
        for i, key in enumerate(keys):
            row = self.rows.setdefault(key, {})
            if fields is not None:
                for f in fields.keys():
                    v = fields[f]
                    row[f] = v[i] if isinstance(v, torch.Tensor) else list(v)[i]
            if tags is not None:
                self.tags[key] = dict(tags[i])
        return KVBatchMeta(partition_id=partition_id, keys=list(keys), tags=[self.tags.get(k, {}) for k in keys])


def fresh_rows(tq: MemoryTQ, step: int, rng: np.random.Generator, groups: int = 3, n: int = 4,
               success: list[list[float]] | None = None) -> KVBatchMeta:
    """``groups`` uids of ``n`` rows as verl's agent-loop worker stores them (plus ``old_log_probs``)."""
    keys = []
    for g in range(groups):
        prompt = torch.tensor(rng.integers(3, 30, size=int(rng.integers(2, 6))))
        for s in range(n):
            L = int(rng.integers(2, 9))
            resp = torch.tensor(rng.integers(3, 12, size=L))
            rm = torch.zeros(L)
            rm[-1] = float(rng.random() < 0.5) if success is None else success[g][s]
            ids = torch.cat([prompt, resp])
            key = f"s{step}u{g}_{s}_0"
            keys.append(key)
            tq.rows[key] = {"uid": f"s{step}u{g}", "input_ids": ids, "position_ids": torch.arange(len(ids)), "prompts": prompt,
                            "responses": resp, "response_mask": torch.ones(L, dtype=torch.int64), "rm_scores": rm,
                            "old_log_probs": torch.tensor(-rng.random(L), dtype=torch.float32)}
            tq.tags[key] = {"status": "success", "seq_len": len(ids)}
    return KVBatchMeta(partition_id="train", keys=keys, tags=[dict(tq.tags[k]) for k in keys])


def trainer(estimator: str = "vsr_grpo", multiple: int = 2, **replay):
    t = object.__new__(VSRSyncTrainer)  # the stage reads only the config (no workers are started)
    t.config = OmegaConf.create({"algorithm": {"adv_estimator": estimator, "use_kl_in_reward": False, "gamma": 1.0, "lam": 1.0,
                                               "norm_adv_by_std_in_grpo": True, "vsr": {"replay": {"warmup": 0, **replay}}},
                                 "actor_rollout_ref": {"rollout": {"n": 4}}, "data": {"seed": 7}})
    t.balanced = []
    t._replay_multiple = lambda: multiple
    t._balance_batch = lambda b, metrics, logging_prefix="": (t.balanced.append(len(b)), b)[1]
    return t


def run_step(t, tq, step, rng, **kw):
    t.global_steps = step + 1  # verl counts from 1
    fresh = fresh_rows(tq, step, rng, **kw)
    metrics: dict = {}
    return fresh, t._compute_advantage(fresh, metrics), metrics


@pytest.fixture
def tq(monkeypatch):
    store = MemoryTQ()
    monkeypatch.setattr(trainer_base, "tq", store)
    monkeypatch.setattr(estimators, "MEMORY", NoveltyMemory())
    return store


@pytest.mark.parametrize("estimator", ["vsr_grpo", "vsr_extra_grpo"])
def test_replayed_rows_come_back_with_every_birth_field(tq, estimator):
    rng = np.random.default_rng(0)
    t = trainer(estimator)
    f0, out0, m0 = run_step(t, tq, 0, rng)
    assert out0.keys == f0.keys and m0["vsr_replay/replay_buffer_rollouts"] == 12.0
    birth = {k: {f: v.clone() for f, v in tq.rows[k].items() if isinstance(v, torch.Tensor)} for k in f0.keys}
    f1, out1, m1 = run_step(t, tq, 1, rng)
    replayed = out1.keys[len(f1.keys):]
    assert out1.keys[: len(f1.keys)] == f1.keys
    assert len(replayed) == 6 == m1["vsr_replay/replay_drawn_rollouts"]  # round(0.5 · 12), a multiple of 2
    assert t.balanced == [18]
    for k, tag in zip(replayed, out1.tags[len(f1.keys):]):
        src = tag["replay_birth_key"]
        assert tag["replayed"] is True and src in birth and k == f"replay1/{src}"
        for f, v in birth[src].items():  # advantages frozen at birth, behaviour log-probs, tokens: all as stored
            assert torch.equal(torch.as_tensor(tq.rows[k][f]), v), f


def test_draw_follows_abs_advantage_priority(tq):
    rng = np.random.default_rng(1)
    t = trainer()
    mixed, flat = [1.0, 0.0, 1.0, 0.0], [1.0] * 4
    f0, _, _ = run_step(t, tq, 0, rng, success=[mixed, flat, flat])  # 4 rows with |A| > 0, 8 with A = 0
    nonzero = {k for k in f0.keys if torch.count_nonzero(torch.as_tensor(tq.rows[k]["advantages"])) > 0}
    assert len(nonzero) == 4
    _, out1, _ = run_step(t, tq, 1, rng, success=[mixed, flat, flat])
    drawn = {tag["replay_birth_key"] for tag in out1.tags if tag.get("replayed")}
    assert len(drawn) == 6 and nonzero <= drawn  # every |A| > 0 row first, then ε-priority rows


def test_rows_older_than_max_age_are_evicted_and_warmup_is_respected(tq):
    rng = np.random.default_rng(2)
    t = trainer(max_age=1, warmup=2)
    f0, out0, _ = run_step(t, tq, 0, rng)
    f1, out1, _ = run_step(t, tq, 1, rng)
    assert out0.keys == f0.keys and out1.keys == f1.keys  # warm-up: nothing replayed
    f2, out2, _ = run_step(t, tq, 2, rng)
    births = {tag["replay_birth_key"] for tag in out2.tags if tag.get("replayed")}
    assert births and births <= set(f1.keys)  # step-0 rows are older than τ_max = 1 at step 2
    assert not set(f0.keys) & set(t._vsr_replay.rows)  # and their payloads are gone


def test_drawn_rows_are_rounded_down_to_verls_batch_multiple(tq):
    rng = np.random.default_rng(3)
    t = trainer(multiple=4)
    run_step(t, tq, 0, rng)
    f1, out1, m = run_step(t, tq, 1, rng)
    assert len(out1.keys) - len(f1.keys) == 4 and m["vsr_replay/replay_dropped_to_multiple"] == 2.0


def test_padding_rows_are_neither_stored_nor_scored(tq):
    rng = np.random.default_rng(4)
    t = trainer()
    f0 = fresh_rows(tq, 0, rng)
    f0.tags[0]["is_padding"] = tq.tags[f0.keys[0]]["is_padding"] = True  # verl's upsampling tags padding rows in TQ
    t.global_steps = 1
    t._compute_advantage(f0, {})
    assert f0.keys[0] not in t._vsr_replay.rows and len(t._vsr_replay.rows) == 11


@pytest.mark.parametrize("params, match", [({"level": "query", "priority": "uniform"}, "level=rollout"),
                                           ({"composition": "pool"}, "fresh_anchored"),
                                           ({"bogus": 1}, r"algorithm\.vsr\.replay.*bogus"),
                                           ({"ratio": 2.0}, r"algorithm\.vsr\.replay\.ratio")])
def test_bad_replay_config_is_named(params, match):
    with pytest.raises(ValueError, match=match):
        VerlReplay(params)


def test_no_replay_config_leaves_the_batch_alone(tq):
    rng = np.random.default_rng(5)
    t = trainer()
    t.config.algorithm.vsr = {}
    f0, out0, m = run_step(t, tq, 0, rng)
    assert out0.keys == f0.keys and not any(k.startswith("vsr_replay/") for k in m)


def test_row_dicts_inverts_verls_tensordict_builder():
    rng = np.random.default_rng(6)
    rows = [{"uid": f"u{i}", "responses": torch.tensor(rng.integers(0, 9, size=int(rng.integers(1, 6)))),
             "score": torch.tensor(float(i)), "extra_fields": {"a": i}} for i in range(4)]
    back = row_dicts(list_of_dict_to_tensordict(rows))
    for a, b in zip(rows, back):
        assert a["uid"] == b["uid"] and a["extra_fields"] == b["extra_fields"]
        assert torch.equal(a["responses"], b["responses"]) and torch.equal(a["score"], b["score"])


def test_the_mode_runs_verls_sync_paths_and_refuses_sub_steps(monkeypatch):
    from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

    seen = {}
    monkeypatch.setattr(PPOTrainerSync, "_build_replay_buffer", lambda self: seen.setdefault("mode", self.trainer_mode))
    t = trainer()
    t.config.trainer = {"v1": {"trainer_mode": "vsr_sync", "sync": {"parameter_sync_step": 2}}}
    t.trainer_mode = "vsr_sync"
    t._build_replay_buffer()
    assert seen["mode"] == "sync" and t.parameter_sync_step == 2  # verl branches on trainer_mode == "sync"
    with pytest.raises(ValueError, match="parameter_sync_step"):
        t._replay()


def test_step_metrics_leave_replayed_rows_out(tq, monkeypatch):
    from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

    rng = np.random.default_rng(7)
    t = trainer()
    run_step(t, tq, 0, rng)
    f1, out1, _ = run_step(t, tq, 1, rng)
    got = {}
    monkeypatch.setattr(PPOTrainerSync, "_compute_metrics", lambda self, b, m, *a: got.setdefault("keys", list(b.keys)))
    metrics: dict = {}
    t._compute_metrics(out1, metrics, {}, 2, 0)
    assert got["keys"] == f1.keys and metrics["vsr_replay/rows_in_update"] == 6.0
