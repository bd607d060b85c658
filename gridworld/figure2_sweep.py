"""``vsr gridworld figure2-sweep``: when does μ_var start near G and walk back toward S?

VSR §2.3 says of its Figure 2 that μ_var ∝ dσ is concentrated near G early in training and walks
back toward S as goal-side cells are mastered. This sweep trains the μ_var learner of Figure 2
(:mod:`gridworld.pg_experiment`, ``mu_var_is``) over a grid of layouts, horizons, slip
probabilities and initial-policy temperatures (the initial network's logits divided by τ),
solves every ``every``-th iterate exactly (:mod:`gridworld.curriculum`) and reduces each run to
a few scalars, all distances as a fraction of the start's distance to G (0 = at G, 1 = at S):

* ``J0``: success probability from S at update 0;
* ``mu0``: μ_var-weighted mean distance to G at update 0 (the paper's picture needs < 0.5);
* ``tilt0 = mu0 - d0``: μ_var's mean distance minus d^π's at update 0 (< 0: μ_var sits nearer
  G than the states the policy visits);
* ``walk_back``: how far μ_var moves back toward S after the iterate where it came nearest G
  (the largest ``mu`` after that iterate minus ``mu_min``; 0 when it only moves toward G);
* ``tilt_change = tilt_end - tilt0``: the same, relative to d^π.

A run shows the paper's picture (``paper_picture``) when ``mu0 < 0.5`` and ``walk_back`` exceeds
``threshold``; it shows it relative to d^π (``relative_picture``) when ``tilt0 < 0`` and
``tilt_change`` exceeds ``threshold``. Each seed draws its own initial network and sampling
stream (seed 0 of the default setting is the μ_var learner drawn in Figure 2).

Writes, beside Figure 2: ``sweep.csv`` (one row per run), ``sweep_curves.csv`` (the statistics
of every solved iterate), ``sweep_summary.csv`` (seed means: the numbers drawn),
``sweep.png`` and ``sweep_config.yaml``.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gridworld.curriculum import curriculum_curve, trend_scalars
from gridworld.grid import LAYOUTS
from gridworld.pg_experiment import ESTIMATORS, PGConfig, make_grid, one_torch_thread, train_learner

#: The per-run scalars (:func:`trend_scalars`), in the order of the figure's columns.
SCALARS = ("J0", "mu0", "tilt0", "walk_back", "tilt_change")
#: Keys the sweep varies, in the order of its loops.
AXES = ("layout", "slip", "init_temperature", "horizon")


@dataclass(frozen=True)
class Figure2SweepConfig:
    """Options of ``vsr gridworld figure2-sweep``."""

    out: Path = Path("figures/gridworld_figure2")
    """Output folder (sweep.csv, sweep_curves.csv, sweep_summary.csv, sweep.png, sweep_config.yaml)."""
    layouts: tuple[str, ...] = ("maze7", "open5", "open7")
    """Layouts (names of gridworld.grid.LAYOUTS)."""
    horizons: tuple[int, ...] = (20, 40, 80, 160, 320)
    """Moves per episode; each must be at least every layout's shortest path."""
    slips: tuple[float, ...] = (0.0, 0.2)
    """Slip probabilities of the moves."""
    temperatures: tuple[float, ...] = (0.25, 1.0, 4.0)
    """Initial-policy temperatures τ (initial logits = default-init logits / τ)."""
    seeds: tuple[int, ...] = (0, 1)
    """Seeds; each draws its own initial network and sampling stream."""
    updates: int = 200
    """Updates per learner (as in Figure 2)."""
    every: int = 10
    """Solve the learner's iterate exactly every this many updates (and at the last)."""
    lr: float = 0.003
    """Adam learning rate (as in Figure 2)."""
    method: str = "mu_var_is"
    """The learner whose proposal is tracked (a name of gridworld.pg_experiment.ESTIMATORS)."""
    threshold: float = 0.05
    """A move back toward S counts when it exceeds this fraction of the S-to-G distance."""
    progress: bool = True
    """Show a progress bar."""

    def __post_init__(self):
        for name in ("layouts", "horizons", "slips", "temperatures", "seeds"):
            if not getattr(self, name):
                raise ValueError(f"{name}: needs at least one value")
        for lay in self.layouts:
            LAYOUTS.check(lay, where="layouts")
        ESTIMATORS.check(self.method, where="method")
        if self.updates < 1 or self.every < 1:
            raise ValueError(f"updates/every: must be >= 1, got {self.updates}, {self.every}")
        if not self.threshold >= 0:
            raise ValueError(f"threshold: must be >= 0, got {self.threshold}")


