"""Entry points: configs in configs/ load and validate; ``train`` + ``evaluate`` end to end on a tiny model."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from llm_harness.trainer.config import EvalConfig, ModelConfig, TrainConfig
from llm_harness.trainer.entry import evaluate, train
from llm_harness.trainer.loop import check_registries
from llm_harness.trainer.runlog import read_metrics
from vsr_util.config_io import load_config, save_config

_CONFIG_DIR = Path(__file__).resolve().parents[3] / "configs"
CONFIGS = sorted(_CONFIG_DIR.glob("testbed_*.yaml")) + sorted(_CONFIG_DIR.glob("agent_*.yaml"))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_shipped_configs_load_and_name_registered_entries(path):
    cfg = load_config(TrainConfig, path)
    check_registries(cfg)
    assert cfg.rollout.prompts_per_step >= 1


def test_train_then_evaluate_end_to_end(tmp_path):
    torch.set_num_threads(1)
    yaml = tmp_path / "cfg.yaml"
    yaml.write_text(f"""
seed: 1
steps: 3
model: {{random_init: true, hidden_size: 32, num_layers: 1, num_heads: 4, max_context: 64}}
task: {{name: step_arith, params: {{n_train: 100, n_validation: 16, n_test: 16, n_hard: 4, max_terms: 3}}}}
rollout: {{prompts_per_step: 2, group_size: 2, max_new_tokens: 8, verify_timeout_s: 0.0}}
validation: {{every: 3, n_problems: 4, k: 2}}
run: {{run_dir: {tmp_path / 'run'}, checkpoint_every: 2, progress: false}}
""")
    cfg = load_config(TrainConfig, yaml)
    assert train(cfg) == 0
    run = tmp_path / "run"
    rows = read_metrics(run / "metrics.jsonl")
    assert [r["step"] for r in rows] == [0, 1, 2]
    assert "val_avg_at_2" in rows[-1] and "gen_new_tokens" in rows[0] and "time_generate_s" in rows[0]
    assert (run / "metrics.csv").read_text().count("\n") == 4
    assert load_config(TrainConfig, run / "config.yaml") == cfg
    assert (run / "checkpoints" / "latest").read_text().strip() == "step_000003"
    ecfg = EvalConfig(run_dir=str(run), task=cfg.task, split="test", n_problems=4, k=2, max_new_tokens=8,
                      out_dir=str(tmp_path / "eval"))
    assert evaluate(ecfg) == 0
    res = json.loads((tmp_path / "eval" / "eval.json").read_text())
    assert res["n_problems"] == 4 and 0.0 <= res["avg_at_k"] <= 1.0 and set(res["pass_at"]) == {"1", "2"}
    # a fresh run into a used run directory is refused; a resumed run with everything done
    # does nothing more and keeps the metrics
    with pytest.raises(ValueError, match="run.run_dir"):
        train(cfg)
    save_config(cfg, yaml)
    from dataclasses import replace

    assert train(replace(cfg, run=replace(cfg.run, resume=True))) == 0
    assert len(read_metrics(run / "metrics.jsonl")) == 3


def test_model_path_missing_is_a_clear_error(tmp_path):
    from llm_harness.trainer.modeling import build_model

    with pytest.raises(ValueError, match="model.path"):
        build_model(ModelConfig(path=str(tmp_path / "nope")), 0)


class _FixedBackend:
    """Returns scripted samples: problem i gets completions whose correctness pattern is known."""

    def __init__(self, codec, task, problems, pattern):
        self.codec, self.task, self.problems, self.pattern = codec, task, problems, pattern

    def generate(self, prompts, n, sp):
        from llm_harness.backends import Sample

        out = []
        for ids in prompts:
            i = next(j for j, p in enumerate(self.problems) if list(self.codec.encode(self.task.plain_prompt(p))) == list(ids))
            row = []
            for j in range(n):
                p = self.problems[i]
                text = p.solution if self.pattern[i][j] else "0+0=0\nA:" + str(int(p.answer) + 1)
                toks = tuple(self.codec.encode(text)) + (1,)
                row.append(Sample(toks, tuple(-0.1 for _ in toks), "stop"))
            out.append(row)
        return out


def test_evaluate_policy_metrics_on_scripted_samples():
    from llm_harness.tasks import get_task
    from llm_harness.trainer.evaluation import SamplingSession, evaluate_policy, format_eval_markdown
    from llm_harness.trainer.modeling import CharTokenizer, Codec
    from llm_harness.trainer.rollout import SafeVerifier

    task = get_task("step_arith", n_train=10, n_validation=4, n_test=4, n_hard=2, max_terms=3)
    probs = list(task.problems("validation"))[:3]
    pattern = [[1, 0, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0]]
    codec = Codec(CharTokenizer())
    be = _FixedBackend(codec, task, probs, pattern)
    ref = {"avg_at_k": 0.25, "length_mean": 20.0}
    res = evaluate_policy(SamplingSession(be, codec, task, SafeVerifier(task, 0), temperature=1.0), probs, k=4, reference=ref)
    assert res["avg_at_k"] == pytest.approx(5 / 12)
    assert res["pass_at"][1] == pytest.approx(5 / 12)
    assert res["pass_at"][4] == pytest.approx(2 / 3)
    assert res["pass_at"][2] == pytest.approx((0.5 + 1 + 0) / 3)  # 1 - C(3,2)/C(4,2) = 1/2 for one correct of 4
    assert res["self_bleu_4"] is not None and 0 <= res["distinct_4"] <= 1
    assert "aes" in res and "avg@4" in format_eval_markdown(res)


def test_training_curve_figure_quick(tmp_path):
    from llm_harness.trainer.figures import make_training_curve_figure

    png = make_training_curve_figure(tmp_path, quick=True)
    assert png.name == "training_curve.png" and png.is_file() and not (tmp_path / "training_curve.pdf").exists()
    assert (tmp_path / "metrics.csv").read_text().count("\n") == 7
    # committed by make figures: no wall time or peak memory (they differ on every run); those go to timings.csv/png
    header = (tmp_path / "metrics.csv").read_text().splitlines()[0].split(",")
    assert "reward_mean" in header and "mem_weights_gb" in header
    assert not [c for c in header if c.startswith(("time_", "mem_peak_"))]
    timings = (tmp_path / "timings.csv").read_text().splitlines()
    assert len(timings) == 7 and timings[0].startswith("step,time_") and "time_step_s" in timings[0]
    assert "mem_peak_train_gb" in timings[0] and (tmp_path / "timings.png").is_file()


def test_agent_configs_are_the_papers_settings():
    """The agentic configs: GiGPO on the mid Sokoban agent; VSR at the paper's rho 0.3, W 5,
    G 8; the ablations differ from VSR in exactly their field(s); the GPU recipes carry the paper's
    Qwen2.5-1.5B-Instruct, batch 32, lr 1e-6, replies <= 256 tokens."""
    load = lambda name: load_config(TrainConfig, _CONFIG_DIR / name)  # noqa: E731
    base, vsr = load("agent_sokoban_gigpo.yaml"), load("agent_sokoban_vsr_gigpo.yaml")
    assert base.model.path == "llm_harness/testbed/checkpoints/sokoban/mid" and base.algo.advantage == "gigpo"
    assert base.algo.collector == "multiturn" and base.task.name == "env" and base.rollout.group_size == 8
    assert not base.plugins and vsr.plugins == {"vsr": {"rho": 0.3, "window": 5, "score": "p1mp"}}
    ablations = {"agent_sokoban_vsr_uniform.yaml": {"score": "uniform"},
                 "agent_sokoban_vsr_norecency.yaml": {"recency": False, "freeze_after": 10},
                 "agent_sokoban_static_reset.yaml": {"cold_start": True, "cold_start_problems": 512, "insert_policy": False,
                                                     "recency": False, "score": "uniform"}}
    for name, diff in ablations.items():
        assert load(name).plugins["vsr"] == {**vsr.plugins["vsr"], **diff}, name
    for name in ("agent_sokoban_gigpo_gpu.yaml", "agent_sokoban_vsr_gigpo_gpu.yaml"):
        g = load(name)
        assert (g.model.path, g.model.backend, g.rollout.prompts_per_step, g.rollout.group_size, g.optim.lr, g.agent.turn_tokens) == \
               ("Qwen/Qwen2.5-1.5B-Instruct", "vllm", 32, 8, 1e-6, 256)
        # the GPU recipes' precision: bf16 sampling and loss on float32 master weights
        assert (g.model.dtype, g.run.precision) == ("float32", "bf16")
    assert load("agent_sokoban_vsr_gigpo_gpu.yaml").plugins == vsr.plugins


def test_babyai_agent_configs():
    """BabyAI configs: the CPU config trains the mid test-bed agent on its own level,
    budget and window (those of its card) with the Sokoban recipe's GiGPO; the GPU recipes, one per VSR
    level, carry the paper's agentic settings; the VSR variants add exactly the paper's plug-in."""
    from llm_harness.testbed.agents import AGENT_FAMILIES

    load = lambda name: load_config(TrainConfig, _CONFIG_DIR / name)  # noqa: E731
    sok, cpu, cpu_vsr = load("agent_sokoban_gigpo.yaml"), load("agent_babyai_oneroom_gigpo.yaml"), load("agent_babyai_oneroom_vsr_gigpo.yaml")
    fam = AGENT_FAMILIES["babyai"]
    assert cpu.model.path == "llm_harness/testbed/checkpoints/babyai/mid"
    assert cpu.task.params["env"] == "babyai" and cpu.task.params["env_params"] == fam.env_params(None)
    assert cpu.task.params["window"] == fam.window and cpu.agent.turn_tokens == fam.max_new_tokens
    assert (cpu.algo, cpu.optim, cpu.rollout.group_size) == (sok.algo, sok.optim, sok.rollout.group_size)
    assert cpu_vsr.plugins == load("agent_sokoban_vsr_gigpo.yaml").plugins and cpu_vsr.task == cpu.task
    sok_gpu = load("agent_sokoban_gigpo_gpu.yaml")
    for level, budget in (("oneroom", 64), ("synthloc", 192), ("miniboss", 128)):
        g, v = load(f"agent_babyai_{level}_gigpo_gpu.yaml"), load(f"agent_babyai_{level}_vsr_gigpo_gpu.yaml")
        assert (g.model, g.algo, g.optim, g.agent) == (sok_gpu.model, sok_gpu.algo, sok_gpu.optim, sok_gpu.agent)
        assert (g.rollout.prompts_per_step, g.rollout.group_size, g.steps) == (32, 8, 150)
        assert (g.model.dtype, g.run.precision, v.run.precision) == ("float32", "bf16", "bf16")
        assert g.task.params["env_params"]["max_steps"] == budget and g.task.params["reply_format"] == "tagged"
        assert not g.plugins and v.plugins == cpu_vsr.plugins and v.task == g.task
    levels = {load(f"agent_babyai_{lv}_gigpo_gpu.yaml").task.params["env_params"]["level"] for lv in ("oneroom", "synthloc", "miniboss")}
    assert levels == {"OneRoomS8", "SynthLoc", "MiniBoss"}



@pytest.mark.parametrize("name", ["real_smollm2_vsr_grpo.yaml", "real_smollm2_vsr_grpo_lenient.yaml", "real_prefix_grpo.yaml"])
def test_real_model_configs_name_their_verifier(name):
    """The real-model configs say which reader grades them; the strict ones ask for the answer with the same
    instruction the chat defaults and the model card use (arith_ladder.STRICT_READER), so they cannot drift apart."""
    from llm_harness.tasks import get_task
    from llm_harness.tasks.arith_ladder import STRICT_READER
    from llm_harness.tasks.base import parse_task_params

    cfg = load_config(TrainConfig, _CONFIG_DIR / name)
    task = get_task(cfg.task.name, **cfg.task.params)
    if name.endswith("_lenient.yaml"):
        assert task.config.answer_mode == "lenient" and task.config.instruction == ""
    else:
        assert {k: cfg.task.params[k] for k in ("answer_mode", "instruction")} == parse_task_params(STRICT_READER)


def test_the_real_model_lab_config_is_the_grpo_recipe_with_the_lenient_reader():
    """configs/real_smollm2_lab.yaml spells out the recipe the committed lab's arms were drawn with (no task
    parameters: a lab's identity holds them as written); everything its gradients depend on stays the GRPO config's."""
    lab = load_config(TrainConfig, _CONFIG_DIR / "real_smollm2_lab.yaml")
    grpo = load_config(TrainConfig, _CONFIG_DIR / "real_smollm2_vsr_grpo.yaml")
    assert dict(lab.task.params) == {} and lab.task.name == grpo.task.name
    for part in ("model", "rollout", "algo", "optim"):
        assert getattr(lab, part) == getattr(grpo, part), part
    assert lab.run.micro_batch_rows == 8 and replace(lab.run, micro_batch_rows=0, run_dir="x", checkpoint_every=1) == \
        replace(grpo.run, micro_batch_rows=0, run_dir="x", checkpoint_every=1)
