"""``vsr study <name>`` is built from the study registry: one command per module of prefixvalue.studies."""

from __future__ import annotations

from prefixvalue.registry import get_study, study_modules
from vsr import cli


def test_every_study_module_is_a_command_and_nothing_else_is():
    listed = sorted(k.split(" ", 1)[1] for k in cli.COMMANDS if k.startswith("study "))
    assert listed == sorted(study_modules()) == ["failed-prefix", "hint-ratio", "mte-correlation", "prefix-selection",
                                                 "sigma-validation"]


def test_a_study_command_parses_into_its_studys_config():
    fn, cfg = cli.parse_command("study hint-ratio", ["--quick", "--out", "/tmp/x", "--no-progress"])
    assert type(cfg) is get_study("hint-ratio").config_cls
    assert cfg.quick and cfg.out == "/tmp/x" and not cfg.progress


def test_vsr_plugins_lists_every_registered_plugin_and_one_plugins_parameters(capsys):
    from llm_harness.trainer.plugins import PLUGINS

    assert cli.main(["plugins"]) == 0
    out = capsys.readouterr().out
    assert all(any(line.split()[:1] == [name] for line in out.splitlines()) for name in PLUGINS)
    assert cli.main(["plugins", "--name", "replay"]) == 0
    out = capsys.readouterr().out
    assert "ratio = 0.5" in out and "max_age = 10" in out and "ReplayConfig" in out
    assert cli.main(["plugins", "--name", "nope"]) == 2
    assert "unknown plug-in 'nope'" in capsys.readouterr().err
