"""The replay / ExTra evidence suites: arm configs, sizing, report sections, smoke runs."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

import llm_harness.compare.runs as runs
import llm_harness.compare.sizing as sizing
import llm_harness.compare.suites_evidence as ev
from llm_harness.compare.report import write_report
from llm_harness.compare.jobs import CompareConfig, plan_jobs
from llm_harness.compare.runner import run
from llm_harness.compare.stats import table_rows
from theory.metrics.paired import holm
from llm_harness.compare.suite import SUITES
from llm_harness.methods.common import plugin_config
from llm_harness.methods.extra import parse_extra_params
from llm_harness.methods.replay import ReplayConfig
from llm_harness.trainer.config import TrainConfig
from llm_harness.trainer.loop import check_registries
from vsr_util.config_io import from_dict

REPLAY_SUITES = ("replay", "replay_tau", "replay_priority", "replay_ratio", "replay_aes")
EXTRA_SUITES = ("extra", "extra_gamma", "extra_signal", "extra_main")


def _parse_plugins(tc: TrainConfig) -> dict:
    """Validate every plug-in's params with its own parser (check_registries checks names only)."""
    out = {}
    for name, params in tc.plugins.items():
        if name == "replay":
            out[name] = plugin_config(ReplayConfig, params, name)
        elif name.startswith("extra"):
            out[name] = parse_extra_params(name, params)
        else:
            out[name] = dict(params)
    return out


@pytest.mark.parametrize("suite", REPLAY_SUITES + EXTRA_SUITES)
def test_every_arm_builds_a_valid_config_on_the_pool_with_the_papers_protocol(suite, tmp_path):
    cfg = CompareConfig(suite=suite, out=tmp_path, seeds=1)
    jobs = plan_jobs(cfg)
    s = SUITES[suite]
    assert {j.method for j in jobs} == {m.name for m in s.methods} | {"base"}
    resolved = {}
    for j in jobs:
        tc = from_dict(TrainConfig, j.mapping, where=j.method)
        check_registries(tc)
        plugins = _parse_plugins(tc)
        assert tc.task.pool == str(tmp_path / "runs" / "pool.json") and tc.model.path.endswith("checkpoints/mid")
        assert tc.steps == s.sizes["steps"] and tc.optim.lr == (1.0e-4 if suite == "replay" else 5.0e-5)
        assert tc.algo.mini_batches == 2
        if suite.startswith("replay"):
            assert (tc.validation.temperature, tc.validation.top_p, tc.validation.k) == (0.6, 0.8, 8)
            assert tc.algo.filter_zero_variance and tc.rollout.group_size == 8
            if "replay" in plugins:  # the paper's 20-of-200 warm-up share at the suite's 80 updates
                assert plugins["replay"].warmup == 8
        else:
            assert (tc.validation.temperature, tc.validation.top_p, tc.validation.k) == (0.7, 0.9, 16)
            assert tc.rollout.group_size == 6
            assert tc.algo.filter_zero_variance == ("dapo" in plugins)
            for p in plugins.values():
                if hasattr(p, "warmup_steps") and p.regen:
                    assert p.warmup_steps == 10  # 30 of 250 -> 12 of 100 -> 10 of 80
        if j.method != "base":
            resolved[j.method] = json.dumps({k: str(v) for k, v in plugins.items()}, sort_keys=True)
    assert len(set(resolved.values())) == len(resolved), "two arms of the suite train the same configuration"
    assert set(s.family()) <= {m.name for m in s.methods} - {s.reference}


