"""Every registered plug-in checkpoints plain data only, and restores it exactly."""

from __future__ import annotations

import pytest

from llm_harness.trainer.checkpoint import check_plain, latest_checkpoint, load_checkpoint
from llm_harness.trainer.plugins import PLUGINS, import_plugin_modules
from trainer_support import ToyTask, assert_plain_equal, make_trainer

import_plugin_modules()


def test_every_plugin_has_a_smoke_run():
    """The runs below come from each plug-in's registration (``PluginSpec.smoke``), so a new plug-in is covered
    without editing this file; a registration without one is refused by ``register_plugin`` itself."""
    assert {"vsr", "replay", "extra", "extra_novelty", "extra_regen", "reinforce_ada_est", "dapo"} <= set(PLUGINS)
    for name, spec in PLUGINS.items():
        assert spec.name == name and spec.smoke.params is not None


@pytest.mark.parametrize("name", sorted(PLUGINS))
def test_plugin_state_is_plain_and_restores_exactly(tmp_path, name):
    smoke = PLUGINS[name].smoke
    params, good, key = dict(smoke.params), ("0" if smoke.hard else "01234"), smoke.state_key

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


def test_a_plugin_name_is_registered_once_with_its_whole_spec():
    from llm_harness.trainer.plugins import PluginSmoke, register_plugin, unit_cost

    def factory(params, ctx):  # never called
        raise AssertionError

    with pytest.raises(ValueError, match="'vsr' is already registered"):
        register_plugin("vsr", config=None, cost=unit_cost, smoke=PluginSmoke())(factory)
    with pytest.raises(TypeError, match="smoke"):
        register_plugin("t_no_smoke", config=None, cost=unit_cost, smoke={"params": {}})(factory)
    with pytest.raises(TypeError, match="cost"):
        register_plugin("t_no_cost", config=None, cost=None, smoke=PluginSmoke())(factory)
    with pytest.raises(TypeError):
        register_plugin("t_bare")  # cost, config and smoke are required keywords
    assert not {"t_no_smoke", "t_no_cost", "t_bare"} & set(PLUGINS)
