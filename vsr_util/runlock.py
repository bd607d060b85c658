"""One writer per run folder: an advisory lock held for a run's whole life.

``vsr train``, ``vsr study`` and ``vsr compare`` write into a folder that later commands resume from;
two processes writing the same folder interleave metrics, overwrite each other's configuration and
point ``latest`` at the other run's checkpoint. :class:`FolderLock` takes an exclusive
``flock(2)`` on ``<folder>/.vsr.lock`` and writes its holder (pid, host, command, start time) into it.
The kernel drops the lock when its file descriptor closes, so a process that dies in any way
(``kill -9`` included) frees the folder: a lock file left by a dead holder is stale and simply
taken over. A second writer is refused with :class:`FolderBusyError` naming the holder.

The lock file is opened without following a symbolic link, and anything but a plain file with one
name (a link, a folder, a FIFO, a hard link shared with another path) is refused naming it: writing
the holder's record must never truncate a file outside the folder.

The lock is advisory: it binds processes that use it (every writing ``vsr`` command), not ``rm``.
On a network filesystem without ``flock`` support the lock is refused with the reason rather than
silently skipped.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import json
import os
import socket
import stat
import sys
from pathlib import Path
from typing import Any, Iterator

__all__ = ["FolderBusyError", "FolderLock", "LOCK_NAME", "check_folder_path", "holder_of", "locked_folder"]

#: the lock file inside a locked folder
LOCK_NAME = ".vsr.lock"


class FolderBusyError(ValueError):
    """Another live process holds the folder's lock."""


def check_folder_path(folder: Path, field: str) -> None:
    """Refuse a folder path that cannot be a run folder, naming ``field``: a dangling symbolic link, or a
    path that exists and is not a directory."""
    if folder.is_symlink() and not folder.exists():
        raise ValueError(f"{field}: {folder} is a symbolic link to {os.readlink(folder)!r}, which does not exist; "
                         "create its target or choose another folder")
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"{field}: {folder} exists and is not a folder")


#: the most bytes of a lock file read back as its holder's record
_MAX_RECORD_BYTES = 64 * 1024

#: flags of every open of a lock file: never through a symbolic link, never blocking (on a FIFO)
_OPEN_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


def holder_of(folder: str | Path) -> dict[str, Any] | None:
    """The holder recorded in ``folder``'s lock file (``None``: no file, not a plain file, or unreadable).
    The record may be a dead process's (a stale lock); only :meth:`FolderLock.acquire` tells whether it is
    held."""
    try:
        fd = os.open(Path(folder) / LOCK_NAME, os.O_RDONLY | _OPEN_FLAGS)
    except OSError:
        return None
    try:
        with os.fdopen(fd, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                return None
            return json.loads(fh.read(_MAX_RECORD_BYTES))
    except (OSError, ValueError):
        return None


def _kind_of(path: Path) -> str:
    """What ``path`` is, in words, for a lock file that is not a plain file (without following a link)."""
    try:
        st = os.lstat(path)
    except OSError as exc:
        return f"unusable ({exc.strerror})"
    if stat.S_ISLNK(st.st_mode):
        try:
            return f"a symbolic link (to {os.readlink(path)!r})"
        except OSError:
            return "a symbolic link"
    kinds = [(stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"),
             (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")]
    for test, name in kinds:
        if test(st.st_mode):
            return name
    if st.st_nlink > 1:
        return f"a file with {st.st_nlink} hard links (it is also reachable from another path)"
    return "not a plain file"


def _not_a_lock_file(path: Path, field: str) -> ValueError:
    """The error for a lock path that must not be opened or written, naming it and what it is."""
    return ValueError(f"{field}: the lock file {path} is {_kind_of(path)}; a run folder's lock must be a plain "
                      "file of its own, since the lock record is written into it (through a link it would overwrite "
                      f"another file): remove {path} and run again")


def _open_lock_file(path: Path, field: str) -> int:
    """A read-write descriptor of lock file ``path`` (created if missing), opened without following a
    symbolic link; anything but a plain file with a single name is refused (:func:`_not_a_lock_file`)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | _OPEN_FLAGS, 0o644)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO, errno.EMLINK):
            raise _not_a_lock_file(path, field) from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1:
        os.close(fd)
        raise _not_a_lock_file(path, field)
    return fd


def _describe(holder: dict[str, Any] | None) -> str:
    if not holder:
        return "another process (its record is unreadable)"
    cmd = holder.get("command") or "?"
    return (f"pid {holder.get('pid', '?')} on {holder.get('host', '?')} (`{cmd}`, since "
            f"{holder.get('started', '?')})")


class FolderLock:
    """Exclusive advisory lock on a run folder (module doc). Use as a context manager, or
    :meth:`acquire` / :meth:`release`; the folder is created if missing (and :attr:`created` says so)."""

    def __init__(self, folder: str | Path, *, field: str = "run folder", command: str | None = None):
        self.folder = Path(folder)
        self.field = field
        self.command = command if command is not None else " ".join(["vsr", *sys.argv[1:]])[:300]
        self.created = False
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> "FolderLock":
        import fcntl

        if self._fd is not None:
            return self
        check_folder_path(self.folder, self.field)
        self.created = not self.folder.exists()
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / LOCK_NAME
        fd = _open_lock_file(path, self.field)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise FolderBusyError(
                f"{self.field}: {self.folder} is being written by {_describe(holder_of(self.folder))}; "
                "one writer per folder: wait for it to finish, stop it, or choose another folder") from None
        except OSError as exc:
            os.close(fd)
            raise OSError(exc.errno, f"cannot lock {path} ({exc.strerror}); the filesystem must support flock",
                          str(path)) from None
        record = {"pid": os.getpid(), "host": socket.gethostname(), "command": self.command,
                  "started": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")}
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(record) + "\n").encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        """Drop the lock (the file stays: removing it would race with a process opening it)."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)

    def discard_if_created(self) -> None:
        """Release, and remove the folder again when this lock created it and nothing else was written
        (a run refused during validation leaves no trace)."""
        self.release()
        if self.created:
            try:
                entries = {p.name for p in self.folder.iterdir()}
                if entries <= {LOCK_NAME}:
                    (self.folder / LOCK_NAME).unlink(missing_ok=True)
                    self.folder.rmdir()
            except OSError:
                pass

    def __enter__(self) -> "FolderLock":
        return self.acquire()

    def __exit__(self, *exc: Any) -> None:
        self.release()

    def __del__(self) -> None:  # pragma: no cover - a lock forgotten by its owner is not kept forever
        self.release()


@contextlib.contextmanager
def locked_folder(folder: str | Path, *, field: str = "run folder") -> Iterator[FolderLock]:
    """Hold ``folder``'s lock for the ``with`` block; a block that raises and wrote nothing leaves no folder
    behind when the lock created it."""
    lock = FolderLock(folder, field=field).acquire()
    try:
        yield lock
    except BaseException:
        lock.discard_if_created()
        raise
    finally:
        lock.release()
