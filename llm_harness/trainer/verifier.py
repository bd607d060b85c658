"""``task.verify`` under a deadline: an exception or a timeout gives reward 0 and is counted, never a crash
(:class:`SafeVerifier`, used by the trainer's collectors, its evaluation and the prefix-value studies)."""

from __future__ import annotations

import concurrent.futures as cf
from typing import Callable, Sequence

from llm_harness.tasks import ParseStatus, Problem, Task, VerifyResult

__all__ = ["SafeVerifier"]


class SafeVerifier:
    """``task.verify`` with a deadline and exception capture; counts failures in ``errors``/``timeouts``.

    With ``timeout_s > 0`` verifications run on a small thread pool and a result not ready by the
    deadline becomes ``VerifyResult(0, TIMEOUT)`` (the worker thread is abandoned, not killed: a
    grader that never returns keeps one pool thread busy). Tasks with their own isolation (the
    math task's subprocess runner) are unaffected.
    """

    def __init__(self, task: Task, timeout_s: float = 10.0, workers: int = 2, warn: Callable[[str], None] | None = None):
        self.task = task
        self.timeout_s = float(timeout_s)
        self.errors = 0
        self.timeouts = 0
        self.warn = warn or (lambda msg: None)
        self._pool = cf.ThreadPoolExecutor(max_workers=workers) if self.timeout_s > 0 else None

    def _one(self, problem: Problem, text: str) -> VerifyResult:
        return self.task.verify(problem, text)

    def _error(self, problem: Problem, exc: BaseException) -> VerifyResult:
        self.errors += 1
        self.warn(f"verify raised for problem {problem.id!r}: {type(exc).__name__}: {exc}")
        return VerifyResult(0.0, ParseStatus.ERROR, detail=f"{type(exc).__name__}: {exc}")

    def verify_many(self, problems: Sequence[Problem], texts: Sequence[str]) -> list[VerifyResult]:
        """Verify ``texts[i]`` against ``problems[i]``; never raises for grader failures."""
        if self._pool is None:
            out = []
            for p, t in zip(problems, texts):
                try:
                    out.append(self._one(p, t))
                except Exception as exc:  # noqa: BLE001 - any grader failure is reward 0
                    out.append(self._error(p, exc))
            return out
        futs = [self._pool.submit(self._one, p, t) for p, t in zip(problems, texts)]
        out = []
        for p, f in zip(problems, futs):
            try:
                out.append(f.result(timeout=self.timeout_s))
            except cf.TimeoutError:
                self.timeouts += 1
                self.warn(f"verify timed out after {self.timeout_s}s for problem {p.id!r}")
                out.append(VerifyResult(0.0, ParseStatus.TIMEOUT, timed_out=True, detail="trainer deadline"))
            except Exception as exc:  # noqa: BLE001
                out.append(self._error(p, exc))
        return out

    def close(self) -> None:
        """Shut the pool down without waiting for abandoned workers."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
