"""Policy-gradient learners that draw their training states from different proposals (VSR D.1).

Every learner starts from the same MLP policy and, at each update, draws the same number of
time-augmented states ``(t, s)`` from its proposal, samples ``a ~ π(·|s)`` and the binary
return-to-go ``r ~ Bernoulli(Q[t, s, a])`` (exactly the law of the outcome of a rollout from
``(t, s, a)``, so no approximation), and ascends

    ĝ = (1/N) Σ_i w_i (r_i - p(t_i, s_i)) ∇ log π(a_i | s_i)

with the exact state baseline ``r_bar = p``. Estimators (a registry, one uniform signature):

* ``on_policy``    states ~ d^π, ``w = 1``;
* ``mu_var_is``    states ~ μ_var ∝ d σ with the exact correction ``w = d/μ``;
* ``mu_var_grpo``  states ~ μ_var with ``w = 1/σ`` — GRPO's standardised residual
  ``(r - r_bar)/σ`` and no density ratio (VSR eq. 10 up to the constant ``E_d σ``);
* ``mu_eps_is``    states ~ μ_ε = (1-ε) μ_var + ε d with ``w = d/μ_ε``;
* ``uniform_is``   states uniform over reachable decision states with ``w = d/μ``.

Where this departs from the paper: the paper does not give its optimiser, learning rate,
batch size or horizon; we use Adam (so the GRPO form's different scale does not decide the
comparison), ``N = 32`` states per update and the horizon of :mod:`gridworld.grid`.
The comparison depends on the optimiser and its step: the measured sensitivity (Adam and plain SGD at several
rates) is in ``figures/gridworld_compare/README.md``.
The per-update gradient variance is measured from the ``N`` per-sample gradient vectors and
reported next to the exact ``V(μ; r_bar)`` of :mod:`theory.vsr_variance`.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Callable

import numpy as np

from gridworld.exact import ExactSolution, solve
from gridworld.grid import GridWorld, build_gridworld, layout_text
from gridworld.policies import encode_states, make_mlp_policy, policy_table
from gridworld.real_policy_theory import mlp_score_vectors, real_policy_problem
from theory import vsr_variance as vv
from vsr_util.registry import Registry


# ---------------------------------------------------------------------------------------------
# Estimators: where states come from and how each sample is weighted
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Estimator:
    """A state proposal on the augmented space and the per-sample weight it uses."""

    name: str
    proposal: Callable[[ExactSolution], np.ndarray]  #: μ[t, s] (sums to 1)
    weight: Callable[[ExactSolution, np.ndarray, np.ndarray, np.ndarray], np.ndarray]  #: w(t_idx, s_idx, μ)
    description: str


#: name -> :class:`Estimator`; ``PGConfig.methods`` are names of this registry.
ESTIMATORS: Registry[Estimator] = Registry("estimator")


def register_estimator(est: Estimator) -> Estimator:
    """Add ``est`` to :data:`ESTIMATORS` under ``est.name`` (duplicates are refused)."""
    return ESTIMATORS.add(est.name, est)


def _is_weight(sol, t, s, mu):
    return sol.fields.dvis[t, s] / mu[t, s]


def _grpo_weight(sol, t, s, mu):
    return 1.0 / sol.fields.sigma[t, s]


def _uniform(sol):
    live = sol.fields.dvis > 0
    return live / live.sum()


register_estimator(Estimator("on_policy", lambda sol: sol.fields.dvis, lambda sol, t, s, mu: np.ones(t.size), "states ~ d^π"))
register_estimator(Estimator("mu_var_is", lambda sol: sol.fields.mu_var, _is_weight, "states ~ μ_var, weight d/μ"))
register_estimator(Estimator("mu_var_grpo", lambda sol: sol.fields.mu_var, _grpo_weight, "states ~ μ_var, (r - r̄)/σ"))
register_estimator(Estimator("mu_eps_is", lambda sol: sol.fields.mu_eps, _is_weight, "states ~ μ_ε, weight d/μ"))
register_estimator(Estimator("uniform_is", _uniform, _is_weight, "uniform over reachable states, weight d/μ"))


# ---------------------------------------------------------------------------------------------
# Config and learner
# ---------------------------------------------------------------------------------------------

#: ``PGConfig.optimizer`` name -> class name in ``torch.optim`` (torch is imported only to train).
OPTIMIZERS: Registry[str] = Registry("optimizer", {"adam": "Adam", "sgd": "SGD"})


@dataclass(frozen=True)
class PGConfig:
    """Policy-gradient comparison on a gridworld (VSR D.1)."""

    layout: str = ""
    """ASCII layout or a name of gridworld.grid.LAYOUTS (maze7, open5, ...); empty = the default 7x7 map."""
    horizon: int = 40
    """Moves allowed per episode."""
    slip: float = 0.0
    """Slip probability of the moves."""
    methods: tuple[str, ...] = ("on_policy", "mu_var_is", "mu_var_grpo", "mu_eps_is", "uniform_is")
    """Estimators to train (names of ESTIMATORS)."""
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    """Sampling seeds; every learner of a seed starts from the same network."""
    init_seed: int = 0
    """Seed of the shared initial network."""
    init_temperature: float = 1.0
    """Temperature of the initial policy: the initial network's output layer is divided by it,
    so the logits at update 0 are PyTorch's default-init logits / τ (1 = the default init;
    large = nearly uniform, small = nearly deterministic)."""
    updates: int = 200
    """Policy updates per learner."""
    states_per_update: int = 32
    """State samples per update (the same budget for every method)."""
    lr: float = 0.003
    """Learning rate. The comparison depends on it: see the module docstring's sensitivity note."""
    optimizer: str = "adam"
    """A name of :data:`OPTIMIZERS`: ``adam`` or ``sgd`` (the same for every method)."""
    eps: float = 0.1
    """Smoothing of μ_ε."""
    hidden: int = 32
    """Hidden tanh units of the MLP."""
    exact_every: int = 10
    """Compute exact V(μ; r̄) and the measured per-sample variance every this many updates (0 = never)."""
    snapshot_every: int = 0
    """Keep the policy table every this many updates (0 = only at the end)."""

    def __post_init__(self):
        for m in self.methods:
            ESTIMATORS.check(m, where="methods")
        for name in ("horizon", "updates", "states_per_update", "hidden"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)}")
        if self.exact_every < 0:
            raise ValueError(f"exact_every: must be >= 0, got {self.exact_every}")
        if not self.seeds:
            raise ValueError("seeds: need at least one seed")
        OPTIMIZERS.check(self.optimizer, where="optimizer")
        if not self.lr > 0:
            raise ValueError(f"lr: must be > 0, got {self.lr}")
        if not self.init_temperature > 0:
            raise ValueError(f"init_temperature: must be > 0, got {self.init_temperature}")
        if not 0 < self.eps <= 1:
            raise ValueError(f"eps: must lie in (0, 1], got {self.eps}")


