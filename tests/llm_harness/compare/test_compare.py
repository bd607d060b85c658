"""``vsr compare``: job planning, seed intervals, verdicts, the report, resumability."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from llm_harness.compare.report import write_report
from llm_harness.compare.stats import seed_interval
from llm_harness.compare.jobs import CompareConfig, plan_jobs
from llm_harness.compare.runner import run
from llm_harness.compare.suite import SUITES
from llm_harness.trainer.config import TrainConfig
from llm_harness.trainer.loop import check_registries
from vsr_util.config_io import from_dict


def test_plan_covers_every_regime_method_seed_and_builds_valid_configs(tmp_path):
    cfg = CompareConfig(out=tmp_path, seeds=2, steps=5)
    jobs = plan_jobs(cfg)
    s = SUITES["testbed"]
    assert len(jobs) == len(s.regimes) * 2 * (len(s.methods) + 1)
    assert len({j.run_dir for j in jobs}) == len(jobs)
    for j in jobs:
        tc = from_dict(TrainConfig, j.mapping)
        check_registries(tc)
        assert tc.steps == 5 and tc.seed == j.seed and tc.validation.every == 2 and tc.validation.k == 8
        if j.regime == "hard":
            assert tc.task.params["min_terms"] == 7
            if "vsr" in tc.plugins:
                assert tc.plugins["vsr"]["cold_start"] is True
        elif "vsr" in tc.plugins and j.method != "vsr_static_expert":
            assert not tc.plugins["vsr"].get("cold_start", False)


def test_config_validation_names_the_field(tmp_path):
    with pytest.raises(ValueError, match="suite"):
        CompareConfig(suite="nope")
    with pytest.raises(ValueError, match="methods"):
        CompareConfig(methods=("grpo", "nope"))
    with pytest.raises(ValueError, match="seeds"):
        CompareConfig(seeds=0)


def test_seed_interval_is_the_student_t_interval():
    m, lo, hi = seed_interval([1.0, 2.0, 3.0])
    h = 4.302652729749464 * 1.0 / math.sqrt(3)
    assert m == 2.0 and lo == pytest.approx(2 - h, rel=1e-9) and hi == pytest.approx(2 + h, rel=1e-9)
    assert math.isnan(seed_interval([0.5])[1])


def _fake_run(job, avg, tokens, seconds=1.0):
    d = Path(job.run_dir)
    d.mkdir(parents=True, exist_ok=True)
    info = {"rc": 0, "fingerprint": job.fingerprint, "wall_s": seconds}
    if job.method == "base":
        info["validation"] = {"val_avg_at_8": 0.3, "val_pass_at_8": 0.6}
    else:
        steps = int(job.mapping["steps"])  # one row per step, as a real run writes (records check it)
        rows = [{"step": s, "gen_new_tokens": tokens, "prompt_instances": 8.0, "mixed_frac_fresh": 0.5,
                 "time_step_s": seconds, "time_plugins_s": 0.01 * seconds, "reward_mean": 0.4} for s in range(steps)]
        rows[min(1, steps - 1)].update({"val_avg_at_8": avg - 0.01, "val_pass_at_8": 0.7})
        rows[-1].update({"val_avg_at_8": avg, "val_pass_at_8": 0.75})
        (d / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    (d / "done.json").write_text(json.dumps(info))


def test_report_verdicts_tokens_and_escaping(tmp_path):
    cfg = CompareConfig(out=tmp_path, seeds=3, steps=4, methods=("grpo", "vsr", "replay", "dapo"), regimes=("normal",))
    jobs = plan_jobs(cfg)
    rng = np.random.default_rng(0)
    for j in jobs:
        base = 0.4 + 0.01 * j.seed
        avg = {"grpo": base, "vsr": base + 0.05 + 0.002 * rng.random(), "replay": base - 0.05 - 0.002 * rng.random(),
               "dapo": base + (0.01 if j.seed % 2 else -0.01)}.get(j.method, 0.3)
        _fake_run(j, avg, 1000.0 if j.method != "vsr" else 600.0)
    path = write_report(cfg, jobs)
    text = path.read_text()
    rows = [line for line in text.splitlines() if line.startswith("| ") and "seeds)" in line]
    vsr_row = next(v for v in rows if v.startswith("| VSR ("))
    assert "| better |" in vsr_row and "| 600 | 0.60 |" in vsr_row
    rep_row = next(v for v in rows if "replay (rollout level" in v)
    assert "| worse |" in rep_row and rep_row.startswith("| \\|A\\| replay")
    assert "| not detected |" in next(v for v in rows if v.startswith("| DAPO"))
    assert "VSR generates 0.60x GRPO's new tokens" in text
    assert (tmp_path / "compare_final.png").stat().st_size > 0 and (tmp_path / "compare_curves.png").exists()
    s = json.loads((tmp_path / "summary.json").read_text())
    assert s["regimes"]["normal"]["base"]["0"]["avg"] == 0.3
    # the contract other tools read: steps, seeds, methods[] with the named fields
    assert s["steps"] == 4 and s["seeds"] == [0, 1, 2]
    by = {m["name"]: m for m in s["methods"]}
    for m in s["methods"]:
        for key in ("name", "final_avg", "ci_low", "ci_high", "delta_vs_grpo", "delta_ci_low", "delta_ci_high",
                    "new_tokens_per_update"):
            assert key in m
    assert by["grpo"]["delta_vs_grpo"] == 0.0 and by["vsr"]["new_tokens_per_update"] == 600.0
    assert by["vsr"]["delta_ci_low"] > 0 and by["replay"]["delta_ci_high"] < 0
    assert by["vsr"]["p_holm"] >= by["vsr"]["p"] and by["vsr"]["verdict"] == "better"
    # Holm over the 3 contrasts: the adjusted p of the smallest raw p is 3x it
    ps = sorted((m["p"], m["p_holm"]) for m in s["methods"] if m["name"] != "grpo")
    assert ps[0][1] == pytest.approx(3 * ps[0][0])
    assert "Power: each contrast is a paired t-test" in text


def _keys(o):
    if isinstance(o, dict):
        return set(o) | set().union(*map(_keys, o.values()))
    return set().union(*map(_keys, o)) if isinstance(o, list) else set()


def test_report_with_timings_apart_is_the_same_bytes_whatever_the_runs_took(tmp_path):
    """``timings_apart`` (the ``make figures`` curriculum figure): no wall-clock number in report.md or summary.json,
    so runs that took other times give the same bytes; the numbers are in timings.json."""
    from llm_harness.compare.report import TIMING_FIELDS

    cfg = CompareConfig(out=tmp_path, seeds=2, steps=4, methods=("grpo", "vsr"), regimes=("normal",), timings_apart=True)
    jobs = plan_jobs(cfg)
    written = []
    for seconds in (1.0, 3.0):
        for j in jobs:
            _fake_run(j, 0.4 + 0.01 * j.seed + 0.02 * (j.method == "vsr"), 1000.0, seconds)
        text = write_report(cfg, jobs, train_wall_s=60 * seconds).read_text()
        written.append((text, (tmp_path / "summary.json").read_bytes(), json.loads((tmp_path / "timings.json").read_text())))
    (text, summary, timings), (text2, summary2, timings2) = written
    assert text == text2 and summary == summary2
    assert not _keys(json.loads(summary)) & TIMING_FIELDS
    assert "| step s |" not in text and "Per-step plug-in overhead" not in text and "`timings.json` beside" in text
    assert timings["train_wall_s"] == 60.0 and timings2["train_wall_s"] == 180.0
    by = {m["name"]: m for m in timings2["methods"]}
    assert by["vsr"]["regime"] == "normal" and by["vsr"]["step_s"] == 3.0 and by["vsr"]["wall_s"] == 6.0
    # the default keeps the timings in the report (the committed suites' reports, rebuilt from their records)
    text = write_report(replace(cfg, timings_apart=False), jobs).read_text()
    assert "| step s | plug-in s / step |" in text and "Per-step plug-in overhead" in text
    assert _keys(json.loads((tmp_path / "summary.json").read_text())) >= TIMING_FIELDS


@pytest.mark.slow
def test_quick_comparison_end_to_end_and_resume(tmp_path, capsys):
    cfg = CompareConfig(out=tmp_path, quick=True, methods=("grpo", "vsr"), regimes=("normal",), workers=1)
    assert run(cfg) == 0
    assert (tmp_path / "report.md").is_file()
    for j in plan_jobs(cfg):
        assert json.loads((Path(j.run_dir) / "done.json").read_text())["rc"] == 0
    capsys.readouterr()
    assert run(cfg) == 0
    assert "3 already done, 0 to run" in capsys.readouterr().out


def test_vsr_regime_plans_runs_on_its_pool_and_the_pool_bytes_enter_the_fingerprint(tmp_path):
    cfg = CompareConfig(suite="vsr_regime", out=tmp_path, seeds=2, steps=5)
    jobs = plan_jobs(cfg)
    s = SUITES["vsr_regime"]
    assert len(jobs) == 2 * (len(s.methods) + 1) and cfg.pool_path == tmp_path / "runs" / "pool.json"
    for j in jobs:
        tc = from_dict(TrainConfig, j.mapping)
        check_registries(tc)
        assert tc.task.pool == str(cfg.pool_path) and tc.validation.k == 8 and tc.validation.n_problems == 500
        assert tc.validation.temperature == 0.7 and tc.validation.top_p == 0.9
        assert not tc.algo.filter_zero_variance and tc.algo.mini_batches == 2
        if "vsr" in tc.plugins:  # every VSR arm starts from the pool's expert solutions but the policy-only one
            assert tc.plugins["vsr"]["cold_start"] is (j.method != "vsr_policy")
        if j.method == "sft_pool":  # the SFT control trains on as many samples per update as GRPO
            assert tc.algo.collector == "expert" and tc.rollout.prompts_per_step * tc.rollout.group_size == 64
    j = next(j for j in jobs if j.method == "vsr")
    before = j.fingerprint
    cfg.pool_path.parent.mkdir(parents=True)
    cfg.pool_path.write_text('{"ids": ["a"]}')
    with_pool = j.fingerprint
    cfg.pool_path.write_text('{"ids": ["b"]}')
    assert len({before, with_pool, j.fingerprint}) == 3
    assert CompareConfig(suite="vsr_regime").sizes["eval_k"] == 8 and CompareConfig(suite="vsr_regime", eval_k=4).sizes["eval_k"] == 4
    assert CompareConfig(suite="vsr_regime").report_dir == Path("figures/compare_vsr_regime")



def test_vsr_regime_fresh_retrains_vsr_regimes_runs_and_scores_them_on_2000_fresh_problems(tmp_path):
    from llm_harness.tasks import get_task

    fresh = {j.method: j for j in plan_jobs(CompareConfig(suite="vsr_regime_fresh", out=tmp_path / "f", seeds=1))}
    regime = {j.method: j for j in plan_jobs(CompareConfig(suite="vsr_regime", out=tmp_path / "r", seeds=1))}
    assert set(fresh) == {"base", "grpo", "vsr", "static_expert", "vsr_policy", "sft_pool"}
    for m, j in fresh.items():
        tc, rc = from_dict(TrainConfig, j.mapping), from_dict(TrainConfig, regime[m].mapping)
        assert tc.validation.split == "test" and tc.validation.n_problems == 2000 and tc.validation.k == 8
        # the training itself is vsr_regime's: only the evaluation differs
        assert (tc.algo, tc.optim, tc.rollout, tc.plugins, tc.steps, tc.seed) == (rc.algo, rc.optim, rc.rollout, rc.plugins,
                                                                                  rc.steps, rc.seed)
        assert {k: v for k, v in tc.task.params.items() if k != "n_test"} == dict(rc.task.params)
    tc = from_dict(TrainConfig, fresh["grpo"].mapping)
    task = get_task(tc.task.name, **dict(tc.task.params))
    test = task.problems("test")[: tc.validation.n_problems]
    assert len({p.id for p in test}) == 2000 and all(p.id.count("+") + p.id.count("-") == 5 for p in test)
    assert not {p.id for p in test} & {p.id for p in task.problems("validation")}
    assert not {p.id for p in test} & {p.id for p in task.problems("train")}



def test_prefix_family_real_gives_every_arm_the_same_model_budget_and_evaluation(tmp_path):
    jobs = plan_jobs(CompareConfig(suite="prefix_family_real", out=tmp_path, seeds=2))
    by = {}
    for j in jobs:
        by.setdefault(j.method, []).append(from_dict(TrainConfig, j.mapping))
    assert set(by) == {"base", "grpo", "dapo", "vsr", "ps", "ps_hard", "pros"} and all(len(v) == 2 for v in by.values())
    plugins = {m: sorted(v[0].plugins) for m, v in by.items()}
    assert plugins == {"base": [], "grpo": [], "dapo": ["dapo"], "vsr": ["vsr"], "ps": ["prefix_sampling"],
                       "ps_hard": ["prefix_sampling"], "pros": ["pros"]}
    assert by["ps_hard"][0].plugins["prefix_sampling"]["hard_only"] is True and by["vsr"][0].plugins["vsr"]["cold_start"]
    for m, cfgs in by.items():
        for seed, tc in enumerate(cfgs):
            assert tc.seed == seed and tc.model.path == "smollm2-135m-instruct" and tc.task.name == "arith_ladder"
            assert (tc.rollout.prompts_per_step, tc.rollout.group_size, tc.rollout.max_new_tokens) == (8, 8, 48)
            assert (tc.steps, tc.optim.lr, tc.validation.split, tc.validation.n_problems, tc.validation.k) == (20, 5e-6, "test", 311, 4)
            assert tc.run.group_prompt_once and tc.run.fused_optimizer  # the lean step for every arm
            # only DAPO filters (its redraws need it); every other arm trains on the same kept groups as GRPO
            assert tc.algo.filter_zero_variance is (m == "dapo")


@pytest.mark.slow
def test_quick_vsr_regime_selects_its_pool_trains_and_reports_the_curriculum(tmp_path):
    cfg = CompareConfig(suite="vsr_regime", out=tmp_path, quick=True, methods=("grpo", "vsr"), workers=1)
    assert run(cfg) == 0
    pool = json.loads((tmp_path / "runs" / "pool_quick.json").read_text())
    assert pool["stats"]["candidates"] == 24 and pool["ids"]
    text = (tmp_path / "report.md").read_text()
    assert "## Prompt pool" in text and "## The reverse curriculum on a language model" in text
    assert (tmp_path / "curriculum_sparse.png").is_file() and (tmp_path / "pool.json").is_file()
    from vsr_util.config_io import read_mapping

    for j in plan_jobs(cfg):
        if j.method != "base":
            assert read_mapping(Path(j.run_dir) / "config.yaml")["task"]["pool"] == str(cfg.pool_path)
    s = json.loads((tmp_path / "summary.json").read_text())
    assert [m["name"] for m in s["methods"]] == ["grpo", "vsr"] and s["protocol"]["eval_temperature"] == 0.7


def test_calibration_and_curriculum_sections_from_run_logs(tmp_path):
    from llm_harness.compare.sections.vsr import calibration_section, curriculum_section

    cfg = CompareConfig(suite="vsr_regime", out=tmp_path, seeds=3, steps=8, methods=("grpo", "vsr", "vsr_oracle", "vsr_calibrated"))
    jobs = plan_jobs(cfg)
    for j in jobs:
        d = Path(j.run_dir)
        d.mkdir(parents=True)
        rows = []
        for s in range(8):
            r = {"step": s, "mixed_frac_fresh": 0.2}
            if j.method == "vsr":  # replayed groups move from alpha-bin 4 to bin 1 over training: a reverse curriculum
                b = 4 if s < 4 else 1
                for k in range(5):
                    r.update({f"vsr_alpha_b{k}_groups": 2.0 * (k == b), f"vsr_alpha_b{k}_mixed": 1.0 * (k == b),
                              f"vsr_alpha_b{k}_success": 1.0 * (k == b)})
                r.update(vsr_buffer_expert_frac=1.0 - s / 8, vsr_replayed_alpha_mean=0.9 - 0.1 * s)
            if j.method == "vsr_oracle":
                r.update(vsr_oracle_spearman_linear=0.1 + 0.01 * j.seed, vsr_oracle_spearman_calibrated=0.3 + 0.01 * j.seed)
            if j.method == "vsr_calibrated":
                r.update(vsr_calib_gap=0.12)
            rows.append(r)
        (d / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    summary = {"sparse": {"base": {}, "methods": {}}}
    text = "\n".join(calibration_section(cfg, jobs, summary, SUITES["vsr_regime"], tmp_path))
    assert "calibrated minus linear: +0.200" in text and "ranks states closer to the oracle" in text
    assert "differs from the linear f(α) = α by 0.120" in text
    text = "\n".join(curriculum_section(cfg, jobs, summary, SUITES["vsr_regime"], tmp_path))
    assert "the frontier moves toward the prompt (smaller α)" in text and (tmp_path / "curriculum_sparse.png").is_file()


def test_replayed_mixed_share_skips_windows_without_replayed_groups():
    from llm_harness.compare.sections.vsr import replayed_mixed_shares

    empty = {"groups": np.zeros(5), "mixed": np.zeros(5)}
    half = {"groups": np.array([0, 2.0, 2.0, 0, 0]), "mixed": np.array([0, 1.0, 1.0, 0, 0])}
    full = {"groups": np.array([1.0, 0, 0, 0, 0]), "mixed": np.array([1.0, 0, 0, 0, 0])}
    shares = replayed_mixed_shares([{"windows": [empty, half]}, {"windows": [full, empty]}])
    assert shares == [0.5, 1.0]  # counting the empty windows as 0 % would give a mean of 0.375, not 0.75
    assert replayed_mixed_shares([{"windows": [empty]}]) == []


def test_assumptions_section_names_the_first_broken_link(tmp_path):
    from llm_harness.compare.sections.vsr import assumptions_section

    cfg = CompareConfig(suite="vsr_regime", out=tmp_path, seeds=3, steps=8, methods=("grpo", "vsr", "vsr_uniform"))
    jobs = plan_jobs(cfg)
    summary = {"sparse": {"base": {}, "methods": {"grpo": {"seeds": {}}, "vsr": {"seeds": {}}, "vsr_uniform": {"seeds": {}}}}}
    for j in jobs:
        if j.method == "base":
            continue
        d = Path(j.run_dir)
        d.mkdir(parents=True)
        noise = 0.001 * j.seed
        if j.method == "grpo":
            rows = [{"step": s, "mixed_frac_fresh": 0.2, "accuracy_fresh": 0.05 + noise} for s in range(8)]
            avg = 0.10 + noise
        elif j.method == "vsr":  # mixed replayed groups and a gain on the pool, but no held-out transfer
            rows = [{"step": s, "mixed_frac_replayed_prefix": 0.6, "accuracy_fresh": 0.15 + 2 * noise} for s in range(8)]
            avg = 0.10 + (0.01 if j.seed % 2 else -0.01)
        else:  # replayed groups no more mixed than fresh ones
            rows = [{"step": s, "mixed_frac_replayed_prefix": 0.1, "accuracy_fresh": 0.05} for s in range(8)]
            avg = 0.10
        (d / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
        summary["sparse"]["methods"][j.method]["seeds"][j.seed] = {"avg": avg}
    text = "\n".join(assumptions_section(cfg, jobs, summary, SUITES["vsr_regime"], tmp_path))
    vsr_row = next(x for x in text.splitlines() if x.startswith("| VSR |"))
    assert "0.60 vs 0.20" in vsr_row and "(3) the gain on the pool does not detectably transfer" in vsr_row
    uni_row = next(x for x in text.splitlines() if x.startswith("| VSR w/o scoring |"))
    assert "(1) replayed groups are not more often mixed (0.10 vs 0.20)" in uni_row


def test_a_finished_run_stays_done_when_a_field_is_added_at_its_default_but_not_when_a_value_changes(tmp_path):
    from llm_harness.compare.jobs import compatible
    from llm_harness.compare.jobs import is_done as _done
    from vsr_util.config_io import to_dict

    job = next(j for j in plan_jobs(CompareConfig(out=tmp_path, seeds=1, steps=2)) if j.method == "grpo")
    cur = job.resolved()
    assert compatible(cur, cur)
    older = json.loads(json.dumps(cur))
    del older["validation"]["top_p"]  # a run from before `validation.top_p` existed (default 1.0, and the job uses 1.0)
    assert cur["validation"]["top_p"] == to_dict(TrainConfig())["validation"]["top_p"]
    assert compatible(older, cur)
    changed = json.loads(json.dumps(cur))
    changed["algo"]["std_ddof"] = 0  # a changed default: the run must be redone
    assert not compatible(changed, cur)
    del older["algo"]["std_ddof"]
    cur2 = json.loads(json.dumps(cur))
    cur2["algo"]["std_ddof"] = 0  # a new field away from its default
    assert not compatible(older, cur2)
    d = Path(job.run_dir)
    d.mkdir(parents=True)
    (d / "done.json").write_text(json.dumps({"fingerprint": "stale", "rc": 0, "config": older}))
    assert _done(job)
    (d / "done.json").write_text(json.dumps({"fingerprint": "stale", "rc": 0, "config": changed}))
    assert not _done(job)
    (d / "done.json").write_text(json.dumps({"fingerprint": "stale", "rc": 0}))
    assert not _done(job)  # nothing to compare with


def test_report_only_leaves_out_runs_finished_with_another_config(tmp_path, capsys):
    """A ``done.json`` whose config differs from the job's (a stale run in the same folder) is not this
    suite's result: ``--report-only`` says so and summarises the current runs only."""
    cfg = CompareConfig(out=tmp_path, seeds=2, steps=4, methods=("grpo", "vsr"), regimes=("normal",), report_only=True)
    jobs = plan_jobs(cfg)
    for j in jobs:
        _fake_run(j, 0.4 + 0.1 * j.seed, 100.0)
    stale = next(j for j in jobs if j.method == "vsr" and j.seed == 1)
    info = json.loads((Path(stale.run_dir) / "done.json").read_text())
    changed = stale.resolved()
    changed["optim"]["lr"] = 1.0  # trained with another learning rate
    (Path(stale.run_dir) / "done.json").write_text(json.dumps({**info, "fingerprint": "stale", "config": changed}))
    assert run(cfg) == 0
    assert "1 run(s) finished with another config are left out of the report (e.g. normal/vsr/seed1)" in capsys.readouterr().out
    d = json.loads((tmp_path / "summary.json").read_text())
    by = {m["name"]: m for m in d["methods"]}
    assert by["vsr"]["n_seeds"] == 1 and by["grpo"]["n_seeds"] == 2


