"""``vsr gridworld figure2-sweep`` (gridworld.figure2_sweep) and the initial-policy temperature."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from gridworld.figure2_sweep import SCALARS, Figure2SweepConfig, run_one
from gridworld.pg_experiment import PGConfig
from gridworld.policies import encode_states, make_mlp_policy
from vsr.cli import main


def test_temperature_divides_the_initial_logits():
    import torch

    x = torch.as_tensor(encode_states(6))
    base = make_mlp_policy(6, 4, seed=3)(x)
    hot = make_mlp_policy(6, 4, seed=3, temperature=4.0)(x)
    torch.testing.assert_close(hot, base / 4.0, rtol=1e-14, atol=0)
    with pytest.raises(ValueError, match="^temperature: must be > 0"):
        make_mlp_policy(6, 4, temperature=0.0)
    with pytest.raises(ValueError, match="^init_temperature: must be > 0"):
        PGConfig(init_temperature=-1.0)


def test_sweep_command_on_a_two_by_two_grid_writes_its_csvs(tmp_path):
    out = tmp_path / "sw"
    argv = ["gridworld", "figure2-sweep", "--out", str(out), "--layouts", "open5", "--horizons", "12", "24"]
    argv += ["--slips", "0", "--temperatures", "1", "4", "--seeds", "0", "--updates", "6", "--every", "3", "--no-progress"]
    assert main(argv) == 0
    runs = pd.read_csv(out / "sweep.csv")
    assert len(runs) == 4
    assert set(zip(runs.horizon, runs.init_temperature)) == {(12, 1.0), (12, 4.0), (24, 1.0), (24, 4.0)}
    assert set(SCALARS) <= set(runs.columns)
    assert np.isfinite(runs[list(SCALARS)].to_numpy(float)).all()
    assert (runs.start_distance == 8).all() and runs.mu0.between(0, 1).all()
    curves = pd.read_csv(out / "sweep_curves.csv")
    assert sorted(curves["update"].unique()) == [0, 3, 6] and len(curves) == 4 * 3
    assert len(pd.read_csv(out / "sweep_summary.csv")) == 4
    for name in ("sweep.png", "sweep_config.yaml"):
        assert (out / name).stat().st_size > 0
    assert not (out / "sweep.pdf").exists()  # PNG only by default
    # hotter start, same network: closer to uniform, so more likely to reach G in 24 moves
    j = runs.set_index(["horizon", "init_temperature"]).J0
    assert j[(24, 4.0)] > j[(24, 1.0)] > 0


def test_sweep_runs_are_deterministic_in_their_seed():
    cfg = Figure2SweepConfig(updates=8, every=4, progress=False)
    setting = {"layout": "maze7", "slip": 0.2, "init_temperature": 1.0, "horizon": 30, "seed": 1}
    a, ca = run_one(cfg, setting)
    b, cb = run_one(cfg, setting)
    assert a == b and ca == cb
    c, _ = run_one(cfg, {**setting, "seed": 2})
    assert c["J0"] != a["J0"]  # each seed draws its own network


def test_sweep_config_validation():
    with pytest.raises(ValueError, match=r"^layouts: unknown layout"):
        Figure2SweepConfig(layouts=("nowhere",))
    with pytest.raises(ValueError, match=r"^horizons: needs at least one value"):
        Figure2SweepConfig(horizons=())
    with pytest.raises(ValueError, match=r"^horizons: 4 is shorter than the shortest path of maze7"):
        run_one(Figure2SweepConfig(updates=2), {"layout": "maze7", "slip": 0.0, "init_temperature": 1.0, "horizon": 4, "seed": 0})
