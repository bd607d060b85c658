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
*record* in the suite's records folder, ``records/compare_<suite>/<regime>/<method>/seed<k>/`` for a committed
suite (``OUT/records/...`` for a report folder outside ``figures/``; :func:`.records.records_folder`;
``records/README.md`` documents the format): ``done.json`` and the gzipped ``metrics.jsonl``, everything the report
reads, a few kB per run. :func:`run` first restores the records whose config matches a job into that job's run
folder, so a fresh clone resumes a suite where its committed records end and ``--report-only`` rebuilds the committed
report anywhere. A
record of another config is never restored (the job reruns and its record is replaced). Suites that
share arms (``Suite.shares_records_with``: the per-table Replay and ExTra suites share their GRPO and
default runs) also restore each other's matching records; such a record is not copied into the suite's
own folder: its manifest entry points at the sibling's (``records`` module doc, "Pointers"), and a
sibling record replaced since (another config) is named and not used. A suite writes only into its own
records folder.
"""

from __future__ import annotations

import shutil
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from llm_harness.compare.executors import EXECUTORS
from llm_harness.compare.jobs import CompareConfig, Job, is_done, plan_jobs, prepare_pool
from llm_harness.compare.records import (RecordError, check_not_in_report_folder, is_pointer, read_manifest, record_key,
                                         records_root, report_bad_record, restore_record, save_record, shared_records_roots)
from vsr_util.atomic import write_json

__all__ = ["make_curriculum_figure", "run"]


def _execute(job: Job) -> dict[str, Any]:
    """Worker: run one job and write its ``done.json`` (returns it)."""
    import torch

    from llm_harness.trainer.config import TrainConfig
    from vsr_util.config_io import from_dict

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
    from llm_harness.trainer.loop import EVAL_OUTCOMES

    outcomes = _eval_outcomes(d / EVAL_OUTCOMES)
    if outcomes is not None:
        out["eval_outcomes"] = outcomes
    out["wall_s"] = time.perf_counter() - t0
    out["config"] = job.resolved()
    out["pool_sha256"] = job.pool_sha256()
    write_json(d / "done.json", out)
    return out


def _eval_outcomes(path: Path) -> dict[str, Any] | None:
    """The final validation's per-problem outcomes for ``done.json`` (the trainer's ``eval_outcomes.json``): step, k,
    the sha256 of the problem ids in order (arms pair on it) and each problem's correct count; None without the file."""
    import hashlib
    import json

    if not path.is_file():
        return None
    doc = json.loads(path.read_text(encoding="utf-8"))
    ids = [str(p) for p in doc["problem_ids"]]
    return {"step": int(doc["step"]), "k": int(doc["k"]), "problems": len(ids),
            "problem_ids_sha256": hashlib.sha256("\n".join(ids).encode()).hexdigest(),
            "correct": [int(c) for c in doc["correct"]]}


def check_jobs(jobs: list[Job]) -> None:
    """Every job's config parsed and each distinct task built once, here, before any worker starts: a bad value
    (a task parameter the task does not take, a size over its bound) fails once, naming the job, instead of in
    every worker."""
    import json

    from llm_harness.tasks import get_task
    from llm_harness.trainer.config import TrainConfig
    from vsr_util.config_io import from_dict

    seen: set[str] = set()
    for j in jobs:
        where = f"{j.regime}/{j.method}"
        cfg = from_dict(TrainConfig, j.mapping, where=where)
        key = json.dumps([cfg.task.name, cfg.task.params], sort_keys=True, default=repr)
        if key in seen:
            continue
        seen.add(key)
        try:
            get_task(cfg.task.name, **dict(cfg.task.params))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{where}: task {cfg.task.name!r} with params {dict(cfg.task.params)}: {exc}") from exc


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
            save_record(j, records_root(cfg))  # kept as it finishes: a session that ends mid-suite loses nothing
        bar.set_postfix(last=f"{j.regime}/{j.method}/{j.seed}")
    return failures


def suite_list() -> str:
    """One line per registered suite: name, arms, regimes, seeds x updates, shared records (``--list-suites``)."""
    from llm_harness.compare.suite import SUITES

    lines = []
    for name in sorted(SUITES):
        s = SUITES[name]
        size = (f"{s.sizes['seeds']} seeds x {s.sizes['steps']} updates" if {"seeds", "steps"} <= set(s.sizes)
                else "vsr compare's default sizes")
        shares = f"; records shared with {', '.join(s.shares_records_with)}" if s.shares_records_with else ""
        lines.append(f"{name}: {len(s.methods)} arms ({', '.join(m.name for m in s.methods)}), "
                     f"{len(s.regimes)} regime(s), {size}{shares}")
    return "\n".join(lines)


def run(cfg: CompareConfig) -> int:
    """Train what is missing, then write the report; exit code 1 if a run failed. The suite's run folder and its
    records folder are locked for the whole call (:mod:`vsr_util.runlock`): a second ``vsr compare`` of the same suite
    is refused even when it names another run folder (both would rewrite the records' manifest)."""
    from contextlib import ExitStack

    from vsr_util.runlock import locked_folder

    if cfg.list_suites:
        print(suite_list())
        return 0
    if cfg.records:
        check_not_in_report_folder(cfg)  # before the lock creates the store's folder
    with ExitStack() as stack:
        stack.enter_context(locked_folder(cfg.runs_root, field="out"))
        if cfg.records:
            stack.enter_context(locked_folder(records_root(cfg), field="records"))
        return _run_locked(cfg)


