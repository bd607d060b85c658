"""Run verification code under a hard deadline, from any thread or process.

math-verify's own timeout uses ``signal.alarm``, which only works in the main thread of the
main interpreter; a thread-based timeout cannot stop a runaway computation either (pure-Python
sympy loops and ``re`` hold the GIL and threads cannot be killed).  So verification runs in
separate worker *processes*:

* :class:`IsolatedRunner` owns ``n_workers`` workers started with :mod:`subprocess` (not
  :mod:`multiprocessing`, so it also works inside daemonic pool workers, DataLoader workers
  and threads).  Each call pickles a module-level function and its arguments to an idle
  worker and waits at most ``timeout_s`` for the answer.
* **Runaway computations:** when the deadline passes, the worker is killed with SIGKILL and
  reaped at once; the computation dies with it, nothing keeps running in the background.  The
  call returns ``CallOutcome(timed_out=True)`` (a warning is logged) and a fresh worker is
  started lazily on the next call.  A worker that crashes (segfault, OOM kill) is replaced
  the same way and the call reports an error.
* Each worker preloads its imports (e.g. ``math_verify``) before it reports ready, so import
  time never counts against a call's deadline, and caps its address space
  (``memory_limit_bytes``, default 8 GiB) so a giant integer raises MemoryError rather than
  exhausting the machine.
* After ``fork`` the child builds its own workers (it never talks to the parent's).

POSIX only (socket pairs passed to the child with ``pass_fds``).
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import queue
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Callable, Sequence

from vsr_util.checks import check_number

__all__ = ["CallOutcome", "IsolatedRunner", "shared_runner"]

logger = logging.getLogger(__name__)

_WORKER_SCRIPT = str(Path(__file__).with_name("_isolation_worker.py"))
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])

#: Default cap on a worker's address space (bytes).
DEFAULT_MEMORY_LIMIT = 8 * 1024**3


@dataclass(frozen=True)
class CallOutcome:
    """Result of one isolated call."""

    value: Any = None
    """The function's return value (``None`` on timeout or error)."""
    timed_out: bool = False
    """True iff the deadline passed and the worker was killed."""
    error: str | None = None
    """The exception (type and message) raised in the worker, or why the worker failed."""
    elapsed_s: float = 0.0
    """Wall-clock seconds from sending the call to its outcome."""

    @property
    def ok(self) -> bool:
        """True iff the call returned normally."""
        return not self.timed_out and self.error is None


