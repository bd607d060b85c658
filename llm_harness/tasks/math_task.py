"""Math word problems from JSONL / parquet files or a Hugging Face dataset (Replay App. A).

Prompt (Replay paper's template): system ``"You are a helpful assistant."``, user
``"Problem : {question}\\n\\nPlease reason step by step, and put your final answer within
\\boxed{}."``, rendered through the tokenizer's chat template with a generation prompt; without a
chat template the plain prompt is ``system + "\\n\\n" + user + "\\n\\n"``.

Verification: the last ``\\boxed{}``/``\\fbox{}`` in the last 500 characters
(:func:`extract_boxed`, done in the calling process), then a grader from
:data:`~llm_harness.tasks.math_grading.GRADERS` run in an :class:`IsolatedRunner` worker under
``timeout_s``: ``"minerva"`` (training reward, the default) or ``"math_verify"`` (evaluation).
A timeout gives reward 0, ``status=TIMEOUT``, ``timed_out=True`` and a logged warning; the
runaway computation is killed with its worker.

Steps (:func:`split_math_steps`): the text is cut after every blank line (a run of newlines
containing an empty line; the blank lines belong to the step before) and before every line that
starts with a ``Step k`` marker (optionally after ``#``, ``*`` or ``_`` decoration), so both
paragraph-style and ``Step 1: ... Step 2: ...`` solutions split into their steps.

Files: a mapping split -> path (``.jsonl``/``.json`` lines or ``.parquet``); field names are
configurable.  A single file under the split name ``"all"`` is divided into train / validation /
test by a salted hash of the question text (disjoint by content).  Malformed rows raise
ValueError naming the file and line (JSONL) or row (parquet).  The files' own splits are trusted:
no cross-split de-duplication is done for multi-file sources.
"""

from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from llm_harness.tasks.base import ParseStatus, Problem, Step, Task, VerifyResult, assign_split, partition_spans
from llm_harness.tasks.isolation import IsolatedRunner, shared_runner
from llm_harness.tasks.math_answers import BOXED_WINDOW, extract_boxed
from llm_harness.tasks.math_grading import GRADERS, require_math_verify
from llm_harness.tasks.registry import build_config, register_task
from vsr_util.checks import check_number

__all__ = [
    "MathFields",
    "MathTask",
    "MathTaskConfig",
    "REPLAY_SYSTEM_PROMPT",
    "REPLAY_USER_TEMPLATE",
    "load_math_file",
    "load_math_hf",
    "load_math_jsonl",
    "load_math_parquet",
    "split_math_steps",
]

logger = logging.getLogger(__name__)

#: System message of the Replay paper's prompt.
REPLAY_SYSTEM_PROMPT = "You are a helpful assistant."
#: User message of the Replay paper's prompt (``{question}`` is substituted literally).
REPLAY_USER_TEMPLATE = "Problem : {question}\n\nPlease reason step by step, and put your final answer within \\boxed{}."

_WORKER_PRELOAD = ("llm_harness.tasks.math_grading:warmup",)
_SPLIT_SALT = "math/v1"


@dataclass(frozen=True)
class MathFields:
    """Which row fields hold what."""

    question: str = "problem"
    """Field with the problem statement."""
    answer: str | None = "answer"
    """Field with the gold answer; ``None``: take the last ``\\boxed{}`` of the solution field."""
    solution: str | None = "solution"
    """Field with a worked solution (optional in rows; ``None`` to ignore)."""
    id: str | None = None
    """Field with a unique id; ``None``: ``<file name>:<line>`` (parquet: ``<file name>:row<i>``)."""


