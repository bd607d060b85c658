"""Rollout replay at ages 1…τ in the lab (``llm_harness.lab.staleness``): the importance-weighted replay estimator is
unbiased for the current policy's gradient (exact, on a tabular softmax policy), the log-probabilities the weights use
are the sampler's, and ``vsr lab --replay-ages`` trains, realises, reports and resumes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llm_harness.lab.staleness import check_ages, replay_advantages, replay_names

ROOT = Path(__file__).resolve().parents[3]


def _softmax(z):
    e = np.exp(z - z.max())
    return e / e.sum()


def _exact_replay_mean(theta_then, theta_now, reward, G, iw):
    """E over a group of G draws from π_then of (1/G) Σ_i coef_i ∇_θ log π_now(y_i), exactly (enumerating groups)."""
    import itertools

    p_then, p_now = _softmax(theta_then), _softmax(theta_now)
    K = len(p_then)
    total = np.zeros(K)
    for ys in itertools.product(range(K), repeat=G):
        prob = float(np.prod(p_then[list(ys)]))
        r = reward[list(ys)]
        lp_now, lp_then = np.log(p_now[list(ys)]), np.log(p_then[list(ys)])
        coef = replay_advantages(r, lp_now, lp_then) if iw else replay_advantages(r)
        for c, y in zip(coef, ys):
            total += prob * c * (np.eye(K)[y] - p_now) / G  # ∇_θ log softmax(θ)_y = e_y − p
    return total


@settings(max_examples=25, deadline=None)
@given(st.lists(st.floats(-2, 2), min_size=3, max_size=3), st.lists(st.floats(-2, 2), min_size=3, max_size=3),
       st.lists(st.sampled_from([0.0, 1.0]), min_size=3, max_size=3))
def test_importance_weighted_replay_is_unbiased_for_the_current_gradient(then, now, reward):
    theta_then, theta_now, r = np.array(then), np.array(now), np.array(reward)
    p_now = _softmax(theta_now)
    G = 3
    # ∇J(now) for J = Σ_y π_now(y) r(y): the leave-one-out estimator at fresh draws has exactly this mean
    grad_j = p_now * (r - p_now @ r)
    got = _exact_replay_mean(theta_then, theta_now, r, G, iw=True)
    np.testing.assert_allclose(got, grad_j, atol=1e-10)
    # without the weights the mean is the gradient at the old policy's sampling distribution: biased unless equal
    if np.allclose(theta_then, theta_now):
        np.testing.assert_allclose(_exact_replay_mean(theta_then, theta_now, r, G, iw=False), grad_j, atol=1e-10)


def test_without_weights_stale_replay_is_biased():
    theta_then, theta_now, r = np.array([1.5, 0.0, -1.0]), np.array([-0.5, 0.5, 1.0]), np.array([1.0, 0.0, 0.0])
    p_now = _softmax(theta_now)
    grad_j = p_now * (r - p_now @ r)
    stale = _exact_replay_mean(theta_then, theta_now, r, 3, iw=False)
    assert np.linalg.norm(stale - grad_j) > 0.1 * np.linalg.norm(grad_j)


def test_replay_advantage_and_age_errors():
    np.testing.assert_allclose(replay_advantages([1.0, 0.0]), [1.0, -1.0])
    np.testing.assert_allclose(replay_advantages([1.0, 0.0], [0.0, 0.0], [np.log(2.0), 0.0]), [0.5, -1.0])
    with pytest.raises(ValueError, match="both log-probabilities"):
        replay_advantages([1.0, 0.0], [0.0, 0.0])
    with pytest.raises(ValueError, match="shapes"):
        replay_advantages([1.0, 0.0], [0.0], [0.0])
    assert check_ages([4, 1, 4], 0.5, 8) == (1, 4)
    with pytest.raises(ValueError, match="positive integers"):
        check_ages([0, 2], 0.5, 8)
    with pytest.raises(ValueError, match="replayed groups"):
        check_ages([1], 0.01, 8)
    assert replay_names([2, 1]) == ["uniform", "replay_a1", "replay_a1_iw", "replay_a2", "replay_a2_iw"]


def test_the_weights_use_the_samplers_log_probabilities(monkeypatch):
    """``LabEngine.sequence_logprobs`` of sampled groups equals the summed behaviour log-probabilities the HF sampler
    recorded (the same policy, temperature and nucleus), so the stored log π of a pool is the sampler's."""
    monkeypatch.chdir(ROOT)
    from llm_harness.lab.engine import LabEngine
    from llm_harness.trainer.config import TrainConfig
    from vsr_util.config_io import load_config

    cfg = load_config(TrainConfig, ROOT / "configs" / "regime_grpo.yaml")
    engine = LabEngine(cfg)
    try:
        groups = engine.sample([engine.prompt_state(p, 3) for p in engine.problems[:3]], seed=5)
        got = engine.sequence_logprobs(groups)
        for g, lp in zip(groups, got):
            want = np.array([float(np.sum(b)) for b in g.behaviour_logprobs])
            np.testing.assert_allclose(lp, want, rtol=1e-4, atol=1e-3)
    finally:
        engine.close()


