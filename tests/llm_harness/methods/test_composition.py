"""Composition: VSR + ExTra + |A| replay in one run — each plug-in's effect is in the batch; resume is
bit-identical with every plug-in on; every shipped config loads and names registered plug-ins."""

from __future__ import annotations

from pathlib import Path

import pytest

from llm_harness.trainer.config import RunConfig, TrainConfig
from llm_harness.trainer.data import Origin
from llm_harness.trainer.loop import check_registries
from llm_harness.trainer.plugins import StepRecorder
from trainer_support import check_resume_is_bit_identical, make_trainer
from vsr_util.config_io import load_config

CONFIGS = Path(__file__).resolve().parents[3] / "configs"

ALL_ON = {
    "vsr": {"cold_start": True, "cold_start_problems": 20, "window": 3},
    "extra": {"warmup_steps": 1, "embedder": "policy_hidden"},
    "replay": {"warmup": 1, "ratio": 0.5},
}


def test_every_plugin_effect_is_present_in_the_combined_batch(tmp_path):
    rec = StepRecorder()
    tr = make_trainer(str(tmp_path / "run"), steps=5, plugins=ALL_ON, extra_plugins=[rec])
    rows = tr.fit()
    tr.close()
    trained = [g for r in rec.records for g in r.trained]
    origins = {g.start.origin for g in trained}
    assert Origin.REPLAYED_PREFIX in origins  # VSR
    assert Origin.REPLAYED_ROLLOUT in origins  # replay
    assert any(r["extra_novelty_bonus_pos_frac"] > 0 for r in rows)  # ExTra novelty shaped advantages
    # replayed rollouts carry their birth advantages, which include the novelty bonus when it applied
    rep = [g for g in trained if g.start.origin is Origin.REPLAYED_ROLLOUT]
    assert all(g.birth_step < r.index for r in rec.records for g in r.trained if g in rep)
    # VSR prefixes are context: the response ids of a prefix group never include the prefix
    for g in trained:
        if g.start.origin is Origin.REPLAYED_PREFIX:
            assert len(g.start.prefix_ids) > 0
            assert all(len(r) <= 8 - len(g.start.prefix_ids) for r in g.response_ids)


def test_resume_is_bit_identical_with_all_plugins_on(tmp_path):
    def make(d, **run_kw):
        return make_trainer(str(d), steps=6, plugins=ALL_ON,
                            run=RunConfig(run_dir=str(d), checkpoint_every=3, progress=False, **run_kw))

    full, c, _ = check_resume_is_bit_identical(make, tmp_path, stop_after=4, checkpoint_step=3)
    # the buffers themselves were restored: same VSR entries and replay units after the run
    va, vc = full.plugins[0], c.plugins[0]
    assert sorted(va.buffer) == sorted(vc.buffer)
    ra, rc = full.plugins[2], c.plugins[2]
    assert [(u.start.problem.id, u.response_ids, u.birth_step) for u in ra.buffer] == \
        [(u.start.problem.id, u.response_ids, u.birth_step) for u in rc.buffer]


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_config_loads_and_names_registered_plugins(path):
    cfg = load_config(TrainConfig, path)
    check_registries(cfg)