# ---------------------------------------------------------------------------- loaders
def _as_text(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return repr(value) if isinstance(value, float) else str(value)
    return None


def _row_to_problem(row: Any, fields: MathFields, default_id: str, where: str) -> Problem:
    if not isinstance(row, Mapping):
        raise ValueError(f"{where}: expected a JSON object, got {type(row).__name__}")
    q = row.get(fields.question)
    if not isinstance(q, str) or not q.strip():
        raise ValueError(f"{where}: field {fields.question!r} (question) is missing or not a non-empty string")
    sol = None
    if fields.solution is not None and row.get(fields.solution) is not None:
        sol = row.get(fields.solution)
        if not isinstance(sol, str):
            raise ValueError(f"{where}: field {fields.solution!r} (solution) must be a string")
    if fields.answer is not None:
        ans = _as_text(row.get(fields.answer))
        if ans is None or not ans.strip():
            raise ValueError(f"{where}: field {fields.answer!r} (answer) is missing, empty or not a string/number")
    else:
        box = extract_boxed(sol or "", window=len(sol or "") + 1)
        if box.status != "ok" or box.content is None:
            raise ValueError(f"{where}: no \\boxed{{}} answer in field {fields.solution!r} (answer field is None)")
        ans = box.content
    pid = default_id
    if fields.id is not None:
        raw = row.get(fields.id)
        pid_text = _as_text(raw)
        if pid_text is None or not pid_text:
            raise ValueError(f"{where}: field {fields.id!r} (id) is missing or empty")
        pid = pid_text
    meta = {"source": where}
    for k, v in row.items():
        if k not in {fields.question, fields.answer, fields.solution, fields.id} and isinstance(v, (str, int, float, bool)):
            meta[k] = v
    return Problem(id=pid, prompt=q, answer=ans.strip(), solution=sol, difficulty=None, metadata=meta)


def _check_unique(problems: Sequence[Problem], source: str) -> None:
    seen: dict[str, str] = {}
    for p in problems:
        if p.id in seen:
            raise ValueError(f"{p.metadata['source']}: duplicate id {p.id!r} (first at {seen[p.id]}) in {source}")
        seen[p.id] = p.metadata["source"]


def load_math_jsonl(path: str | os.PathLike, fields: MathFields = MathFields(), max_rows: int | None = None) -> list[Problem]:
    """Problems from a JSON-lines file (blank lines skipped); errors name ``file:line``."""
    path = Path(path)
    out: list[Problem] = []
    with open(path, "rb") as fh:
        for line_no, raw in enumerate(fh, start=1):
            where = f"{path}:{line_no}"
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ValueError(f"{where}: not UTF-8 (byte {raw[exc.start]:#04x} at column {exc.start + 1})") from None
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                if not out and line.strip() in ("[", "{"):  # a pretty-printed JSON document, not JSON Lines
                    raise ValueError(
                        f"{where}: this looks like a pretty-printed JSON {'array' if line.strip() == '[' else 'object'}; "
                        f"the file must be JSON Lines (one problem object per line), e.g. "
                        f"`jq -c '.[]' {path.name} > {path.stem}.jsonl`") from None
                raise ValueError(f"{where}: invalid JSON ({exc.msg} at column {exc.colno})") from None
            out.append(_row_to_problem(row, fields, f"{path.name}:{line_no}", where))
            if max_rows is not None and len(out) >= max_rows:
                break
    if not out:
        raise ValueError(f"{path}: no problems (empty file)")
    _check_unique(out, str(path))
    return out


def load_math_parquet(path: str | os.PathLike, fields: MathFields = MathFields(), max_rows: int | None = None) -> list[Problem]:
    """Problems from a parquet file (needs pandas with pyarrow); errors name ``file: row i``
    (0-based)."""
    import pandas as pd

    path = Path(path)
    frame = pd.read_parquet(path)
    if max_rows is not None:
        frame = frame.iloc[:max_rows]
    out = []
    for i, row in enumerate(frame.to_dict(orient="records")):
        row = {k: (None if _is_nan(v) else v) for k, v in row.items()}
        out.append(_row_to_problem(row, fields, f"{path.name}:row{i}", f"{path}: row {i}"))
    if not out:
        raise ValueError(f"{path}: no problems (empty file)")
    _check_unique(out, str(path))
    return out


def _is_nan(v: Any) -> bool:
    return isinstance(v, float) and v != v


def load_math_file(path: str | os.PathLike, fields: MathFields = MathFields(), max_rows: int | None = None) -> list[Problem]:
    """Dispatch on the suffix: ``.jsonl``/``.json``/``.ndjson`` or ``.parquet``."""
    suffix = Path(path).suffix.lower()
    if suffix in (".jsonl", ".json", ".ndjson"):
        return load_math_jsonl(path, fields, max_rows)
    if suffix in (".parquet", ".pq"):
        return load_math_parquet(path, fields, max_rows)
    raise ValueError(f"path: unsupported file type {suffix!r} for {path} (expected .jsonl, .json, .ndjson or .parquet)")


def load_math_hf(
    name: str,
    split: str = "test",
    *,
    config: str | None = None,
    fields: MathFields = MathFields(),
    max_rows: int | None = None,
) -> list[Problem]:
    """Problems from a Hugging Face dataset (needs the ``datasets`` package and network access;
    refused when ``HF_HUB_OFFLINE``/``HF_DATASETS_OFFLINE`` is set, as in the tests)."""
    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        if os.environ.get(var, "").strip().lower() in ("1", "true", "yes", "on"):
            raise ValueError(f"name: cannot load Hugging Face dataset {name!r}: {var} is set (offline); use local files")
    try:
        import datasets  # type: ignore[import-not-found]
    except ImportError:
        raise ImportError(
            f"loading Hugging Face dataset {name!r} needs the 'datasets' package: pip install datasets"
        ) from None
    ds = datasets.load_dataset(name, config, split=split)
    out = []
    for i, row in enumerate(ds):
        if max_rows is not None and i >= max_rows:
            break
        out.append(_row_to_problem(dict(row), fields, f"{name}/{split}:{i}", f"{name} [{split}]: row {i}"))
    _check_unique(out, name)
    return out


# ---------------------------------------------------------------------------- steps
_BLANK_RUN = re.compile(r"\n[ \t]*\n(?:[ \t]*\n)*")
_STEP_MARKER = re.compile(r"(?im)^[ \t]*(?:[#*_]+[ \t]*)?step[ \t]+\d+")


def split_math_steps(text: str) -> tuple[Step, ...]:
    """Paragraph / ``Step k`` steps of a math solution (module docstring)."""
    cuts = [m.end() for m in _BLANK_RUN.finditer(text)]
    cuts += [m.start() for m in _STEP_MARKER.finditer(text)]
    return partition_spans(text, cuts)


# ---------------------------------------------------------------------------- the task
@dataclass(frozen=True)
class MathTaskConfig:
    """Where math problems come from and how completions are graded."""

    files: Mapping[str, str] = field(default_factory=dict)
    """split name -> JSONL/parquet path; a single ``"all"`` entry is hash-split."""
    hf_dataset: str | None = None
    """Hugging Face dataset name (online only); used for the splits in ``hf_splits``."""
    hf_config: str | None = None
    """Hugging Face dataset configuration name."""
    hf_splits: Mapping[str, str] = field(default_factory=lambda: {"test": "test"})
    """our split name -> Hugging Face split name."""
    fields: MathFields = field(default_factory=MathFields)
    """Row field names."""
    max_rows: int | None = None
    """Read at most this many rows per source."""
    split_fractions: tuple[float, float, float] = (0.8, 0.1, 0.1)
    """(train, validation, test) shares when a single ``"all"`` file is given."""
    grader: str = "minerva"
    """Default grader of :meth:`MathTask.verify`: ``"minerva"`` (training) or ``"math_verify"``."""
    timeout_s: float = 5.0
    """Deadline of one verification (seconds); a timeout gives reward 0."""
    n_workers: int = 1
    """Worker processes used by :meth:`MathTask.verify_many`."""
    window: int = BOXED_WINDOW
    """Trailing characters searched for the final ``\\boxed{}``."""
    system_prompt: str = REPLAY_SYSTEM_PROMPT
    """System message."""
    user_template: str = REPLAY_USER_TEMPLATE
    """User message; ``{question}`` is replaced by the problem text."""

    def __post_init__(self) -> None:
        GRADERS.check(self.grader, where="grader")
        check_number("timeout_s", self.timeout_s, 0, lo_open=True)
        check_number("n_workers", self.n_workers, 1, integer=True)
        check_number("window", self.window, 1, integer=True)
        if "{question}" not in self.user_template:
            raise ValueError("user_template: must contain '{question}'")
        if isinstance(self.fields, Mapping):
            object.__setattr__(self, "fields", build_config(MathFields, self.fields))
        object.__setattr__(self, "files", {str(k): str(v) for k, v in dict(self.files).items()})
        object.__setattr__(self, "hf_splits", dict(self.hf_splits))
        object.__setattr__(self, "split_fractions", tuple(self.split_fractions))


class MathTask(Task):
    """Math problems with ``\\boxed{}`` answers (module docstring)."""

    name = "math"

    def __init__(
        self,
        problems_by_split: Mapping[str, Iterable[Problem]],
        config: MathTaskConfig | None = None,
        *,
        runner: IsolatedRunner | None = None,
    ) -> None:
        self.config = config or MathTaskConfig()
        self._problems = {str(k): tuple(v) for k, v in problems_by_split.items()}
        if not self._problems:
            raise ValueError("problems_by_split: must name at least one split")
        self._runner = runner

    @classmethod
    def from_config(cls, config: MathTaskConfig, *, runner: IsolatedRunner | None = None) -> "MathTask":
        """Load the problems named by ``config`` (files, else the Hugging Face dataset)."""
        c = config
        if c.files and c.hf_dataset:
            raise ValueError("files: give either files or hf_dataset, not both")
        by_split: dict[str, list[Problem]] = {}
        if c.files:
            if "all" in c.files:
                if len(c.files) != 1:
                    raise ValueError("files: 'all' cannot be combined with other splits")
                names = ("train", "validation", "test")
                fractions = dict(zip(names, c.split_fractions))
                by_split = {n: [] for n in names}
                for p in load_math_file(c.files["all"], c.fields, c.max_rows):
                    by_split[assign_split(p.prompt, fractions, _SPLIT_SALT)].append(p)
            else:
                by_split = {s: load_math_file(path, c.fields, c.max_rows) for s, path in c.files.items()}
        elif c.hf_dataset:
            by_split = {
                s: load_math_hf(c.hf_dataset, hf_split, config=c.hf_config, fields=c.fields, max_rows=c.max_rows)
                for s, hf_split in c.hf_splits.items()
            }
        else:
            raise ValueError("files: give files={split: path} or hf_dataset=<name>")
        return cls(by_split, c, runner=runner)

    @property
    def splits(self) -> tuple[str, ...]:
        return tuple(self._problems)

    def problems(self, split: str) -> tuple[Problem, ...]:
        return self._problems[self.check_split(split)]

    @property
    def runner(self) -> IsolatedRunner:
        """The worker pool verifications run in (a process-wide shared one by default)."""
        if self._runner is None:
            self._runner = shared_runner(self.config.n_workers, preload=_WORKER_PRELOAD)
        return self._runner

    def messages(self, problem: Problem) -> list[dict[str, str]]:
        user = self.config.user_template.replace("{question}", problem.prompt)
        return [{"role": "system", "content": self.config.system_prompt}, {"role": "user", "content": user}]

    def plain_prompt(self, problem: Problem) -> str:
        msgs = self.messages(problem)
        return f"{msgs[0]['content']}\n\n{msgs[1]['content']}\n\n"

    def split_steps(self, text: str) -> tuple[Step, ...]:
        return split_math_steps(text)

    def _grader(self, grader: str | None) -> tuple[str, Any]:
        name = grader or self.config.grader
        fn = GRADERS.lookup(name, "grader")
        if name == "math_verify":
            require_math_verify()
        return name, fn

    def _pre(self, completion: str) -> VerifyResult | str:
        box = extract_boxed(completion, self.config.window)
        if box.status == "missing":
            return VerifyResult(0.0, ParseStatus.MISSING, None, detail=f"no \\boxed{{}} in the last {self.config.window} characters")
        if box.status != "ok" or box.content is None:
            return VerifyResult(0.0, ParseStatus.MALFORMED, None, detail="\\boxed{} with unbalanced braces or empty content")
        return box.content

    def _post(self, problem: Problem, pred: str, name: str, outcome) -> VerifyResult:
        if outcome.timed_out:
            logger.warning(
                "math verification of problem %r (%s) timed out after %.2f s: reward 0", problem.id, name, outcome.elapsed_s
            )
            return VerifyResult(0.0, ParseStatus.TIMEOUT, pred, timed_out=True, detail=f"{name}: timed out after {self.config.timeout_s:g} s")
        if outcome.error is not None:
            logger.warning("math verification of problem %r (%s) failed: %s", problem.id, name, outcome.error.splitlines()[0])
            return VerifyResult(0.0, ParseStatus.ERROR, pred, detail=f"{name}: {outcome.error}")
        correct, detail = outcome.value
        return VerifyResult(1.0 if correct else 0.0, ParseStatus.OK, pred, detail=detail)

    def verify(self, problem: Problem, completion: str, *, grader: str | None = None) -> VerifyResult:
        """Reward of ``completion`` with ``grader`` (default ``config.grader``) under the deadline."""
        name, fn = self._grader(grader)
        pre = self._pre(completion)
        if isinstance(pre, VerifyResult):
            return pre
        outcome = self.runner.call(fn, (pre, problem.answer), timeout_s=self.config.timeout_s)
        return self._post(problem, pre, name, outcome)

    def verify_many(
        self, problems: Sequence[Problem], completions: Sequence[str], *, grader: str | None = None
    ) -> list[VerifyResult]:
        """:meth:`verify` for each pair, spread over ``config.n_workers`` workers."""
        if len(problems) != len(completions):
            raise ValueError(f"completions: expected {len(problems)} completions (one per problem), got {len(completions)}")
        name, fn = self._grader(grader)
        pres = [self._pre(c) for c in completions]
        todo = [i for i, p in enumerate(pres) if not isinstance(p, VerifyResult)]
        outcomes = self.runner.map(fn, [(pres[i], problems[i].answer) for i in todo], timeout_s=self.config.timeout_s)
        results: list[VerifyResult | str] = list(pres)
        for i, out in zip(todo, outcomes):
            results[i] = self._post(problems[i], pres[i], name, out)  # type: ignore[arg-type]
        return results  # type: ignore[return-value]

    def evaluate(self, problem: Problem, completion: str) -> VerifyResult:
        """Evaluation verdict: :meth:`verify` with the ``math_verify`` grader."""
        return self.verify(problem, completion, grader="math_verify")


@register_task("math")
def _make_math(*, problems: Mapping[str, Iterable[Problem]] | None = None, runner: IsolatedRunner | None = None, **params) -> MathTask:
    """``get_task("math", files={"test": "math500.jsonl"}, grader="math_verify", ...)``: fields
    of :class:`MathTaskConfig`; or ``problems={split: [Problem, ...]}`` with config fields."""
    config = build_config(MathTaskConfig, params)
    if problems is not None:
        if config.files or config.hf_dataset:
            raise ValueError("problems: give either problems or files/hf_dataset, not both")
        return MathTask(problems, config, runner=runner)
    return MathTask.from_config(config, runner=runner)