def test_a_part_run_with_methods_keeps_the_earlier_parts_in_the_report(tmp_path):
    """``--methods`` picks what to train; the report still covers the suite's other finished runs, so a
    suite run in parts (agents: gigpo + vsr_gigpo, then the ablations) keeps one report with its contrasts."""
    everything = plan_jobs(CompareConfig(out=tmp_path, seeds=2, steps=4, methods=("grpo", "vsr", "dapo"), regimes=("normal",)))
    for j in everything:
        if j.method in ("base", "grpo", "vsr"):  # part 1, finished earlier
            _fake_run(j, 0.4 + 0.1 * j.seed, 100.0)
    part2 = CompareConfig(out=tmp_path, seeds=2, steps=4, methods=("dapo",), regimes=("normal",), report_only=True)
    assert {j.method for j in plan_jobs(part2)} == {"base", "dapo"}
    assert run(part2) == 0
    names = {m["name"] for m in json.loads((tmp_path / "summary.json").read_text())["methods"]}
    assert {"grpo", "vsr"} <= names and "dapo" not in names  # dapo has not run


def test_a_part_run_with_regimes_keeps_the_other_regimes_in_the_report(tmp_path):
    """``--regimes`` picks where to train; the report keeps the other regimes' finished runs (the agents suite
    runs Sokoban and BabyAI in separate parts, and a part's report must not drop the other environment)."""
    first = CompareConfig(out=tmp_path, seeds=2, steps=4, methods=("grpo", "vsr"), regimes=("normal",))
    for j in plan_jobs(first):
        _fake_run(j, 0.4 + 0.1 * j.seed, 100.0)
    second = CompareConfig(out=tmp_path, seeds=2, steps=4, methods=("grpo", "vsr"), regimes=("hard",))
    for j in plan_jobs(second):
        _fake_run(j, 0.3 + 0.1 * j.seed, 100.0)
    assert run(replace(second, report_only=True)) == 0
    rows = json.loads((tmp_path / "summary.json").read_text())["methods"]
    assert {(m["regime"], m["name"]) for m in rows} >= {("normal", "grpo"), ("normal", "vsr"), ("hard", "grpo"), ("hard", "vsr")}


