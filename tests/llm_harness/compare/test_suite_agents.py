"""``vsr compare --suite agents``: the suite's jobs resolve to the agent configs, and a
2-update smoke run of the base evaluation, GiGPO, VSR + GiGPO and the static-reset control (tiny sizes)
completes through the runner's worker, logs the episode accounting, and :func:`agent_summary` reads it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from llm_harness.compare.jobs import CompareConfig, plan_jobs
from llm_harness.compare.suite import SUITES
from llm_harness.trainer.config import TrainConfig
from llm_harness.trainer.loop import check_registries
from vsr_util.config_io import deep_merge, from_dict


def test_the_suite_is_registered_with_gigpo_as_reference(tmp_path):
    s = SUITES["agents"]
    assert s.reference == "gigpo" and [m.name for m in s.methods][0] == "gigpo"
    jobs = plan_jobs(CompareConfig(suite="agents", out=tmp_path, seeds=2, steps=20))
    assert len(jobs) == len(s.regimes) * 2 * (len(s.methods) + 1)
    for j in jobs:
        tc = from_dict(TrainConfig, j.mapping)
        check_registries(tc)
        assert tc.algo.advantage == "gigpo" and tc.algo.collector == "multiturn" and tc.task.name == "env"
        assert tc.model.path.endswith(f"checkpoints/{j.regime}/mid") and tc.steps == 20 and tc.validation.n_problems == 128
        vsr = tc.plugins.get("vsr")
        assert (vsr is None) == (j.method in ("base", "gigpo"))
        if j.method == "vsr_norecency":
            assert vsr["freeze_after"] == 5  # a quarter of the run, rescaled from the config's 10 of 40


def test_the_babyai_regime_is_the_babyai_config():
    """Every method of the ``babyai`` regime trains the BabyAI test-bed agent with exactly the task of
    ``configs/agent_babyai_oneroom_gigpo.yaml`` (level, budget, window of its card), Sokoban's recipe otherwise."""
    from llm_harness.compare.suites_agents import BABYAI_OVERRIDES
    from vsr_util.config_io import load_config

    cpu = load_config(TrainConfig, Path(__file__).resolve().parents[3] / "configs" / "agent_babyai_oneroom_gigpo.yaml")
    jobs = [j for j in plan_jobs(CompareConfig(suite="agents", out=Path("/tmp/unused"), seeds=1, steps=4, regimes=("babyai",)))]
    assert {j.regime for j in jobs} == {"babyai"} and len(jobs) == len(SUITES["agents"].methods) + 1
    for j in jobs:
        tc = from_dict(TrainConfig, j.mapping)
        assert tc.task == cpu.task and tc.model.path == cpu.model.path and tc.rollout.share_prefix is False, j.method
        assert tc.algo == cpu.algo and (tc.rollout.group_size, tc.rollout.prompts_per_step) == (cpu.rollout.group_size, cpu.rollout.prompts_per_step)
    assert BABYAI_OVERRIDES["task"]["params"]["env_params"] == dict(cpu.task.params["env_params"])


def test_two_update_smoke_run_logs_the_episode_accounting(tmp_path):
    from llm_harness.compare.runner import _execute
    from llm_harness.compare.sections.agents import agent_summary, format_agent_summary

    tiny = {"steps": 2, "task": {"params": {"n_train": 16}},  # building 5000 training rooms costs ~30 s per job
            "rollout": {"prompts_per_step": 3, "group_size": 2}, "agent": {"max_turns": 4},
            "validation": {"every": 2, "n_problems": 4, "k": 1}, "plugins": {}}
    jobs = []
    for j in plan_jobs(CompareConfig(suite="agents", out=tmp_path, quick=True, regimes=("sokoban",))):
        if j.method not in ("base", "gigpo", "vsr_gigpo", "static_reset"):
            continue
        over = dict(tiny)
        if "vsr" in j.mapping["plugins"]:
            over["plugins"] = {"vsr": {**j.mapping["plugins"]["vsr"], "cold_start_problems": 4}}
        jobs.append(type(j)(j.regime, j.method, j.seed, j.run_dir, deep_merge(j.mapping, over)))
    for j in jobs:
        res = _execute(j)
        assert res["rc"] == 0, j.method
        done = json.loads((Path(j.run_dir) / "done.json").read_text())
        if j.method == "base":
            v = done["validation"]
            assert v["val_avg_at_1"] == v["val_success"] and 0.0 <= v["val_success"] <= 1.0
    rows = {j.method: [json.loads(x) for x in (Path(j.run_dir) / "metrics.jsonl").read_text().splitlines()]
            for j in jobs if j.method != "base"}
    for m, rs in rows.items():
        assert len(rs) == 2 and "val_success" in rs[-1]
        assert all(r["gen_new_actions"] >= r["episodes"] >= 6 for r in rs), m
        assert all(r["episode_turns_mean"] <= 4 for r in rs)
    # the static-reset control replays expert states from the first update; their groups are counted
    assert all(r["groups_replayed_prefix"] == 1.0 and 0.0 < r["vsr_replayed_alpha_p50"] < 1.0 for r in rows["static_reset"])
    assert all(np.isfinite(r["success_mixed_frac_replayed_prefix"]) for r in rows["static_reset"])
    summary = agent_summary(jobs)["sokoban"]
    assert set(summary) == {"gigpo", "vsr_gigpo", "static_reset"}
    assert summary["gigpo"]["token_ratio_vs_reference"] == 1.0
    s = summary["static_reset"]
    assert s["new_actions_per_update"] == pytest.approx(np.mean([r["gen_new_actions"] for r in rows["static_reset"]]))
    assert 0.0 < s["replayed_alpha_p50_first_third"] < 1.0 and not np.isfinite(summary["gigpo"]["success_mixed_replayed"])
    text = format_agent_summary(agent_summary(jobs))
    assert "| static_reset | 1 |" in text and "new actions / update" in text
    # the suite's report carries it as a section
    from llm_harness.compare.sections import load_sections
    from llm_harness.compare.suite import SUITES

    SECTIONS = load_sections()

    assert "agent_accounting" in SUITES["agents"].sections
    lines = SECTIONS.lookup("agent_accounting", "report section")(None, jobs, {}, SUITES["agents"], tmp_path)
    assert "\n".join(lines).strip() == text.strip()
    # ... and the reverse-curriculum section (replayed α per window, success-mixed fresh groups), led by
    # the suite's first VSR arm

    assert "curriculum" in SUITES["agents"].sections and SUITES["agents"].min_effect == 0.05
    cur = SECTIONS.lookup("curriculum", "report section")(CompareConfig(suite="agents", out=tmp_path, steps=2), jobs, {"sokoban": {}},
                                                           SUITES["agents"], tmp_path)
    assert "Regime `sokoban`, arm `vsr_gigpo` (1 seeds):" in cur and (tmp_path / "curriculum_sokoban.png").is_file()