def _settings(cfg: Figure2SweepConfig) -> list[dict]:
    return [
        {"layout": lay, "slip": float(slip), "init_temperature": float(tau), "horizon": int(H), "seed": int(seed)}
        for lay, slip, tau, H, seed in itertools.product(cfg.layouts, cfg.slips, cfg.temperatures, cfg.horizons, cfg.seeds)
    ]


def run_one(cfg: Figure2SweepConfig, setting: dict, bar=None) -> tuple[dict, list[dict]]:
    """Train the learner of one setting; ``(run row, curve rows)``. Deterministic in (cfg, setting)."""
    seed = setting["seed"]
    pg = PGConfig(
        layout=setting["layout"], horizon=setting["horizon"], slip=setting["slip"], init_temperature=setting["init_temperature"],
        methods=(cfg.method,), seeds=(seed,), init_seed=seed, updates=cfg.updates, lr=cfg.lr,
        exact_every=0, snapshot_every=cfg.every,
    )  # fmt: skip
    grid = make_grid(pg)
    D = int(grid.distance_to_goal[grid.start_state])
    if setting["horizon"] < D:
        raise ValueError(f"horizons: {setting['horizon']} is shorter than the shortest path of {setting['layout']} ({D} moves)")
    trace = train_learner(pg, grid, cfg.method, seed, bar)
    curve = [
        {**setting, "update": k, "J": st["J"], **{f"{n}_frac": st.get(f"{n}_frac", np.nan) for n in ("mu", "d", "sigma")}}
        for k, _, st in curriculum_curve(grid, trace.snapshots, eps=pg.eps)
    ]
    col = {key: np.array([r[key] for r in curve]) for key in ("update", "mu_frac", "d_frac", "sigma_frac")}
    row = {**setting, "start_distance": D, "J0": float(trace.J[0]), "J_end": float(trace.J[-1])}
    row.update(trend_scalars(col["update"], col["mu_frac"], col["d_frac"], threshold=cfg.threshold))
    row["sigma0"], row["sigma_end"] = float(col["sigma_frac"][0]), float(col["sigma_frac"][np.isfinite(col["sigma_frac"])][-1])
    return row, curve


def run_sweep(cfg: Figure2SweepConfig):
    """Every setting of the sweep; ``(runs, curves)`` DataFrames (one row per run / solved iterate)."""
    import pandas as pd
    from tqdm.auto import tqdm

    settings = _settings(cfg)
    rows, curves = [], []
    with one_torch_thread(), tqdm(total=len(settings) * cfg.updates, desc="figure-2 sweep", disable=not cfg.progress) as bar:
        for st in settings:
            row, curve = run_one(cfg, st, bar)
            rows.append(row)
            curves.extend(curve)
    return pd.DataFrame(rows), pd.DataFrame(curves)


def summary_table(runs):
    """Seed means of the scalars per setting, with the fraction of seeds showing each picture."""
    keys = [k for k in AXES if k in runs.columns]
    num = ["J0", "J_end", "mu0", "d0", "tilt0", "mu_min", "mu_end", "walk_back", "tilt_end", "tilt_change", "sigma0", "sigma_end"]
    g = runs.groupby(keys, sort=False)
    out = g[num].mean()
    out["paper_picture"] = g["paper_picture"].mean()
    out["relative_picture"] = g["relative_picture"].mean()
    out["seeds"] = g.size()
    return out.reset_index()


_PANELS = {
    "J0": ("J at update 0", "viridis", (0.0, 1.0)),
    "mu0": ("μ_var at update 0:\nmean distance to G (1 = at S)", "RdBu_r", (0.0, 1.0)),
    "tilt0": ("tilt at update 0: μ_var − d^π\n(< 0: μ_var nearer G)", "RdBu_r", None),
    "walk_back": ("walk-back of μ_var toward S\n(largest after nearest G − nearest G)", "Greens", None),
    "tilt_change": ("tilt change over training\n(end − start; > 0: toward S)", "RdBu_r", None),
}