def make_grid(cfg: PGConfig) -> GridWorld:
    return build_gridworld(layout_text(cfg.layout), slip=cfg.slip, horizon=cfg.horizon)


@dataclass
class LearnerTrace:
    """What one learner recorded."""

    method: str
    seed: int
    J: np.ndarray  #: success probability from S before each update and after the last [updates+1]
    exact_V: dict[int, float]  #: update -> exact per-sample trace variance of the estimator
    measured_V: dict[int, float]  #: update -> measured per-sample trace variance over the N samples
    snapshots: dict[int, np.ndarray]  #: update -> policy table pi[S, A]


def train_learner(cfg: PGConfig, grid: GridWorld, method: str, seed: int, progress=None) -> LearnerTrace:
    """Train one learner; returns its trace. Deterministic in (cfg, method, seed)."""
    import torch

    est = ESTIMATORS.lookup(method, where="method")
    mdp = grid.mdp
    x = encode_states(mdp.n_states, "onehot")
    xt = torch.as_tensor(x)
    model = make_mlp_policy(x.shape[1], mdp.n_actions, hidden=cfg.hidden, seed=cfg.init_seed, temperature=cfg.init_temperature)
    opt = getattr(torch.optim, OPTIMIZERS.lookup(cfg.optimizer, where="optimizer"))(model.parameters(), lr=cfg.lr)
    rng = np.random.default_rng([seed, 7919])
    H, S = cfg.horizon, mdp.n_states
    Js = np.empty(cfg.updates + 1)
    exact_V, measured_V, snaps = {}, {}, {}
    for k in range(cfg.updates + 1):
        pi = policy_table(model, x)
        sol = solve(mdp, pi, eps=cfg.eps, solver="numba_serial")  # tiny MDP: threads only add overhead
        Js[k] = sol.J
        if cfg.snapshot_every and k % cfg.snapshot_every == 0 or k == cfg.updates:
            snaps[k] = pi
        if k == cfg.updates:
            break
        if sol.fields is None:
            raise RuntimeError(f"{method}: every reachable state is deterministic at update {k}; μ_var is undefined")
        mu = est.proposal(sol)
        flat = rng.choice(H * S, size=cfg.states_per_update, p=mu.ravel() / mu.sum())
        t, s = np.divmod(flat, S)
        a = (rng.random(t.size)[:, None] > np.cumsum(pi[s], axis=1)).sum(axis=1).clip(max=mdp.n_actions - 1)
        r = (rng.random(t.size) < sol.q[t, s, a]).astype(np.float64)
        coef = est.weight(sol, t, s, mu) * (r - sol.p[t, s])
        if cfg.exact_every and k % cfg.exact_every == 0:
            g = mlp_score_vectors(model, x)
            per = coef[:, None] * g[s, a]
            measured_V[k] = float(np.sum(np.var(per, axis=0, ddof=1)))
            exact_V[k] = _exact_variance(sol, pi, g, method)
        logp = torch.log_softmax(model(xt[s]), dim=-1)[torch.arange(t.size), torch.as_tensor(a)]
        loss = -(torch.as_tensor(coef) * logp).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if progress is not None:
            progress.update(1)
    return LearnerTrace(method, seed, Js, exact_V, measured_V, snaps)