def test_regimes_carry_their_own_sizes_and_a_flag_overrides_them(tmp_path):
    """The BabyAI regime runs its own seeds and updates (``Regime.sizes``); Sokoban keeps the suite's; a
    ``vsr compare`` flag overrides both; the held-out protocol is suite-wide."""
    from llm_harness.compare.suite import Regime
    from llm_harness.compare.suites_agents import BABYAI_SIZES, SUITE_SIZES

    cfg = CompareConfig(suite="agents", out=tmp_path)
    assert cfg.sizes_for("babyai")["steps"] == BABYAI_SIZES["steps"] != SUITE_SIZES["steps"] == cfg.sizes_for("sokoban")["steps"]
    assert cfg.sizes_for("babyai")["eval_every"] == BABYAI_SIZES["steps"] // 2 and cfg.sizes == cfg.sizes_for("sokoban")
    jobs = plan_jobs(cfg)
    for regime, z in (("sokoban", SUITE_SIZES), ("babyai", BABYAI_SIZES)):
        mine = [j for j in jobs if j.regime == regime]
        assert {j.seed for j in mine} == set(range(z["seeds"])) and len(mine) == z["seeds"] * (len(SUITES["agents"].methods) + 1)
        assert {j.resolved()["steps"] for j in mine} == {z["steps"]}
        assert {j.resolved()["validation"]["n_problems"] for j in mine} == {SUITE_SIZES["eval_problems"]}
    flagged = plan_jobs(CompareConfig(suite="agents", out=tmp_path, steps=6, seeds=2))
    assert {(j.resolved()["steps"], j.seed < 2) for j in flagged} == {(6, True)} and len(flagged) == 2 * 2 * 6
    with pytest.raises(ValueError, match="sizes may set only"):
        Regime("x", "y", sizes={"eval_k": 4})
    with pytest.raises(ValueError, match="sizes.steps must be an integer"):
        Regime("x", "y", sizes={"steps": 0})


def test_the_report_shows_finished_runs_only(tmp_path):
    """A run still training (``metrics.jsonl`` written, no ``done.json``) is left out of every section, so
    the accounting's seed counts match the main table's."""
    from llm_harness.compare.runner import run
    from llm_harness.methods.vsr import CURRICULUM_BINS

    cfg = CompareConfig(suite="agents", out=tmp_path, seeds=3, steps=4, regimes=("sokoban",), methods=("gigpo", "vsr_gigpo"),
                        report_only=True)
    jobs = plan_jobs(cfg)
    for j in jobs:
        d = Path(j.run_dir)
        d.mkdir(parents=True, exist_ok=True)
        val = {"val_avg_at_2": 0.2 + 0.01 * j.seed, "val_pass_at_2": 0.3, "val_success": 0.2}
        if j.method != "base":
            rows = [{"step": s, "gen_new_tokens": 3000.0, "gen_new_actions": 700.0, "success_mixed_frac_fresh": 0.5,
                     "time_step_s": 1.0, "time_plugins_s": 0.0, "reward_mean": 0.1,
                     **({"success_mixed_frac_replayed_prefix": 0.8, "vsr_replayed_alpha_p50": 0.6 - 0.1 * s,
                         "vsr_replayed_alpha_mean": 0.6, "vsr_buffer_expert_frac": 0.0,
                         **{f"vsr_alpha_b{k}_{w}": 1.0 for k in range(CURRICULUM_BINS) for w in ("groups", "mixed", "success")}}
                        if j.method == "vsr_gigpo" else {})} for s in range(4)]
            rows[-1].update(val)
            (d / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
        if not (j.method == "vsr_gigpo" and j.seed == 2):  # still training
            (d / "done.json").write_text(json.dumps({"rc": 0, "fingerprint": j.fingerprint, "wall_s": 1.0,
                                                    **({"validation": val} if j.method == "base" else {})}))
    assert run(cfg) == 0
    text = (tmp_path / "report.md").read_text()
    assert "| vsr_gigpo | 2 |" in text and "| gigpo | 3 |" in text
    assert "arm `vsr_gigpo` (2 seeds)" in text and (tmp_path / "curriculum_sokoban.png").is_file()