def _run_locked(cfg: CompareConfig) -> int:
    from tqdm.auto import tqdm

    from llm_harness.compare.report import write_report

    own_root = records_root(cfg)
    roots = _readable_records_roots(cfg) if cfg.records else []  # a damaged manifest: refused before any work
    kept_pool = cfg.report_dir / "pool.json"  # the pool the committed report was made on (sections.common.pool_section)
    if cfg.records and not kept_pool.is_file():  # a new suite's first part: a sibling's kept pool (same bytes, or reselected)
        kept_pool = next((d / "pool.json" for d in cfg.shared_report_dirs if (d / "pool.json").is_file()), kept_pool)
    if cfg.records and cfg.pool_path is not None and not Path(cfg.pool_path).is_file() and kept_pool.is_file():
        Path(cfg.pool_path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(kept_pool, cfg.pool_path)  # prepare_pool still reselects it if its settings differ
    if not cfg.report_only:
        prepare_pool(cfg)
    jobs = plan_jobs(cfg)
    # earlier parts' runs (other methods, other regimes) stay in the report: a part run never drops them
    planned = plan_jobs(replace(cfg, methods=(), regimes=())) if cfg.methods or cfg.regimes else jobs
    restored: dict[Path, int] = {}
    own: list[Job] = []
    for j in planned if cfg.records else ():
        broken: list[RecordError] = []  # this suite's pointer for j cannot be followed: a sibling may still restore j
        root = next((r for r in roots
                     if restore_record(j, r, retrain=cfg.retrain, report_only=cfg.report_only,
                                       pointer_errors=broken if r == own_root else None)),
                    None)
        if root is None and broken:
            report_bad_record(broken[0], cfg.retrain, cfg.report_only)
        if root is not None:
            restored[root] = restored.get(root, 0) + 1
            if root == own_root:
                own.append(j)
    mine = read_manifest(own_root) if own else {}  # readable: restore_record read it
    via = sum(is_pointer(mine.get(record_key(j))) for j in own)  # restored through this suite's pointers
    for root, n in restored.items():
        print(f"vsr compare: {n} finished run(s) restored from {root}"
              + (f" ({via} of them through its pointers to sibling suites' records)" if via and root == own_root
                 else ""), flush=True)
    missing = [j for j in jobs if not is_done(j)]
    todo = [] if cfg.report_only else missing
    print(f"vsr compare --suite {cfg.suite}: {len(jobs)} jobs, {len(jobs) - len(missing)} already done, "
          + (f"report only ({len(missing)} not run)" if cfg.report_only else f"{len(todo)} to run on {cfg.workers} worker(s), executor {cfg.executor}")
          + f" -> {cfg.runs_root}", flush=True)
    failures = 0
    t0 = time.perf_counter()
    if todo:
        check_jobs(todo)
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
        if is_done(j):
            current.append(j)
            if cfg.records:  # a run a sibling suite holds byte for byte: a pointer to its record, not a copy
                save_record(j, own_root, shared_records_roots(cfg))
        elif (Path(j.run_dir) / "done.json").is_file():
            stale.append(j)
    if stale:
        print(f"vsr compare: {len(stale)} run(s) finished with another config are left out of the report "
              f"(e.g. {stale[0].regime}/{stale[0].method}/seed{stale[0].seed}); rerun without --report-only to redo them",
              flush=True)
    if not current:
        raise ValueError(f"no finished run of suite {cfg.suite!r} in {cfg.runs_root} (and no matching record in "
                         f"{own_root}): nothing to report" + ("; run it without --report-only first"
                                                                       if cfg.report_only else ""))
    now = {j.run_dir for j in jobs}  # this invocation's jobs first, then the rest of the suite
    absent = [j for j in jobs if not is_done(j)] + [j for j in planned if j.run_dir not in now and not is_done(j)]
    if absent:
        print(f"vsr compare: {len(absent)} of {len(planned)} planned run(s) are missing from the report "
              f"(failed or not run): {_describe_jobs(absent)}", flush=True)
    path = write_report(cfg, current, train_wall_s=wall if todo else None, missing=absent)
    print(f"report: {path}", flush=True)
    return 1 if failures else 0


def _readable_records_roots(cfg: CompareConfig) -> list[Path]:
    """The records roots to restore from, each manifest read once (not once per job): this suite's own, whose
    damaged manifest stops the call before anything is restored, trained or reported (no finished run's record could
    be added to it, and ``--report-only`` cannot check the records it would report), then the siblings' that read
    (a damaged one is named once and not used; refused with ``--no-retrain``)."""
    own = records_root(cfg)
    try:
        read_manifest(own)
    except RecordError as e:
        raise RecordError(f"{e} (vsr compare stopped before restoring, training or reporting anything)") from None
    roots = [own]
    for root in shared_records_roots(cfg):
        try:
            read_manifest(root)
        except RecordError as e:
            if not cfg.retrain:
                raise RecordError(f"{e}; refusing (--no-retrain)") from None
            then = "their jobs are left out of the report" if cfg.report_only else "their jobs train again"
            print(f"vsr compare: a sibling suite's records are not used, {then} unless restored from another "
                  f"folder: {e}", flush=True)
            continue
        roots.append(root)
    return roots


def make_curriculum_figure(out_dir: Any, quick: bool = False) -> int:
    """``make figures`` entry: suite ``vsr_regime_small`` (``--quick``: smoke sizes) into ``out_dir``, whose
    ``curriculum_sparse.png`` is VSR's reverse curriculum on the test bed."""
    # records off: `make figures` regenerates the figure rather than restoring the committed runs; so the timings,
    # which differ on every run, go to the uncommitted timings.json and the committed report reproduces byte for byte
    return run(CompareConfig(suite="vsr_regime_small", out=Path(out_dir), quick=quick, workers=2, records=False,
                             timings_apart=True))
