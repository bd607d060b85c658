"""IsolatedRunner: deadlines that kill runaway work, from threads and daemonic processes."""

from __future__ import annotations

import multiprocessing as mp
import operator
import os
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from llm_harness.tasks import IsolatedRunner


@pytest.fixture(scope="module")
def runner():
    r = IsolatedRunner(2, memory_limit_bytes=2 * 1024**3)
    yield r
    r.close()


def test_values_errors_and_order(runner):
    assert runner.call(operator.add, (2, 3), timeout_s=30).value == 5
    out = runner.call(int, ("x",), timeout_s=30)
    assert not out.ok and out.error.startswith("ValueError") and not out.timed_out
    outs = runner.map(abs, [(-i,) for i in range(8)], timeout_s=30)
    assert [o.value for o in outs] == list(range(8))


def test_runaway_c_computation_is_killed(runner):
    # 9 ** (9 ** 9) is one long C-level computation: no signal or thread could stop it.
    t0 = time.perf_counter()
    out = runner.call(operator.pow, (9, 9**9), timeout_s=1.0)
    assert out.timed_out and out.value is None and time.perf_counter() - t0 < 4.0
    before = runner.n_timeouts
    assert runner.call(time.sleep, (30,), timeout_s=0.5).timed_out
    assert runner.n_timeouts == before + 1
    assert runner.call(operator.mul, (6, 7), timeout_s=30).value == 42  # replaced worker


def test_killed_worker_processes_are_gone(runner):
    runner.warm_up()
    pids_before = {w.proc.pid for w in runner._all}
    assert runner.call(time.sleep, (30,), timeout_s=0.3).timed_out
    gone = pids_before - {w.proc.pid for w in runner._all}
    assert len(gone) == 1
    (pid,) = gone
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # reaped, not a zombie and not running


def test_crashing_and_memory_hungry_calls(runner):
    out = runner.call(os._exit, (3,), timeout_s=30)
    assert not out.ok and "died" in out.error
    out = runner.call(bytearray, (8 * 1024**3,), timeout_s=30)
    assert not out.ok and "MemoryError" in out.error
    assert runner.call(operator.add, (1, 1), timeout_s=30).value == 2


def test_bad_arguments(runner):
    with pytest.raises(ValueError, match="^fn: the call cannot be pickled"):
        runner.call(lambda: 1, timeout_s=5)
    with pytest.raises(ValueError, match="^timeout_s"):
        runner.call(abs, (1,), timeout_s=0)
    with pytest.raises(ValueError, match="^n_workers"):
        IsolatedRunner(0)
    assert runner.call(abs, (-1,), timeout_s=30).value == 1  # the worker survived


def test_threads_share_the_pool(runner):
    with ThreadPoolExecutor(max_workers=4) as ex:
        futs = [ex.submit(runner.call, time.sleep if i % 2 else abs, (5,) if i % 2 else (-i,), timeout_s=0.5) for i in range(4)]
        outs = [f.result(timeout=60) for f in futs]
    assert [o.timed_out for o in outs] == [False, True, False, True]
    assert outs[0].value == 0 and outs[2].value == 2


def _in_daemonic_child(_):
    r = IsolatedRunner(1)
    try:
        slow = r.call(time.sleep, (30,), timeout_s=0.5)
        fast = r.call(operator.add, (20, 22), timeout_s=30)
        return slow.timed_out, fast.value
    finally:
        r.close()


def test_works_inside_a_daemonic_pool_worker():
    with mp.get_context("fork").Pool(1) as pool:  # pool workers are daemonic
        assert pool.map(_in_daemonic_child, [0]) == [(True, 42)]


_INHERITED: list[IsolatedRunner] = []


def _use_inherited_runner(_):
    return os.getpid(), _INHERITED[0].call(os.getppid, (), timeout_s=30).value


def test_forked_child_starts_its_own_workers(runner):
    runner.warm_up()
    parents_workers = list(runner._all)
    _INHERITED[:] = [runner]
    try:
        with mp.get_context("fork").Pool(1) as pool:
            (child_pid, worker_parent), = pool.map(_use_inherited_runner, [0])
    finally:
        _INHERITED.clear()
    assert worker_parent == child_pid != os.getpid()  # not the parent's worker
    assert all(w.alive for w in parents_workers)  # and the child left the parent's workers alone
    assert runner.call(os.getppid, (), timeout_s=30).value == os.getpid()  # parent's pool intact


def test_closed_runner_refuses_calls():
    r = IsolatedRunner(1)
    assert r.call(abs, (-2,), timeout_s=30).value == 2
    r.close()
    with pytest.raises(RuntimeError, match="closed"):
        r.call(abs, (1,), timeout_s=1)
