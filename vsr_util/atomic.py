"""Atomic result files: write to a temporary file in the same folder, fsync, then rename.

A crash mid-write leaves the previous file intact instead of a truncated one.
"""

from __future__ import annotations

import contextlib
import csv
import errno
import io
import json
import numbers
import os
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence


#: ``errno`` values of a full disk or an exhausted quota
DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


def is_disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` is an ``OSError`` of a full disk or an exhausted quota (:data:`DISK_FULL_ERRNOS`)."""
    return isinstance(exc, OSError) and exc.errno in DISK_FULL_ERRNOS


@contextlib.contextmanager
def naming_path(path: str | os.PathLike) -> Iterator[None]:
    """Give a full-disk ``OSError`` raised inside the block without a file name (``write``, ``flush`` and ``fsync``
    name none) the name ``path``, so the one-line error says what was being written."""
    try:
        yield
    except OSError as exc:
        if not is_disk_full(exc) or exc.filename is not None:
            raise
        raise OSError(exc.errno, exc.strerror, str(path)) from exc


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success it replaces ``path`` atomically. A full disk while
    writing raises an ``OSError`` naming ``path`` (:func:`naming_path`)."""
    path = Path(path)
    with naming_path(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.close(fd)
    tmp_path = Path(tmp)
    try:
        with naming_path(path):
            yield tmp_path
            with open(tmp_path, "rb+") as fh:
                os.fsync(fh.fileno())
            # mkstemp creates 0600 files; give results the permissions a plain open() would
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp_path, 0o666 & ~umask)
            os.replace(tmp_path, path)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def check_output_file(path: str | os.PathLike, field: str) -> None:
    """Refuse, before any work, a result file that cannot be written, naming ``field`` and the path at fault: a
    path that is a folder, an ancestor that is a file or cannot be reached (a symbolic-link loop), or a nearest
    existing folder that is not writable. Missing folders are fine (:func:`atomic_path` creates them)."""
    import stat

    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{field}: {path} is a folder, not a file; give a file path (e.g. {path / 'result.json'})")
    for anc in path.parents:  # the nearest existing ancestor must be a writable folder
        try:
            st = os.stat(anc)
        except (FileNotFoundError, NotADirectoryError):
            continue  # missing (created later), or below a file (found further up)
        except OSError as exc:
            raise ValueError(f"{field}: cannot reach {anc} ({exc.strerror}), so {path} cannot be written") from None
        if not stat.S_ISDIR(st.st_mode):
            raise ValueError(f"{field}: {anc} is a file, not a folder, so {path} cannot be written under it")
        if not os.access(anc, os.W_OK | os.X_OK):
            raise ValueError(f"{field}: cannot write {path}: {anc} is not writable")
        return


def write_text(path: str | os.PathLike, text: str) -> Path:
    """Atomically write ``text`` to ``path``."""
    with atomic_path(path) as tmp:
        tmp.write_text(text)
    return Path(path)


def write_json(path: str | os.PathLike, obj: Any, *, indent: int = 2) -> Path:
    """Atomically write ``obj`` as JSON (NaN/inf are rejected rather than written silently)."""
    return write_text(path, json.dumps(obj, indent=indent, allow_nan=False, default=_json_default) + "\n")


#: floats in committed CSV files: 12 significant digits, so a result that moves only in its last bits between machines
#: or thread schedules (a parallel reduction's summation order) writes the same bytes (``make figures`` reproduces them)
CSV_FLOAT_FORMAT = "%.12g"


def _csv_field(value: Any, float_format: str | None, na_rep: str | None) -> str:
    """One CSV field's text: ``None`` empty, a string as it is, a float (Python's or NumPy's) through ``float_format``
    (``str`` without one) and NaN as ``na_rep`` (``None``: as the float formats it, ``nan``), anything else ``str``."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, numbers.Real) and not isinstance(value, numbers.Integral):
        if na_rep is not None and value != value:
            return na_rep
        return float_format % value if float_format else str(value)
    return str(value)


def csv_text(header: Sequence[Any] | None, rows: Iterable[Sequence[Any] | Mapping[str, Any]], *,
             float_format: str | None = None, na_rep: str | None = None, lineterminator: str = "\n",
             ignore_extra: bool = False) -> str:
    """``rows`` (after ``header``, when given) as CSV text through Python's :mod:`csv` module: a field holding a comma,
    a quote or a line break is quoted and its quotes doubled, so every field reads back as written.

    A row is a sequence of fields, or a mapping read in ``header``'s order (a missing key is an empty field; a key
    outside the header is a ``ValueError`` unless ``ignore_extra``). Fields are formatted by type: ``None`` empty,
    floats through ``float_format`` (e.g. :data:`CSV_FLOAT_FORMAT`; ``str`` without one), NaN as ``na_rep`` when it is
    given, anything else with ``str``. Lines end with ``lineterminator``."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator=lineterminator)
    names = list(header) if header is not None else None
    if names is not None:
        writer.writerow([str(h) for h in names])
    known = set(names or ())
    for row in rows:
        if isinstance(row, Mapping):
            if names is None:
                raise ValueError("csv rows given as mappings need a header")
            extra = [k for k in row if k not in known]
            if extra and not ignore_extra:
                raise ValueError(f"csv row has keys outside the header: {extra}")
            row = [row.get(k) for k in names]
        writer.writerow([_csv_field(v, float_format, na_rep) for v in row])
    return buf.getvalue()


def write_csv(path: str | os.PathLike, header: Sequence[Any] | None, rows: Iterable[Sequence[Any] | Mapping[str, Any]],
              **fmt: Any) -> Path:
    """Atomically write ``rows`` as a CSV file (UTF-8, line ends as given): the one CSV writer of the toolkit; ``fmt``
    are :func:`csv_text`'s keywords (``float_format``, ``na_rep``, ``lineterminator``, ``ignore_extra``)."""
    text = csv_text(header, rows, **fmt)
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8", newline="") as fh:
        fh.write(text)
    return Path(path)


def write_frame_csv(path: str | os.PathLike, frame: Any, *, float_format: str | None = None) -> Path:
    """Atomically write a pandas ``DataFrame`` through :func:`write_csv`, formatted as ``frame.to_csv(index=False,
    float_format=float_format)`` formats it: the columns' names as the header, float columns through
    ``float_format`` (``str`` without one), missing values (NaN, ``None``) empty, every other value with ``str``."""
    import pandas as pd

    columns = []
    for i in range(frame.shape[1]):
        values = frame.iloc[:, i].to_numpy()
        missing = pd.isna(values)
        if values.dtype.kind == "f":
            columns.append(["" if m else (float_format % v if float_format else str(v)) for v, m in zip(values, missing)])
        else:
            columns.append(["" if m else v for v, m in zip(values, missing)])
    return write_csv(path, list(frame.columns), zip(*columns) if columns else [])

#: the file beside a result that holds its wall-clock numbers (and other measurements of the machine, such as peak
#: memory): they differ on every run, so they stay out of the committed result, which ``make figures`` then rewrites
#: byte for byte (``make figures-check``); ``.gitignore`` leaves out every ``timings.*`` and ``*.timings.json``
TIMINGS_FILE = "timings.json"


def split_fields(obj: Any, keys: frozenset[str] | set[str], *, ids: tuple[str, ...] = ()) -> tuple[Any, Any]:
    """``(rest, taken)``: ``obj`` (plain JSON data: dicts, lists, scalars) without the mapping entries whose key is
    in ``keys``, at any depth, and those entries alone, nested as in ``obj`` (``None`` where a branch holds none;
    a list keeps its length, ``None`` for an item without any). A dict that gives up entries also lends its ``ids``
    entries to ``taken``, so a list item's timings say whose they are (``ids=("name",)``)."""
    if isinstance(obj, dict):
        rest, taken = {}, {}
        for k, v in obj.items():
            if k in keys:
                taken[k] = v
                continue
            rest[k], t = split_fields(v, keys, ids=ids)
            if t is not None:
                taken[k] = t
        if not taken:
            return rest, None
        return rest, {**{k: obj[k] for k in ids if k in obj and k not in taken}, **taken}
    if isinstance(obj, (list, tuple)):
        pairs = [split_fields(v, keys, ids=ids) for v in obj]
        taken = [t for _, t in pairs]
        return [r for r, _ in pairs], (taken if any(t is not None for t in taken) else None)
    return obj, None


#: the largest JSON file :func:`read_json` reads (manifests, pools, summaries, records are kB to a few MB)
MAX_JSON_BYTES = 256 << 20


def _check_regular(path: str | os.PathLike, st: os.stat_result) -> None:
    import stat

    if not stat.S_ISREG(st.st_mode):
        raise ValueError(f"{os.fspath(path)}: not a regular file")


def read_bounded(path: str | os.PathLike, max_bytes: int,
                 check: Callable[[Any, os.stat_result], None] = _check_regular) -> tuple[bytes, os.stat_result]:
    """``(bytes, stat)`` of ``path``, opened without blocking (a FIFO opens without waiting for a writer) and
    ``check(path, stat)``-ed once open (default: a regular file, else ValueError naming it). At most
    ``max_bytes + 1`` bytes are read, none when the file says it is larger: the caller compares ``len`` and
    ``st_size`` with ``max_bytes`` and words the refusal."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        check(path, st)
    except BaseException:
        os.close(fd)
        raise
    with os.fdopen(fd, "rb") as f:
        return (f.read(max_bytes + 1) if st.st_size <= max_bytes else b""), st


def read_json(path: str | os.PathLike, *, max_bytes: int = MAX_JSON_BYTES) -> Any:
    """The JSON document in ``path``, read with its size bounded before any memory is spent
    (:func:`read_bounded`): a file that is not a regular file (a FIFO, a device, a folder) or is larger than
    ``max_bytes`` raises ValueError naming it. A missing or unreadable file raises the ``OSError``; bad UTF-8 or bad
    JSON the ``ValueError`` (``json.JSONDecodeError`` carries the line)."""
    raw, st = read_bounded(path, max_bytes)
    if st.st_size > max_bytes or len(raw) > max_bytes:
        raise ValueError(f"{os.fspath(path)}: {max(st.st_size, len(raw))} bytes, more than the {max_bytes} a JSON "
                         "file of this toolkit may hold")
    return json.loads(raw.decode("utf-8"))


def json_safe(o: Any) -> Any:
    """``o`` with non-finite floats as ``None`` (strict JSON has no NaN), numpy scalars as Python ones and mapping keys as
    strings, recursively through dicts, lists and tuples."""
    import numpy as np

    if isinstance(o, dict):
        return {str(k): json_safe(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [json_safe(v) for v in o]
    if isinstance(o, (float, np.floating)):
        return float(o) if np.isfinite(o) else None
    if isinstance(o, np.integer):
        return int(o)
    return o


def _json_default(o: Any):
    import numpy as np

    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


#: Environment variable that asks every figure job for more formats than the PNG (``png,pdf``: vector figures for a paper).
FIGURE_FORMATS_ENV = "VSR_FIGURE_FORMATS"
#: What it may name (PNG and PDF are written byte-stable: the PDF carries no creation date).
FIGURE_FORMATS = ("png", "pdf")


def figure_formats() -> tuple[str, ...]:
    """The formats :func:`save_figure` writes when not told: ``("png",)``, or what ``$VSR_FIGURE_FORMATS`` lists
    (comma-separated, case and spaces ignored, repeats dropped), PNG first.

    The list must name PNG, since reports link the PNG and callers take the first path as it; a format outside
    :data:`FIGURE_FORMATS` or a list without ``png`` raises ``ValueError`` naming the variable."""
    raw = os.environ.get(FIGURE_FORMATS_ENV, "").strip()
    if not raw:
        return ("png",)
    asked = [f.strip().lower() for f in raw.split(",") if f.strip()]
    unknown = [f for f in asked if f not in FIGURE_FORMATS]
    if unknown or "png" not in asked:
        why = f"unknown format(s) {unknown}" if unknown else "png is missing (reports link the PNG)"
        raise ValueError(f"{FIGURE_FORMATS_ENV}={raw!r}: {why}; give a comma list of {', '.join(FIGURE_FORMATS)} "
                         "that includes png, e.g. png,pdf")
    return tuple(dict.fromkeys(["png", *asked]))


def save_figure(fig, out_dir: str | os.PathLike, stem: str, *, dpi: int = 120,
                formats: tuple[str, ...] | None = None) -> list[Path]:
    """Atomically save ``fig`` as ``<stem>.<ext>`` for each of ``formats`` in ``out_dir``, then close it.

    ``formats=None`` (every figure job of the project) writes the PNG only, unless the environment variable
    ``VSR_FIGURE_FORMATS`` asks for more (``VSR_FIGURE_FORMATS=png,pdf make figures`` adds a PDF of every figure;
    :func:`figure_formats`); the PNG comes first then. An explicit ``formats`` wins over the variable.

    Returns the paths in the order of the formats written.
    """
    import matplotlib.pyplot as plt

    formats = figure_formats() if formats is None else formats
    paths = []
    for ext in formats:
        path = Path(out_dir) / f"{stem}.{ext}"
        with atomic_path(path) as tmp:
            # no creation date in the PDF: the same figure gives the same bytes (a rebuilt report leaves no diff)
            fig.savefig(tmp, format=ext, dpi=dpi, metadata={"CreationDate": None} if ext == "pdf" else None)
        paths.append(path)
    plt.close(fig)
    return paths