def test_replay_refuses_nucleus_sampling(tmp_path, monkeypatch):
    """Importance weights between two policies need the same support: a top-p sampler is refused, naming why."""
    monkeypatch.chdir(ROOT)
    import yaml

    from llm_harness.lab.config import LabConfig
    from llm_harness.lab.run import records_dir, run_lab

    cfg_path = tmp_path / "nucleus.yaml"
    cfg_path.write_text(yaml.safe_dump({"extends": str(ROOT / "configs" / "regime_grpo.yaml"), "rollout": {"top_p": 0.9}}))
    cfg = LabConfig(train_config=str(cfg_path), pool=str(ROOT / "figures" / "compare_vsr_regime" / "pool.json"), prompts=8,
                    probe_samples=4, score_samples=0, groups=2, group_size=4, batches=2, blocks=2, reference_batches=2,
                    heldout=4, allocations=("uniform",), replay_ages=(1,), out=str(tmp_path / "lab"), progress=False)
    with pytest.raises(ValueError, match="top_p 0.9"):
        run_lab(cfg)


def test_lab_replay_step_trains_reports_and_resumes(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    from llm_harness.lab.config import LabConfig
    from llm_harness.lab.run import records_dir, run_lab

    cfg = LabConfig(train_config=str(ROOT / "configs" / "regime_grpo.yaml"),
                    pool=str(ROOT / "figures" / "compare_vsr_regime" / "pool.json"), prompts=8, probe_samples=4,
                    score_samples=0, groups=2, group_size=4, batches=4, blocks=2, reference_batches=4, heldout=8,
                    allocations=("uniform",), replay_ages=(1, 2), out=str(tmp_path / "lab"), progress=False)
    s = run_lab(cfg)
    out = Path(cfg.out)
    doc = json.loads((records_dir(out) / "replay.json").read_text())
    assert doc["tau"] == 2 and len(doc["train"]) == 2 and sorted(doc["records"]) == sorted(replay_names((1, 2)))
    rows = {r["name"]: r for r in s["replay"]["rows"]}
    assert set(rows) == set(replay_names((1, 2))) and rows["uniform"]["signal_scale"] == 1.0 == rows["uniform"]["variance_side"]
    # replayed groups generate nothing: the replay batches generate about half of uniform's tokens
    assert rows["replay_a1"]["tokens"] < rows["uniform"]["tokens"]
    report = (out / "report.md").read_text()
    assert "Rollout replay at ages 1, 2" in report and "| `replay_a2_iw` |" in report
    costs = doc["costs"]
    assert "weight_ess_frac" in costs["replay_a1_iw"] and 0.0 < costs["replay_a1_iw"]["weight_ess_frac"] <= 1.0 + 1e-12
    assert costs["replay_a1_iw"]["log_weight_abs_mean"] >= 0.0 and "weight_ess_frac" not in costs["replay_a1"]
    before = (records_dir(out) / "replay.json").read_text()
    run_lab(cfg)  # resumes: no training, no new draws
    assert (records_dir(out) / "replay.json").read_text() == before