def plot_sweep(summary, out: Path) -> None:
    """One row of heatmaps per (layout, slip), one column per scalar; x = horizon, y = τ."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from vsr_util.atomic import save_figure

    groups = list(summary.groupby(["layout", "slip"], sort=False))
    Hs = sorted(summary["horizon"].unique())
    taus = sorted(summary["init_temperature"].unique())
    fig = plt.figure(figsize=(3.3 * len(SCALARS), 2.3 * len(groups) + 1.6))
    gs = fig.add_gridspec(len(groups) + 1, len(SCALARS), height_ratios=[1] * len(groups) + [0.08], hspace=0.45, wspace=0.25)
    for j, name in enumerate(SCALARS):
        title, cmap, lim = _PANELS[name]
        vals = summary[name].to_numpy(float)
        if lim is None:
            m = max(float(np.nanmax(np.abs(vals))), 0.1)  # a floor, so that noise-sized values stay pale
            lim = (0.0, m) if cmap == "Greens" else (-m, m)
        for i, ((lay, slip), sub) in enumerate(groups):
            ax = fig.add_subplot(gs[i, j])
            img = sub.pivot(index="init_temperature", columns="horizon", values=name).reindex(index=taus, columns=Hs).to_numpy(float)
            im = ax.imshow(img, cmap=cmap, vmin=lim[0], vmax=lim[1], aspect="auto", origin="lower")
            for (r, c), v in np.ndenumerate(img):
                if np.isfinite(v):
                    x = (v - lim[0]) / (lim[1] - lim[0])
                    dark = x > 0.6 if cmap == "Greens" else (x < 0.2 if cmap == "viridis" else abs(x - 0.5) > 0.3)
                    ax.text(c, r, f"{v:.2f}", ha="center", va="center", fontsize=7.5, color="white" if dark else "black")
            ax.set_xticks(range(len(Hs)), [str(h) for h in Hs], fontsize=7)
            ax.set_yticks(range(len(taus)), [f"{t:g}" for t in taus], fontsize=7)
            if i == 0:
                ax.set_title(title, fontsize=9)
            if i == len(groups) - 1:
                ax.set_xlabel("horizon H", fontsize=8)
            if j == 0:
                ax.set_ylabel(f"{lay}, slip {slip:g}\ninit temperature τ", fontsize=8)
        fig.colorbar(im, cax=fig.add_subplot(gs[len(groups), j]), orientation="horizontal")
    n = int(summary["seeds"].max())
    fig.suptitle(f"Where μ_var ∝ dσ sits, at update 0 and over training (μ_var learner; mean over seeds: {n}; distances to G as a fraction of S's)", fontsize=11)
    fig.subplots_adjust(left=0.07, right=0.99, top=0.93, bottom=0.04)
    save_figure(fig, out, "sweep")


def figure2_sweep(cfg: Figure2SweepConfig) -> int:
    """Run the sweep, write its CSVs and figure, print where each picture appears."""
    from vsr_util.atomic import write_frame_csv
    from vsr_util.config_io import save_config

    runs, curves = run_sweep(cfg)
    summary = summary_table(runs)
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    save_config(cfg, out / "sweep_config.yaml")
    for name, df in (("sweep.csv", runs), ("sweep_curves.csv", curves), ("sweep_summary.csv", summary)):
        write_frame_csv(out / name, df, float_format="%.6g")
    plot_sweep(summary, out)
    print(f"    {len(runs)} runs; mu0 ranges {runs.mu0.min():.2f}..{runs.mu0.max():.2f} (paper's picture needs < 0.5)")
    print(f"    paper's picture (mu0 < 0.5 and walk-back > {cfg.threshold:g}): {int(runs.paper_picture.sum())} of {len(runs)} runs")
    print(f"    relative picture (tilt0 < 0 and tilt change > {cfg.threshold:g}): {int(runs.relative_picture.sum())} of {len(runs)} runs")
    for lay, sub in runs.groupby("layout", sort=False):
        print(f"      {lay}: {int(sub.relative_picture.sum())} of {len(sub)}; mean tilt0 {sub.tilt0.mean():+.3f}, mean tilt change {sub.tilt_change.mean():+.3f}")
    return 0
