"""Every registered plug-in checkpoints plain data only, and restores it exactly."""

from __future__ import annotations

import pytest

from llm_harness.trainer.checkpoint import check_plain, latest_checkpoint, load_checkpoint
from llm_harness.trainer.plugins import PLUGINS, import_plugin_modules
from trainer_support import ToyTask, assert_plain_equal, make_trainer

#: every registered plug-in -> (params of a 3-step run, ToyTask's good first characters, a state key
#: that must be non-empty after the run (None: the plug-in keeps no state))
RUNS = {
    "vsr": ({"cold_start": True, "cold_start_problems": 20}, "01234", "buffer"),
    "replay": ({"warmup": 1}, "01234", "buffer"),
    "extra": ({"warmup_steps": 0, "embedder": "ngram4"}, "0", "queue"),
    "extra_novelty": ({"embedder": "ngram4"}, "01234", "memory"),
    "extra_regen": ({"warmup_steps": 0}, "0", "prefix_cache"),
    "reinforce_ada_est": ({"n_min": 2, "n_max": 8}, "01234", None),
    "dapo": ({}, "01234", None),
}


def test_every_registered_plugin_is_covered():
    import_plugin_modules()
    assert sorted(PLUGINS) == sorted(RUNS), "add the new plug-in to RUNS"


@pytest.mark.parametrize("name", sorted(RUNS))
def test_plugin_state_is_plain_and_restores_exactly(tmp_path, name):
    params, good, key = RUNS[name]

    def make(d):
        return make_trainer(str(d), task=ToyTask(good=good), steps=3, plugins={name: params})

    tr = make(tmp_path / "a")
    tr.fit()  # checkpoints after every step: each save checks the state is plain
    tr.close()
    state = tr.plugins[0].state_dict()
    check_plain(state)
    if key is not None:
        assert len(state[key]) > 0
    saved = load_checkpoint(latest_checkpoint(tmp_path / "a" / "checkpoints"))["plugins"][1]
    assert_plain_equal(saved, state)
    other = make(tmp_path / "b")
    other.plugins[0].load_state_dict(saved)
    assert_plain_equal(other.plugins[0].state_dict(), state)
    other.close()