def test_records_rebuild_the_report_after_the_run_folders_are_gone(tmp_path, capsys):
    """Every finished run leaves a record (done.json + gzipped metrics) in its records folder (``OUT/records`` for a
    report folder outside ``figures/``); on a machine without the run folders (a fresh clone), ``run`` restores them
    and the report is the same."""
    import shutil

    cfg = CompareConfig(out=tmp_path, seeds=2, steps=4, methods=("grpo", "vsr"), regimes=("normal",), report_only=True)
    jobs = plan_jobs(cfg)
    for j in jobs:
        _fake_run(j, 0.4 + 0.1 * j.seed + (0.02 if j.method == "vsr" else 0.0), 100.0)
    assert run(cfg) == 0
    first = json.loads((tmp_path / "summary.json").read_text())
    rec = tmp_path / "records" / "normal" / "vsr" / "seed1"
    assert (rec / "done.json").is_file() and (rec / "metrics.jsonl.gz").is_file()
    assert not (tmp_path / "records" / "normal" / "base" / "seed0" / "metrics.jsonl.gz").exists()
    vsr1 = next(j for j in jobs if j.method == "vsr" and j.seed == 1)
    metrics = (Path(vsr1.run_dir) / "metrics.jsonl").read_bytes()
    shutil.rmtree(tmp_path / "runs")
    capsys.readouterr()
    assert run(cfg) == 0
    assert f"{len(jobs)} finished run(s) restored" in capsys.readouterr().out
    again = json.loads((tmp_path / "summary.json").read_text())
    strip = lambda d: {k: v for k, v in d.items() if k not in ("created", "machine")}  # noqa: E731
    assert strip(again) == strip(first)
    assert (Path(vsr1.run_dir) / "metrics.jsonl").read_bytes() == metrics
    # the records alone, in another folder: the runs' location is not part of what they computed
    other = tmp_path / "elsewhere"
    shutil.copytree(tmp_path / "records", other / "records")
    moved = CompareConfig(out=other, seeds=2, steps=4, methods=("grpo", "vsr"), regimes=("normal",), report_only=True)
    assert run(moved) == 0
    assert strip(json.loads((other / "summary.json").read_text())) == strip(first)


