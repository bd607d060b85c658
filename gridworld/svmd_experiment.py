"""SVMD run as an algorithm and measured against its Theorem C.5 bound (VSR Appendix C).

``vsr gridworld svmd --out DIR`` runs State-Visitation Policy Mirror Descent (VSR Algorithm 2,
stagewise) on a random dense MDP and on a small gridworld, with

* an **exact critic** (``N -> inf``): ``Q_hat = Q^{pi_t}``, identical to :func:`theory.svmd.svmd_exact`;
* a **sampled critic**: at each iteration and stage ``h`` the states are drawn from
  ``mu_h = (1 - eps) mu_var_h + eps d_h`` with ``mu_var_h ∝ d_h sigma_h`` and
  ``sigma_h(s) = std_{a ~ pi_t,h}(Q_h(s, a))`` (the oracle score, from the exact ``Q`` of ``pi_t``),
  ``a ~ pi_t,h``, and a Monte-Carlo return-to-go ``G`` by rolling ``pi_t`` out of ``(s, a)``.
  The critic is the importance-weighted least-squares fit (weights ``w = d_h / mu_h``) over the
  finite class ``F_h`` of tables with values on the grid ``{0, 1/m, ..., H}``, ``|F_h| = (mH+1)^{SA}``.
  Because the class is a full table, the weighted loss separates over pairs and is
  ``W_sa (f(s,a) - Gbar_sa)^2 + const`` with ``Gbar_sa`` the weighted mean at ``(s, a)``; since
  ``w`` depends on ``s`` only, ``Gbar_sa`` is the plain mean of the returns observed at ``(s, a)``,
  and the ERM over ``F_h`` is that mean rounded to the nearest grid point (clipped to ``[0, H]``).
  **Unvisited pairs** do not enter the loss, so the ERM leaves them free; we set them to the
  mean observed return at the same state (an estimated advantage of zero, so the mirror step
  neither rewards nor punishes an action it has no data on), and to 0 at states with no sample
  at all (a constant per state leaves the mirror step unchanged there).

The comparator ``mu`` is the optimal policy from backward induction, uniform over the argmax set
(ties within 1e-12), so with the uniform ``pi_1`` its divergence ``D_mu`` is at most
``H log A`` and finite; ``kappa`` (Assumption C.3) is measured as the largest
:func:`theory.svmd.coverage_constant` of ``mu`` against the iterates ``pi_t`` of the run (finite
because mirror steps keep full support).  The bound uses ``C = 1``, the failure probability
``delta`` of the config and ``beta_h`` of Thm C.5 computed in log space (``log |F_h|`` can exceed
the float range); with the exact critic ``beta = 0``.  The step size is ``eta* (T)`` of Thm C.5.

Gridworld as a dense finite-horizon MDP: the sparse :class:`gridworld.mdp.TabularMDP` pays 1 on
arriving in a goal; the dense form keeps every state (terminals included) with reward
``r[s, a] = P(next state is a goal | s, a)`` on non-terminal ``s`` and absorbing zero-reward rows on
terminals, so ``J`` is the probability of reaching a goal within ``H`` decisions, the same
number as :func:`gridworld.exact.solve` ``(mdp, pi).J`` (tested).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from theory import svmd as sv
from theory._validate import as_array, check_probability, check_simplex
from theory.instances import DenseMDP, random_dense_mdp
from vsr_util.atomic import CSV_FLOAT_FORMAT

#: Tie tolerance used when the comparator spreads its mass over the optimal actions.
ARGMAX_TIE_TOL = 1e-12

#: Variances below ``(SIGMA_REL_TOL * max(1, |Q|_max))^2`` are rounding noise and count as 0.
SIGMA_REL_TOL = 1e-12

#: Small gridworld used by default (13 free cells, H = 8 keeps every sweep in seconds).
SMALL_LAYOUT = """
S...
.##.
...#
#..G
"""


# ---------------------------------------------------------------------------------------------
# Dense forms
# ---------------------------------------------------------------------------------------------


def gridworld_dense(mdp) -> DenseMDP:
    """Dense finite-horizon form ``P[h,s,a,s']``, ``r[h,s,a]``, ``rho[s]`` of a TabularMDP (module doc)."""
    P = mdp.dense()
    S, A, _ = P.shape
    H = mdp.horizon
    goal = mdp.terminal & (mdp.terminal_reward == 1.0)
    r = P @ goal.astype(float)
    term = np.asarray(mdp.terminal)
    P = P.copy()
    P[term] = 0.0
    P[term, :, np.flatnonzero(term)] = 1.0  # absorbing: every action stays
    r[term] = 0.0
    r = np.clip(r, 0.0, 1.0)
    return DenseMDP(np.broadcast_to(P, (H, S, A, S)).copy(), np.broadcast_to(r, (H, S, A)).copy(), np.array(mdp.init, dtype=float))


def optimal_policy(P, r) -> np.ndarray:
    """``mu[h, s, a]``: optimal policy by backward induction, uniform over (near-)ties."""
    P = as_array(P, "P", ndim=4)
    r = as_array(r, "r", ndim=3)
    H, S, A, _ = P.shape
    V = np.zeros(S)
    mu = np.zeros((H, S, A))
    for h in range(H - 1, -1, -1):
        Q = r[h] + P[h] @ V
        best = Q.max(axis=1, keepdims=True)
        arg = Q >= best - ARGMAX_TIE_TOL
        mu[h] = arg / arg.sum(axis=1, keepdims=True)
        V = best[:, 0]
    return mu


# ---------------------------------------------------------------------------------------------
# Proposal and sampled critic (Algorithm 2, lines 3-6)
# ---------------------------------------------------------------------------------------------


def vsr_proposal(d_h, Q_h, pi_h, eps: float) -> np.ndarray:
    """``mu_h = (1 - eps) mu_var_h + eps d_h`` with ``mu_var_h ∝ d_h sigma_h`` (VSR App. C.2, Algorithm 2 line 4).

    ``d_h[s]``, ``Q_h[s, a]``, ``pi_h[s, a]``; ``sigma_h(s) = std_{a ~ pi_h}(Q_h(s, a))``. Falls back to
    ``d_h`` when ``sum d sigma = 0``.
    """
    d_h = check_simplex(as_array(d_h, "d_h", ndim=1), "d_h")
    pi_h = check_simplex(as_array(pi_h, "pi_h", ndim=2, shape=(d_h.shape[0], None)), "pi_h", axis=1)
    Q_h = as_array(Q_h, "Q_h", shape=pi_h.shape)
    eps = check_probability(eps, "eps", open_low=True)
    mean = np.einsum("sa,sa->s", pi_h, Q_h)
    var = np.einsum("sa,sa->s", pi_h, (Q_h - mean[:, None]) ** 2)
    # rounding leaves var ~ 1e-32 where Q is constant over actions: treat it as exactly 0
    tol = (SIGMA_REL_TOL * max(1.0, float(np.abs(Q_h).max(initial=0.0)))) ** 2
    w = d_h * np.sqrt(np.where(var > tol, var, 0.0))
    z = w.sum()
    mu_var = w / z if z > 0 else d_h
    return (1.0 - eps) * mu_var + eps * d_h


def _sample_rows(cdf: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One index per row of ``cdf[n, k]`` (inverse CDF)."""
    u = rng.random(cdf.shape[0])
    idx = (u[:, None] >= cdf).sum(axis=1)
    return np.minimum(idx, cdf.shape[1] - 1)


def rollout_returns(P, r, pi, h: int, s, a, rng: np.random.Generator) -> np.ndarray:
    """``G[n] = sum_{k >= h} r_k`` rolling ``pi`` out of ``(s[n], a[n])`` at stage ``h`` (vectorised)."""
    H = P.shape[0]
    s = np.asarray(s, dtype=np.int64).copy()
    a = np.asarray(a, dtype=np.int64).copy()
    G = np.zeros(s.shape[0])
    for k in range(h, H):
        G += r[k, s, a]
        if k + 1 == H:
            break
        s = _sample_rows(np.cumsum(P[k, s, a], axis=1), rng)
        a = _sample_rows(np.cumsum(pi[k + 1, s], axis=1), rng)
    return G


def sampled_critic(P, r, rho, pi, N: int, eps: float, m: int, rng: np.random.Generator):
    """Weighted-least-squares tabular critic over the grid class ``F_h`` (module docstring).

    Returns ``Q_hat[h, s, a]`` and the sample counts ``n[h, s, a]``; ``N`` states per stage.
    """
    P, r, pi = sv._mdp(P, r, pi)
    H, S, A = pi.shape
    Q, _ = sv.evaluate_policy(P, r, pi)
    d = sv.stage_occupancy(P, rho, pi)
    Q_hat = np.zeros((H, S, A))
    counts = np.zeros((H, S, A), dtype=np.int64)
    for h in range(H):
        mu_h = vsr_proposal(d[h], Q[h], pi[h], eps)
        s = _sample_rows(np.broadcast_to(np.cumsum(mu_h), (N, S)), rng)
        a = _sample_rows(np.cumsum(pi[h, s], axis=1), rng)
        G = rollout_returns(P, r, pi, h, s, a, rng)
        w = d[h, s] / mu_h[s]  # importance weights of the loss; constant within a pair
        flat = s * A + a
        W = np.bincount(flat, weights=w, minlength=S * A).reshape(S, A)
        WG = np.bincount(flat, weights=w * G, minlength=S * A).reshape(S, A)
        n = np.bincount(flat, minlength=S * A).reshape(S, A)
        seen = n > 0
        mean = np.where(W > 0, WG / np.where(W > 0, W, 1.0), 0.0)
        # pairs with w = 0 (d_h(s) = 0) carry no loss; use the plain mean there
        plain = np.bincount(flat, weights=G, minlength=S * A).reshape(S, A) / np.maximum(n, 1)
        mean = np.where(W > 0, mean, plain)
        state_mean = np.where(seen.any(axis=1), (mean * seen).sum(axis=1) / np.maximum(seen.sum(axis=1), 1), 0.0)
        fit = np.where(seen, mean, state_mean[:, None])
        Q_hat[h] = np.clip(np.round(fit * m) / m, 0.0, float(H))
        counts[h] = n
    return Q_hat, counts


def svmd_sampled(P, r, rho, pi1, eta: float, T: int, N: int, eps: float, m: int, seed: int):
    """``T`` iterations of SVMD with the sampled critic; returns ``policies[t, h, s, a]`` and ``J[t]``."""
    if T < 1:
        raise ValueError(f"T: must be >= 1, got {T}")
    rng = np.random.default_rng(seed)
    pi = np.array(as_array(pi1, "pi1", ndim=3))
    pols, J = [], []
    for _ in range(T):
        pols.append(pi.copy())
        J.append(sv.expected_return(P, r, rho, pi))
        Q_hat, _ = sampled_critic(P, r, rho, pi, N, eps, m, rng)
        pi = sv.mirror_step(pi, Q_hat, eta)
    return np.stack(pols), np.array(J)


def log_class_size(S: int, A: int, H: int, m: int) -> float:
    """``log |F_h| = S A log(m H + 1)`` for tables with values on the grid of step ``1/m`` in ``[0, H]``."""
    return S * A * math.log(m * H + 1)


def critic_radius_log(C: float, H: int, T: int, log_class: float, delta: float, eps: float, N: int) -> float:
    """``beta_h`` of Thm C.5 with ``log |F_h|`` given (same formula as :func:`theory.svmd.critic_error_radius`)."""
    return math.sqrt(C * H**2 * (math.log(H * T / delta) + log_class) / (eps * N))


# ---------------------------------------------------------------------------------------------
# Config and driver
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SVMDConfig:
    """``vsr gridworld svmd``: SVMD against the Theorem C.5 bound."""

    out: Path = Path("results/svmd")
    """Output folder (CSV, figure, config)."""
    settings: tuple[str, ...] = ("random", "gridworld")
    """MDPs to run: ``random`` (dense random MDP) and/or ``gridworld`` (small layout)."""
    Ts: tuple[int, ...] = (5, 10, 20, 40, 80, 160, 320)
    """Iteration counts of the T sweep."""
    Ns: tuple[int, ...] = (10, 30, 100, 300, 1000)
    """States per stage of the N_h sweep."""
    epsilons: tuple[float, ...] = (0.02, 0.1, 0.3, 1.0)
    """Mixing weights of the ε sweep (1.0 = on-policy d_h)."""
    T: int = 20
    """Iterations used by the N and ε sweeps."""
    N: int = 100
    """States per stage used by the T and ε sweeps."""
    eps: float = 0.1
    """Mixing weight used by the T and N sweeps."""
    seeds: tuple[int, ...] = (0, 1, 2)
    """Sampling seeds of the sampled critic."""
    random_S: int = 6
    """States of the random MDP."""
    random_A: int = 3
    """Actions of the random MDP."""
    random_H: int = 5
    """Horizon of the random MDP."""
    mdp_seed: int = 0
    """Seed of the random MDP."""
    layout: str = SMALL_LAYOUT
    """ASCII layout of the gridworld."""
    grid_horizon: int = 8
    """Horizon of the gridworld."""
    slip: float = 0.1
    """Slip probability of the gridworld moves."""
    eta_scale: float = 1.0
    """Step size ``eta = eta_scale * eta*(T)`` (Thm C.5 holds for every eta; 1 = the theorem's choice)."""
    grid_m: int = 64
    """Critic class resolution: values on the grid of step 1/m in [0, H]."""
    delta: float = 0.05
    """Failure probability of the bound."""
    progress: bool = True
    """Show a tqdm progress bar."""

    def __post_init__(self):
        known = {"random", "gridworld"}
        if not self.settings or any(s not in known for s in self.settings):
            raise ValueError(f"settings: must be a non-empty subset of {sorted(known)}, got {self.settings}")
        for name in ("Ts", "Ns", "epsilons", "seeds"):
            if not getattr(self, name):
                raise ValueError(f"{name}: needs at least one value")
        for name in ("T", "N", "random_S", "random_A", "random_H", "grid_horizon", "grid_m"):
            if int(getattr(self, name)) != getattr(self, name) or getattr(self, name) < 1:
                raise ValueError(f"{name}: must be a positive integer, got {getattr(self, name)!r}")
        if any(int(t) != t or t < 1 for t in self.Ts):
            raise ValueError(f"Ts: must be positive integers, got {self.Ts}")
        if any(int(n) != n or n < 1 for n in self.Ns):
            raise ValueError(f"Ns: must be positive integers, got {self.Ns}")
        if any(not 0 < e <= 1 for e in (*self.epsilons, self.eps)):
            raise ValueError(f"eps: mixing weights must lie in (0, 1], got eps={self.eps}, epsilons={self.epsilons}")
        if not (math.isfinite(self.eta_scale) and self.eta_scale > 0):
            raise ValueError(f"eta_scale: must be a finite number > 0, got {self.eta_scale}")
        if not 0 < self.delta < 1:
            raise ValueError(f"delta: must lie in (0, 1), got {self.delta}")
        if not 0 <= self.slip <= 1:
            raise ValueError(f"slip: must lie in [0, 1], got {self.slip}")


@dataclass(frozen=True)
class _Setting:
    """One MDP of the sweep: dense form, uniform ``pi_1``, comparator ``mu``, ``J(mu)`` and ``D_mu``."""

    name: str
    mdp: DenseMDP
    pi1: np.ndarray
    mu: np.ndarray
    J_mu: float
    D_mu: float


def build_setting(cfg: SVMDConfig, name: str) -> _Setting:
    """Dense MDP, uniform ``pi_1``, comparator and ``D_mu`` of one setting."""
    if name == "random":
        mdp = random_dense_mdp(np.random.default_rng(cfg.mdp_seed), S=cfg.random_S, A=cfg.random_A, H=cfg.random_H)
    else:
        from gridworld.grid import build_gridworld

        mdp = gridworld_dense(build_gridworld(cfg.layout, slip=cfg.slip, horizon=cfg.grid_horizon).mdp)
    H, S, A = mdp.horizon, mdp.n_states, mdp.n_actions
    pi1 = np.full((H, S, A), 1.0 / A)
    mu = optimal_policy(mdp.P, mdp.r)
    return _Setting(
        name=name,
        mdp=mdp,
        pi1=pi1,
        mu=mu,
        J_mu=sv.expected_return(mdp.P, mdp.r, mdp.rho, mu),
        D_mu=sv.comparator_divergence(mdp.P, mdp.rho, mu, pi1),
    )


FIELDS = (
    "setting", "sweep", "critic", "T", "N", "eps", "seed", "eta", "J_mu", "J_bar", "gap",
    "D_mu", "kappa", "optimization", "drift", "critic_term", "bound", "holds",
)


def run_one(cfg: SVMDConfig, st: _Setting, sweep: str, critic: str, T: int, N: int, eps: float, seed: int) -> dict:
    """One SVMD run and its Thm C.5 terms, as a CSV row."""
    m = st.mdp
    H, S, A = m.horizon, m.n_states, m.n_actions
    eta = cfg.eta_scale * sv.optimal_step_size(st.D_mu, H, T)
    if critic == "exact":
        pols, J = sv.svmd_exact(m.P, m.r, m.rho, st.pi1, eta, T)
        betas = np.zeros(H)
    else:
        pols, J = svmd_sampled(m.P, m.r, m.rho, st.pi1, eta, T, N, eps, cfg.grid_m, seed)
        beta = critic_radius_log(1.0, H, T, log_class_size(S, A, H, cfg.grid_m), cfg.delta, eps, N)
        betas = np.full(H, beta)
    kappa = max(sv.coverage_constant(m.P, m.rho, st.mu, p) for p in pols)
    b = sv.svmd_bound(st.D_mu, eta, H, T, kappa=kappa, betas=betas)
    gap = st.J_mu - float(J.mean())
    return dict(
        setting=st.name, sweep=sweep, critic=critic, T=T, N=(math.inf if critic == "exact" else N),
        eps=eps, seed=seed, eta=eta, J_mu=st.J_mu, J_bar=float(J.mean()), gap=gap, D_mu=st.D_mu,
        kappa=kappa, optimization=b.optimization, drift=b.drift, critic_term=b.critic, bound=b.total,
        holds=bool(gap <= b.total + 1e-12),
    )


def plan(cfg: SVMDConfig) -> list[tuple]:
    """Every (setting, sweep, critic, T, N, eps, seed) run of the config."""
    jobs = []
    for name in cfg.settings:
        for T in cfg.Ts:
            jobs.append((name, "T", "exact", T, cfg.N, cfg.eps, 0))
            jobs += [(name, "T", "sampled", T, cfg.N, cfg.eps, s) for s in cfg.seeds]
        for N in cfg.Ns:
            jobs += [(name, "N", "sampled", cfg.T, N, cfg.eps, s) for s in cfg.seeds]
        for e in cfg.epsilons:
            jobs += [(name, "eps", "sampled", cfg.T, cfg.N, e, s) for s in cfg.seeds]
    return jobs


def run_sweeps(cfg: SVMDConfig) -> list[dict]:
    """Run every job of :func:`plan` (tqdm bar) and return the CSV rows."""
    from tqdm.auto import tqdm

    settings = {name: build_setting(cfg, name) for name in cfg.settings}
    rows = []
    for job in tqdm(plan(cfg), desc="svmd runs", disable=not cfg.progress):
        name, sweep, critic, T, N, eps, seed = job
        rows.append(run_one(cfg, settings[name], sweep, critic, T, N, eps, seed))
    return rows


def _agg(rows, setting, sweep, critic, key):
    xs = sorted({r[key] for r in rows if r["setting"] == setting and r["sweep"] == sweep and r["critic"] == critic})
    out = []
    for x in xs:
        sel = [r for r in rows if r["setting"] == setting and r["sweep"] == sweep and r["critic"] == critic and r[key] == x]
        g = np.array([r["gap"] for r in sel])
        out.append((x, g.mean(), g.min(), g.max(), sel[0]))
    return out


def plot(rows: list[dict], cfg: SVMDConfig, out: Path) -> list[Path]:
    """Figure: per setting, gap vs T (with opt+drift), gap vs N_h (with the critic term), gap vs ε."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from vsr_util.atomic import save_figure

    n = len(cfg.settings)
    fig, axes = plt.subplots(n, 3, figsize=(14, 3.8 * n), squeeze=False)
    for i, name in enumerate(cfg.settings):
        ax = axes[i, 0]
        for critic, c in (("exact", "C0"), ("sampled", "C1")):
            a = _agg(rows, name, "T", critic, "T")
            x = [p[0] for p in a]
            ax.plot(x, [p[1] for p in a], "o-", color=c, label=f"gap, {critic} critic")
            if critic == "sampled":
                ax.fill_between(x, [p[2] for p in a], [p[3] for p in a], color=c, alpha=0.2)
        a = _agg(rows, name, "T", "exact", "T")
        ax.plot([p[0] for p in a], [p[4]["optimization"] for p in a], "--", color="k", label="D/(ηT)")
        ax.plot([p[0] for p in a], [p[4]["drift"] for p in a], ":", color="r", label="ηH³/2 (= D/(ηT) at η*)")
        ax.plot([p[0] for p in a], [p[4]["optimization"] + p[4]["drift"] for p in a], "-", color="gray", label="opt + drift")
        ax.set(xscale="log", yscale="log", xlabel="T", ylabel="J(μ) − J(π̄_T)", title=f"{name}: gap vs T (η = {cfg.eta_scale:g}·η*(T))")
        ax.legend(fontsize=7)

        ax = axes[i, 1]
        a = _agg(rows, name, "N", "sampled", "N")
        x = [p[0] for p in a]
        ax.plot(x, [p[1] for p in a], "o-", color="C1", label=f"gap (T={cfg.T}, ε={cfg.eps})")
        ax.fill_between(x, [p[2] for p in a], [p[3] for p in a], color="C1", alpha=0.2)
        ax.plot(x, [p[4]["critic_term"] for p in a], "--", color="k", label="2κΣβ_h")
        ax.plot(x, [p[4]["optimization"] + p[4]["drift"] for p in a], "-", color="gray", label="opt + drift")
        ax.set(xscale="log", yscale="log", xlabel="N_h", title=f"{name}: gap vs N_h")
        ax.legend(fontsize=7)

        ax = axes[i, 2]
        a = _agg(rows, name, "eps", "sampled", "eps")
        x = [p[0] for p in a]
        ax.plot(x, [p[1] for p in a], "o-", color="C2", label=f"gap (T={cfg.T}, N={cfg.N})")
        ax.fill_between(x, [p[2] for p in a], [p[3] for p in a], color="C2", alpha=0.2)
        ax.plot(x, [p[4]["critic_term"] for p in a], "--", color="k", label="2κΣβ_h")
        ax.set(xscale="log", yscale="log", xlabel="ε", title=f"{name}: gap vs ε")
        ax.legend(fontsize=7)
    fig.tight_layout()
    return save_figure(fig, out, "svmd_bound")


def run(cfg: SVMDConfig) -> int:
    """``vsr gridworld svmd``: run the sweeps, write ``svmd.csv``, the figure and ``config.yaml``."""
    from vsr_util.atomic import write_csv
    from vsr_util.config_io import save_config

    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    save_config(cfg, out / "config.yaml")
    rows = run_sweeps(cfg)
    write_csv(out / "svmd.csv", FIELDS, rows, float_format=CSV_FLOAT_FORMAT)
    plot(rows, cfg, out)
    return 0


def make_svmd_figure(out_dir: Path, quick: bool = False) -> int:
    """Entry for ``vsr figures``."""
    cfg = SVMDConfig(out=Path(out_dir))
    if quick:
        cfg = dataclasses.replace(cfg, Ts=(5, 20), Ns=(10, 100), epsilons=(0.1, 1.0), T=10, N=30, seeds=(0,), progress=False)
    return run(cfg)
