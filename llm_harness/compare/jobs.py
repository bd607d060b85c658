"""A comparison's jobs: the options of ``vsr compare`` (:class:`CompareConfig`), one (regime, method, seed) run
(:class:`Job`, with its resolved config and fingerprint), the plan of a suite's jobs, its prompt pool, and whether a
run folder's ``done.json`` finishes a job (:func:`matches`, :func:`is_done`).

Runs go to ``OUT/runs/<regime>/<method>/seed<k>/`` (a normal run directory: config, metrics, final checkpoint) and
end with ``done.json``; ``OUT/runs/<regime>/base/seed<k>/done.json`` holds the evaluation of the untrained starting
checkpoint with the same evaluation seed. A ``done.json`` finishes a job when its fingerprint matches, or (written
before a config field was added) when its resolved config is the job's up to new fields at their defaults and the
pool bytes are the same.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llm_harness.compare.executors import EXECUTORS
from llm_harness.compare.suite import SUITES, Method, Regime, Suite, method_mapping, run_mapping
from vsr_util.checks import check_number
from vsr_util.atomic import read_json

__all__ = ["DEFAULT_SIZES", "QUICK_POOL", "QUICK_SIZES", "CompareConfig", "Job", "compatible", "is_done", "location_free",
           "matches", "plan_jobs", "prepare_pool"]


#: sizes of a suite that sets none (``Suite.sizes`` overrides, a flag overrides both)
DEFAULT_SIZES = {"seeds": 3, "steps": 40, "eval_problems": 128, "eval_k": 8, "eval_every": 0}
#: smoke-test sizes (``--quick``)
QUICK_SIZES = {"seeds": 1, "steps": 3, "eval_problems": 16, "eval_k": 2, "eval_every": 3}
#: pool selection at smoke-test sizes
QUICK_POOL = {"candidates": 24, "samples": 4, "max_successes": 3, "size": 8}


def _size_limits() -> dict[str, int]:
    """Upper bounds of the size flags, checked when the options are built (before any job is planned): the trainer's
    :data:`~llm_harness.trainer.config.LIMITS` where a flag sets a training field, and 1,000 seeds (a plan holds
    seeds x methods x regimes jobs) and 1,024 worker processes."""
    from llm_harness.trainer.config import LIMITS

    return {"seeds": 1_000, "steps": LIMITS["steps"], "eval_problems": LIMITS["validation_problems"],
            "eval_k": LIMITS["validation_k"], "eval_every": LIMITS["steps"], "workers": 1_024}


@dataclass(frozen=True)
class CompareConfig:
    """Options of ``vsr compare``."""

    suite: str = "testbed"
    """Registered suite (``llm_harness.compare.suite.SUITES``)."""
    out: Path | None = None
    """Report folder (report.md, summary.json, figures); default ``figures/compare_<suite>`` (``--quick``:
    ``runs/compare_<suite>_quick``, so a smoke test never touches a suite's committed report or its runs). Runs go to
    ``OUT/runs`` when ``--out`` is given, else to ``runs/compare_<suite>/runs``; the runs' records to the records
    store, ``records/compare_<suite>`` for a report folder in ``figures/``, else ``OUT/records``
    (:func:`llm_harness.compare.records.records_folder`)."""
    seeds: int | None = None
    """Seeds per (regime, method): 0 .. seeds-1 (default: the suite's)."""
    steps: int | None = None
    """Training steps of every run (matched update counts; default: the suite's)."""
    eval_problems: int | None = None
    """Held-out problems evaluated (validation split; default: the suite's)."""
    eval_k: int | None = None
    """Samples per held-out problem (avg@1 is their mean, pass@k from them; default: the suite's)."""
    eval_every: int | None = None
    """Held-out evaluation every this many steps (0: at steps/2 and at the end; default: the suite's)."""
    workers: int = 2
    """Parallel training processes (``ray``: CPUs of the local Ray instance; a cluster's own otherwise)."""
    executor: str = "process"
    """Where jobs run (``llm_harness.compare.executors.EXECUTORS``): ``process`` (a local process pool) or
    ``ray`` (one Ray task per job; ``RAY_ADDRESS`` picks a cluster)."""
    methods: tuple[str, ...] = ()
    """Train only these methods (default: all of the suite); the report covers every finished run of the
    suite (all methods, all regimes), so a suite run in parts keeps one report."""
    regimes: tuple[str, ...] = ()
    """Train only these regimes (default: all); the report still covers the other regimes' finished runs."""
    report_only: bool = False
    """Do not train; rebuild the report from the runs already in ``out``."""
    quick: bool = False
    """Smoke-test sizes: 1 seed, 3 steps, 16 problems x 2 samples (and a tiny prompt pool); a size flag given
    with it (``--seeds``, ``--steps``, ``--eval-problems``, ``--eval-k``, ``--eval-every``) wins."""
    retrain: bool = True
    """A damaged or mismatched record (checksum, row count, configuration: ``llm_harness.compare.records``) is named
    and its job trained again; ``--no-retrain`` refuses instead."""
    records: bool = True
    """Keep every finished run's record (done.json + gzipped metrics) in the suite's records folder (``records/``
    README) and restore the matching ones before training, so a suite resumes on a fresh clone; off: train whatever
    the run folder lacks."""
    timings_apart: bool = False
    """Write the wall-clock numbers (step and plug-in seconds, step-time ratios, wall time) to ``OUT/timings.json``
    instead of into ``report.md`` and ``summary.json``, so a report whose runs are trained again (no records: the
    ``make figures`` curriculum figure) is rewritten byte for byte; ``timings.json`` is not committed."""
    records_dir: Path | None = None
    """The suite's records folder, its siblings' beside it (``DIR/../compare_<sibling>``); default: from the report
    folder (:func:`llm_harness.compare.records.records_folder`): ``records/compare_<suite>`` for a report folder in
    ``figures/`` (the committed suites), else ``OUT/records``."""
    list_suites: bool = False
    """Print every registered suite (name, arms, regimes, seeds x updates, the suites it shares records with) and
    exit without training."""

    def __post_init__(self) -> None:
        s = SUITES.lookup(self.suite, "suite")
        limits = _size_limits()
        for name in ("seeds", "steps", "eval_problems", "eval_k", "workers"):
            if getattr(self, name) is not None:
                check_number(name, getattr(self, name), 1, limits[name], integer=True)
        if self.eval_every is not None:
            check_number("eval_every", self.eval_every, 0, limits["eval_every"], integer=True)
        EXECUTORS.check(self.executor, "executor")
        bad = sorted(set(self.methods) - {m.name for m in s.methods})
        if bad:
            raise ValueError(f"methods: unknown in suite {self.suite!r}: {bad}; known: {[m.name for m in s.methods]}")
        bad = sorted(set(self.regimes) - {r.name for r in s.regimes})
        if bad:
            raise ValueError(f"regimes: unknown in suite {self.suite!r}: {bad}; known: {[r.name for r in s.regimes]}")

    @property
    def report_dir(self) -> Path:
        """Where report.md, summary.json and the figures go (the runs' records: ``records.records_root``)."""
        if self.out is not None:
            return Path(self.out)
        return Path("runs") / f"compare_{self.suite}_quick" if self.quick else Path("figures") / f"compare_{self.suite}"

    @property
    def runs_root(self) -> Path:
        """Where the runs (and the suite's prompt pool) go."""
        if self.out is not None:
            return Path(self.out) / "runs"
        return Path("runs") / f"compare_{self.suite}{'_quick' if self.quick else ''}" / "runs"

    @property
    def shared_report_dirs(self) -> list[Path]:
        """The report folders of the suites this one shares runs with (``Suite.shares_records_with``), beside this
        suite's: ``<report dir>/../compare_<sibling>`` (where their kept ``pool.json`` is)."""
        return [self.report_dir.parent / f"compare_{name}" for name in SUITES[self.suite].shares_records_with]

    @property
    def sizes(self) -> dict[str, int]:
        """Resolved suite-level sizes: flag, else the suite's, else :data:`DEFAULT_SIZES` (``--quick``:
        :data:`QUICK_SIZES`); a regime may set its own seeds / steps / eval_every (:meth:`sizes_for`)."""
        return self.sizes_for(None)

    def sizes_for(self, regime: str | None) -> dict[str, int]:
        """Resolved sizes of one regime: flag, else the regime's (``Regime.sizes``), else the suite's, else
        :data:`DEFAULT_SIZES` (``--quick``: a flag, else :data:`QUICK_SIZES`, for every regime)."""
        if self.quick:
            z = dict(QUICK_SIZES)
        else:
            suite = SUITES[self.suite]
            own = next((dict(r.sizes) for r in suite.regimes if r.name == regime), {}) if regime is not None else {}
            z = {**DEFAULT_SIZES, **dict(suite.sizes), **own}
        for k in z:
            if getattr(self, k) is not None:
                z[k] = int(getattr(self, k))
        z["eval_every"] = z["eval_every"] or max(1, z["steps"] // 2)
        return z

    @property
    def pool_path(self) -> Path | None:
        """The suite's prompt-pool file (None when the suite trains on the whole split): ``OUT/runs/pool.json``
        with ``--out``, else ``runs/pools/<pool name>.json`` (shared by suites with the same pool;
        ``<name>_quick`` at smoke-test sizes)."""
        spec = SUITES[self.suite].pool
        if spec is None:
            return None
        if self.out is not None:
            return self.runs_root / ("pool_quick.json" if self.quick else "pool.json")
        return Path("runs") / "pools" / f"{spec.name}{'_quick' if self.quick else ''}.json"


@dataclass(frozen=True)
class Job:
    """One unit of work: a training run, or the evaluation of the starting checkpoint (``method == 'base'``)."""

    regime: str
    method: str
    seed: int
    run_dir: str
    mapping: dict = field(hash=False)

    def resolved(self) -> dict[str, Any]:
        """The run's configuration with every default filled in (``to_dict`` of its TrainConfig)."""
        from llm_harness.trainer.config import TrainConfig
        from vsr_util.config_io import from_dict, to_dict

        return to_dict(from_dict(TrainConfig, self.mapping, where=f"{self.regime}/{self.method}"))

    def pool_sha256(self) -> str | None:
        """sha256 of the prompt-pool file the run trains on (None without one, or before it exists)."""
        from llm_harness.trainer.pool import pool_digest

        pool = (self.mapping.get("task") or {}).get("pool")
        return pool_digest(pool) if pool and Path(pool).is_file() else None

    @property
    def fingerprint(self) -> str:
        """Hash of the *resolved* run config (a changed default, not only a changed file, reruns the job)
        and of the prompt-pool file's bytes when the run trains on one; where the run and the pool file lie is
        left out (:func:`location_free`), so a run's record matches the same job under another ``--out``."""
        resolved = location_free(self.resolved())
        sha = self.pool_sha256()
        if sha:
            resolved["task"]["pool_sha256"] = sha
        return hashlib.sha256(json.dumps(resolved, sort_keys=True, default=str).encode()).hexdigest()[:16]


def location_free(resolved: dict[str, Any]) -> dict[str, Any]:
    """A resolved run config without where it lies: ``run.run_dir`` dropped and ``task.pool`` reduced to whether
    there is one (the pool's bytes enter the fingerprint separately)."""
    out = json.loads(json.dumps(resolved, default=str))
    out.get("run", {}).pop("run_dir", None)
    if "task" in out and "pool" in out["task"]:
        out["task"]["pool"] = "<pool>" if out["task"]["pool"] else ""
    return out


def plan_jobs(cfg: CompareConfig) -> list[Job]:
    """Every job of the comparison (base evaluations first, then the training runs seed by seed), with resolved
    config mappings."""
    suite: Suite = SUITES[cfg.suite]
    methods = [m for m in suite.methods if not cfg.methods or m.name in cfg.methods]
    regimes = [r for r in suite.regimes if not cfg.regimes or r.name in cfg.regimes]
    base_method = next(m for m in suite.methods if m.name == suite.reference)
    pool = str(cfg.pool_path) if cfg.pool_path is not None else ""
    root = cfg.runs_root

    sizes = {r.name: cfg.sizes_for(r.name) for r in regimes}

    def kw(r: Regime) -> dict[str, Any]:
        z = sizes[r.name]
        return dict(steps=z["steps"], eval_problems=z["eval_problems"], eval_k=z["eval_k"], eval_every=z["eval_every"], pool=pool)

    files: dict[str, dict[str, Any]] = {}  # each method's config file read once, not once per job

    def mapping(m: Method, r: Regime, seed: int, d: Path) -> dict[str, Any]:
        if m.config not in files:
            files[m.config] = method_mapping(m)
        return run_mapping(m, r, seed=seed, run_dir=str(d), base=files[m.config], **kw(r))

    jobs: list[Job] = []
    for r in regimes:
        for seed in range(sizes[r.name]["seeds"]):
            d = root / r.name / "base" / f"seed{seed}"
            jobs.append(Job(r.name, "base", seed, str(d), mapping(base_method, r, seed, d)))
    for r in regimes:  # seed by seed, so that a suite stopped part-way has paired seeds of every method
        for seed in range(sizes[r.name]["seeds"]):
            for m in methods:
                d = root / r.name / m.name / f"seed{seed}"
                jobs.append(Job(r.name, m.name, seed, str(d), mapping(m, r, seed, d)))
    # one run config per (regime, method) validated here: a bad size fails once, at planning, not in every worker
    seen: set[tuple[str, str]] = set()
    for j in jobs:
        if (j.regime, j.method) not in seen:
            seen.add((j.regime, j.method))
            j.resolved()
    return jobs


def prepare_pool(cfg: CompareConfig) -> Path | None:
    """Select the suite's prompt pool into :attr:`CompareConfig.pool_path` unless a file with the same
    selection settings is there (resumable); returns its path (None for a suite without a pool)."""
    suite = SUITES[cfg.suite]
    path = cfg.pool_path
    if suite.pool is None or path is None:
        return None
    import torch

    from llm_harness.compare.suite import CONFIG_DIR
    from llm_harness.pool_selection import PoolSelection, pool_is_current, select_to_file, selection_config

    sel = PoolSelection(**{**dict(suite.pool.selection), **(QUICK_POOL if cfg.quick else {})})
    tcfg = selection_config(CONFIG_DIR / suite.pool.config, run_dir=str(path.parent / "_pool_run"))
    if pool_is_current(path, tcfg, sel):
        return path
    if path.is_file():
        print(f"vsr compare: {path} was selected with other settings; selecting again", flush=True)
    torch.set_num_threads(max(1, cfg.workers))
    select_to_file(tcfg, sel, path)
    return path


def _flat(d: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(d, dict) and d:
        out: dict[str, Any] = {}
        for k, v in d.items():
            out.update(_flat(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: d}


def compatible(stored: dict[str, Any], current: dict[str, Any]) -> bool:
    """Whether a finished run's resolved config ``stored`` is the job's ``current`` one up to fields added
    since at their defaults: every stored field must be unchanged (a changed default reruns the job),
    every new field must hold ``TrainConfig``'s default (so a new option does not rerun a whole suite)."""
    from llm_harness.trainer.config import TrainConfig
    from vsr_util.config_io import to_dict

    a, b = _flat(location_free(stored)), _flat(location_free(current))
    if set(a) - set(b):
        return False
    defaults = _flat(location_free(to_dict(TrainConfig())))
    norm = lambda v: json.loads(json.dumps(v, default=str))  # noqa: E731 - tuples vs lists, as written to disk
    for k, v in b.items():
        if k in a:
            if norm(a[k]) != norm(v):
                return False
        elif k not in defaults or norm(defaults[k]) != norm(v):
            return False
    return True


def matches(info: dict[str, Any], job: Job, folder: Path) -> bool:
    """Whether ``done.json`` contents ``info`` (in ``folder``) finish ``job``: the same fingerprint, or (written
    before a config field was added) the same resolved config up to new fields at their defaults and the same
    pool bytes."""
    if info.get("fingerprint") == job.fingerprint:
        return True
    stored = info.get("config")
    if stored is None and (folder / "config.yaml").is_file():
        from vsr_util.config_io import read_mapping

        stored = read_mapping(folder / "config.yaml")  # the trainer's resolved config
    if stored is None or info.get("pool_sha256", job.pool_sha256()) != job.pool_sha256():
        return False
    return compatible(stored, job.resolved())


def is_done(job: Job) -> bool:
    """A finished ``done.json`` for this job (:func:`matches`)."""
    p = Path(job.run_dir) / "done.json"
    if not p.is_file():
        return False
    try:
        return matches(read_json(p), job, p.parent)
    except (OSError, ValueError):
        return False
