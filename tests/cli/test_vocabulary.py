"""One vocabulary across the commands that take a model (``vsr.vocabulary``): ``--model``, ``--task``,
``--task-params``, ``--out`` and ``--seed`` mean the same in train, eval, the studies, lab, advise and model card;
the old spellings still work with one deprecation line; a chat model's defaults fill what the user did not give
and the command says so on its first line."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from llm_harness.models.defaults import CHAT_MODEL, folder_has_chat_template, model_defaults
from llm_harness.tasks.arith_ladder import STRICT_READER
from vsr.cli import COMMANDS, parse_command
from vsr.vocabulary import VOCABULARY, apply_vocabulary, split_task_params

TINY = "llm_harness/testbed/checkpoints/mid"


def _chat_folder(tmp_path: Path) -> str:
    """A folder that reads as a chat model (its tokenizer config carries a template); never loaded here."""
    d = tmp_path / "chatmodel"
    d.mkdir()
    (d / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ messages }}"}))
    return str(d)


def test_a_chat_model_is_told_from_the_test_bed_without_loading_it(tmp_path):
    assert model_defaults("mid") is None and model_defaults(TINY) is None
    assert model_defaults("smollm2-135m-instruct") is CHAT_MODEL  # registered: no import needed to classify
    assert model_defaults(_chat_folder(tmp_path)) is CHAT_MODEL
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "tokenizer_config.json").write_text(json.dumps({"chat_template": None}))
    assert not folder_has_chat_template(plain) and model_defaults(str(plain)) is None
    (plain / "tokenizer_config.json").write_text("{not json")
    assert model_defaults(str(plain)) is None  # the loader reports the damaged file, not the classifier
    assert model_defaults("no/such-model") is None


def test_every_command_of_the_vocabulary_exists():
    assert set(VOCABULARY) <= set(COMMANDS)


@pytest.mark.parametrize("name", ["train", "eval"])
def test_deprecated_spellings_translate_with_one_line_each(name):
    err = io.StringIO()
    old_out = "--run.run-dir" if name == "train" else "--out-dir"
    args, params = apply_vocabulary(name, ["--model.path", TINY, "--task.name=step_arith", old_out, "x",
                                           "--model.path", TINY], err=err)
    own_out = "--run.run-dir" if name == "train" else "--out-dir"
    assert args == ["--model.path", TINY, "--task.name=step_arith", own_out, "x", "--model.path", TINY]
    assert params is None
    lines = err.getvalue().splitlines()
    assert sorted(lines) == sorted([f"vsr {name}: --model.path is deprecated; use --model (same meaning)",
                                    f"vsr {name}: --task.name is deprecated; use --task (same meaning)",
                                    f"vsr {name}: {old_out} is deprecated; use --out (same meaning)"])


def test_the_vocabulary_flags_become_the_commands_own():
    err = io.StringIO()
    args, params = apply_vocabulary("train", ["--model", TINY, "--task", "step_arith", "--out", "r", "--seed", "3",
                                              "--task-params", "n_train=50", "seed=2", "--steps", "1"], err=err)
    assert args == ["--model.path", TINY, "--task.name", "step_arith", "--run.run-dir", "r", "--seed", "3",
                    "--steps", "1"]
    assert params == ("n_train=50", "seed=2")
    assert err.getvalue() == ""  # the test bed: no deprecation, no model defaults


def test_task_params_end_at_the_next_flag_and_accept_the_equals_form():
    assert split_task_params(["--a", "--task-params", "x=1", "y=2", "--b"]) == (["--a", "--b"], ("x=1", "y=2"))
    assert split_task_params(["--task-params=x=1"]) == ([], ("x=1",))
    assert split_task_params(["--task-params"]) == ([], ())
    assert split_task_params(["--b"]) == (["--b"], None)


def test_a_chat_model_gets_its_defaults_where_nothing_sets_them_and_says_so(tmp_path):
    chat = _chat_folder(tmp_path)
    err = io.StringIO()
    args, _ = apply_vocabulary("eval", ["--model", chat], err=err)
    assert args == ["--model.path", chat, "--task.name", "arith_ladder", "--max-new-tokens", "48"]
    line = err.getvalue().strip()
    assert line.startswith(f"vsr eval: {chat} is a chat model: using its defaults --task arith_ladder "
                           "--max-new-tokens 48")
    # a flag the user gave wins, and only the rest is filled
    err = io.StringIO()
    args, _ = apply_vocabulary("eval", ["--model", chat, "--max_new_tokens=128"], err=err)
    assert args == ["--model.path", chat, "--max_new_tokens=128", "--task.name", "arith_ladder"]
    # a config file that sets them wins too (nothing added, nothing said)
    err = io.StringIO()
    args, _ = apply_vocabulary("train", ["--model", chat], {"task": {"name": "step_arith"},
                                                            "rollout": {"max_new_tokens": 7}}, err=err)
    assert args == ["--model.path", chat] and err.getvalue() == ""
    # the model named in the config file counts as well
    args, _ = apply_vocabulary("train", [], {"model": {"path": chat}}, err=io.StringIO())
    assert args == ["--task.name", "arith_ladder", "--rollout.max-new-tokens", "48"]


def test_a_study_on_a_chat_model_runs_the_ladder_and_a_quick_study_is_small(tmp_path):
    chat = _chat_folder(tmp_path)
    args, _ = apply_vocabulary("study hint-ratio", ["--model", chat, "--quick"], err=io.StringIO())
    args, params = split_task_params(args)
    cfg = dict(zip(args[3::2], args[4::2]))
    assert cfg == {"--task": "arith_ladder", "--split": "test", "--min-difficulty": "0.0",
                   "--response-budget": "64", "--n-problems": str(CHAT_MODEL.quick_problems)}
    assert params == STRICT_READER  # the strict reader and its instruction
    args, _ = apply_vocabulary("study hint-ratio", ["--model", chat, "--quick", "false"], err=io.StringIO())
    assert "--n-problems" not in args
    args, _ = apply_vocabulary("study hint-ratio", ["--model", "mid", "--quick"], err=io.StringIO())
    assert args == ["--model", "mid", "--quick"]


def test_eval_of_a_run_folder_takes_the_runs_model(tmp_path):
    chat = _chat_folder(tmp_path)
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text(f"model:\n  path: {chat}\n")
    args, _ = apply_vocabulary("eval", ["--run-dir", str(run)], err=io.StringIO())
    assert args[2:] == ["--task.name", "arith_ladder", "--max-new-tokens", "48"]


def test_parsed_configs_carry_the_vocabulary(tmp_path):
    _, cfg = parse_command("eval", ["--model", TINY, "--task", "step_arith", "--task-params", "n_test=9", "seed=4",
                                    "--out", str(tmp_path / "e"), "--seed", "5"])
    assert (cfg.model.path, cfg.task.name, cfg.out_dir, cfg.seed) == (TINY, "step_arith", str(tmp_path / "e"), 5)
    assert cfg.task.params == {"n_test": 9, "seed": 4}
    _, cfg = parse_command("train", ["--config", "configs/testbed_grpo.yaml", "--task-params", "n_train=77",
                                     "--out", str(tmp_path / "r")])
    assert cfg.run.run_dir == str(tmp_path / "r")
    assert cfg.task.params["n_train"] == 77 and cfg.task.name == "step_arith"
    _, cfg = parse_command("lab", ["--model", TINY, "--task", "step_arith", "--task-params", "n_train=60",
                                   "--out", str(tmp_path / "l"), "--seed", "2"])
    assert (cfg.task, cfg.task_params, cfg.out, cfg.seed) == ("step_arith", ("n_train=60",), str(tmp_path / "l"), 2)
    _, cfg = parse_command("advise", ["--model", TINY, "--task-params", "n_train=60", "--seed", "2"])
    assert cfg.task_params == ("n_train=60",)
    _, cfg = parse_command("model card", ["--model", TINY, "--task-params", "seed=1", "--out", "x", "--seed", "3"])
    assert (cfg.task_params, cfg.out, cfg.seed) == (("seed=1", *STRICT_READER), "x", 3)  # the card reads strictly
    _, cfg = parse_command("study sigma-validation", ["--model", TINY, "--task", "step_arith", "--task-params",
                                                      "seed=1", "--out", "y", "--seed", "3"])
    assert (cfg.task, cfg.task_params, cfg.out, cfg.seed) == ("step_arith", ("seed=1",), "y", 3)


def test_bad_task_params_are_refused_naming_the_item(capsys):
    from vsr.cli import main

    with pytest.raises(ValueError, match=r"task_params\[0\]: expected 'key=value'"):
        parse_command("eval", ["--model", TINY, "--task-params", "seed"])
    with pytest.raises(SystemExit) as e:
        main(["lab", "--task", "no_such_task"])
    assert e.value.code == 2 and "unknown task 'no_such_task'" in capsys.readouterr().err


def test_the_lab_applies_its_task_and_params_to_the_training_config(tmp_path):
    from llm_harness.lab.config import LabConfig
    from llm_harness.lab.run import _train_cfg

    base = _train_cfg(LabConfig(train_config="configs/testbed_grpo.yaml", out=str(tmp_path)))
    t = _train_cfg(LabConfig(train_config="configs/testbed_grpo.yaml", out=str(tmp_path), task_params=("n_train=61",)))
    assert t.task.name == base.task.name and t.task.params == {**base.task.params, "n_train": 61}
    t = _train_cfg(LabConfig(train_config="configs/testbed_grpo.yaml", out=str(tmp_path), task="arith_ladder"))
    assert t.task.name == "arith_ladder" and t.task.params == {} and t.task.pool == ""


@pytest.mark.parametrize("name", ["lab", "advise"])
def test_lab_and_advise_on_a_chat_model_take_the_ladders_rollouts(tmp_path, name):
    chat = _chat_folder(tmp_path)
    err = io.StringIO()
    args, _ = apply_vocabulary(name, ["--model", chat], err=err)
    assert args == ["--model", chat, "--train-config", CHAT_MODEL.train_config]
    assert Path(CHAT_MODEL.train_config).is_file()
    assert "--train-config configs/real_smollm2_lab.yaml" in err.getvalue()
    args, _ = apply_vocabulary(name, ["--model", chat, "--train-config", "configs/testbed_grpo.yaml"], err=io.StringIO())
    assert args == ["--model", chat, "--train-config", "configs/testbed_grpo.yaml"]


def test_a_chat_model_reads_the_ladder_strictly_unless_told_otherwise(tmp_path):
    chat = _chat_folder(tmp_path)
    err = io.StringIO()
    _, params = apply_vocabulary("train", ["--model", chat], err=err)
    assert params == STRICT_READER and "answer_mode=strict" in err.getvalue() and "answer_mode=lenient" in err.getvalue()
    # keys the user sets keep their values; the others are filled
    _, params = apply_vocabulary("eval", ["--model", chat, "--task-params", "n_test=9", "instruction=Be brief."],
                                 err=io.StringIO())
    assert params == ("n_test=9", "instruction=Be brief.", "answer_mode=strict")
    # answer_mode given (flag or config file): nothing is filled, nothing said
    err = io.StringIO()
    _, params = apply_vocabulary("eval", ["--model", chat, "--task-params", "answer_mode=lenient"], err=err)
    assert params == ("answer_mode=lenient",) and "reading" not in err.getvalue()
    _, params = apply_vocabulary("train", ["--model", chat], {"task": {"name": "arith_ladder", "params": {
        "answer_mode": "lenient"}}}, err=io.StringIO())
    assert params is None
    # a config file's instruction is not overridden by the default one
    _, params = apply_vocabulary("train", ["--model", chat], {"task": {"name": "arith_ladder", "params": {
        "instruction": "Mine."}}}, err=io.StringIO())
    assert params == ("answer_mode=strict",)
    # another task, or the test bed: untouched
    args, params = apply_vocabulary("study hint-ratio", ["--model", chat, "--task", "step_arith"], err=io.StringIO())
    assert "--task-params" not in args
    _, params = apply_vocabulary("train", ["--model", chat, "--task", "step_arith"], err=io.StringIO())
    assert params is None
    args, params = apply_vocabulary("study hint-ratio", ["--model", "mid"], err=io.StringIO())
    assert args == ["--model", "mid"]
    # the studies: the strict keys join the user's own --task-params
    args, _ = apply_vocabulary("study failed-prefix", ["--model", chat, "--task-params", "n_test=5", "--seed", "1"],
                               err=io.StringIO())
    rest, params = split_task_params(args)
    assert params == ("n_test=5", *STRICT_READER) and "--seed" in rest
    # parsed end to end: the config's task reads strictly
    _, cfg = parse_command("eval", ["--model", chat, "--out", str(tmp_path / "e")])
    assert cfg.task.name == "arith_ladder" and cfg.task.params["answer_mode"] == "strict"
