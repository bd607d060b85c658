"""Every size checked before memory is spent, and the weak messages of a user trial made clear:
each case names the field or the file (and line) and the way out."""

from __future__ import annotations

import json
import time
from dataclasses import replace

import pytest

from llm_harness.trainer.config import LIMITS, RolloutConfig, TrainConfig
from vsr.cli import main
from vsr_util.config_io import from_dict, load_config

TINY = {"steps": 3, "model": {"random_init": True, "hidden_size": 16, "num_layers": 1, "num_heads": 2, "max_context": 64},
        "task": {"name": "step_arith", "params": {"n_train": 50, "n_validation": 8, "n_test": 8}},
        "rollout": {"prompts_per_step": 2, "group_size": 2, "max_new_tokens": 4, "verify_timeout_s": 0},
        "validation": {"every": 1, "n_problems": 4, "k": 2},
        "run": {"progress": False, "checkpoint_every": 1, "keep_checkpoints": 3}}


def _with(path: str, value):
    d = json.loads(json.dumps(TINY))
    *head, last = path.split(".")
    node = d
    for k in head:
        node = node.setdefault(k, {})
    node[last] = value
    return d


@pytest.mark.parametrize("field, value, limit", [
    ("rollout.prompts_per_step", 10**9, LIMITS["prompts_per_step"]),
    ("rollout.group_size", 10**9, LIMITS["group_size"]),
    ("rollout.max_new_tokens", 10**9, LIMITS["max_new_tokens"]),
    ("steps", 10**18, LIMITS["steps"]),
    ("algo.ppo_epochs", 10**9, LIMITS["ppo_epochs"]),
    ("validation.k", 10**9, LIMITS["validation_k"]),
    ("validation.n_problems", 10**9, LIMITS["validation_problems"]),
])
def test_a_huge_size_is_refused_at_validation_naming_field_and_limit(field, value, limit):
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match=rf"{field.split('.')[-1]}: must be <= {limit}, got {value}"):
        from_dict(TrainConfig, _with(field, value))
    assert time.perf_counter() - t0 < 30  # refused, not attempted (a generous bound: a failure would take minutes)


def test_the_rollouts_per_step_product_is_bounded():
    cfg = from_dict(TrainConfig, TINY)
    with pytest.raises(ValueError, match=r"prompts_per_step x rollout.group_size: 4096 x 4096 = 16777216 rollouts"):
        replace(cfg, rollout=RolloutConfig(prompts_per_step=4096, group_size=4096))


def test_an_agent_tasks_n_train_is_bounded_and_nothing_is_materialised():
    from llm_harness.envs.task import MAX_TRAIN_EPISODES, EnvTaskConfig
    from llm_harness.tasks import get_task

    with pytest.raises(ValueError, match=rf"n_train: must be <= {MAX_TRAIN_EPISODES}, got 1000000000"):
        EnvTaskConfig(env="sokoban", n_train=10**9)
    task = get_task("env", env="sokoban", n_train=MAX_TRAIN_EPISODES)  # the largest allowed: built lazily
    assert len(task._splits["train"]) == MAX_TRAIN_EPISODES and isinstance(task._splits["train"], range)


def test_a_non_utf8_config_names_file_and_line(tmp_path, capsys):
    p = tmp_path / "c.yaml"
    p.write_bytes(b"steps: 3\nseed: 1 # caf\xe9\n")
    assert main(["train", "--config", str(p)]) == 2
    err = capsys.readouterr().err
    assert f"{p}:2: not UTF-8 (byte 0xe9 at column 14)" in err


@pytest.mark.parametrize("text, expect", [
    ('[\n  {"steps": 3}\n]\n', "must be a mapping of section -> fields, got a list (JSON array / YAML sequence)"),
    ('{\n  "steps": 3,\n  "seed": \n}\n', ":4: not valid JSON (Expecting value at column 1)"),
])
def test_a_json_config_error_says_what_and_where(tmp_path, text, expect):
    p = tmp_path / "c.json"
    p.write_text(text)
    with pytest.raises(ValueError) as info:
        load_config(TrainConfig, p)
    assert expect in str(info.value) and str(p) in str(info.value)


def test_a_pretty_printed_json_array_task_file_is_recognised(tmp_path):
    from llm_harness.tasks.math_task import load_math_jsonl

    p = tmp_path / "probs.json"
    p.write_text(json.dumps([{"id": "a", "problem": "1+1", "answer": "2"}], indent=2))
    with pytest.raises(ValueError, match=r"probs\.json:1: this looks like a pretty-printed JSON array; the file must be "
                                         r"JSON Lines .*jq -c"):
        load_math_jsonl(p)


def test_a_pickled_model_folder_is_refused_without_torch_advice(tmp_path, capsys):
    d = tmp_path / "m"
    d.mkdir()
    (d / "config.json").write_text("{}")
    (d / "pytorch_model.bin").write_bytes(b"\x80\x04not really")
    rc = main(["eval", "--model.path", str(d), "--n-problems", "2", "--out-dir", str(tmp_path / "e")])
    err = capsys.readouterr().err
    assert rc == 2 and "holds pytorch_model.bin, not safetensors" in err and "If you trust the file" in err
    assert "weights_only=False" not in err