def test_a_record_of_another_config_is_not_restored_and_an_unfinished_run_is_replaced(tmp_path):
    from llm_harness.compare.jobs import is_done as _done
    from llm_harness.compare.records import records_root, restore_record, save_record

    cfg = CompareConfig(out=tmp_path, seeds=1, steps=4, methods=("grpo",), regimes=("normal",))
    job = next(j for j in plan_jobs(cfg) if j.method == "grpo")
    _fake_run(job, 0.5, 100.0)
    save_record(job, records_root(cfg))
    import shutil

    shutil.rmtree(job.run_dir)
    Path(job.run_dir).mkdir(parents=True)
    (Path(job.run_dir) / "checkpoint_partial").write_text("an interrupted run")
    assert restore_record(job, records_root(cfg)) and _done(job)
    assert not (Path(job.run_dir) / "checkpoint_partial").exists()
    assert not restore_record(job, records_root(cfg))  # already finished: nothing to do
    other = next(j for j in plan_jobs(CompareConfig(out=tmp_path, seeds=1, steps=5, methods=("grpo",), regimes=("normal",)))
                 if j.method == "grpo")  # 5 steps: another config at the same path
    assert not _done(other) and not restore_record(other, records_root(cfg))
    assert json.loads((Path(job.run_dir) / "done.json").read_text())["fingerprint"] == job.fingerprint