class _Worker:
    """One worker subprocess and its connection."""

    def __init__(self, preload: Sequence[str], memory_limit: int, start_timeout_s: float) -> None:
        parent_sock, child_sock = socket.socketpair()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([_PACKAGE_ROOT] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        env.setdefault("OMP_NUM_THREADS", "1")
        try:
            self.proc = subprocess.Popen(
                [sys.executable, _WORKER_SCRIPT, str(child_sock.fileno()), json.dumps(list(preload)), str(memory_limit)],
                pass_fds=(child_sock.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                env=env,
                close_fds=True,
            )
        finally:
            child_sock.close()
        self.conn = Connection(parent_sock.detach())
        if not self.conn.poll(start_timeout_s):
            self.kill()
            raise RuntimeError(f"verification worker did not start within {start_timeout_s:g} s")
        try:
            kind, payload = self.conn.recv()
        except EOFError:
            self.kill()
            raise RuntimeError("verification worker exited during start-up (see stderr)") from None
        if kind != "ready":
            self.kill()
            raise RuntimeError(f"verification worker failed to start: {payload}")

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        try:
            self.proc.kill()
        except OSError:  # already gone
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover - unkillable process
            logger.error("verification worker %d did not exit after SIGKILL", self.proc.pid)
        try:
            self.conn.close()
        except OSError:  # pragma: no cover
            pass

    def close(self) -> None:
        """Ask the worker to exit, kill it if it does not within a second."""
        try:
            self.conn.send(None)
            self.proc.wait(timeout=1.0)
        except Exception:
            pass
        self.kill()


class IsolatedRunner:
    """A pool of worker processes that run picklable calls under a deadline (module docstring).

    Thread-safe: concurrent :meth:`call` s use different workers (a call waits for an idle one).
    """

    def __init__(
        self,
        n_workers: int = 1,
        *,
        preload: Sequence[str] = (),
        memory_limit_bytes: int | None = DEFAULT_MEMORY_LIMIT,
        start_timeout_s: float = 120.0,
    ) -> None:
        check_number("n_workers", n_workers, 1, integer=True)
        check_number("start_timeout_s", start_timeout_s, 0, lo_open=True)
        self.n_workers = int(n_workers)
        self.preload = tuple(preload)
        self.memory_limit = int(memory_limit_bytes or 0)
        self.start_timeout_s = float(start_timeout_s)
        self.n_timeouts = 0
        """Number of calls cut by the deadline so far."""
        self._lock = threading.Lock()
        self._closed = False
        self._reset_slots()

    def _reset_slots(self) -> None:
        self._pid = os.getpid()
        self._slots: queue.Queue[_Worker | None] = queue.Queue()
        self._all: list[_Worker] = []
        for _ in range(self.n_workers):
            self._slots.put(None)  # started lazily

    def _check_fork(self) -> None:
        if os.getpid() != self._pid:
            with self._lock:
                if os.getpid() != self._pid:
                    self._reset_slots()  # never touch the parent's workers

    def _start(self) -> _Worker:
        w = _Worker(self.preload, self.memory_limit, self.start_timeout_s)
        with self._lock:
            self._all.append(w)
        return w

    def _retire(self, w: _Worker) -> None:
        w.kill()
        with self._lock:
            if w in self._all:
                self._all.remove(w)

    def warm_up(self) -> None:
        """Start every worker now (otherwise they start on first use)."""
        self._check_fork()
        taken = [self._slots.get() for _ in range(self.n_workers)]
        try:
            taken = [w if (w is not None and w.alive) else self._start() for w in taken]
        finally:
            for w in taken:
                self._slots.put(w)

    def call(self, fn: Callable[..., Any], args: Sequence[Any] = (), *, timeout_s: float) -> CallOutcome:
        """Run ``fn(*args)`` in a worker; give up (and kill the worker) after ``timeout_s``.

        ``fn`` must be picklable by reference (a module-level function).  A pickling failure of
        the call is a programming error and raises ValueError.
        """
        if self._closed:
            raise RuntimeError("IsolatedRunner: already closed")
        check_number("timeout_s", timeout_s, 0, lo_open=True)
        self._check_fork()
        w = self._slots.get()
        try:
            if w is not None and not w.alive:
                self._retire(w)
                w = None
            if w is None:
                w = self._start()
            t0 = time.perf_counter()
            try:
                w.conn.send((fn, tuple(args)))
            except (BrokenPipeError, ConnectionResetError, EOFError):
                self._retire(w)
                w = None
                return CallOutcome(error="verification worker died before the call", elapsed_s=0.0)
            except Exception as exc:
                raise ValueError(f"fn: the call cannot be pickled for a worker process ({type(exc).__name__}: {exc})") from None
            if not w.conn.poll(timeout_s):
                elapsed = time.perf_counter() - t0
                self._retire(w)
                w = None
                with self._lock:
                    self.n_timeouts += 1
                logger.info(
                    "isolated call %s timed out after %.2f s; worker killed",
                    getattr(fn, "__qualname__", fn),
                    elapsed,
                )
                return CallOutcome(timed_out=True, elapsed_s=elapsed)
            try:
                kind, payload = w.conn.recv()
            except (EOFError, OSError):
                self._retire(w)
                w = None
                return CallOutcome(error="verification worker died during the call", elapsed_s=time.perf_counter() - t0)
            elapsed = time.perf_counter() - t0
            if kind == "ok":
                return CallOutcome(value=payload, elapsed_s=elapsed)
            return CallOutcome(error=str(payload), elapsed_s=elapsed)
        finally:
            self._slots.put(w)

    def map(self, fn: Callable[..., Any], arg_list: Sequence[Sequence[Any]], *, timeout_s: float) -> list[CallOutcome]:
        """:meth:`call` for every argument tuple, spread over the workers; results in order.

        Each call gets its own ``timeout_s``.
        """
        if len(arg_list) <= 1 or self.n_workers == 1:
            return [self.call(fn, a, timeout_s=timeout_s) for a in arg_list]
        with ThreadPoolExecutor(max_workers=self.n_workers) as ex:
            return list(ex.map(lambda a: self.call(fn, a, timeout_s=timeout_s), arg_list))

    def close(self) -> None:
        """Stop every worker of this process (idempotent)."""
        if os.getpid() != self._pid:
            self._closed = True
            return
        with self._lock:
            workers, self._all = list(self._all), []
            self._closed = True
        for w in workers:
            w.close()

    def __enter__(self) -> "IsolatedRunner":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_SHARED: dict[tuple, IsolatedRunner] = {}
_SHARED_LOCK = threading.Lock()


def shared_runner(
    n_workers: int = 1, *, preload: Sequence[str] = (), memory_limit_bytes: int | None = DEFAULT_MEMORY_LIMIT
) -> IsolatedRunner:
    """A process-wide runner per ``(n_workers, preload, memory_limit_bytes)``, closed at exit."""
    key = (os.getpid(), int(n_workers), tuple(preload), memory_limit_bytes)
    with _SHARED_LOCK:
        r = _SHARED.get(key)
        if r is None or r._closed:
            r = IsolatedRunner(n_workers, preload=preload, memory_limit_bytes=memory_limit_bytes)
            _SHARED[key] = r
        return r


@atexit.register
def _close_shared() -> None:  # pragma: no cover - exercised at interpreter exit
    for r in list(_SHARED.values()):
        try:
            r.close()
        except Exception:
            pass
