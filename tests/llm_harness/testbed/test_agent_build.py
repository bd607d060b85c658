"""``vsr testbed build --family sokoban`` in a tiny configuration: end to end in seconds, cards,
bitwise rebuild; the family options and their errors."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from llm_harness.testbed.agents import AGENT_FAMILIES
from llm_harness.testbed.build import FAMILIES, AgentBuildSettings, TestbedBuildConfig, build
from llm_harness.testbed.model import TestbedModelConfig, load_testbed
from llm_harness.testbed.paths import CHECKPOINT_DIR

TINY = TestbedModelConfig(hidden_size=32, num_hidden_layers=1, intermediate_size=64)
AGENT = AgentBuildSettings(n_train_seeds=20, card_seeds=8, card_samples=2, card_chunk_seeds=4, alphas=(0.0, 0.5),
                           curve_checkpoints=("late",))


def _cfg(out, **kw):
    base = dict(family="sokoban", out_dir=str(out), save_steps=(3, 5), save_names=("early", "late"), arch=TINY,
                agent=AGENT, batch_size=8, warmup_steps=1, log_every=5, progress=False)
    base.update(kw)
    return TestbedBuildConfig(**base)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("agent_build")
    assert build(_cfg(out)) == 0
    return out


def test_tiny_sokoban_build_writes_loadable_checkpoints_with_cards(built):
    for name, step, n_alpha in (("early", 3, 1), ("late", 5, 2)):
        path = built / name
        model, tok = load_testbed(path)
        assert model.config.max_position_embeddings == 384 and len(tok) == 4 + 97 + 4
        assert tok.decode(tok.encode("# √ P\nA:up")) == "# √ P\nA:up"
        card = json.loads((path / "card.json").read_text())
        assert card["family"] == "sokoban" and card["name"] == name and card["step"] == step
        assert card["agent"]["window"] == 0 and card["agent"]["longest_prompt_tokens"] == 317
        rows = card["evaluation"]["continuation"]
        assert [r["alpha"] for r in rows] == [0.0, 0.5][:n_alpha]
        for r in rows:
            assert r["n_seeds"] == 8 and r["n_episodes"] == 16 and len(r["success_per_seed"]) == 8
            assert 0.0 <= r["ci_low"] <= r["success"] <= r["ci_high"] <= 1.0
        assert "Success from the initial state" in (path / "README.md").read_text()
    log = json.loads((built / "build_log.json").read_text())
    assert [e["step"] for e in log["log"]] == [5] and [s["step"] for s in log["saved"]] == [3, 5]


def test_agent_rebuild_is_bitwise_identical_and_prefix_invariant(built, tmp_path):
    torch.set_num_threads(1)
    build(_cfg(tmp_path, save_steps=(3,), save_names=("again",), cards=False))
    assert not (tmp_path / "again" / "card.json").exists()
    a, b = load_file(built / "early" / "model.safetensors"), load_file(tmp_path / "again" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_family_defaults_and_errors(tmp_path):
    arith = TestbedBuildConfig()
    assert (arith.family, arith.out_dir, arith.save_steps, arith.max_new_tokens) == ("arith", str(CHECKPOINT_DIR), (500, 550, 675), 160)
    assert arith.arch == TestbedModelConfig() and arith.agent == AgentBuildSettings()
    sok = TestbedBuildConfig(family="sokoban")
    assert sok.out_dir == str(CHECKPOINT_DIR / "sokoban") and sok.max_new_tokens == 8
    assert sok.agent.window == 0 and sok.agent.context == sok.arch.max_position_embeddings == 384
    baby = TestbedBuildConfig(family="babyai")
    assert baby.agent.level == "OneRoomS8" and baby.agent.curve_checkpoints == ("mid",) and sok.agent.curve_checkpoints == ("low", "mid", "high")
    assert AGENT_FAMILIES["babyai"].env_params(None) == {"level": "OneRoomS8", "max_steps": 16}
    assert AGENT_FAMILIES["babyai"].env_params("MiniBoss") == {"level": "MiniBoss"}  # a per-level budget
    assert TestbedBuildConfig(family="babyai", agent=AgentBuildSettings(curve_checkpoints=())).agent.curve_checkpoints == ()
    assert set(FAMILIES) == {"arith", "sokoban", "babyai"}
    with pytest.raises(ValueError, match="family"):
        TestbedBuildConfig(family="chess")
    with pytest.raises(ValueError, match="agent.level"):
        TestbedBuildConfig(family="sokoban", agent=AgentBuildSettings(level="OneRoomS8"))
    with pytest.raises(ValueError, match="agent.level"):
        TestbedBuildConfig(family="babyai", agent=AgentBuildSettings(level="BossLevel"))
    with pytest.raises(ValueError, match="agent"):
        TestbedBuildConfig(agent=AgentBuildSettings(window=1))  # agent settings with arith
    with pytest.raises(ValueError, match="max_position_embeddings"):
        TestbedBuildConfig(family="sokoban", arch=TestbedModelConfig(max_position_embeddings=1000))
    with pytest.raises(ValueError, match="alphas"):
        AgentBuildSettings(alphas=(0.5,))
    with pytest.raises(ValueError, match="agent.context"):
        build(_cfg(tmp_path, agent=AgentBuildSettings(n_train_seeds=3, context=300), cards=False))


def test_cli_parses_the_family(tmp_path, capsys):
    from vsr.cli import run_command

    args = ["--family", "sokoban", "--out-dir", str(tmp_path), "--save-steps", "2", "--save-names", "only",
            "--arch.hidden-size", "16", "--arch.num-hidden-layers", "1", "--arch.intermediate-size", "16",
            "--agent.n-train-seeds", "5", "--batch-size", "4", "--warmup-steps", "0", "--no-cards", "--no-progress"]
    assert run_command("testbed build", args) == 0
    log = json.loads((tmp_path / "build_log.json").read_text())
    assert log["build_config"]["family"] == "sokoban" and log["build_config"]["agent"]["context"] == 384


def test_family_budget_reaches_the_environment_and_is_validated():
    """An agent family's ``max_steps`` is part of its environment parameters (and so of its cards and
    evaluations); without one the environment keeps its own budget."""
    from llm_harness.envs import make_env
    from llm_harness.testbed.agents import AgentFamily

    fam = AgentFamily(env="sokoban", alphabet="#_OX√PS", window=0, context=64, max_steps=7)
    assert fam.env_params(None) == {"max_steps": 7}
    env = make_env(fam.env, **fam.env_params(None))
    env.reset(0)
    for _ in range(6):
        _, _, done, _ = env.step("xyzzy")  # invalid: a no-op that spends a turn
        assert not done
    assert env.step("xyzzy")[2], "the 7th turn ends the episode"
    assert AgentFamily(env="sokoban", alphabet="#", window=0, context=64).env_params(None) == {}
    with pytest.raises(ValueError, match="max_steps"):
        AgentFamily(env="sokoban", alphabet="#", window=0, context=64, max_steps=0)
    with pytest.raises(ValueError, match="no level 'OneRoomS8'"):
        AgentFamily(env="sokoban", alphabet="#", window=0, context=64, max_steps={"OneRoomS8": 16})
    with pytest.raises(ValueError, match="max_steps"):
        AgentFamily(env="babyai", alphabet="#", window=0, context=64, level="MiniBoss", max_steps={"MiniBoss": 0})
