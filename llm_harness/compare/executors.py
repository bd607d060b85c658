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

from vsr_util.registry import Registry

__all__ = ["EXECUTORS", "Executor", "process_pool", "ray_tasks"]

Executor = Callable[[Sequence[Any], int, Callable[[Any], dict]], Iterator[tuple[Any, "dict | BaseException"]]]

#: name -> executor(jobs, workers, fn) yielding (job, result or exception) in completion order
EXECUTORS: Registry[Executor] = Registry("compare executor")


def _exit_on_sigterm(signum: int, frame: Any) -> None:
    """Worker's SIGTERM: run multiprocessing's finalizers (they unlink the semaphores this worker created, e.g.
    tqdm's lock, which the resource tracker would otherwise report as leaked) and exit at once. The job's run
    folder stays resumable: every file in it is written atomically, and its lock dies with the process."""
    try:
        from multiprocessing import util

        util._run_finalizers(0)
    finally:
        os._exit(128 + signum)


def _watch_parent(parent_pid: int) -> None:
    """Worker initializer: ignore SIGINT (the parent decides: a terminal's Ctrl-C reaches the whole process
    group) and exit when the parent dies, so no worker outlives an interrupted or killed ``vsr compare``."""
    import signal
    import threading
    import time

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:  # Linux: the kernel sends SIGTERM to this worker when its parent exits
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass

    def watch() -> None:  # elsewhere (and as a second line of defence): poll the parent
        while True:
            if os.getppid() != parent_pid:
                os._exit(1)
            time.sleep(1.0)

    if os.getppid() != parent_pid:
        os._exit(1)
    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _terminate(pool: cf.ProcessPoolExecutor) -> None:
    """Cancel the queued jobs and stop the running workers now (their run folders stay resumable)."""
    procs = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for p in procs:
        if p.is_alive():
            p.terminate()
    for p in procs:
        p.join(timeout=10)
        if p.is_alive():
            p.kill()
            p.join(timeout=10)
    pool.shutdown(wait=True)  # the manager thread sees the dead workers and releases the queues' semaphores


@EXECUTORS.register("process")
def process_pool(jobs: Sequence[Any], workers: int, fn: Callable[[Any], dict]) -> Iterator[tuple[Any, Any]]:
    """``fn(job)`` in a pool of ``workers`` spawned processes. Interrupted (Ctrl-C, SIGTERM, or the caller
    closing this generator), it cancels the queued jobs and terminates the workers before re-raising;
    workers ignore SIGINT and die with the parent (:func:`_watch_parent`)."""
    pool = cf.ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn"),
                                  initializer=_watch_parent, initargs=(os.getpid(),))
    finished = False
    try:
        futs = {pool.submit(fn, j): j for j in jobs}
        for f in cf.as_completed(futs):
            try:
                res = f.result()
            except Exception as exc:  # noqa: BLE001 - reported by the caller, the other jobs go on
                res = exc
            yield futs[f], res
        finished = True
    finally:
        if finished:
            pool.shutdown(wait=True)
        else:
            _terminate(pool)


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
    except BaseException:
        if started:
            ray.shutdown()
        raise
    try:
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for r in done:
                try:
                    yield refs[r], ray.get(r)
                except ray.exceptions.RayTaskError as exc:
                    yield refs[r], exc.cause if isinstance(exc.cause, BaseException) else exc
    finally:
        for r in pending:  # interrupted (or the caller stopped early): cancel what has not finished
            try:
                ray.cancel(r, force=True)
            except Exception:  # noqa: BLE001 - best effort; shutdown below stops a local instance anyway
                pass
        if started:
            ray.shutdown()