def test_tables_name_suite_arms_and_table13_is_twelve_fresh_anchored_configurations(tmp_path):
    names = {m.name for m in ev.REPLAY_METHODS}
    for t in ev.REPLAY_TABLES:
        assert set(t.arms) <= names and len(set(t.arms)) == len(t.arms)
    for t in ev.EXTRA_TABLES:
        assert set(t.arms) <= {m.name for m in ev.EXTRA_METHODS}
    assert len(set(ev.REPLAY_AES_CONFIGS)) == 12 and set(ev.REPLAY_AES_CONFIGS) <= names
    jobs = {j.method: j for j in plan_jobs(CompareConfig(suite="replay", out=tmp_path, seeds=1))}
    rc = {n: plugin_config(ReplayConfig, jobs[n].mapping["plugins"]["replay"], "replay") for n in ev.REPLAY_AES_CONFIGS}
    assert all(c.composition == "fresh_anchored" for c in rc.values())
    assert {(c.priority, c.level) for c in rc.values()} == {("abs_adv", "rollout"), ("uniform", "rollout"), ("uniform", "query"),
                                                             ("sigma_g", "rollout"), ("sigma_g", "query")}
    assert [rc[n].max_age for n in ("abs_tau1", "abs", "abs_tau30", "abs_tau60")] == [1, 10, 30, 60]
    # the per-table suites are the paper's tables, each its own Holm family
    assert SUITES["replay_tau"].family() == ev.REPLAY_TABLES[1].arms
    assert SUITES["extra_gamma"].family() == ev.EXTRA_TABLES[1].arms
    assert [parse_extra_params("extra", jobs_e.mapping["plugins"]["extra"]).gamma
            for jobs_e in plan_jobs(CompareConfig(suite="extra_gamma", out=tmp_path, seeds=1))
            if "extra" in jobs_e.mapping["plugins"]] == [0.5, 1.0, 2.0, 5.0]
    # the committed `replay` suite trains at 1e-4; the per-table ones at 5e-5 (there GRPO memorised the pool)
    lrs = {name: {j.resolved()["optim"]["lr"] for j in plan_jobs(CompareConfig(suite=name, out=tmp_path, seeds=1))}
           for name in REPLAY_SUITES}
    assert lrs == {"replay": {1e-4}, "replay_tau": {5e-5}, "replay_priority": {5e-5}, "replay_ratio": {5e-5}, "replay_aes": {5e-5}}
    # Table 13's own suite: the twelve configurations, one Holm family, sharing the per-table suites' runs
    assert set(SUITES["replay_aes"].family()) == set(ev.REPLAY_AES_CONFIGS)
    assert set(SUITES["replay_aes"].shares_records_with) == {"replay_tau", "replay_priority", "replay_ratio"}


@pytest.mark.parametrize("suite", tuple(s for s in REPLAY_SUITES + EXTRA_SUITES if s not in ("replay_aes", "replay_priority", "extra_gamma")))
def test_each_suite_fits_two_hours_on_two_cores(suite):
    assert sizing.estimated_hours(suite, workers=2) <= 2.0


def test_replay_priority_at_its_powered_size_fits_after_its_siblings():
    """Tables 3-4 need 23 seeds for 80 % power at 2 pp (7 arms): 2.02 h by the cost model alone, which is within 2 %
    of the records at the median (benchmarks/suite_cost.py); after replay_tau and replay_ratio (GRPO and ``abs`` are
    theirs) under an hour."""
    assert SUITES["replay_priority"].sizes["seeds"] == 23
    assert sizing.estimated_hours("replay_priority") <= 2.1 and sizing.estimated_hours("replay_priority", after_siblings=True) <= 1.0


def test_extra_table1_suite_is_the_headline_family_and_fits_after_its_siblings():
    """``extra_main`` is ExTra Table 1 at 27 seeds; after the other ExTra suites it trains only DAPO / ExTra-N beyond
    seed 5: GRPO, ExTra-R, ExTra (full) and the base for seeds 0-26 are ``extra_gamma``'s jobs (the ``extra`` suite
    predates records, so on a clone its six seeds of DAPO / ExTra-N are trained again)."""
    s = SUITES["extra_main"]
    assert s.family() == ev.EXTRA_TABLES[0].arms and s.sizes["seeds"] == 27
    assert set(s.shares_records_with) == {"extra", "extra_gamma", "extra_signal"}
    assert sizing.estimated_hours("extra_main") <= 2.0
    assert sizing.estimated_hours("extra_main", after_siblings=True) < sizing.estimated_hours("extra_main") / 2
    left = {(j.method, j.seed) for j in sizing.jobs_left("extra_main", after_siblings=True)}
    assert left == {(m, sd) for m in ("dapo", "extra_n") for sd in range(6, 27)}