def _exact_variance(sol: ExactSolution, pi: np.ndarray, g: np.ndarray, method: str) -> float:
    """Exact per-sample trace variance of the estimator (Lemma B.1 on the real policy).

    The proposal is rebuilt from the problem's own σ (computed from Q) rather than taken from
    the solver's fields, so that σ = 0 exactly where the outcome is deterministic and the
    support condition of Lemma B.1 is decided consistently.
    """
    P = real_policy_problem(sol.d, sol.p, sol.q, pi, g).problem
    muvar = vv.variance_proposal(P.d, P.sigma)
    proposals = {
        "on_policy": P.d,
        "mu_var_is": muvar,
        "mu_eps_is": vv.smoothed_proposal(muvar, P.d, sol.fields.eps),
        "uniform_is": np.full(P.d.size, 1.0 / P.d.size),
    }
    if method == "mu_var_grpo":
        # (1/σ) = (d/μ_var) / E_d[σ]: the IS estimator under μ_var scaled by 1/E_d σ
        return P.V(muvar, P.rbar) / float(P.d @ P.sigma) ** 2
    return P.V(proposals[method], P.rbar)


def run_comparison(cfg: PGConfig, *, progress: bool = True) -> list[LearnerTrace]:
    """Train every (method, seed) learner."""
    from tqdm.auto import tqdm

    grid = make_grid(cfg)
    total = len(cfg.methods) * len(cfg.seeds) * cfg.updates
    traces = []
    with one_torch_thread(), tqdm(total=total, desc="policy-gradient learners", disable=not progress) as bar:
        for method in cfg.methods:
            for seed in cfg.seeds:
                traces.append(train_learner(cfg, grid, method, seed, bar))
    return traces


@contextlib.contextmanager
def one_torch_thread():
    """Run the block with one torch intra-op thread (tiny tensors: more threads cost ~100x here
    on 2 shared cores); the previous setting is restored afterwards."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def curve_table(traces: list[LearnerTrace]):
    """Tidy DataFrame: method, seed, update, J."""
    import pandas as pd

    rows = [{"method": tr.method, "seed": tr.seed, "update": k, "J": float(j)} for tr in traces for k, j in enumerate(tr.J)]
    return pd.DataFrame(rows)


def variance_table(traces: list[LearnerTrace]):
    """Tidy DataFrame: method, seed, update, exact_V, measured_V."""
    import pandas as pd

    rows = [
        {"method": tr.method, "seed": tr.seed, "update": k, "exact_V": tr.exact_V[k], "measured_V": tr.measured_V[k]}
        for tr in traces
        for k in sorted(tr.exact_V)
    ]
    return pd.DataFrame(rows)


def paired_difference(traces: list[LearnerTrace], a: str, b: str, *, window: int = 20) -> dict:
    """Seed-paired difference of mean J over the last ``window`` updates (a - b) with a t-based 95% CI."""
    from theory.metrics import t_interval

    by = {(tr.method, tr.seed): tr for tr in traces}
    seeds = sorted({tr.seed for tr in traces if tr.method == a} & {tr.seed for tr in traces if tr.method == b})
    diffs = np.array([by[(a, s)].J[-window:].mean() - by[(b, s)].J[-window:].mean() for s in seeds])
    n = diffs.size
    mean = float(diffs.mean())
    if n < 2:
        return {"a": a, "b": b, "n": n, "mean": mean, "lo": float("nan"), "hi": float("nan")}
    _, lo, hi = t_interval(diffs)
    return {"a": a, "b": b, "n": n, "mean": mean, "lo": lo, "hi": hi}
