"""``vsr lab`` end to end on the test bed's ``low`` checkpoint at toy sizes: files, report, resumption, the
allocation registry and configuration errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from llm_harness.lab.allocations import ALLOCATIONS, AllocationParams, Proposal, allocation_names, register_allocation
from llm_harness.lab.probe import ProbeResult, build_state_space
from llm_harness.lab.config import LabConfig
from llm_harness.lab.run import records_dir, run_lab
from llm_harness.lab.summary import predictions
from vsr.cli import main

ROOT = Path(__file__).resolve().parents[3]
POOL = ROOT / "figures" / "compare_vsr_regime" / "pool.json"


def _tiny(tmp_path: Path, **kw) -> LabConfig:
    base = dict(train_config=str(ROOT / "configs" / "regime_grpo.yaml"), pool=str(POOL), prompts=8, probe_samples=4,
                score_samples=1, groups=2, group_size=4, batches=4, blocks=2, reference_batches=4, heldout=8,
                allocations=("uniform", "prompt_neyman", "vsr_linear", "extra"), out=str(tmp_path / "lab"), progress=False)
    base.update(kw)
    return LabConfig(**base)


def test_lab_runs_reports_and_resumes(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    cfg = _tiny(tmp_path)
    s = run_lab(cfg)
    out = Path(cfg.out)
    for f in ("probe.json", "reference_pool.json", "reference_heldout.json", "alloc_uniform.json", "alloc_extra.json"):
        assert (records_dir(out) / f).is_file(), f
    for f in ("summary.json", "report.md"):
        assert (out / f).is_file(), f
    doc = json.loads((out / "summary.json").read_text())
    assert [r["name"] for r in doc["allocations"]] == list(cfg.allocations)
    uni = next(r for r in doc["allocations"] if r["name"] == "uniform")
    # against itself: 1 whenever its SNR estimate is positive (at toy sizes it may not be: then no ratio)
    assert uni["realised_gain"]["value"] is None or uni["realised_gain"]["value"] == pytest.approx(1.0)
    assert uni["stats"]["trvar"]["value"] > 0 and uni["stats"]["tokens"]["value"] > 0
    # 1 by definition, or undefined when no prompt's outcome varied in the probe's prediction half (toy sizes)
    assert uni["predicted"]["b4"]["gain"] is None or uni["predicted"]["b4"]["gain"] == pytest.approx(1.0)
    assert next(r for r in doc["allocations"] if r["name"] == "extra")["predicted"]["b3"] is None
    assert s["probe"]["prompts"] == 8 and s["probe"]["prefix_states"] > 0
    report = (out / "report.md").read_text()
    assert "| `vsr_linear` |" in report and "predicted (B.3)" in report
    # the components, each measured apart; Assumption S's s² only as a prediction, never inside a realised number
    assert doc["plan"]["reference_batches"] == 4 and doc["plan"]["batches"] == 4
    rows = {r["name"]: r for r in doc["allocations"]}
    assert rows["uniform"]["components"] is None
    for name in ("prompt_neyman", "vsr_linear", "extra"):
        c = rows[name]["components"]
        assert set(c) == {"noise_ratio", "mean_sq", "mean_sq_minus_uniform", "heldout_projection",
                          "heldout_projection_minus_uniform", "signal_sq"}
        assert c["noise_ratio"]["label"] in ("resolved", "not resolved")
        assert c["mean_sq_minus_uniform"]["label"] in ("> 0", "< 0", "not detected")
    assert rows["vsr_linear"]["predicted"]["biased"] and rows["vsr_linear"]["realised_gains"]["variance"] is None
    assert rows["vsr_linear"]["components"]["signal_sq"]["source"] == "predicted (assumption S)"
    assert rows["prompt_neyman"]["components"]["signal_sq"] == {"value": 1.0, "source": "unbiased (theorem)"}
    assert rows["prompt_neyman"]["realised_gains"]["variance"]["signal_from"] == "unbiased"
    nr = rows["vsr_linear"]["components"]["noise_ratio"]
    assert nr["predicted_b3"] is None or nr["predicted_b3"] > 0
    assert "## What each realised gain is made of" in report and "| `vsr_linear` |" in report.split("made of")[1]
    # --reanalyze rebuilds the same rows, plan and report from the stored records alone (no model)
    from llm_harness.lab.config import LabConfig as _C
    from llm_harness.lab.run import lab_command

    stripped = {**doc, "allocations": [{k: v for k, v in r.items() if k != "components"} for r in doc["allocations"]]}
    stripped.pop("plan")
    (out / "summary.json").write_text(json.dumps(stripped))
    assert lab_command(_C(out=str(out), reanalyze=True, progress=False)) == 0
    again = json.loads((out / "summary.json").read_text())
    assert again["allocations"] == doc["allocations"] and again["plan"] == doc["plan"]
    assert (out / "report.md").read_text() == report
    with pytest.raises(ValueError, match="no summary.json"):
        lab_command(_C(out=str(tmp_path / "empty"), reanalyze=True, progress=False))
    # a rerun reuses every finished step: identical records, nothing resampled
    before = {f: (records_dir(out) / f).read_text() for f in ("probe.json", "alloc_uniform.json", "alloc_vsr_linear.json")}
    run_lab(cfg)
    assert {f: (records_dir(out) / f).read_text() for f in before} == before
    # a changed knob recomputes only what depends on it
    cfg2 = _tiny(tmp_path, allocation=AllocationParams(rho=0.25))
    run_lab(cfg2)
    assert (records_dir(out) / "alloc_uniform.json").read_text() == before["alloc_uniform.json"]
    assert (records_dir(out) / "alloc_vsr_linear.json").read_text() != before["alloc_vsr_linear.json"]


def test_state_space_and_predictions_from_a_synthetic_probe():
    space = build_state_space([10, None, 4], (0.25, 0.5, 0.9), budget=8)
    # prompt 0 (10 tokens): cuts 3, 5 (9 >= budget 8 is dropped); prompt 1 has no solution; prompt 2: 1, 2, 4
    assert space.n_prompts == 3
    assert space.problem.tolist() == [0, 1, 2, 0, 0, 2, 2, 2]
    assert space.cut.tolist() == [0, 0, 0, 3, 5, 1, 2, 4]
    S = space.size
    k = np.array([1, 0, 8, 2, 5, 3, 6, 8])
    probe = ProbeResult(space, np.full(S, 8), k, np.linspace(20, 5, S), np.full(S, np.nan))
    preds = predictions(probe, AllocationParams(), allocation_names(()), 8)
    assert preds["uniform"]["b4"]["gain"] == pytest.approx(1.0)
    assert preds["dapo"]["b4"]["gain"] == pytest.approx(1.0)
    assert preds["prompt_neyman"]["b4"]["gain"] > 0 and not preds["prompt_neyman"]["biased"]
    assert preds["vsr_linear"]["biased"] and preds["extra"]["b4"] is None
    assert preds["uniform"]["b3"]["gain"] == pytest.approx(1.0)  # no measured score norms: B.3 = B.4
    assert preds["vsr_linear"]["b3"]["gain"] == pytest.approx(preds["vsr_linear"]["b4"]["gain"])


def test_allocation_registry_and_config_errors(tmp_path):
    assert {"uniform", "dapo", "prompt_neyman", "prompt_variance", "vsr_linear", "vsr_calibrated", "prefix_uniform",
            "prefix_oracle", "extra"} <= set(ALLOCATIONS.names())
    with pytest.raises(ValueError, match="lab.allocations.*'bogus'"):
        allocation_names(("uniform", "bogus"))
    with pytest.raises(ValueError, match="listed twice"):
        allocation_names(("uniform", "uniform"))
    with pytest.raises(ValueError):
        register_allocation("uniform", "again")(lambda probe, params, G: Proposal(np.ones(1), np.ones(1)))
    with pytest.raises(ValueError, match="blocks"):
        LabConfig(batches=4, blocks=8)
    with pytest.raises(ValueError, match="alphas"):
        LabConfig(alphas=(0.5, 1.0))
    with pytest.raises(ValueError, match="allocation.rho"):
        AllocationParams(rho=1.5)
    with pytest.raises(ValueError, match="group_size"):
        LabConfig(group_size=1)
    with pytest.raises(SystemExit) as e:
        main(["lab", "--allocations", "nope", "--out", str(tmp_path / "x")])
    assert e.value.code == 2


def test_probe_halves_and_the_b3_check():
    space = build_state_space([10, 10], (0.5,), budget=8)
    S = space.size
    probe = ProbeResult(space, np.full(S, 8), np.array([3, 0, 8, 5]), np.full(S, 10.0), np.full(S, 2.0),
                        k_split=np.array([1, 0, 4, 4]), score_each=np.array([[4.0, 1.0]] * S),
                        score_reward=np.array([[1.0, 0.0]] * S))
    assert probe.selection().k.tolist() == [1, 0, 4, 4] and probe.selection().n.tolist() == [4] * S
    assert probe.evaluation().k.tolist() == [2, 0, 4, 1] and probe.evaluation().n.tolist() == [4] * S
    b = probe.score_by_outcome()
    assert b["prompt_ratio"] == pytest.approx(4.0) and b["prefix_success_n"] == 2
    again = ProbeResult.from_plain(probe.to_plain())
    assert again.k_split.tolist() == probe.k_split.tolist() and np.array_equal(again.score_each, probe.score_each)


def test_batch_gradient_is_the_gradient_of_the_weighted_objective(monkeypatch):
    """``LabEngine.gradient`` equals the autograd gradient of ``F(θ) = Σ_j w_j Σ_i A_ij log π(y_ij | s_j) / n`` written
    out independently here (sign, prompt/prefix masking, leave-one-out advantages, weights and normaliser)."""
    from dataclasses import replace

    import torch

    from llm_harness.lab.engine import LabEngine
    from llm_harness.lab.run import _train_cfg
    from llm_harness.trainer.data import build_batch
    from llm_harness.trainer.modeling import sequence_logprobs

    monkeypatch.chdir(ROOT)
    eng = LabEngine(_train_cfg(LabConfig(pool=str(POOL), group_size=4)))
    try:
        probs = eng.problems[:3]
        states = [eng.prompt_state(probs[0], 4), eng.prefix_state(probs[1], 5, 0.25, 4), eng.prompt_state(probs[2], 4)]
        groups = eng.sample(states, seed=3)
        eng.model.double()
        for g in groups:  # rewards forced mixed so every group carries gradient
            g.rewards[:] = np.array([1.0, 0.0, 0.0, 1.0])
        w = [0.5, 2.0, 1.0]
        got = eng.gradient(groups, w, normaliser=10).double()
        adv = np.array([2, -2, -2, 2]) / 3.0  # r_i − mean of the other three
        b = build_batch([replace(g, advantages=adv * wj) for g, wj in zip(groups, w)], eng.codec.pad_token_id)
        assert int(b.loss_mask[4:8].sum()) == sum(len(r) for r in groups[1].response_ids)  # the prefix is not scored
        for p in eng.params:
            p.grad = None
        lp, _ = sequence_logprobs(eng.model, b.input_ids, b.attention_mask, b.loss_mask, with_entropy=False)
        (((lp * b.loss_mask).sum(-1) * b.advantages.double()).sum() / 10).backward()
        want = torch.cat([p.grad.reshape(-1) for p in eng.params])
        assert float((got - want).norm() / want.norm()) < 1e-6
        assert float(eng.gradient(groups, [0.0, 0.0, 0.0]).norm()) == 0.0
    finally:
        eng.close()


def test_make_figures_small_lab_quick(tmp_path, monkeypatch):
    from llm_harness.lab.run import make_lab_figure

    monkeypatch.chdir(ROOT)
    assert make_lab_figure(tmp_path / "lab_small", True) == 0
    s = json.loads((tmp_path / "lab_small" / "summary.json").read_text())
    assert [r["name"] for r in s["allocations"]] == ["uniform", "dapo", "prompt_neyman", "vsr_calibrated"]
    report = (tmp_path / "lab_small" / "report.md").read_text()
    assert report.startswith("# Allocation lab")
    # committed by make figures: no wall-clock number and no temporary folder, so a rerun writes the same bytes
    assert "wall_s" not in s and "wall_s" not in s["probe"] and s["config"]["out"] == str(tmp_path / "lab_small")
    assert all(set(r["cost"]) == {"generated_groups", "kept_groups"} for r in s["allocations"])
    assert "s / batch (sample + grad)" not in report and "`timings.json` beside this report" in report
    t = json.loads((tmp_path / "lab_small" / "timings.json").read_text())
    assert t["wall_s"] > 0 and set(t["probe"]["wall_s"]) == {"sampling", "score_norms"}
    assert [(a["name"], a["cost"]["sampling_s"] > 0) for a in t["allocations"]] == [(n, True) for n in
                                                                                      ["uniform", "dapo", "prompt_neyman", "vsr_calibrated"]]
    assert not list(Path(ROOT / "figures").glob("lab_small/.vsr.lock"))