def test_suites_that_share_arms_restore_each_others_records(tmp_path, capsys):
    """extra_signal's GRPO, ExTra (full) and base runs are extra_gamma's (same resolved config, same pool): they are
    restored from the sibling's records, its kept pool is reused, and extra_signal's own manifest points at the
    sibling's records instead of keeping a copy. The layout of the committed suites: report folders in ``figures/``,
    their records in the store beside it, ``records/compare_<suite>``."""
    from llm_harness.compare.records import read_manifest, records_root, shared_records_roots

    committed_pool = Path(__file__).resolve().parents[3] / "figures" / "compare_extra" / "pool.json"
    gamma = CompareConfig(suite="extra_gamma", out=tmp_path / "figures" / "compare_extra_gamma", seeds=1, steps=2,
                          eval_k=8, methods=("grpo", "extra_full"), report_only=True)
    gamma.pool_path.parent.mkdir(parents=True)
    gamma.pool_path.write_bytes(committed_pool.read_bytes())
    (gamma.report_dir / "pool.json").write_bytes(committed_pool.read_bytes())
    shared = [j for j in plan_jobs(gamma) if j.method in ("base", "grpo", "extra_full")]
    for j in shared:
        _fake_run(j, 0.3, 10.0)
    assert run(gamma) == 0
    assert records_root(gamma) == tmp_path / "records" / "compare_extra_gamma"
    signal = CompareConfig(suite="extra_signal", out=tmp_path / "figures" / "compare_extra_signal", seeds=1, steps=2,
                           eval_k=8, report_only=True)
    assert shared_records_roots(signal)[0] == tmp_path / "records" / "compare_extra"  # absent here: skipped
    capsys.readouterr()
    assert run(signal) == 0
    out = capsys.readouterr().out
    assert f"3 finished run(s) restored from {records_root(gamma)}" in out
    assert signal.pool_path.read_bytes() == committed_pool.read_bytes()
    by = {j.method: j for j in plan_jobs(signal)}
    assert {m for m, j in by.items() if (Path(j.run_dir) / "done.json").is_file()} == {"base", "grpo", "extra_full"}
    assert not (records_root(signal) / "recurring").exists()  # no copy: pointers
    entry = read_manifest(records_root(signal))["recurring/grpo/seed0"]
    assert entry == {"in": "../compare_extra_gamma", **read_manifest(records_root(gamma))["recurring/grpo/seed0"]}
    assert not list((tmp_path / "figures").rglob("manifest.json"))  # figures/ holds reports only
    # another config (3 steps) matches no sibling record: nothing is restored, so there is nothing to report
    capsys.readouterr()
    with pytest.raises(ValueError, match="nothing to report"):
        run(CompareConfig(suite="extra_signal", out=tmp_path / "figures" / "compare_extra_signal", seeds=1, steps=3,
                          eval_k=8, report_only=True))
    assert "restored" not in capsys.readouterr().out


