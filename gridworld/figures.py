"""``vsr gridworld figure2`` and ``vsr gridworld compare`` (VSR Figure 2 and Appendix D.1).

Figure 2 (``figure2.png``): heatmaps of d^π, σ and μ_var (time-marginalised over the augmented
states, :func:`gridworld.curriculum.cell_marginals`) at several snapshots of the μ_var learner,
the learning curves of the on-policy and μ_var learners (mean and min-max band over seeds), and
the curriculum statistics over training: the mean distance to G under μ_var, under d^π and under
the σ cell weights (:func:`gridworld.curriculum.curriculum_stats`).

``figure2_regimes.png`` draws the same heatmaps and statistics for the μ_var learner (first
seed) in each setting of ``Figure2Config.regimes`` (:data:`REGIMES`), chosen from
``vsr gridworld figure2-sweep`` to show where μ_var walks back toward S and where it does not
(``figures/gridworld_figure2/README.md``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gridworld.curriculum import cell_marginals, curriculum_curve, trend_scalars
from gridworld.pg_experiment import PGConfig, curve_table, make_grid, one_torch_thread, paired_difference, run_comparison, train_learner, variance_table
from vsr_util.registry import Registry
from vsr_util.atomic import CSV_FLOAT_FORMAT


@dataclass(frozen=True)
class Regime:
    """A gridworld setting in which Figure 2's μ_var learner is drawn."""

    layout: str
    """A name of gridworld.grid.LAYOUTS."""
    horizon: int
    """Moves per episode."""
    slip: float
    """Slip probability."""
    init_temperature: float
    """Initial-policy temperature τ (PGConfig.init_temperature)."""
    label: str
    """One line for the figure."""


#: name -> :class:`Regime` drawn in ``figure2_regimes.png`` (both chosen from the sweep: same
#: horizon and τ, only the walls differ).
REGIMES: Registry[Regime] = Registry(
    "Figure 2 regime",
    {
        "maze_long_horizon": Regime("maze7", 160, 0.0, 4.0, "7x7 maze, H = 160, τ = 4: d^π reaches G at update 0; μ_var walks back toward S"),
        "open_long_horizon": Regime("open7", 160, 0.0, 4.0, "open 7x7 room, H = 160, τ = 4: no walls, μ_var stays where d^π is"),
    },
)


@dataclass(frozen=True)
class Figure2Config:
    """Options of ``vsr gridworld figure2``."""

    out: Path = Path("figures/gridworld_figure2")
    """Output folder (PNG, CSVs and the config used)."""
    seeds: tuple[int, ...] = (0, 1, 2)
    """Seeds of each learner."""
    updates: int = 200
    """Updates per learner."""
    snapshots: tuple[int, ...] = (0, 40, 80, 120, 200)
    """Updates at which the heatmaps are drawn (of the μ_var learner, first seed)."""
    lr: float = 0.003
    """Adam learning rate."""
    horizon: int = 40
    """Moves per episode (default 7x7 maze, τ = 1)."""
    regimes: tuple[str, ...] = ("maze_long_horizon", "open_long_horizon")
    """Settings drawn in figure2_regimes.png (names of gridworld.figures.REGIMES; empty = none)."""
    progress: bool = True
    """Show a progress bar."""

    def __post_init__(self):
        for r in self.regimes:
            REGIMES.check(r, where="regimes")


_HEATMAPS = [("d", r"$d^\pi$ (visitation)", "Blues"), ("sigma", r"$\sigma^\pi$ (d-weighted over t)", "Oranges"), ("mu", r"$\mu_{var} \propto d\sigma$", "Greens")]


def _regime_tables(grid, snapshots: dict, snaps: tuple[int, ...], eps: float, regime: str):
    """Curriculum rows of every snapshot and heatmap rows/panels at ``snaps`` for one learner."""
    curr_rows, heat_rows, panels = [], [], {}
    for k, sol, st in curriculum_curve(grid, snapshots, eps=eps):
        if sol.fields is None:
            continue
        curr_rows.append(
            {
                "regime": regime,
                "update": k,
                "J": st["J"],
                "mu_weighted_distance": st["mu_distance"],
                "d_weighted_distance": st["d_distance"],
                "sigma_weighted_distance": st["sigma_distance"],
                "mu_frac": st["mu_frac"],
                "d_frac": st["d_frac"],
                "sigma_frac": st["sigma_frac"],
                "tilt": st["tilt"],
            }
        )
        if k in snaps:
            panels[k] = cell_marginals(sol)
            d_cell, sig_cell, mu_cell = panels[k]
            for s in range(grid.mdp.n_states):
                r, c = grid.coords[s]
                heat_rows.append({"regime": regime, "update": k, "state": s, "row": int(r), "col": int(c), "d": d_cell[s], "sigma": sig_cell[s], "mu_var": mu_cell[s]})
    return curr_rows, heat_rows, panels