def _trained(tmp_path):
    cfg = from_dict(TrainConfig, _with("run.run_dir", str(tmp_path / "run")))
    from llm_harness.trainer.entry import train

    assert train(cfg) == 0
    return cfg, tmp_path / "run"


def test_eval_of_a_run_names_the_step_and_the_damaged_checkpoint_it_skipped(tmp_path, capsys):
    cfg, run = _trained(tmp_path)
    f = run / "checkpoints" / "step_000003" / "model.safetensors"
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0xFF
    f.write_bytes(bytes(data))
    capsys.readouterr()
    rc = main(["eval", "--run-dir", str(run), "--task.name", "step_arith", "--n-problems", "2", "--k", "1",
               "--max-new-tokens", "4", "--out-dir", str(tmp_path / "e")])
    err = capsys.readouterr().err
    assert rc == 0 and "evaluating step 2" in err and "the newest intact checkpoint; skipped:" in err
    assert "step_000003" in err


def test_eval_of_a_run_says_when_the_task_differs_from_the_one_it_trained_on(tmp_path, capsys):
    cfg, run = _trained(tmp_path)
    base = ["eval", "--run-dir", str(run), "--n-problems", "2", "--k", "1", "--max-new-tokens", "4"]
    capsys.readouterr()
    assert main(base + ["--task.name", "step_arith", "--out-dir", str(tmp_path / "e1")]) == 0
    err = capsys.readouterr().err
    assert "trained on step_arith n_test=8 n_train=50 n_validation=8; evaluating step_arith as the command sets" in err
    same = ["--task-params", "n_train=50", "n_validation=8", "n_test=8"]
    assert main(base + ["--task.name", "step_arith", *same, "--out-dir", str(tmp_path / "e2")]) == 0
    assert "trained on" not in capsys.readouterr().err  # the run's own task: nothing to say


def test_a_damaged_metrics_row_is_recovered_from_the_csv_on_resume(tmp_path, capsys):
    cfg, run = _trained(tmp_path)
    lines = (run / "metrics.jsonl").read_text().splitlines()
    before = [json.loads(x) for x in lines]
    lines[1] = lines[1][:40]  # a damaged middle row; its CSV copy is intact
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    from llm_harness.trainer.entry import train

    capsys.readouterr()
    assert train(replace(cfg, steps=4, run=replace(cfg.run, resume=True))) == 0
    assert "metrics.jsonl:2 is damaged" in capsys.readouterr().err
    after = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in after] == [0, 1, 2, 3]
    assert after[1]["reward_mean"] == pytest.approx(before[1]["reward_mean"]) and after[1]["step"] == 1
    assert ("loss" in after[1]) == ("loss" in before[1])  # absent when the step made no update
    # damaged in both files: refused, naming the line, nothing lost
    lines = (run / "metrics.jsonl").read_text().splitlines()
    lines[1] = "{oops"
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    (run / "metrics.csv").write_text((run / "metrics.csv").read_text().splitlines()[0] + "\n")
    with pytest.raises(ValueError, match=r"metrics.jsonl:2: damaged metrics row .* repair or delete that line"):
        train(replace(cfg, steps=5, run=replace(cfg.run, resume=True)))


def test_a_pass_too_large_for_the_machine_is_refused_before_the_first_step(tmp_path, monkeypatch):
    import llm_harness.trainer.memory_check as mc
    from llm_harness.trainer.entry import train

    cfg = from_dict(TrainConfig, _with("run.run_dir", str(tmp_path / "run")))
    est = mc.estimate_pass_bytes(cfg, prompt_tokens=10, vocab=100, max_context=64)
    assert (est.rows, est.tokens) == (4, 14) and est.bytes == 4 * 14 * 100 * 4 * 3
    monkeypatch.setattr(mc, "available_bytes", lambda: 1000)  # a machine with 1000 bytes free
    with pytest.raises(ValueError, match=r"memory: the largest training pass holds about .* set run.micro_batch_rows 1 or less"):
        train(cfg)
    assert not (tmp_path / "run").exists()  # refused before anything was written
    monkeypatch.setenv("VSR_NO_MEMORY_CHECK", "1")
    assert train(cfg) == 0


def test_the_one_metrics_reader_skips_a_torn_last_line_and_names_other_damage(tmp_path):
    from llm_harness.trainer.runlog import read_metrics

    p = tmp_path / "metrics.jsonl"
    p.write_text('{"step": 0}\n{"step": 1}\n{"step": 2, "lo')
    assert [r["step"] for r in read_metrics(p)] == [0, 1]
    p.write_text('{"step": 0}\n{"ste\n{"step": 2}\n')
    with pytest.raises(ValueError, match=r"metrics.jsonl:2: damaged metrics row"):
        read_metrics(p)
    assert read_metrics(tmp_path / "missing.jsonl") == []