def test_quick_runs_never_share_a_folder_with_the_suite(tmp_path):
    from llm_harness.compare.records import records_root

    full, quick = CompareConfig(suite="agents"), CompareConfig(suite="agents", quick=True)
    assert full.report_dir == Path("figures/compare_agents") and full.runs_root == Path("runs/compare_agents/runs")
    assert quick.report_dir == Path("runs/compare_agents_quick") and quick.runs_root == Path("runs/compare_agents_quick/runs")
    assert records_root(full) == Path("records/compare_agents")  # the store, beside figures/
    assert records_root(quick) == Path("runs/compare_agents_quick/records")


def test_without_records_nothing_is_kept_or_restored(tmp_path, capsys):
    cfg = CompareConfig(out=tmp_path, seeds=1, steps=4, methods=("grpo",), regimes=("normal",), report_only=True)
    for j in plan_jobs(cfg):
        _fake_run(j, 0.5, 100.0)
    assert run(CompareConfig(**{**cfg.__dict__, "records": False})) == 0
    assert not (tmp_path / "records").exists()
    assert run(cfg) == 0 and (tmp_path / "records" / "normal" / "grpo" / "seed0" / "done.json").is_file()


def test_the_pool_kept_beside_a_report_is_put_back_for_its_records(tmp_path):
    """A suite on a prompt pool: the fingerprint hashes the pool's bytes, so restoring records on a fresh clone
    needs the pool the report was made on (``pool.json`` beside it); it is copied back unless records are off."""
    from llm_harness.compare.records import records_root, restore_record, save_record

    cfg = CompareConfig(suite="vsr_regime", out=tmp_path, seeds=1, steps=2, methods=("grpo",), report_only=True)
    cfg.pool_path.parent.mkdir(parents=True)
    committed_pool = Path(__file__).resolve().parents[3] / "figures" / "compare_vsr_regime" / "pool.json"
    cfg.pool_path.write_bytes(committed_pool.read_bytes())  # a real pool file: the report's pool section reads it
    job = next(j for j in plan_jobs(cfg) if j.method == "grpo")
    _fake_run(job, 0.3, 10.0)
    save_record(job, records_root(cfg))
    (tmp_path / "pool.json").write_bytes(cfg.pool_path.read_bytes())
    import shutil

    shutil.rmtree(tmp_path / "runs")
    with pytest.raises(ValueError, match="nothing to report"):  # no records, no runs
        run(CompareConfig(**{**cfg.__dict__, "records": False}))
    assert not cfg.pool_path.exists()
    run(cfg)
    assert cfg.pool_path.read_bytes() == (tmp_path / "pool.json").read_bytes()
    assert (Path(job.run_dir) / "done.json").is_file() and not restore_record(job, records_root(cfg))