def test_table5_suite_at_its_powered_size_fits_after_table1():
    """``extra_gamma`` needs 28 seeds (its 20-seed spread): 2.3 h alone by the cost model, too long for one 2-hour
    run, but ``extra_main`` (1.9 h) trains its GRPO, ExTra-R and ExTra (full) runs to seed 26, after which the γ
    arms and seed 27 are left (about 1.2 h). Naming a suite it shares nothing with is an error, not a silent 0."""
    assert SUITES["extra_gamma"].sizes["seeds"] == 28
    alone, after_main = sizing.estimated_hours("extra_gamma"), sizing.estimated_hours("extra_gamma", after_siblings=("extra_main",))
    assert alone > 2.0 and after_main <= 1.5
    assert sizing.estimated_hours("extra_gamma", after_siblings=True) <= after_main
    assert sizing.estimated_hours("extra_gamma", after_siblings="extra_main") == after_main
    left = {(j.method, j.seed) for j in sizing.jobs_left("extra_gamma", after_siblings=("extra_main",))}
    assert left == ({(m, sd) for m in ("gamma0.5", "gamma2", "gamma5") for sd in range(28)}
                    | {(m, 27) for m in ("grpo", "extra_r", "extra_full", "base")})
    with pytest.raises(ValueError, match="shares no records with"):
        sizing.estimated_hours("extra_gamma", after_siblings=("replay_tau",))


def test_table13_suite_fits_two_hours_after_the_per_table_suites():
    """``replay_aes`` (13 arms x 27 seeds) after its siblings trains the two uniform-rollout τ arms, the seeds of the
    τ and priority arms beyond their suites' 22 / 23 and seed 26 of ``replay_ratio``'s arms and the base."""
    assert SUITES["replay_aes"].sizes["seeds"] == 27
    assert sizing.estimated_hours("replay_aes", after_siblings=True) <= 2.0
    left = {(j.method, j.seed) for j in sizing.jobs_left("replay_aes", after_siblings=("replay_tau", "replay_priority", "replay_ratio"))}
    assert left == ({(m, s) for m in ("uniform_rollout_tau1", "uniform_rollout_tau30") for s in range(27)}
                    | {(m, s) for m in ("abs_tau1", "abs_tau30", "abs_tau60") for s in range(22, 27)}
                    | {(m, s) for m in ("uniform_query", "uniform_rollout", "sigma_query", "sigma_rollout") for s in range(23, 27)}
                    | {(m, 26) for m in ("grpo", "abs", "abs_r1", "abs_alpha1", "base")})


def test_table13_section_ranks_and_draws_the_aes(tmp_path):
    arms = ("grpo", "abs", "abs_tau1", "uniform_rollout_tau30")
    cfg = CompareConfig(suite="replay_aes", out=tmp_path, seeds=3, steps=4, eval_every=2, methods=arms)
    jobs = plan_jobs(cfg)
    effect = {"grpo": 0.0, "abs": -0.02, "abs_tau1": 0.03, "uniform_rollout_tau30": 0.0}
    for j in jobs:
        base = 0.40 + 0.02 * j.seed
        _fake(j, 8, acc=base if j.method == "base" else base + effect[j.method] + 0.001 * j.seed, length=30.0)
    text = write_report(cfg, jobs).read_text()
    ranks = [line.split(" | ")[1] for line in text.splitlines() if re.match(r"\| \d+ \| ", line)]
    assert ranks[0].startswith("|A| rollout, τ_max = 1".replace("|", "\\|")) and len(ranks) == 3
    assert "### Replay Table 2" not in text  # Table 13 only: no per-table sections
    assert "Not run in this suite (all twelve" in text
    assert (tmp_path / "replay_aes_recurring_lr5e-5.png").stat().st_size > 0


# ----------------------------------------------------------------------------------------- sections on fake logs