def _draw_heatmaps(fig, gs, grid, panels: dict, J_of: dict) -> None:
    """Rows 0-2 of ``gs``: d, σ, μ_var heatmaps, one column per snapshot in ``panels``."""
    for j, k in enumerate(sorted(panels)):
        for i, (_, title, cmap) in enumerate(_HEATMAPS):
            ax = fig.add_subplot(gs[i, j])
            img = grid.to_grid(panels[k][i])
            top = np.nanmax(img)
            ax.imshow(img, cmap=cmap, vmin=0, vmax=top if np.isfinite(top) and top > 0 else 1)
            ax.imshow(np.where(np.isnan(img), 1.0, np.nan), cmap="Greys", vmin=0, vmax=1.2)
            sr, sc = grid.layout.start
            ax.text(sc, sr, "S", ha="center", va="center", fontweight="bold")
            for gr, gc in grid.layout.goals:
                ax.text(gc, gr, "G", ha="center", va="center", fontweight="bold")
            ax.set_xticks([])
            ax.set_yticks([])
            if i == 0:
                ax.set_title(f"update {k}\nJ = {J_of[k]:.3f}", fontsize=9)
            if j == 0:
                ax.set_ylabel(title, fontsize=9)


def _draw_curriculum(ax, curr, start_distance: float) -> None:
    ax.plot(curr["update"], curr["mu_weighted_distance"], color="tab:green", label=r"$E_{\mu_{var}}$[distance to G]")
    ax.plot(curr["update"], curr["d_weighted_distance"], color="tab:blue", ls="--", label=r"$E_{d^\pi}$[distance to G]")
    ax.plot(curr["update"], curr["sigma_weighted_distance"], color="tab:orange", ls="-.", label=r"$\sigma$-weighted mean distance over cells")
    ax.axhline(start_distance, color="grey", lw=0.8, ls=":")
    ax.axhline(start_distance / 2, color="grey", lw=0.8, ls=":")
    ax.set_ylim(0, start_distance * 1.05)
    ax.set_xlabel("update")
    ax.set_ylabel(f"moves to G (S is {start_distance:g} away)")
    ax.legend(fontsize=8, loc="lower right")


def _train_regime(name: str, cfg: Figure2Config, progress) -> tuple:
    reg = REGIMES[name]
    pg = PGConfig(
        layout=reg.layout, horizon=reg.horizon, slip=reg.slip, init_temperature=reg.init_temperature, methods=("mu_var_is",),
        seeds=cfg.seeds[:1], updates=cfg.updates, lr=cfg.lr, exact_every=0, snapshot_every=10,
    )  # fmt: skip
    grid = make_grid(pg)
    with one_torch_thread():
        trace = train_learner(pg, grid, "mu_var_is", cfg.seeds[0], progress)
    return grid, trace, pg.eps