def test_ablation_rows_pair_by_common_seeds_with_holm_per_regime():
    from types import SimpleNamespace

    from llm_harness.compare.sections.common import ablation_rows

    suite = SimpleNamespace(ablations=(("vsr", "uniform"), ("vsr", "frozen"), ("vsr", "absent")))
    seeds = lambda vals: {k: {"avg": v} for k, v in enumerate(vals)}  # noqa: E731
    summary = {"r": {"base": {}, "methods": {
        "vsr": {"seeds": seeds([0.30, 0.32, 0.28, 0.31])},
        "uniform": {"seeds": seeds([0.25, 0.26, 0.24])},  # seed 3 unfinished: paired over 0-2
        "frozen": {"seeds": seeds([0.30, 0.33, 0.27, 0.31])}}}}
    rows = ablation_rows(summary, suite, 0.05)["r"]
    assert [(r["method"], r["ablation"]) for r in rows] == [("vsr", "uniform"), ("vsr", "frozen")]  # "absent" never ran
    u, f = rows
    assert u["contrast"].n == 3 and u["contrast"].mean == pytest.approx(0.05)
    assert f["contrast"].n == 4 and f["contrast"].mean == pytest.approx(0.0)
    ps = sorted([u["contrast"].p, f["contrast"].p])
    assert u["p_holm"] == pytest.approx(min(1.0, 2 * ps[0])) and u["p_holm"] < 0.05  # Holm over the regime's 2 pairs
    assert 0.0 <= u["power"] <= 1.0 and u["seeds_for_80"] >= 2


def test_a_suite_rejects_ablations_of_unknown_methods():
    from llm_harness.compare.suite import Method, Regime, Suite

    with pytest.raises(ValueError, match="ablations name methods it does not have: \\['nope'\\]"):
        Suite(name="x", methods=(Method("grpo", "grpo.yaml", "GRPO"),), regimes=(Regime("r", "r"),),
              ablations=(("grpo", "nope"),))
