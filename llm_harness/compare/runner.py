"""``vsr compare --suite NAME``: train every (regime, method, seed) of a suite and write the report.

Runs go to ``OUT/runs/<regime>/<method>/seed<k>/`` (a normal run directory: config, metrics,
final checkpoint) and end with ``done.json``; a rerun with the same settings skips finished runs
and restarts unfinished ones (resumable). ``OUT/runs/<regime>/base/seed<k>/done.json`` holds the
evaluation of the untrained starting checkpoint with the same evaluation seed. Jobs run on the
``executor`` (:mod:`.executors`): ``workers`` spawned processes (torch at one thread each), or
Ray tasks (a local instance, or the cluster at ``RAY_ADDRESS``). The report (:mod:`.report`) is
written to ``OUT/report.md`` with figures beside it.

**Records.** The run folders are not committed (checkpoints), so a suite run in parts over several
sessions would lose its earlier parts with the machine. Every finished run therefore also leaves a
*record* in the report folder, ``OUT/records/<regime>/<method>/seed<k>/`` (``done.json`` and the
gzipped ``metrics.jsonl``: everything the report reads, a few kB per run); :func:`run` first restores
the records whose config matches a job into that job's run folder, so a fresh clone resumes a suite
where its committed records end and ``--report-only`` rebuilds the committed report anywhere. A
record of another config is never restored (the job reruns and its record is replaced). Suites that
share arms (``Suite.shares_records_with``: the per-table Replay and ExTra suites share their GRPO and
default runs) also restore each other's matching records, and keep a copy in their own folder.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from llm_harness.compare.executors import EXECUTORS
from llm_harness.compare.records import RecordError, manifest_entry, read_manifest, update_manifest, verify_record
from llm_harness.compare.suite import SUITES, Regime, Suite, run_mapping
from vsr.atomic import atomic_path, write_json
from vsr.checks import check_number

__all__ = ["CompareConfig", "Job", "plan_jobs", "prepare_pool", "restore_record", "run", "save_record"]


#: sizes of a suite that sets none (``Suite.sizes`` overrides, a flag overrides both)
DEFAULT_SIZES = {"seeds": 3, "steps": 40, "eval_problems": 128, "eval_k": 8, "eval_every": 0}
#: smoke-test sizes (``--quick``)
QUICK_SIZES = {"seeds": 1, "steps": 3, "eval_problems": 16, "eval_k": 2, "eval_every": 3}
#: pool selection at smoke-test sizes
QUICK_POOL = {"candidates": 24, "samples": 4, "max_successes": 3, "size": 8}


@dataclass(frozen=True)
class CompareConfig:
    """Options of ``vsr compare``."""

    suite: str = "testbed"
    """Registered suite (``llm_harness.compare.suite.SUITES``)."""
    out: Path | None = None
    """Report folder (report.md, summary.json, figures, the runs' records); default ``figures/compare_<suite>``
    (``--quick``: ``runs/compare_<suite>_quick``, so a smoke test never touches a suite's committed report or its
    runs). Runs go to ``OUT/runs`` when ``--out`` is given, else to ``runs/compare_<suite>/runs``."""
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
    """Smoke-test sizes: 1 seed, 3 steps, 16 problems x 2 samples (and a tiny prompt pool)."""
    retrain: bool = True
    """A damaged or mismatched record (checksum, row count, configuration: ``llm_harness.compare.records``) is named
    and its job trained again; ``--no-retrain`` refuses instead."""
    records: bool = True
    """Keep every finished run's record (done.json + gzipped metrics) in ``OUT/records`` and restore the matching
    ones before training, so a suite resumes on a fresh clone; off: train whatever the run folder lacks."""

    def __post_init__(self) -> None:
        s = SUITES.lookup(self.suite, "suite")
        for name in ("seeds", "steps", "eval_problems", "eval_k", "workers"):
            if getattr(self, name) is not None:
                check_number(name, getattr(self, name), 1, integer=True)
        if self.eval_every is not None:
            check_number("eval_every", self.eval_every, 0, integer=True)
        EXECUTORS.check(self.executor, "executor")
        bad = sorted(set(self.methods) - {m.name for m in s.methods})
        if bad:
            raise ValueError(f"methods: unknown in suite {self.suite!r}: {bad}; known: {[m.name for m in s.methods]}")
        bad = sorted(set(self.regimes) - {r.name for r in s.regimes})
        if bad:
            raise ValueError(f"regimes: unknown in suite {self.suite!r}: {bad}; known: {[r.name for r in s.regimes]}")

    @property
    def report_dir(self) -> Path:
        """Where report.md, summary.json, the figures and the runs' records go."""
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
    def records_root(self) -> Path:
        """Where the finished runs' records go (module doc, "Records")."""
        return self.report_dir / "records"

    @property
    def shared_records_roots(self) -> list[Path]:
        """The record folders of the suites this one shares runs with (``Suite.shares_records_with``), beside this
        suite's report folder: ``<report dir>/../compare_<sibling>/records``."""
        return [self.report_dir.parent / f"compare_{name}" / "records" for name in SUITES[self.suite].shares_records_with]

    @property
    def sizes(self) -> dict[str, int]:
        """Resolved suite-level sizes: flag, else the suite's, else :data:`DEFAULT_SIZES` (``--quick``:
        :data:`QUICK_SIZES`); a regime may set its own seeds / steps / eval_every (:meth:`sizes_for`)."""
        return self.sizes_for(None)

    def sizes_for(self, regime: str | None) -> dict[str, int]:
        """Resolved sizes of one regime: flag, else the regime's (``Regime.sizes``), else the suite's, else
        :data:`DEFAULT_SIZES` (``--quick``: :data:`QUICK_SIZES` for every regime)."""
        if self.quick:
            return dict(QUICK_SIZES)
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
        from vsr.config_io import from_dict, to_dict

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

    jobs: list[Job] = []
    for r in regimes:
        for seed in range(sizes[r.name]["seeds"]):
            d = root / r.name / "base" / f"seed{seed}"
            jobs.append(Job(r.name, "base", seed, str(d), run_mapping(base_method, r, seed=seed, run_dir=str(d), **kw(r))))
    for r in regimes:  # seed by seed, so that a suite stopped part-way has paired seeds of every method
        for seed in range(sizes[r.name]["seeds"]):
            for m in methods:
                d = root / r.name / m.name / f"seed{seed}"
                jobs.append(Job(r.name, m.name, seed, str(d), run_mapping(m, r, seed=seed, run_dir=str(d), **kw(r))))
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
    from vsr.config_io import to_dict

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


def _matches(info: dict[str, Any], job: Job, folder: Path) -> bool:
    """Whether ``done.json`` contents ``info`` (in ``folder``) finish ``job``: the same fingerprint, or (written
    before a config field was added) the same resolved config up to new fields at their defaults and the same
    pool bytes."""
    if info.get("fingerprint") == job.fingerprint:
        return True
    stored = info.get("config")
    if stored is None and (folder / "config.yaml").is_file():
        from vsr.config_io import read_mapping

        stored = read_mapping(folder / "config.yaml")  # the trainer's resolved config
    if stored is None or info.get("pool_sha256", job.pool_sha256()) != job.pool_sha256():
        return False
    return compatible(stored, job.resolved())


def _done(job: Job) -> bool:
    """A finished ``done.json`` for this job (:func:`_matches`)."""
    p = Path(job.run_dir) / "done.json"
    if not p.is_file():
        return False
    try:
        return _matches(json.loads(p.read_text()), job, p.parent)
    except (OSError, ValueError):
        return False


def _record_dir(records_root: Path, job: Job) -> Path:
    return Path(records_root) / job.regime / job.method / f"seed{job.seed}"


def _record_key(job: Job) -> str:
    return f"{job.regime}/{job.method}/seed{job.seed}"


def save_record(job: Job, records_root: Path) -> Path:
    """Keep a finished run's ``done.json`` and gzipped ``metrics.jsonl`` under ``records_root`` (module doc,
    "Records") and their checksums in the root's manifest (:mod:`.records`); files already holding the same
    bytes are left alone. Returns the record folder."""
    src, dest = Path(job.run_dir), _record_dir(records_root, job)
    done = (src / "done.json").read_bytes()
    if not (dest / "done.json").is_file() or (dest / "done.json").read_bytes() != done:
        metrics = src / "metrics.jsonl"
        gz = dest / "metrics.jsonl.gz"
        if metrics.is_file():
            with atomic_path(gz) as tmp:  # mtime 0: the same run gives the same bytes
                with open(tmp, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as fh:
                    fh.write(metrics.read_bytes())
        elif gz.exists():
            gz.unlink()
        with atomic_path(dest / "done.json") as tmp:  # last: a record is complete once done.json is there
            tmp.write_bytes(done)
    update_manifest(records_root, _record_key(job), manifest_entry(dest))
    return dest


def restore_record(job: Job, records_root: Path, *, retrain: bool = True) -> bool:
    """Put a job's record back into its run folder when the job is not finished there and the record's config
    matches it (:func:`_matches`) and the record passes :func:`.records.verify_record`; returns whether it did.
    An unfinished run in the folder is replaced. A damaged or mismatched record is named and left unused (the job
    retrains), or refused with :class:`.records.RecordError` when ``retrain`` is false."""
    rec = _record_dir(records_root, job)
    if _done(job) or not (rec / "done.json").is_file():
        return False
    try:
        info = json.loads((rec / "done.json").read_text())
    except (ValueError, UnicodeDecodeError) as e:
        return _bad_record(RecordError(f"{rec / 'done.json'}: not JSON ({e})"), retrain)
    if not isinstance(info, dict):
        return _bad_record(RecordError(f"{rec / 'done.json'}: not a JSON object"), retrain)
    if not _matches(info, job, rec):
        return False
    steps = None if job.method == "base" else int(job.mapping.get("steps", 0))
    try:
        verify_record(rec, info, key=_record_key(job), manifest=read_manifest(records_root), steps=steps)
    except RecordError as e:
        return _bad_record(e, retrain)
    d = Path(job.run_dir)
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    if (rec / "metrics.jsonl.gz").is_file():
        with atomic_path(d / "metrics.jsonl") as tmp:
            tmp.write_bytes(gzip.decompress((rec / "metrics.jsonl.gz").read_bytes()))
    with atomic_path(d / "done.json") as tmp:
        tmp.write_bytes((rec / "done.json").read_bytes())
    return True


def _bad_record(err: RecordError, retrain: bool) -> bool:
    if not retrain:
        raise RecordError(f"{err}; refusing (--no-retrain); delete the record to retrain the job") from None
    print(f"vsr compare: record not used, the job trains again: {err}", flush=True)
    return False


def _execute(job: Job) -> dict[str, Any]:
    """Worker: run one job and write its ``done.json`` (returns it)."""
    import torch

    from llm_harness.trainer.config import TrainConfig
    from vsr.config_io import from_dict

    torch.set_num_threads(1)
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    except ImportError:  # pragma: no cover - transformers is a core dependency
        pass
    cfg = from_dict(TrainConfig, job.mapping, where=f"{job.regime}/{job.method}")
    d = Path(job.run_dir)
    if d.exists():
        shutil.rmtree(d)  # an unfinished (or stale) run restarts from scratch
    d.mkdir(parents=True)
    t0 = time.perf_counter()
    out: dict[str, Any] = {"regime": job.regime, "method": job.method, "seed": job.seed, "fingerprint": job.fingerprint}
    if job.method == "base":
        from llm_harness.trainer.entry import build_trainer

        tr = build_trainer(cfg)
        try:
            out["validation"] = tr.validate()
        finally:
            tr.close()
        out["rc"] = 0
    else:
        from llm_harness.trainer.entry import train
        from llm_harness.trainer.loop import config_fingerprint

        out["rc"] = int(train(cfg))
        out["train_fingerprint"] = config_fingerprint(cfg)  # the metrics rows carry it too (records.verify_record)
    out["wall_s"] = time.perf_counter() - t0
    out["config"] = job.resolved()
    out["pool_sha256"] = job.pool_sha256()
    write_json(d / "done.json", out)
    return out


def _describe_jobs(jobs: list[Job], limit: int = 12) -> str:
    """``regime/method (seeds 0, 2)`` for each (regime, method) of ``jobs``, at most ``limit`` of them."""
    by: dict[tuple[str, str], list[int]] = {}
    for j in jobs:
        by.setdefault((j.regime, j.method), []).append(j.seed)
    parts = [f"{r}/{m} (seed{'s' if len(v) > 1 else ''} {', '.join(map(str, sorted(v)))})" for (r, m), v in by.items()]
    return "; ".join(parts[:limit]) + (f"; and {len(parts) - limit} more" if len(parts) > limit else "")


def _collect(cfg: CompareConfig, bar: Any) -> int:
    """Report each finished job as it arrives and keep its record; returns the number of failed jobs."""
    failures = 0
    for j, res in bar:
        if isinstance(res, BaseException):
            failures += 1
            print(f"  FAILED: {j.regime}/{j.method}/seed{j.seed}: {type(res).__name__}: {res}", flush=True)
        elif res.get("rc", 1) != 0:
            failures += 1
            print(f"  FAILED (exit {res['rc']}): {j.regime}/{j.method}/seed{j.seed}", flush=True)
        elif cfg.records:
            save_record(j, cfg.records_root)  # kept as it finishes: a session that ends mid-suite loses nothing
        bar.set_postfix(last=f"{j.regime}/{j.method}/{j.seed}")
    return failures


def run(cfg: CompareConfig) -> int:
    """Train what is missing, then write the report; exit code 1 if a run failed. The suite's run folder is
    locked for the whole call (:mod:`vsr.runlock`): a second ``vsr compare`` of the same suite and folder is
    refused."""
    from vsr.runlock import locked_folder

    with locked_folder(cfg.runs_root, field="out"):
        return _run_locked(cfg)


def _run_locked(cfg: CompareConfig) -> int:
    from tqdm.auto import tqdm

    from llm_harness.compare.report import write_report

    kept_pool = cfg.report_dir / "pool.json"  # the pool the committed report was made on (sections.pool_section)
    if cfg.records and not kept_pool.is_file():  # a new suite's first part: a sibling's kept pool (same bytes, or reselected)
        kept_pool = next((r.parent / "pool.json" for r in cfg.shared_records_roots if (r.parent / "pool.json").is_file()),
                         kept_pool)
    if cfg.records and cfg.pool_path is not None and not Path(cfg.pool_path).is_file() and kept_pool.is_file():
        Path(cfg.pool_path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(kept_pool, cfg.pool_path)  # prepare_pool still reselects it if its settings differ
    if not cfg.report_only:
        prepare_pool(cfg)
    jobs = plan_jobs(cfg)
    # earlier parts' runs (other methods, other regimes) stay in the report: a part run never drops them
    planned = plan_jobs(replace(cfg, methods=(), regimes=())) if cfg.methods or cfg.regimes else jobs
    restored: dict[Path, int] = {}
    for j in planned if cfg.records else ():
        root = next((r for r in (cfg.records_root, *cfg.shared_records_roots) if restore_record(j, r, retrain=cfg.retrain)),
                    None)
        if root is not None:
            restored[root] = restored.get(root, 0) + 1
    for root, n in restored.items():
        print(f"vsr compare: {n} finished run(s) restored from {root}", flush=True)
    missing = [j for j in jobs if not _done(j)]
    todo = [] if cfg.report_only else missing
    print(f"vsr compare --suite {cfg.suite}: {len(jobs)} jobs, {len(jobs) - len(missing)} already done, "
          + (f"report only ({len(missing)} not run)" if cfg.report_only else f"{len(todo)} to run on {cfg.workers} worker(s), executor {cfg.executor}")
          + f" -> {cfg.runs_root}", flush=True)
    failures = 0
    t0 = time.perf_counter()
    if todo:
        runs = EXECUTORS[cfg.executor](todo, cfg.workers, _execute)
        bar = tqdm(runs, total=len(todo), desc="runs", file=sys.stdout)
        try:
            failures = _collect(cfg, bar)
        finally:
            runs.close()  # an interrupt in this loop still cancels the queue and stops the workers
            bar.close()
    wall = time.perf_counter() - t0
    current, stale = [], []  # finished runs of this config; done.json files from another config (not this suite's result)
    for j in planned:
        if _done(j):
            current.append(j)
            if cfg.records:
                save_record(j, cfg.records_root)
        elif (Path(j.run_dir) / "done.json").is_file():
            stale.append(j)
    if stale:
        print(f"vsr compare: {len(stale)} run(s) finished with another config are left out of the report "
              f"(e.g. {stale[0].regime}/{stale[0].method}/seed{stale[0].seed}); rerun without --report-only to redo them",
              flush=True)
    if not current:
        raise ValueError(f"no finished run of suite {cfg.suite!r} in {cfg.runs_root} (and no matching record in "
                         f"{cfg.records_root}): nothing to report" + ("; run it without --report-only first"
                                                                       if cfg.report_only else ""))
    now = {j.run_dir for j in jobs}  # this invocation's jobs first, then the rest of the suite
    absent = [j for j in jobs if not _done(j)] + [j for j in planned if j.run_dir not in now and not _done(j)]
    if absent:
        print(f"vsr compare: {len(absent)} of {len(planned)} planned run(s) are missing from the report "
              f"(failed or not run): {_describe_jobs(absent)}", flush=True)
    path = write_report(cfg, current, train_wall_s=wall if todo else None, missing=absent)
    print(f"report: {path}", flush=True)
    return 1 if failures else 0


def make_curriculum_figure(out_dir: Any, quick: bool = False) -> int:
    """``make figures`` entry: suite ``vsr_regime_small`` (``--quick``: smoke sizes) into ``out_dir``, whose
    ``curriculum_sparse.png`` is VSR's reverse curriculum on the test bed (issue 13 item 2)."""
    # records off: `make figures` regenerates the figure rather than restoring the committed runs
    return run(CompareConfig(suite="vsr_regime_small", out=Path(out_dir), quick=quick, workers=2, records=False))
