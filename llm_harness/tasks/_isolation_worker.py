"""Worker process of :mod:`llm_harness.tasks.isolation` (run as a script, not imported).

Usage: ``python _isolation_worker.py FD PRELOAD_JSON MEMORY_LIMIT_BYTES``.  ``FD`` is an
inherited socket; messages are pickled ``(fn, args)`` pairs, answered with ``("ok", value)`` or
``("err", message)``.  ``None`` or end-of-file ends the worker.  The worker's stdout goes to
``/dev/null`` (set by the parent), so stray prints cannot corrupt the protocol.
"""

from __future__ import annotations

import sys

# Run as a script, sys.path[0] is this folder: drop it so sibling modules cannot shadow packages.
if sys.path and sys.path[0] and __name__ == "__main__":
    sys.path.pop(0)

import importlib  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import traceback  # noqa: E402
from multiprocessing.connection import Connection  # noqa: E402


def _preload(entries: list[str]) -> None:
    for entry in entries:
        module, _, func = entry.partition(":")
        mod = importlib.import_module(module)
        if func:
            getattr(mod, func)()


def main(argv: list[str]) -> int:
    fd, preload, mem = int(argv[1]), json.loads(argv[2]), int(argv[3])
    conn = Connection(fd)
    try:
        _preload(preload)
        if mem > 0:
            import resource

            resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
    except BaseException as exc:  # report start-up failures to the parent, then exit
        conn.send(("err", f"worker start-up failed: {type(exc).__name__}: {exc}"))
        return 1
    conn.send(("ready", os.getpid()))
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return 0
        except BaseException as exc:  # the call could not be unpickled (e.g. missing module)
            conn.send(("err", f"cannot read call: {type(exc).__name__}: {exc}"))
            continue
        if msg is None:
            return 0
        fn, args = msg
        try:
            reply = ("ok", fn(*args))
        except MemoryError:
            reply = ("err", "MemoryError: worker memory limit reached")
        except BaseException as exc:
            tb = traceback.format_exc(limit=3)
            reply = ("err", f"{type(exc).__name__}: {exc}\n{tb}")
        try:
            conn.send(reply)
        except Exception as exc:  # unpicklable result
            conn.send(("err", f"result could not be sent: {type(exc).__name__}: {exc}"))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
