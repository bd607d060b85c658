"""``vsr advise``'s prediction, knob tuning, bootstrap and recommendation on synthetic probes (the command itself
runs in test_lab_run's end-to-end test bed check)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from llm_harness.lab.advise import AdviseConfig, _subset, bootstrap_gains, gains, recommend, tuned
from llm_harness.lab.allocations import AllocationParams
from llm_harness.lab.probe import ProbeResult, build_state_space

NAMES = ("uniform", "dapo", "prompt_neyman", "vsr_linear", "prefix_oracle")


def _probe(p_prompt, p_prefix_by_alpha, n=16, seed=0) -> ProbeResult:
    rng = np.random.default_rng(seed)
    P = len(p_prompt)
    space = build_state_space([20] * P, tuple(p_prefix_by_alpha), budget=64)
    p = np.concatenate([p_prompt, [p_prefix_by_alpha[a] for a in space.alpha[P:]]])
    k = rng.binomial(n, p)
    tokens = np.where(space.is_prefix, 20 * (1 - space.alpha), 20.0)
    return ProbeResult(space, np.full(space.size, n), k, tokens, np.full(space.size, np.nan))


def test_sparse_prompts_favour_prefix_restarts_and_dense_ones_do_not():
    """Almost every prompt unsolved, expert prefixes in the middle of the ladder: restarts are predicted to gain a lot;
    prompts spread around p = 0.5 with prefixes almost always solved: nothing beats uniform by much."""
    sparse = _probe(np.full(40, 0.02), {0.25: 0.1, 0.5: 0.3, 0.75: 0.6, 0.9: 0.9})
    g = gains(sparse, AllocationParams(), 8, NAMES)
    assert g["vsr_linear"] > 2 and g["prefix_oracle"] >= g["vsr_linear"] * 0.9
    dense = _probe(np.linspace(0.3, 0.7, 40), {0.25: 0.97, 0.5: 0.99, 0.75: 0.99, 0.9: 0.99}, seed=1)
    g2 = gains(dense, AllocationParams(), 8, NAMES)
    assert g2["prompt_neyman"] < 1.2 and g2["vsr_linear"] < 1.0
    assert g2["dapo"] == pytest.approx(1.0)


def test_tuning_bootstrap_and_recommendation():
    probe = _probe(np.full(30, 0.03), {0.25: 0.1, 0.5: 0.3, 0.75: 0.6, 0.9: 0.9}, seed=2)
    t = tuned(probe, AllocationParams(), 8)
    knob, value, gain = t["vsr_linear"]
    assert knob == "rho" and value in (0.25, 0.5, 0.75, 1.0)
    for v in (0.25, 0.5, 0.75, 1.0):  # the chosen ρ is the best on the grid
        assert gains(probe, AllocationParams(rho=v), 8, ("vsr_linear",))["vsr_linear"] <= gain + 1e-12
    ci = bootstrap_gains(probe, {"vsr_linear": AllocationParams(rho=value), "uniform": AllocationParams()}, 8, 100,
                         np.random.default_rng(0))
    assert ci["vsr_linear"][0] <= gain <= ci["vsr_linear"][1]
    assert ci["uniform"] == pytest.approx((1.0, 1.0))
    rows = [{"name": "uniform", "gain": 1.0, "lo": 1.0, "hi": 1.0, "biased": False, "knob": None, "value": None},
            {"name": "vsr_linear", "gain": gain, "lo": ci["vsr_linear"][0], "hi": ci["vsr_linear"][1], "biased": True,
             "knob": "rho", "value": value}]
    text = recommend(rows, 1.1)
    assert text.startswith("Use vsr_linear with rho = ") and "biased" in text
    assert recommend([{**rows[1], "lo": 1.02}], 1.1).startswith("Stay with uniform prompts")


def test_subset_keeps_prompts_with_their_prefix_states():
    probe = _probe(np.array([0.1, 0.5, 0.9]), {0.5: 0.5})
    sub = _subset(probe, np.array([2, 2, 0]))
    assert sub.space.n_prompts == 3
    assert sub.k[:3].tolist() == [probe.k[2], probe.k[2], probe.k[0]]
    assert sub.space.problem.tolist() == [0, 1, 2, 0, 1, 2]


def test_config_errors():
    with pytest.raises(ValueError, match="min_gain"):
        AdviseConfig(min_gain=0.5)
    with pytest.raises(ValueError, match="alphas"):
        AdviseConfig(alphas=(0.0,))
    assert math.isnan(gains(_probe(np.full(4, 0.5), {0.5: 0.5}), AllocationParams(), 8, ("extra",))["extra"])


def test_advise_end_to_end_on_the_test_bed(tmp_path, monkeypatch, capsys):
    from pathlib import Path

    from llm_harness.lab.advise import advise_command

    root = Path(__file__).resolve().parents[3]
    monkeypatch.chdir(root)
    out = tmp_path / "advise.json"
    cfg = AdviseConfig(pool=str(root / "figures" / "compare_vsr_regime" / "pool.json"), prompts=8, probe_samples=4,
                       score_samples=1, bootstrap=20, out=str(out), progress=False)
    assert advise_command(cfg) == 0
    text = capsys.readouterr().out
    assert "prompt_neyman" in text and ("Use " in text or "Stay with uniform" in text or "No allocation" in text)
    import json

    doc = json.loads(out.read_text())
    assert {r["name"] for r in doc["rows"]} >= {"uniform", "dapo", "vsr_linear", "extra"}
    assert doc["probe_wall_s"]["sampling"] > 0 and out.with_suffix(".txt").read_text().startswith("vsr advise:")
    # every interval that spans more than a factor 2 says so, in the table and in the record
    for r in doc["rows"]:
        lo, hi = r["lo"], r["hi"]
        wide = lo is not None and hi is not None and (lo <= 0 or hi / lo > 2)
        assert r["label"] == ("not resolved" if wide or lo is None else "resolved")
        if wide:
            assert any(line.startswith(r["name"]) and "(not resolved)" in line for line in text.splitlines())


def test_render_labels_wide_intervals():
    from llm_harness.lab.advise import render

    res = {"model": "m", "task": "t", "prompts": 4, "prompt_mixed_share": 0.5, "prompt_pass_rate": 0.5, "prefix_states": 0,
           "wall_s": 1.0, "probe_wall_s": {}, "recommendation": "r",
           "rows": [{"name": "a", "gain": 1.5, "lo": 0.6, "hi": 3.0, "biased": False, "knob": None},
                    {"name": "b", "gain": 1.5, "lo": 1.2, "hi": 1.9, "biased": False, "knob": None}]}
    lines = render(res).splitlines()
    assert "(not resolved)" in next(x for x in lines if x.startswith("a ")) and "(not resolved)" not in next(x for x in lines if x.startswith("b "))
