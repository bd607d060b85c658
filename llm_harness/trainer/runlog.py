"""Per-step metrics as JSONL and CSV in the run directory.

``metrics.jsonl`` gets one JSON object per step (appended, flushed); ``metrics.csv`` is rewritten
whenever a new column appears (columns = union of keys in first-seen order), so both files always
hold the same rows. On resume, rows at or after the resumed step are dropped (a killed run may
have logged steps after its last checkpoint).
"""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path
from typing import Any, Mapping

from vsr_util.atomic import csv_text, naming_path, write_csv, write_text

__all__ = ["MetricsWriter", "TIMING_KEYS", "is_timing_key", "parse_jsonl", "read_metrics"]

#: keys that measure wall time (excluded from bit-identity comparisons)
TIMING_KEYS = (
    "time_generate_s", "time_score_s", "time_train_s", "time_plugins_s", "time_step_s", "time_eval_s", "steps_per_s",
)


#: line end of ``metrics.csv`` (the csv module's default, which the committed run logs were written with)
CSV_LINE_END = "\r\n"


def is_timing_key(key: str) -> bool:
    """Wall-time and memory metrics (the fixed ones, any plug-in's ``time_*``, the ``mem_*`` peaks), which differ
    between identical runs."""
    return key in TIMING_KEYS or key.startswith(("time_", "mem_"))


def _clean(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if hasattr(v, "item"):
        return _clean(v.item())
    return v


def parse_jsonl(data: bytes) -> list[tuple[int, dict[str, Any] | None, str]]:
    """``(line number, row or None, why not)`` for every non-blank line of JSON-lines bytes: a row is a JSON object
    in UTF-8; a line that is not one gives ``None`` and the reason (the callers decide what a damaged line means)."""
    out: list[tuple[int, dict[str, Any] | None, str]] = []
    for no, raw in enumerate(data.split(b"\n"), 1):
        if not raw.strip():
            continue
        try:
            row = json.loads(raw.decode("utf-8"))
            if not isinstance(row, dict):
                raise ValueError("not a JSON object")
        except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            out.append((no, None, str(exc)))
            continue
        out.append((no, row, ""))
    return out


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a ``metrics.jsonl`` file, the project's one reader of it: a missing file gives no rows; a torn
    last line (a run killed while writing it) is skipped; any other line that is not a JSON object is an error
    naming ``file:line`` (a resume recovers such a row from ``metrics.csv``: :class:`MetricsWriter`)."""
    p = Path(path)
    if not p.is_file():
        return []
    entries = parse_jsonl(p.read_bytes())
    rows = []
    for k, (no, row, why) in enumerate(entries):
        if row is None:
            if k == len(entries) - 1:
                continue
            raise ValueError(f"{p}:{no}: damaged metrics row ({why})")
        rows.append(row)
    return rows


def _csv_value(v: str) -> Any:
    if v == "":
        return None
    for conv in (int, float):
        try:
            return conv(v)
        except ValueError:
            pass
    return v


def _rows_for_resume(jsonl: Path, csv_path: Path) -> list[dict[str, Any]]:
    """The rows of a run's ``metrics.jsonl`` for a resume. A damaged line is recovered from the same row of
    ``metrics.csv`` (both files hold the same rows in the same order) with a warning; a damaged line neither
    file holds intact is an error naming it, except a torn last line (a run killed while writing it)."""
    import sys

    if not jsonl.is_file():
        return []
    entries = parse_jsonl(jsonl.read_bytes())
    csv_rows: list[dict[str, str]] | None = None
    rows = []
    for i, (no, row, reason) in enumerate(entries):
        if row is not None:
            rows.append(row)
            continue
        if csv_rows is None:
            try:
                csv_rows = list(csv.DictReader(io.StringIO(csv_path.read_text(encoding="utf-8"))))
            except (OSError, ValueError):
                csv_rows = []
        recovered = {k: _csv_value(v) for k, v in csv_rows[i].items() if k} if i < len(csv_rows) else None
        expected = rows[-1].get("step", -1) + 1 if rows else 0
        if recovered is not None and recovered.get("step") == expected:
            print(f"warning: {jsonl}:{no} is damaged ({reason}); recovered step {expected} from {csv_path}",
                  file=sys.stderr)
            rows.append(recovered)
        elif i == len(entries) - 1:
            print(f"warning: {jsonl}:{no}: a torn last line (the run stopped while writing it) is dropped",
                  file=sys.stderr)
        else:
            raise ValueError(f"{jsonl}:{no}: damaged metrics row ({reason}) and {csv_path} does not hold it intact; "
                             "repair or delete that line to resume (the rows after it would otherwise be lost)")
    return rows


class MetricsWriter:
    """Appends step rows to ``metrics.jsonl`` and keeps ``metrics.csv`` in sync."""

    def __init__(self, run_dir: str | Path, *, resume_step: int | None = None, tensorboard: bool = False,
                 wandb: Mapping[str, Any] | None = None):
        self.dir = Path(run_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.jsonl = self.dir / "metrics.jsonl"
        self.csv = self.dir / "metrics.csv"
        self.rows: list[dict[str, Any]] = []
        if resume_step is not None:
            self.rows = [r for r in _rows_for_resume(self.jsonl, self.csv) if r.get("step", -1) < resume_step]
        write_text(self.jsonl, "".join(json.dumps(r) + "\n" for r in self.rows))
        self.columns: list[str] = []
        for r in self.rows:
            self._extend(r)
        self._write_csv()
        self._tb = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(str(self.dir / "tensorboard"))
        self._wandb = None
        if wandb:
            import wandb as _wandb  # optional dependency; the trainer checks it is installed before any work

            self._wandb = _wandb.init(**dict(wandb))

    def _extend(self, row: Mapping[str, Any]) -> bool:
        new = [k for k in row if k not in self.columns]
        self.columns.extend(new)
        return bool(new)

    def _write_csv(self) -> None:
        write_csv(self.csv, self.columns, self.rows, lineterminator=CSV_LINE_END, ignore_extra=True)

    def log(self, row: Mapping[str, Any]) -> None:
        """Append one step's metrics (non-finite floats become null)."""
        row = {k: _clean(v) for k, v in row.items()}
        self.rows.append(row)
        with naming_path(self.jsonl), open(self.jsonl, "a") as fh:  # a full disk names the file
            fh.write(json.dumps(row) + "\n")
            fh.flush()
        if self._extend(row):
            self._write_csv()
        else:
            with naming_path(self.csv), open(self.csv, "a", encoding="utf-8", newline="") as fh:
                fh.write(csv_text(None, [[row.get(k) for k in self.columns]], lineterminator=CSV_LINE_END))
        if self._tb is not None:
            step = int(row.get("step", len(self.rows)))
            for k, v in row.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    self._tb.add_scalar(k, v, step)
        if self._wandb is not None:
            step = int(row.get("step", len(self.rows)))
            self._wandb.log({k: v for k, v in row.items() if isinstance(v, (int, float)) and not isinstance(v, bool)},
                            step=step)

    def close(self) -> None:
        """Flush the optional tensorboard / wandb writers."""
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            self._wandb.finish()