def figure2(cfg: Figure2Config) -> int:
    """Run the two learners (and the μ_var learner of each regime), then draw and save Figure 2."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd
    from tqdm.auto import tqdm

    from vsr_util.atomic import save_figure, write_frame_csv
    from vsr_util.config_io import save_config

    snaps = tuple(sorted(set(cfg.snapshots)))
    if not snaps or snaps[-1] > cfg.updates or snaps[0] < 0:
        raise ValueError(f"snapshots: must lie in [0, updates={cfg.updates}], got {cfg.snapshots}")
    pg = PGConfig(methods=("on_policy", "mu_var_is"), seeds=cfg.seeds, updates=cfg.updates, lr=cfg.lr, horizon=cfg.horizon, snapshot_every=10)
    grid = make_grid(pg)
    traces = run_comparison(pg, progress=cfg.progress)
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    save_config(cfg, out / "config.yaml")

    lead = next(tr for tr in traces if tr.method == "mu_var_is" and tr.seed == cfg.seeds[0])
    curr_rows, heat_rows, panels = _regime_tables(grid, lead.snapshots, snaps, pg.eps, "default")
    regimes = {}
    with tqdm(total=len(cfg.regimes) * cfg.updates, desc="Figure 2 regimes", disable=not cfg.progress or not cfg.regimes) as bar:
        for name in cfg.regimes:
            rgrid, rtrace, eps = _train_regime(name, cfg, bar)
            rc, rh, rp = _regime_tables(rgrid, rtrace.snapshots, snaps, eps, name)
            curr_rows += rc
            heat_rows += rh
            regimes[name] = (rgrid, rp)
    curves = curve_table(traces)
    curr_all = pd.DataFrame(curr_rows)
    for name, df in (("curves.csv", curves), ("curriculum.csv", curr_all), ("heatmaps.csv", pd.DataFrame(heat_rows)), ("variance.csv", variance_table(traces))):
        write_frame_csv(out / name, df, float_format=CSV_FLOAT_FORMAT)

    curr = curr_all[curr_all["regime"] == "default"]
    J_of = dict(zip(curr["update"], curr["J"]))
    cols = sorted(panels)
    fig = plt.figure(figsize=(3.0 * len(cols) + 1, 13))
    gs = fig.add_gridspec(4, len(cols), height_ratios=[1, 1, 1, 1.25])
    _draw_heatmaps(fig, gs, grid, panels, J_of)
    split = max(1, len(cols) // 2 + 1) if len(cols) > 2 else 1
    ax = fig.add_subplot(gs[3, :split])
    for method, color in (("on_policy", "tab:blue"), ("mu_var_is", "tab:green")):
        sub = curves[curves["method"] == method].pivot(index="update", columns="seed", values="J")
        ax.plot(sub.index, sub.mean(axis=1), color=color, label=f"{method} (mean of {sub.shape[1]} seeds)")
        ax.fill_between(sub.index, sub.min(axis=1), sub.max(axis=1), color=color, alpha=0.2)
    ax.set_xlabel("update")
    ax.set_ylabel("success probability from S")
    ax.set_ylim(0, 1.02)
    ax.legend(fontsize=8)
    ax.set_title(f"same init, {pg.states_per_update} states per update", fontsize=9)
    D = float(grid.distance_to_goal[grid.start_state])
    if split < len(cols):
        ax = fig.add_subplot(gs[3, split:])
        _draw_curriculum(ax, curr, D)
        ax.set_title("curriculum statistics (distance of the mass from G)", fontsize=9)
    fig.suptitle(f"d, σ and μ_var ∝ dσ of the μ_var learner over training (7x7 maze, H = {cfg.horizon}, exact)", fontsize=11)
    fig.tight_layout()
    save_figure(fig, out, "figure2")
    if regimes:
        _figure_regimes(curr_all, regimes, out)

    diff = paired_difference(traces, "mu_var_is", "on_policy")
    print(f"    mu_var - on_policy, mean J over the last 20 updates: {diff['mean']:+.3f} (95% CI {diff['lo']:+.3f}, {diff['hi']:+.3f}; {diff['n']} seeds)")
    for name, sub in curr_all.groupby("regime", sort=False):
        tr = trend_scalars(sub["update"], sub["mu_frac"], sub["d_frac"])
        print(
            f"    {name}: E_mu_var[distance to G] / S's {tr['mu0']:.2f} (update 0) -> nearest G {tr['mu_min']:.2f} (update "
            f"{tr['update_min']}) -> walk-back {tr['walk_back']:+.2f}; tilt mu - d {tr['tilt0']:+.2f} -> {tr['tilt_end']:+.2f}; "
            f"sigma-weighted {sub['sigma_frac'].iloc[0]:.2f} -> {sub['sigma_frac'].iloc[-1]:.2f}"
        )
    return 0


def _figure_regimes(curr_all, regimes: dict, out: Path) -> None:
    """``figure2_regimes.png``: one block (heatmaps + curriculum statistics) per regime."""
    import matplotlib.pyplot as plt

    from vsr_util.atomic import save_figure

    n_snap = max(len(p) for _, p in regimes.values())
    fig = plt.figure(figsize=(3.0 * n_snap + 5.5, 9.6 * len(regimes)))
    subfigs = np.atleast_1d(fig.subfigures(len(regimes), 1, hspace=0.04))
    for sf, (name, (grid, panels)) in zip(subfigs, regimes.items()):
        curr = curr_all[curr_all["regime"] == name]
        gs = sf.add_gridspec(3, n_snap + 1, width_ratios=[1] * n_snap + [1.8], left=0.04, right=0.98, wspace=0.3)
        _draw_heatmaps(sf, gs, grid, panels, dict(zip(curr["update"], curr["J"])))
        ax = sf.add_subplot(gs[:, n_snap])
        _draw_curriculum(ax, curr, float(grid.distance_to_goal[grid.start_state]))
        ax.set_title("curriculum statistics (first seed)", fontsize=9)
        sf.suptitle(f"{name}: {REGIMES[name].label}", fontsize=11)
    save_figure(fig, out, "figure2_regimes")


@dataclass(frozen=True)
class CompareConfig:
    """Options of ``vsr gridworld compare`` (every estimator of gridworld.pg_experiment)."""

    out: Path = Path("figures/gridworld_compare")
    """Output folder."""
    pg: PGConfig = dataclasses.field(default_factory=PGConfig)
    """The learners (methods, seeds, updates, lr, ...)."""
    progress: bool = True
    """Show a progress bar."""


def compare(cfg: CompareConfig) -> int:
    """Train every estimator, write curves/variance CSVs, a summary and the figure."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from vsr_util.atomic import save_figure, write_frame_csv, write_text
    from vsr_util.config_io import save_config

    traces = run_comparison(cfg.pg, progress=cfg.progress)
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    save_config(cfg, out / "config.yaml")
    curves, var = curve_table(traces), variance_table(traces)
    for name, df in (("curves.csv", curves), ("variance.csv", var)):
        write_frame_csv(out / name, df, float_format=CSV_FLOAT_FORMAT)
    lines = ["# Gridworld policy-gradient comparison", "", f"{len(cfg.pg.seeds)} seeds x {cfg.pg.updates} updates, {cfg.pg.states_per_update} states per update, {cfg.pg.optimizer} lr {cfg.pg.lr}.", ""]
    lines += ["| method | final J (mean over seeds) | mean J, last 20 updates | vs on_policy (paired, 95% CI) | exact V at update 0 | measured V at update 0 (mean over seeds) |", "|---|---|---|---|---|---|"]
    for m in cfg.pg.methods:
        sub = [tr for tr in traces if tr.method == m]
        final = np.mean([tr.J[-1] for tr in sub])
        last = np.mean([tr.J[-20:].mean() for tr in sub])
        diff = paired_difference(traces, m, "on_policy") if m != "on_policy" and "on_policy" in cfg.pg.methods else None
        dtxt = f"{diff['mean']:+.3f} ({diff['lo']:+.3f}, {diff['hi']:+.3f})" if diff else "-"
        v0 = var[(var["method"] == m) & (var["update"] == 0)]
        lines.append(f"| {m} | {final:.3f} | {last:.3f} | {dtxt} | {v0.exact_V.mean():.3g} | {v0.measured_V.mean():.3g} |")
    write_text(out / "summary.md", "\n".join(lines) + "\n")
    print("\n".join(lines))

    fig, axes = plt.subplots(1, 2, figsize=(13, 4.5))
    ax = axes[0]
    for m in cfg.pg.methods:
        sub = curves[curves["method"] == m].pivot(index="update", columns="seed", values="J")
        line = ax.plot(sub.index, sub.mean(axis=1), label=m)[0]
        ax.fill_between(sub.index, sub.min(axis=1), sub.max(axis=1), color=line.get_color(), alpha=0.15)
    ax.set_xlabel("update")
    ax.set_ylabel("success probability from S")
    ax.legend(fontsize=8)
    ax = axes[1]
    for m in cfg.pg.methods:
        sub = var[var["method"] == m].groupby("update")[["exact_V", "measured_V"]].mean()
        line = ax.plot(sub.index, sub.exact_V, label=f"{m} exact")[0]
        ax.plot(sub.index, sub.measured_V, ls=":", color=line.get_color())
    ax.set_yscale("log")
    ax.set_xlabel("update")
    ax.set_ylabel("per-sample trace variance (solid exact, dotted measured)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, out, "compare")
    return 0


def make_figure2(out_dir: Path, quick: bool = False) -> int:
    """Entry for ``vsr figures``."""
    cfg = Figure2Config(out=Path(out_dir))
    if quick:
        cfg = dataclasses.replace(cfg, seeds=(0,), updates=20, snapshots=(0, 10, 20))
    return figure2(cfg)


def make_compare_figure(out_dir: Path, quick: bool = False) -> int:
    """Entry for ``vsr figures``: every estimator, 3 seeds (1 seed and 10 updates when ``quick``)."""
    pg = dataclasses.replace(PGConfig(), seeds=(0, 1, 2))
    if quick:
        pg = dataclasses.replace(pg, seeds=(0,), updates=10, exact_every=5)
    return compare(CompareConfig(out=Path(out_dir), pg=pg))
