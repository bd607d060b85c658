"""Finite-horizon occupancy + value sweeps: Numba parallel / Numba serial / NumPy / scipy.sparse.

``vsr bench exact`` (or ``python benchmarks/exact_sweep.py``) times, for each MDP family
(big gridworlds, random MDPs), size ``S`` and initial distribution (point mass, full support):

* one forward sweep (``d[t+1] = P_π^T d[t]``, ``t < H``) plus one backward sweep
  (``p[t] = P_π p[t+1]``) with ``H = 64`` — ``2H`` sparse mat-vecs — for every exact solver
  (:data:`gridworld.exact.SOLVERS`; ``--solvers``, formerly ``--backends``), on the
  *same* CSR arrays (``P_π`` and ``P_π^T`` built once per policy; scipy wraps them without
  copying);
* the policy contraction ``P_π = Σ_a π(a|·) P(·|·, a)`` separately.

Before any timing each solver's ``d`` and ``p`` are compared with the NumPy reference (the
run stops on a mismatch).  JIT cost is reported separately: ``first_call_s`` is what the first
call in this process cost (a cache load when Numba's on-disk cache is warm), ``compile_s`` is a
fresh, uncached compile of the same kernels.  The same run measures the memory bandwidth as the
best of several copies of a large array (NumPy ``copyto``, one thread; a Numba ``prange`` copy
with all threads; measured at the start and again before each MDP's rows, which use their own
measurement) and reports each row's *effective* bandwidth — the minimum bytes a sweep must
move (values + indices + row pointers + one read of ``x`` + one write of ``y`` per mat-vec)
divided by its time — as a fraction of that copy bandwidth (1.0 = as fast as a copy).

Outputs: ``sweep_s`` fills preallocated, already-touched ``d``/``p`` arrays (``out=``, as a loop
that solves the same MDP repeatedly does), so it measures the sweep and not the kernel's zeroing
of fresh pages; ``sweep_fresh_s`` is the same sweep into freshly allocated outputs (what one
``solve`` call pays).  Every solver is timed both ways.  ``gather_free_fraction`` is a ceiling:
the fraction of bandwidth a loop over the same CSR arrays reaches when it reads ``x[i]`` instead
of ``x[indices[k]]`` (not a correct mat-vec; it shows how much of the gap to 1.0 is the streaming
itself and how much the random gathers).  ``prefetch`` is the software-prefetch distance the Numba
kernels chose for the graph (0 on local graphs such as gridworlds).

Departures from a textbook benchmark: timings are the best of ``repeats`` runs (at least one,
stopping early once ``min_time_s`` is spent) because the machine may be shared; the load
average is recorded next to the results.  Point-mass and full-support rows do the same work
(every kernel is a dense-vector sweep; none skips zero entries) and are both kept as asked.
Targets (not asserted): Numba parallel >= 0.7 of bandwidth at S ~ 1e6 and >= 5x NumPy;
a 256x256 gridworld with H = 200: d, p, σ, μ in < 5 s (uniform start over its cells).
"""

from __future__ import annotations

import math
import os
import platform
import sys
import time
from dataclasses import dataclass
from typing import Annotated

import numpy as np
from tyro.conf import arg as tyro_arg

#: Columns of the CSV, in order.
COLUMNS = (
    "family",
    "n_states",
    "nnz_pairs",
    "nnz",
    "horizon",
    "init",
    "backend",
    "threads",
    "contract_s",
    "sweep_s",
    "forward_s",
    "backward_s",
    "sweep_fresh_s",
    "bytes_per_sweep",
    "effective_GBps",
    "bandwidth_GBps",
    "fraction_of_bandwidth",
    "speedup_vs_numpy",
    "max_abs_err_vs_numpy",
    "repeats",
    "prefetch",
    "gather_free_fraction",
)


