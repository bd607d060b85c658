"""Where ``vsr compare`` runs its jobs: a registry of executors, one call site in :func:`.runner.run`.

An executor takes the jobs to run, a worker count and the job function (``runner._execute``: trains
or evaluates one job and writes its ``done.json``), and yields ``(job, result)`` as jobs finish —
``result`` is the job's ``done.json`` mapping, or the exception it raised. Entries:

* ``process`` — a spawned process pool of ``workers`` processes on this machine (the default);
* ``ray`` — one Ray task per job (``num_cpus=1``). With ``RAY_ADDRESS`` set (or Ray already
  initialised) the tasks go to that cluster and its CPUs set the parallelism; otherwise a local
  Ray instance with ``workers`` CPUs is started and shut down afterwards. Run folders are written
  by the workers: on a cluster ``--out`` must be a filesystem every node shares. The resumable
  ``done.json`` fingerprints are the same for both executors (they are the job's, not the executor's).
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing as mp
import os
from typing import Any, Callable, Iterator, Sequence

from vsr.registry import Registry

__all__ = ["EXECUTORS", "Executor", "process_pool", "ray_tasks"]

Executor = Callable[[Sequence[Any], int, Callable[[Any], dict]], Iterator[tuple[Any, "dict | BaseException"]]]

#: name -> executor(jobs, workers, fn) yielding (job, result or exception) in completion order
EXECUTORS: Registry[Executor] = Registry("compare executor")


@EXECUTORS.register("process")
def process_pool(jobs: Sequence[Any], workers: int, fn: Callable[[Any], dict]) -> Iterator[tuple[Any, Any]]:
    """``fn(job)`` in a pool of ``workers`` spawned processes."""
    with cf.ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn")) as pool:
        futs = {pool.submit(fn, j): j for j in jobs}
        for f in cf.as_completed(futs):
            try:
                yield futs[f], f.result()
            except Exception as exc:  # noqa: BLE001 - reported by the caller, the other jobs go on
                yield futs[f], exc


@EXECUTORS.register("ray")
def ray_tasks(jobs: Sequence[Any], workers: int, fn: Callable[[Any], dict]) -> Iterator[tuple[Any, Any]]:
    """``fn(job)`` as one Ray task per job (module doc: local instance or ``RAY_ADDRESS`` cluster)."""
    try:
        import ray
    except ImportError:
        raise ValueError("executor: 'ray' needs the ray package (pip install 'vsr-toolkit[verl]' or ray)") from None
    started = not ray.is_initialized()
    if started:
        if os.environ.get("RAY_ADDRESS"):
            ray.init(address=os.environ["RAY_ADDRESS"], log_to_driver=False)
        else:
            ray.init(num_cpus=int(workers), include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        remote = ray.remote(num_cpus=1, max_retries=0)(fn)
        refs = {remote.remote(j): j for j in jobs}
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for r in done:
                try:
                    yield refs[r], ray.get(r)
                except ray.exceptions.RayTaskError as exc:
                    yield refs[r], exc.cause if isinstance(exc.cause, BaseException) else exc
    finally:
        if started:
            ray.shutdown()