def _fake(job, k, *, acc, length, steps=4, extra=None):
    d = Path(job.run_dir)
    d.mkdir(parents=True, exist_ok=True)
    val = {f"val_avg_at_{k}": acc, f"val_pass_at_{k}": min(1.0, acc + 0.3), "val_pass_at_1": acc, "val_length_mean": length}
    val.update(extra or {})
    info = {"rc": 0, "fingerprint": job.fingerprint, "wall_s": 1.0}
    if job.method == "base":
        info["validation"] = val
    else:
        rows = [{"step": s, "gen_new_tokens": 900.0, "prompt_instances": 8.0 + (8.0 if job.method == "dapo" else 0.0),
                 "mixed_frac_fresh": 0.5, "time_step_s": 1.0, "time_plugins_s": 0.01, "reward_mean": 0.4,
                 "entropy": 1.0 - 0.1 * s, "clip_frac_fresh": 0.001, "clip_frac_replayed_rollout": 0.004}
                for s in range(steps)]
        if job.method.startswith("extra") or job.method.startswith("gamma"):
            for r in rows:
                r["extra_novelty_bonus_mean_correct"] = 0.2
        rows[1].update({key: v - 0.01 for key, v in val.items()})
        rows[-1].update(val)
        (d / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    (d / "done.json").write_text(json.dumps(info))


def test_replay_tables_holm_within_each_table_and_the_aes_ranking(tmp_path):
    arms = ("grpo", "abs", "abs_tau1", "abs_tau60", "uniform_query_pool", "sigma_query_pool")
    cfg = CompareConfig(suite="replay", out=tmp_path, seeds=3, steps=4, eval_every=2, methods=arms)
    jobs = plan_jobs(cfg)
    effect = {"grpo": 0.0, "abs": 0.05, "abs_tau1": 0.02, "abs_tau60": -0.04, "uniform_query_pool": 0.0, "sigma_query_pool": -0.01}
    rng = np.random.default_rng(1)
    for j in jobs:
        base = 0.40 + 0.02 * j.seed
        acc = base if j.method == "base" else base + effect[j.method] + 0.003 * rng.standard_normal()
        length = 30.0 - (3.0 if j.method == "abs" else 0.0)
        _fake(j, 8, acc=acc, length=length, extra={"val_length_correct": 25.0} if j.method == "abs" else None)
    text = write_report(cfg, jobs).read_text()
    assert "### Replay Table 2: age-eviction horizon" in text and "### Replay Table 9" not in text
    # Table 2 is its own family: 3 of its arms ran, so the smallest Holm-adjusted p is 3x its raw p
    finals = runs.final_evals(jobs, "recurring", 8)
    rows = table_rows(finals, ev.REPLAY_TABLES[1].arms, "grpo", "val_avg_at_8")
    assert [r["arm"] for r in rows] == ["abs_tau1", "abs", "abs_tau60"]
    ps = [r["p"] for r in rows]
    assert [r["p_holm"] for r in rows] == pytest.approx(holm(ps))
    assert min(r["p_holm"] for r in rows) == pytest.approx(min(1.0, 3 * min(ps)))
    assert rows[1]["diff"][0] == pytest.approx(0.05, abs=0.01)
    # clip-fraction columns of Table 2 (percent)
    tau_line = next(line for line in text.splitlines() if line.startswith("| \\|A\\| rollout, τ_max = 60 | "))
    assert tau_line.rstrip().endswith("| 0.100 | 0.400 |")
    # Table 13: ranked by AES; abs is shorter and more accurate -> first
    aes = [line for line in text.splitlines() if line.startswith("| 1 | ")]
    assert aes and aes[0].startswith("| 1 | Ours")
    assert "clip % replay" not in next(line for line in text.splitlines() if line.startswith("| arm |") and "pass@k" in line
                                       and text.index(line) > text.index("Replay Table 1"))
    assert "Not run in this suite" in text
    csv = (tmp_path / "replay_aes_recurring.csv").read_text().splitlines()
    assert csv[0].startswith("rank,arm") and csv[1].split(",")[1] == "abs"
    assert float(csv[1].split(",")[6]) == pytest.approx(0.1 + 3 * 0.05 / 0.41, abs=0.03)
    # evaluation metrics: the logged ones are shown, the missing ones named
    grpo_eval = [line for line in text.splitlines() if line.startswith("| GRPO") and "| reference |" in line and "seeds)" not in line]
    assert len(grpo_eval) == 1 and re.search(r"\| reference \| [+-]0\.0\d\d \[", grpo_eval[0])  # AES vs the start ≈ 0
    assert "## Held-out evaluation metrics" in text and "Not logged by this trainer: L (incorrect), Distinct-4, Self-BLEU-4, LogDet." in text
    assert (tmp_path / "replay_tables_recurring.png").stat().st_size > 0 and (tmp_path / "replay_tables_recurring.csv").is_file()


def test_extra_sections_on_fake_logs(tmp_path):
    arms = ("grpo", "dapo", "extra_n", "extra_full", "gamma5", "surprise")
    cfg = CompareConfig(suite="extra", out=tmp_path, seeds=3, steps=4, eval_every=2, methods=arms)
    jobs = plan_jobs(cfg)
    for j in jobs:
        acc = 0.4 + 0.01 * j.seed + {"extra_full": 0.04, "gamma5": -0.03}.get(j.method, 0.0)
        pk = {f"val_pass_at_{i}": min(1.0, acc + 0.02 * i) for i in range(1, 17)}
        pk.update({"val_distinct_4": 0.5, "val_self_bleu_4": 0.3, "val_logdet": 2.0, "val_length_correct": 20.0,
                   "val_length_incorrect": 40.0})
        _fake(j, 16, acc=acc, length=30.0, extra=pk)
    text = write_report(cfg, jobs).read_text()
    assert "### ExTra Table 5: novelty weight" in text and "### ExTra Table 6" in text
    header = next(line for line in text.splitlines() if line.startswith("| arm | pass@1 | pass@2 | pass@3"))
    assert header.count("pass@") == 16
    assert "## Training dynamics (ExTra Fig. 2)" in text and "## Sample efficiency (ExTra Fig. 3)" in text
    dapo = next(line for line in text.splitlines() if line.startswith("| DAPO") and "| 4 | " in line)
    assert "| 64 |" in dapo  # 16 prompt instances per update over 4 updates, redraws counted
    ent = next(line for line in text.splitlines() if line.startswith("| GRPO") and "[" in line and "nats" not in line
               and line.count("|") == 6)
    assert "-0.300" in ent  # entropy 1.0 -> 0.7 over the fake run: last quarter minus first quarter
    assert "Not logged by this trainer" not in text
    for stem in ("extra_tables", "passk", "extra_dynamics", "prompt_efficiency", "eval_metrics"):
        assert (tmp_path / f"{stem}_recurring.csv").is_file()
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["steps"] == 4 and summary["seeds"] == [0, 1, 2]
    by = {m["name"]: m for m in summary["methods"]}
    assert by["extra_full"]["delta_vs_grpo"] == pytest.approx(0.04) and by["extra_full"]["in_holm_family"]
    assert not by["gamma5"]["in_holm_family"]  # the suite-level family is ExTra Table 1's


def test_final_eval_reads_the_last_evaluation_and_the_base_job(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    (d / "metrics.jsonl").write_text(json.dumps({"step": 0, "val_avg_at_8": 0.1, "x": 1}) + "\n"
                                     + json.dumps({"step": 1, "val_avg_at_8": 0.2, "val_logdet": float("nan")}) + "\n"
                                     + json.dumps({"step": 2, "loss": 0.3}) + "\n")
    out = runs.final_eval(d, 8)
    assert out["val_avg_at_8"] == 0.2 and math.isnan(out["val_logdet"]) and "x" not in out
    b = tmp_path / "base"
    b.mkdir()
    (b / "done.json").write_text(json.dumps({"validation": {"val_avg_at_8": 0.3}}))
    assert runs.final_eval(b, 8) == {"val_avg_at_8": 0.3} and runs.final_eval(b, 16) == {}


# ----------------------------------------------------------------------------------------- smoke runs


@pytest.mark.slow
@pytest.mark.parametrize("suite,arms", [pytest.param(s, a, id=s) for s, a in (
    ("replay", ("grpo", "abs")), ("replay_tau", ("grpo", "abs_tau60")), ("replay_priority", ("grpo", "sigma_query")),
    ("replay_ratio", ("grpo", "abs_r1_alpha1")), ("replay_aes", ("grpo", "uniform_rollout_tau1")), ("extra", ("grpo", "extra_full")), ("extra_gamma", ("grpo", "gamma5")),
    ("extra_signal", ("ngram4", "surprise")), ("extra_main", ("dapo", "extra_n")))])
def test_smoke_run(suite, arms, tmp_path):
    cfg = CompareConfig(suite=suite, quick=True, methods=arms, out=tmp_path, workers=1)
    assert run(cfg) == 0
    text = (tmp_path / "report.md").read_text()
    assert "## Held-out evaluation metrics" in text and (tmp_path / "summary.json").is_file()
    for j in plan_jobs(cfg):
        assert json.loads((Path(j.run_dir) / "done.json").read_text())["rc"] == 0


@pytest.mark.parametrize("suite,arms", [("extra_signal", ("ngram4", "surprise")), ("replay_tau", ("abs_tau1", "abs_tau60"))])
def test_sections_without_the_reference_run(suite, arms, tmp_path):
    """A suite run without its reference arm still writes its report (contrasts and AES shown as undefined)."""
    cfg = CompareConfig(suite=suite, out=tmp_path, seeds=2, steps=4, eval_every=2, methods=arms)
    jobs = plan_jobs(cfg)
    k = cfg.sizes["eval_k"]
    for j in jobs:
        _fake(j, k, acc=0.4 + 0.01 * j.seed, length=30.0, extra={f"val_pass_at_{i}": 0.5 for i in range(1, k + 1)})
    text = write_report(cfg, jobs).read_text()
    assert "## Held-out evaluation metrics" in text


def test_every_suite_names_registered_sections_and_its_own_arms():
    """A typo in a suite's section list or figure arms would surface only when its report is written, after hours of
    training: every registered suite is checked here."""
    from llm_harness.compare.sections import load_sections

    sections = load_sections()
    for name in SUITES.names():
        s = SUITES[name]
        for sec in s.sections:
            sections.lookup(sec, f"suite {name} sections")
        # figure arms are a preference list shared by a paper's suites: at least one must be this suite's
        assert not s.figure_arms or set(s.figure_arms) & {m.name for m in s.methods}, name
        assert s.reference in {m.name for m in s.methods}, name


def test_family_passk_section_contrasts_the_holm_family_on_pass_at_k(tmp_path):
    """``family_passk``: the suite's Holm family again on pass@k, each arm's paired mean difference to the reference
    (its own Holm family), with a power column and a CSV of the same numbers."""
    import csv

    from llm_harness.compare.sections.common import family_passk_section

    arms = ("grpo", "vsr", "sft_pool")
    cfg = CompareConfig(suite="vsr_regime", out=tmp_path, seeds=4, steps=4, eval_every=2, methods=arms)
    jobs = plan_jobs(cfg)
    k = cfg.sizes["eval_k"]
    pass_effect = {"grpo": 0.0, "vsr": 0.04, "sft_pool": -0.10}
    want: dict[str, list[float]] = {a: [] for a in arms}
    for j in jobs:
        p = 0.40 + 0.02 * j.seed + pass_effect.get(j.method, 0.0) + 0.003 * ((j.seed * 7 + len(j.method)) % 5)
        _fake(j, k, acc=0.1, length=30.0, extra={f"val_pass_at_{k}": p})
        if j.method in want:
            want[j.method].append(p)
    lines = family_passk_section(cfg, jobs, {}, SUITES["vsr_regime"], tmp_path)
    text = "\n".join(lines)
    assert f"## Contrasts on pass@{k}" in text and "power" in text
    with open(tmp_path / "family_passk_sparse.csv") as fh:
        rows = {r["arm"]: r for r in csv.DictReader(fh)}
    assert set(rows) == {"vsr", "sft_pool"}  # the family present in this run; the reference is not contrasted with itself
    for arm in ("vsr", "sft_pool"):
        diff = np.mean(np.array(want[arm]) - np.array(want["grpo"]))
        assert float(rows[arm]["diff"]) == pytest.approx(diff, abs=1e-12)
        assert float(rows[arm]["p_holm"]) >= float(rows[arm]["p"])
    assert (tmp_path / "family_passk_sparse.png").stat().st_size > 0