@dataclass(frozen=True)
class ExactSweepConfig:
    """Configuration of the exact-sweep benchmark (``vsr bench exact``)."""

    families: tuple[str, ...] = ("grid", "random")
    """MDP families: ``grid`` (random-wall gridworld, slip 0.1) and/or ``random`` (random MDP)."""
    sizes: tuple[int, ...] = (1_000, 10_000, 100_000, 1_000_000)
    """Target numbers of states ``S`` (gridworld sides are chosen to get close)."""
    horizon: int = 64
    """Horizon ``H`` of the sweeps."""
    inits: tuple[str, ...] = ("point", "full")
    """Initial distributions: ``point`` (one start state) and/or ``full`` (uniform over non-goals)."""
    solvers: Annotated[tuple[str, ...], tyro_arg(aliases=("--backends",))] = ("numba_parallel", "numba_serial", "numpy", "scipy")
    """Exact solvers to time (``--solvers``; ``--backends`` is its old name), names in ``gridworld.exact.SOLVERS``.
    ``numpy`` always runs (reference and ratio baseline). The CSV column keeps the name ``backend``."""
    n_actions: int = 4
    """Actions per state of the random MDPs (gridworlds always have 4)."""
    branching: int = 4
    """Successors per state-action pair of the random MDPs."""
    locality: int = 0
    """Random MDPs: 0 = successors uniform over all states; w > 0 = within ``s ± w`` (cache friendly)."""
    slip: float = 0.1
    """Slip probability of the gridworlds."""
    wall_density: float = 0.2
    """Wall density of the random gridworld layouts."""
    repeats: int = 5
    """Maximum timed repetitions per row (the best is reported)."""
    min_time_s: float = 2.0
    """Stop repeating a row once this much time was spent on it (always at least one run)."""
    bandwidth_mib: int = 256
    """Size of the array copied to measure memory bandwidth (MiB)."""
    measure_compile: bool = True
    """Also time a fresh, uncached Numba compile of the sweep kernels."""
    grid_target: bool = True
    """Also time every exact quantity (d, p, σ, μ) on a 256x256 gridworld with H = 200."""
    grid_target_side: int = 256
    """Side of the target gridworld."""
    grid_target_horizon: int = 200
    """Horizon of the target gridworld."""
    threads: int = 0
    """Numba threads (0 = Numba's default)."""
    check_atol: float = 1e-10
    """Largest allowed |difference| to the NumPy reference before timing."""
    seed: int = 0
    """Seed of the MDPs and policies."""
    out: str = "out/bench/exact_sweep.csv"
    """CSV output path (a ``.json`` summary and the config are written beside it)."""
    quick: bool = False
    """Tiny sizes and one repeat (for tests); overrides ``sizes``, ``repeats``, the target size and the
    bandwidth array (16 MiB, which fits in cache: quick-mode fractions of bandwidth are not meaningful)."""
    progress: bool = True
    """Print progress lines while running."""


#: Environment variables recorded in the summary (they change threading behaviour).
_ENV_KEYS = ("OMP_WAIT_POLICY", "NUMBA_NUM_THREADS", "NUMBA_THREADING_LAYER", "OMP_NUM_THREADS")


def _quick(cfg: ExactSweepConfig) -> ExactSweepConfig:
    import dataclasses

    return dataclasses.replace(
        cfg,
        sizes=(400, 3_000),
        repeats=1,
        min_time_s=0.0,
        bandwidth_mib=16,
        grid_target_side=48,
        grid_target_horizon=50,
        horizon=min(cfg.horizon, 16),
    )


# ---------------------------------------------------------------------------------------------
# Building blocks
# ---------------------------------------------------------------------------------------------


def _best_time(fn, repeats: int, min_time_s: float) -> tuple[float, int, object]:
    best, spent, n, out = math.inf, 0.0, 0, None
    while n < max(1, repeats):
        t0 = time.perf_counter()
        out = fn()
        dt = time.perf_counter() - t0
        best, spent, n = min(best, dt), spent + dt, n + 1
        if spent >= min_time_s:
            break
    return best, n, out


