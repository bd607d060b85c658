"""scripts/verl: the data writer, the reward function, and every method's Hydra overrides composed
against verl 0.9.1's own ``ppo_trainer`` config (what can be checked without a GPU)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

verl = pytest.importorskip("verl")
import pandas as pd  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402

from llm_harness.integrations.verl.estimators import _params  # noqa: E402
from llm_harness.integrations.verl.prefix_buffer import PrefixBuffer  # noqa: E402
from llm_harness.integrations.verl.rollout_replay import VerlReplay  # noqa: E402
from llm_harness.tasks import get_task  # noqa: E402
from llm_harness.testbed.paths import shipped_checkpoint  # noqa: E402

ROOT = Path(__file__).resolve().parents[4]
PARAMS = {"n_train": 16, "n_validation": 4, "n_test": 4, "n_hard": 2}


def _script(name: str):
    sys.path.insert(0, str(ROOT / "scripts/verl"))
    try:
        return __import__(name)
    finally:
        sys.path.pop(0)


def make_data(out: Path, agent: str) -> None:
    """``scripts/verl/make_data.py`` with its command line, in this process (its imports are loaded)."""
    assert _script("make_data").main(["--task", "step_arith", "--params", json.dumps(PARAMS), "--out", str(out),
                                      "--agent", agent, "--tokenizer", str(shipped_checkpoint("mid"))]) == 0


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("verl_data")
    make_data(d / "vsr", "vsr_prefix")
    (d / "plain").mkdir()  # the same rows for verl's default agent loop (one subprocess less)
    for f in ("train.parquet", "val.parquet"):
        df = pd.read_parquet(d / "vsr" / f)
        df["agent_name"] = "single_turn_agent"
        df.to_parquet(d / "plain" / f)
    assert _script("make_data").main(["--task", "env", "--params", json.dumps(ENV_PARAMS), "--out", str(d / "env")]) == 0
    return d


ENV_PARAMS = {"env": "sokoban", "window": 1, "n_train": 8}


def test_make_data_writes_env_episodes_for_the_vsr_env_loop(data):
    tr, va = pd.read_parquet(data / "env" / "train.parquet"), pd.read_parquet(data / "env" / "val.parquet")
    task = get_task("env", **ENV_PARAMS)
    assert set(tr["agent_name"]) == {"vsr_env"} and set(va["agent_name"]) == {"vsr_env_eval"}
    assert [int(e["seed"]) for e in tr["extra_info"]] == [task.seed_of(p) for p in task.problems("train")]
    assert json.loads(tr["extra_info"].iloc[0]["params"]) == ENV_PARAMS
    with pytest.raises(SystemExit):
        _script("make_data").main(["--task", "env", "--params", json.dumps(ENV_PARAMS), "--out", str(data / "x"), "--agent", "vsr_prefix"])


def test_make_data_writes_the_tasks_problems_with_reward_fields(data):
    tr, va = pd.read_parquet(data / "vsr" / "train.parquet"), pd.read_parquet(data / "vsr" / "val.parquet")
    task = get_task("step_arith", **PARAMS)
    probs = list(task.problems("train"))
    assert len(tr) == len(probs) and len(va) == len(list(task.problems("validation")))
    assert set(tr["agent_name"]) == {"vsr_prefix"} and set(va["agent_name"]) == {"single_turn_agent"}
    assert [r["ground_truth"] for r in tr["reward_model"]] == [p.answer for p in probs]
    assert list(tr["prompt"].iloc[0][0].keys()) == ["role", "content"] and len(tr["vsr_prompt_ids"].iloc[0]) > 0


def test_reward_function_grades_with_the_tasks_verifier():
    reward = _script("reward")
    info = {"params": json.dumps(PARAMS, sort_keys=True)}
    assert reward.compute_score("vsr/step_arith", "3+4=7\nA:7", "7", info) == 1.0
    assert reward.compute_score("vsr/step_arith", "3+4=8\nA:8", "7", info) == 0.0
    with pytest.raises(ValueError, match="data_source"):
        reward.compute_score("openai/gsm8k", "A:7", "7", info)


@pytest.mark.parametrize("method", ["grpo", "vsr_grpo", "vsr", "extra", "vsr_extra", "replay", "all", "gigpo", "vsr_gigpo"])
def test_every_methods_overrides_compose_with_verls_config(data, method):
    folder = data / ("vsr" if method in ("vsr", "vsr_extra", "all") else "env" if "gigpo" in method else "plain")
    env = {**os.environ, "DRY_RUN": "1", "MODEL": "/m", "DATA": str(folder), "OUT": "/tmp/unused", "PYTHON": sys.executable}
    out = subprocess.run(["bash", str(ROOT / "scripts/verl/train.sh"), method], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    cfgdir = str(Path(verl.__file__).parent / "trainer" / "config")
    with initialize_config_dir(config_dir=cfgdir, version_base=None):
        cfg = compose(config_name="ppo_trainer", overrides=out.stdout.split())
    assert cfg.trainer.v1.trainer_mode == "vsr_sync" and cfg.reward.custom_reward_function.name == "compute_score"
    p = _params(cfg.algorithm)  # the toolkit's parse of algorithm.vsr refuses unknown keys
    if "vsr" in cfg.algorithm and "prefix" in cfg.algorithm.vsr:
        assert PrefixBuffer(p.prefix, n=cfg.actor_rollout_ref.rollout.n, prompts_per_step=cfg.data.train_batch_size,
                            max_response_tokens=cfg.data.max_response_length).plugin.cfg.rho == (0.3 if "gigpo" in method else 0.5)
    if "gigpo" in method:
        from llm_harness.integrations.verl.env_loop import _agent_params
        from llm_harness.trainer.gigpo import GiGPOParams
        from vsr_util.config_io import from_dict

        assert _agent_params(cfg)["turn_tokens"] == 256 and from_dict(GiGPOParams, dict(p.gigpo)).gamma == 0.95
    if "vsr" in cfg.algorithm and "replay" in cfg.algorithm.vsr:
        assert VerlReplay(p.replay).cfg.ratio == 0.5
        # r · B rows must fill whole PPO mini-batches, or verl's multiple rounds the draw down to nothing
        n, mb = cfg.actor_rollout_ref.rollout.n, cfg.actor_rollout_ref.actor.ppo_mini_batch_size
        assert (0.5 * cfg.data.train_batch_size * n) % (mb * n) == 0


def test_the_recipe_builds_verls_worker_configs(data):
    """The overrides instantiate verl's actor and rollout dataclasses (verl checks micro-batch sizes there,
    not when composing): the recipe once left the micro-batch unset and failed on its first launch."""
    from verl.utils.config import omega_conf_to_dataclass

    env = {**os.environ, "DRY_RUN": "1", "MODEL": "/m", "DATA": str(data / "plain"), "OUT": "/tmp/unused", "PYTHON": sys.executable}
    out = subprocess.run(["bash", str(ROOT / "scripts/verl/train.sh"), "grpo"], env=env, capture_output=True, text=True)
    with initialize_config_dir(config_dir=str(Path(verl.__file__).parent / "trainer" / "config"), version_base=None):
        cfg = compose(config_name="ppo_trainer", overrides=out.stdout.split())
    actor = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    assert actor.ppo_micro_batch_size_per_gpu == 8 and omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout).name == "vllm"


def test_cpu_device_appends_the_cpu_overrides_after_the_recipe(data):
    env = {**os.environ, "DRY_RUN": "1", "MODEL": "/m", "DATA": str(data / "plain"), "OUT": "/tmp/unused", "PYTHON": sys.executable}
    gpu = subprocess.run(["bash", str(ROOT / "scripts/verl/train.sh"), "grpo"], env=env, capture_output=True, text=True).stdout.split()
    cpu = subprocess.run(["bash", str(ROOT / "scripts/verl/train.sh"), "grpo", "trainer.total_training_steps=7"],
                         env={**env, "DEVICE": "cpu"}, capture_output=True, text=True).stdout.split()
    listed = [ln.split("#")[0].strip() for ln in (ROOT / "scripts/verl/cpu.overrides").read_text().splitlines()]
    listed = [ln for ln in listed if ln]
    assert cpu == gpu + listed + ["trainer.total_training_steps=7"]  # the recipe, then the CPU lines, then the caller's
    with initialize_config_dir(config_dir=str(Path(verl.__file__).parent / "trainer" / "config"), version_base=None):
        cfg = compose(config_name="ppo_trainer", overrides=cpu)
    assert cfg.trainer.device == "cpu" and cfg.actor_rollout_ref.rollout.name == "vsr_hf" and cfg.trainer.total_training_steps == 7
    bad = subprocess.run(["bash", str(ROOT / "scripts/verl/train.sh"), "grpo"], env={**env, "DEVICE": "tpu"}, capture_output=True, text=True)
    assert bad.returncode == 2 and "DEVICE must be gpu or cpu" in bad.stderr


def test_agent_methods_refuse_data_without_the_env_loop(data):
    env = {**os.environ, "DRY_RUN": "1", "MODEL": "/m", "DATA": str(data / "plain"), "OUT": "/tmp/unused", "PYTHON": sys.executable}
    out = subprocess.run(["bash", str(ROOT / "scripts/verl/train.sh"), "vsr_gigpo"], env=env, capture_output=True, text=True)
    assert out.returncode == 2 and "--task env" in out.stderr


def test_vsr_refuses_data_without_its_agent_loop(data):
    env = {**os.environ, "DRY_RUN": "1", "MODEL": "/m", "DATA": str(data / "plain"), "OUT": "/tmp/unused", "PYTHON": sys.executable}
    out = subprocess.run(["bash", str(ROOT / "scripts/verl/train.sh"), "vsr"], env=env, capture_output=True, text=True)
    assert out.returncode == 2 and "--agent vsr_prefix" in out.stderr