def _parallel_copy_kernel():
    import numba as nb

    @nb.njit(parallel=True, cache=False)
    def parallel_copy(src, dst):
        for i in nb.prange(src.size):
            dst[i] = src[i]

    return parallel_copy


def measure_bandwidth(mib: int, repeats: int = 5) -> dict:
    """Copy bandwidth (bytes read + written per second) of NumPy ``copyto`` and a Numba ``prange`` copy.

    Returns ``{"numpy_copy_Bps", "numba_copy_Bps", "bandwidth_Bps"}`` (the last is the larger).
    """
    n = max(1, mib * 2**20 // 8)
    src = np.random.default_rng(0).random(n)
    dst = np.empty_like(src)
    np.copyto(dst, src)  # touch the pages
    pcopy = _parallel_copy_kernel()
    pcopy(src, dst)
    t_np = min(_timed(lambda: np.copyto(dst, src)) for _ in range(repeats))
    t_nb = min(_timed(lambda: pcopy(src, dst)) for _ in range(repeats))
    moved = 2.0 * src.nbytes
    out = {"numpy_copy_Bps": moved / t_np, "numba_copy_Bps": moved / t_nb}
    out["bandwidth_Bps"] = max(out.values())
    return out


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _gather_free_kernel():
    import numba as nb

    @nb.njit(parallel=True, cache=False, fastmath=False)
    def gather_free_pass(indptr, indices, vals, x, y):
        zero = np.uint64(0)
        for i in nb.prange(y.size):
            # the loop of kernels._row_dot, reading indices[k] but gathering x[i]: the streaming alone
            k = np.uint64(indptr[i])
            hi = np.uint64(indptr[i + 1])
            acc = 0.0
            while k < hi:
                acc += vals[k] * x[np.uint64(i) + (np.uint64(indices[k]) & zero)]
                k += np.uint64(1)
            y[i] = acc

    @nb.njit(cache=False, fastmath=False)
    def gather_free(indptr, indices, vals, x, y, n_pass):
        for _ in range(n_pass):  # back-to-back parallel regions, as in a sweep
            gather_free_pass(indptr, indices, vals, x, y)

    return gather_free


def gather_free_fraction(g, vals, n_pass: int, repeats: int, bandwidth_Bps: float) -> float:
    """Fraction of bandwidth of ``n_pass`` gather-free passes over the graph's arrays (see the module doc)."""
    fn = _gather_free_kernel()
    S = g.indptr.size - 1
    x = np.random.default_rng(0).random(S)
    y = np.zeros(S)
    fn(g.indptr, g.indices, vals, x, y, 1)
    best = min(_timed(lambda: fn(g.indptr, g.indices, vals, x, y, n_pass)) for _ in range(max(1, repeats)))
    return sweep_bytes(S, g.nnz, n_pass) / 2 / best / bandwidth_Bps


def sweep_bytes(n_states: int, nnz: int, horizon: int, index_bytes: int = 4) -> int:
    """Minimum bytes moved by a forward + backward sweep (``2H`` CSR mat-vecs)."""
    per_matvec = nnz * (8 + index_bytes) + (n_states + 1) * index_bytes + 2 * 8 * n_states
    return 2 * horizon * per_matvec


def build_mdp(family: str, size: int, cfg: ExactSweepConfig):
    """The benchmark MDP of a family with about ``size`` states (point-mass start)."""
    from gridworld.grid import build_gridworld, random_layout
    from gridworld.random_mdp import random_mdp

    if family == "grid":
        side = max(2, int(round(math.sqrt(size / (1.0 - cfg.wall_density)))))
        layout = random_layout(side, side, wall_density=cfg.wall_density, seed=cfg.seed)
        return build_gridworld(layout, slip=cfg.slip, horizon=cfg.horizon, name=f"grid{side}x{side}").mdp
    if family == "random":
        return random_mdp(
            size, cfg.n_actions, cfg.branching, seed=cfg.seed, horizon=cfg.horizon, locality=cfg.locality or None
        )
    raise ValueError(f"families: unknown family {family!r} (use 'grid' or 'random')")


def initial_distribution(mdp, init: str) -> np.ndarray:
    """``point``: the MDP's own start state; ``full``: uniform over the non-terminal states."""
    if init == "point":
        return np.ascontiguousarray(mdp.init)
    if init == "full":
        full = (~mdp.terminal).astype(float)
        return full / full.sum()
    raise ValueError(f"inits: unknown initial distribution {init!r} (use 'point' or 'full')")


def jit_costs(cfg: ExactSweepConfig) -> dict:
    """First-call cost of the cached Numba kernels and (optionally) a fresh uncached compile."""
    import numba as nb

    from gridworld import kernels as K
    from gridworld.exact import SOLVERS, contract
    from gridworld.graph import state_graph
    from gridworld.grid import build_gridworld
    from gridworld.policies import uniform_policy

    world = build_gridworld("S...\n.#..\n...G", horizon=5)
    mdp = world.mdp
    pi = uniform_policy(mdp)
    out: dict[str, float] = {}
    t0 = time.perf_counter()
    _ = state_graph(mdp)
    out["first_call_graph_s"] = time.perf_counter() - t0
    for name in ("numba_parallel", "numba_serial"):
        if name not in cfg.solvers:
            continue
        impl = SOLVERS[name]
        t0 = time.perf_counter()
        kern = contract(mdp, pi, solver=name)
        ti, tr = mdp.terminal_states, np.ascontiguousarray(mdp.terminal_reward[mdp.terminal_states])
        impl.forward(kern, mdp.init, ti, tr, mdp.horizon)
        impl.backward(kern, ti, tr, mdp.horizon)
        out[f"first_call_{name}_s"] = time.perf_counter() - t0
    if cfg.measure_compile:
        kern = contract(mdp, pi, solver="numpy")
        g = state_graph(mdp)
        ti, tr = mdp.terminal_states, np.ascontiguousarray(mdp.terminal_reward[mdp.terminal_states])
        H = mdp.horizon
        for name, par in (("numba_parallel", True), ("numba_serial", False)):
            if name not in cfg.solvers:
                continue
            opts = dict(fastmath=False, nogil=True, cache=False)
            spmv_serial = nb.njit(**opts)(K._make_spmv(False))
            spmv = nb.njit(parallel=True, **opts)(K._make_spmv(True)) if par else spmv_serial
            fns = (
                nb.njit(parallel=par, **opts)(K._make_contract(par)),
                nb.njit(**opts)(K._make_forward(spmv, spmv_serial)),
                nb.njit(**opts)(K._make_backward(spmv, spmv_serial)),
            )
            pi3 = np.ascontiguousarray(pi[None])

            def call():
                data = np.empty((1, g.nnz))
                fns[0](mdp.indptr, mdp.probs, g.pos, g.indptr, pi3, data, 0)
                d, ab, re = np.empty((H + 1, mdp.n_states)), np.empty(H + 1), np.empty(H + 1)
                fns[1](g.t_indptr, g.t_indices, kern.t_data, mdp.init, ti, tr, d, ab, re, 0, 1)
                fns[2](g.indptr, g.indices, kern.data, ti, tr, np.empty((H + 1, mdp.n_states)), 0, 1)

            first = _timed(call)
            steady = min(_timed(call) for _ in range(3))
            out[f"compile_{name}_s"] = first - steady
    return out


def grid_target(cfg: ExactSweepConfig) -> dict:
    """Time every exact quantity (d, p, σ, μ_var, μ_ε) on the target gridworld with Numba parallel.

    The gridworld is a random-wall layout with slip, started uniformly over its non-goal cells.
    """
    from gridworld.exact import solve
    from gridworld.grid import build_gridworld, random_layout
    from gridworld.policies import random_softmax_policy

    side, H = cfg.grid_target_side, cfg.grid_target_horizon
    t0 = time.perf_counter()
    world = build_gridworld(
        random_layout(side, side, wall_density=cfg.wall_density, seed=cfg.seed), slip=cfg.slip, horizon=H
    )
    build_s = time.perf_counter() - t0
    # Full-support start: from the corner S the goal is > H moves away, so σ would vanish on d's
    # support and μ_var would be undefined.
    full = (~world.mdp.terminal).astype(float)
    mdp = world.mdp.with_init(full / full.sum())
    pi = random_softmax_policy(mdp, seed=cfg.seed)
    t0 = time.perf_counter()
    sol = solve(mdp, pi, solver="numba_parallel")  # includes the one-off state graph
    first_s = time.perf_counter() - t0
    best, n, sol2 = _best_time(lambda: solve(mdp, pi, solver="numba_parallel"), cfg.repeats, cfg.min_time_s)
    ok = np.array_equal(sol.p, sol2.p) and sol2.fields is not None
    return {
        "grid_target_side": side,
        "grid_target_states": mdp.n_states,
        "grid_target_horizon": H,
        "grid_target_build_s": build_s,
        "grid_target_first_solve_s": first_s,
        "grid_target_solve_s": best,
        "grid_target_repeats": n,
        "grid_target_J": sol.J,
        "grid_target_consistent": bool(ok),
        "grid_target_met": bool(first_s < 5.0),
    }


# ---------------------------------------------------------------------------------------------
# Main loop
# ---------------------------------------------------------------------------------------------


def run_rows(cfg: ExactSweepConfig, log=print) -> list[dict]:
    """Benchmark rows (one per family x size x init x solver); raises on a correctness mismatch.

    The MDP, its state graph and ``P_π`` are built once per (family, size); the initial
    distribution only enters the forward sweep, so the backward sweep is timed once per solver
    and shared by the ``point`` and ``full`` rows.
    """
    import numba as nb

    from gridworld import kernels as K
    from gridworld.exact import SOLVERS, contract
    from gridworld.graph import state_graph
    from gridworld.policies import random_softmax_policy

    solvers = list(dict.fromkeys(["numpy", *(SOLVERS.check(n, where="solvers") for n in cfg.solvers)]))
    rows: list[dict] = []
    for family in cfg.families:
        for size in cfg.sizes:
            mdp = build_mdp(family, size, cfg)
            graph = state_graph(mdp)
            pi = random_softmax_policy(mdp, seed=cfg.seed)
            pi3 = np.ascontiguousarray(pi[None])
            ti = mdp.terminal_states
            tr = np.ascontiguousarray(mdp.terminal_reward[ti])
            H = mdp.horizon
            kern = contract(mdp, pi, solver="numpy")  # the shared arrays every solver sweeps
            nbytes = sweep_bytes(mdp.n_states, graph.nnz, H)
            # Below the work threshold the parallel kernels run their serial branch.
            threads = nb.get_num_threads() if graph.nnz >= K.PARALLEL_MIN_WORK else 1
            inits = {name: initial_distribution(mdp, name) for name in cfg.inits}
            S = mdp.n_states
            # Preallocated, touched outputs for the timed sweeps (see the module doc).
            d_out = (np.zeros((H + 1, S)), np.zeros(H + 1), np.zeros(H + 1))
            p_out = np.zeros((H + 1, S))
            # The copy bandwidth is measured again next to each block of rows: on a shared machine it
            # drifts by +-20% over a run, and the fraction must compare like with like.
            bandwidth_Bps = measure_bandwidth(cfg.bandwidth_mib)["bandwidth_Bps"]
            ceiling = gather_free_fraction(graph, kern.data[0], 2 * H, cfg.repeats, bandwidth_Bps)
            results: dict[tuple[str, str], dict] = {}
            ref: dict[str, np.ndarray] = {}
            for name in solvers:
                be = SOLVERS[name]
                # Correctness against the NumPy reference before any timing.
                err = float(np.abs(be.contract(mdp, pi3) - kern.data).max())
                p = be.backward(kern, ti, tr, H)
                ref.setdefault("p", p)
                err = max(err, float(np.abs(p - ref["p"]).max()))
                del p
                for init_name, init in inits.items():
                    d, _, _ = be.forward(kern, init, ti, tr, H)
                    ref.setdefault(init_name, d)
                    err = max(err, float(np.abs(d - ref[init_name]).max()))
                    del d
                if not err <= cfg.check_atol:
                    raise RuntimeError(f"{name} disagrees with the NumPy reference on {mdp.name} (max |diff| = {err:.3g})")
                t_c, _, _ = _best_time(lambda: be.contract(mdp, pi3), cfg.repeats, cfg.min_time_s)
                t_b, n_b, _ = _best_time(lambda: be.backward(kern, ti, tr, H, out=p_out), cfg.repeats, cfg.min_time_s)
                t_bf, _, _ = _best_time(lambda: be.backward(kern, ti, tr, H), cfg.repeats, cfg.min_time_s)
                for init_name, init in inits.items():
                    t_f, n_f, _ = _best_time(
                        lambda: be.forward(kern, init, ti, tr, H, out=d_out), cfg.repeats, cfg.min_time_s
                    )
                    t_ff, _, _ = _best_time(lambda: be.forward(kern, init, ti, tr, H), cfg.repeats, cfg.min_time_s)
                    sweep = t_f + t_b
                    results[(name, init_name)] = dict(
                        family=family,
                        n_states=mdp.n_states,
                        nnz_pairs=mdp.nnz,
                        nnz=graph.nnz,
                        horizon=H,
                        init=init_name,
                        backend=name,
                        threads=threads if name == "numba_parallel" else 1,
                        contract_s=t_c,
                        sweep_s=sweep,
                        forward_s=t_f,
                        backward_s=t_b,
                        sweep_fresh_s=t_ff + t_bf,
                        bytes_per_sweep=nbytes,
                        effective_GBps=nbytes / sweep / 1e9,
                        bandwidth_GBps=bandwidth_Bps / 1e9,
                        fraction_of_bandwidth=(nbytes / sweep) / bandwidth_Bps,
                        max_abs_err_vs_numpy=err,
                        repeats=min(n_f, n_b),
                        prefetch=graph.prefetch if name.startswith("numba") else 0,
                        gather_free_fraction=ceiling,
                    )
                    if cfg.progress:
                        log(
                            f"  {family:6s} S={mdp.n_states:>9,d} {init_name:5s} {name:15s} "
                            f"sweep {sweep:8.4f} s  ({nbytes / sweep / 1e9:6.2f} GB/s)"
                        )
            ref.clear()
            for init_name in cfg.inits:
                base = results[("numpy", init_name)]["sweep_s"]
                for name in solvers:
                    if name in cfg.solvers:
                        r = results[(name, init_name)]
                        r["speedup_vs_numpy"] = base / r["sweep_s"]
                        rows.append(r)
            mdp = graph = kern = d_out = p_out = None  # release the big arrays before the next size is built
    return rows


def format_table(rows: list[dict]) -> str:
    """Fixed-width text table of the rows (ratios vs NumPy, fraction of bandwidth)."""
    head = (
        f"{'family':6s} {'S':>9s} {'nnz':>10s} {'init':5s} {'backend':15s} {'thr':>3s} "
        f"{'contract':>9s} {'sweep':>9s} {'fresh':>9s} {'GB/s':>6s} {'frac_bw':>7s} {'ceiling':>7s} {'x numpy':>8s}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r['family']:6s} {r['n_states']:>9,d} {r['nnz']:>10,d} {r['init']:5s} {r['backend']:15s} {r['threads']:>3d} "
            f"{r['contract_s']:>9.4f} {r['sweep_s']:>9.4f} {r['sweep_fresh_s']:>9.4f} {r['effective_GBps']:>6.2f} "
            f"{r['fraction_of_bandwidth']:>7.3f} {r['gather_free_fraction']:>7.3f} {r['speedup_vs_numpy']:>8.2f}"
        )
    return "\n".join(lines)


def run(cfg: ExactSweepConfig) -> int:
    """Run the benchmark, write CSV + JSON summary + config, print the table; returns 0."""
    from pathlib import Path

    import numba as nb

    from vsr_util.atomic import write_csv, write_json
    from vsr_util.config_io import save_config, to_dict

    if cfg.quick:
        cfg = _quick(cfg)
    if cfg.threads:
        nb.set_num_threads(int(cfg.threads))
    log = print if cfg.progress else (lambda *a, **k: None)
    out = Path(cfg.out)
    log(f"exact sweep benchmark: numba {nb.__version__}, {nb.get_num_threads()} threads, load {os.getloadavg()}")
    jit = jit_costs(cfg)
    log("  jit: " + ", ".join(f"{k}={v:.3f}" for k, v in jit.items()))
    bw = measure_bandwidth(cfg.bandwidth_mib)
    log(f"  copy bandwidth: numpy {bw['numpy_copy_Bps'] / 1e9:.2f} GB/s, numba {bw['numba_copy_Bps'] / 1e9:.2f} GB/s")
    rows = run_rows(cfg, log=log)
    target = grid_target(cfg) if cfg.grid_target else {}
    # Headline numbers: the numba_parallel rows at each family's largest size.
    largest = {}
    for r in rows:
        if r["backend"] == "numba_parallel" and r["n_states"] >= largest.get(r["family"], {}).get("n_states", -1):
            largest[r["family"]] = r
    headline = {
        f"{fam}_{r['n_states']}_{init}": {
            "fraction_of_bandwidth": x["fraction_of_bandwidth"],
            "speedup_vs_numpy": x["speedup_vs_numpy"],
        }
        for fam, r in largest.items()
        for x in rows
        for init in [x["init"]]
        if x["backend"] == "numba_parallel" and x["family"] == fam and x["n_states"] == r["n_states"]
    }
    summary = {
        "numba_version": nb.__version__,
        "numpy_version": np.__version__,
        "threads": nb.get_num_threads(),
        "threading_layer": _threading_layer(),
        "cpu_count": os.cpu_count(),
        "machine": platform.machine(),
        "python": sys.version.split()[0],
        "load_average": list(os.getloadavg()),
        "env": {k: os.environ.get(k) for k in _ENV_KEYS},
        **bw,
        **jit,
        **target,
        "numba_parallel_at_largest_size": headline,
        "config": to_dict(cfg),
    }
    write_csv(out, COLUMNS, rows, float_format="%.6g")
    write_json(out.with_suffix(".json"), summary)
    save_config(cfg, out.with_name(out.stem + "_config.yaml"))
    print(format_table(rows))
    if target:
        print(
            f"target {target['grid_target_side']}x{target['grid_target_side']} gridworld (S={target['grid_target_states']:,}, "
            f"H={target['grid_target_horizon']}): all exact quantities in {target['grid_target_first_solve_s']:.3f} s "
            f"(first call, incl. state graph), {target['grid_target_solve_s']:.3f} s steady"
        )
    print(f"wrote {out}, {out.with_suffix('.json')}")
    return 0


def _threading_layer() -> str:
    import numba as nb

    try:
        return nb.threading_layer()
    except ValueError:  # no parallel region has run in this process
        return "none"


if __name__ == "__main__":
    import tyro

    sys.exit(run(tyro.cli(ExactSweepConfig)))
