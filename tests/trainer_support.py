"""Test support of the trainer: a fault-injecting toy task, tiny trainers, fake groups, resume and plain-data checks,
and planted checkpoints.

:class:`ToyTask` is the smoke run's :class:`~llm_harness.trainer.smoke.FirstCharTask` with fault injection: modes
``"raise"`` / ``"sleep"`` make the grader fail or hang on problems whose id hashes to the chosen fraction. The test
folders import this module by its bare name (``tests/`` is on ``sys.path`` through its ``conftest.py``).
"""

from __future__ import annotations

import time
from typing import Any

from llm_harness.tasks import Problem, VerifyResult
from llm_harness.tasks.base import stable_unit_hash
from llm_harness.trainer.smoke import FirstCharTask, tiny_config

__all__ = ["FileOnUnpickle", "ToyTask", "assert_plain_equal", "check_resume_is_bit_identical", "fake_group",
           "make_trainer", "metrics_without_timing", "plant_checkpoint", "tiny_config", "torch_pickle"]


class ToyTask(FirstCharTask):
    """:class:`~llm_harness.trainer.smoke.FirstCharTask` whose grader fails (``mode="raise"``) or hangs for
    ``sleep_s`` (``mode="sleep"``) on the ``fault_fraction`` of problems whose id hashes below it."""

    def __init__(self, good: str = "01234", mode: str = "ok", fault_fraction: float = 0.0, sleep_s: float = 0.0,
                 n_train: int = 200):
        super().__init__(good=good, n_train=n_train)
        self.mode = mode
        self.fault_fraction = fault_fraction
        self.sleep_s = sleep_s

    def verify(self, problem: Problem, completion: str) -> VerifyResult:
        if self.mode != "ok" and stable_unit_hash(problem.id, "fault") < self.fault_fraction:
            if self.mode == "raise":
                raise RuntimeError("injected grader failure")
            time.sleep(self.sleep_s)
        return super().verify(problem, completion)


def make_trainer(run_dir: str, task: Any = None, extra_plugins: list | None = None, **over: Any):
    """A :class:`~llm_harness.trainer.loop.Trainer` on :func:`tiny_config` (overrides as keywords) and
    a random tiny model; ``task`` defaults to :class:`ToyTask`."""
    from llm_harness.trainer.entry import build_trainer

    return build_trainer(tiny_config(run_dir, **over), task=task or ToyTask(), extra_plugins=extra_plugins)


def fake_group(problem: Problem, prompt_ids, responses, rewards, step: int, *, origin: Any = None, prefix=(),
               advantages=None):
    """A rollout group with the given responses and rewards (behaviour log-probs −0.5 per token)."""
    import numpy as np

    from llm_harness.trainer.data import Origin, RolloutGroup, StartState

    return RolloutGroup(
        StartState(prompt_ids, problem, prefix, origin or Origin.FRESH),
        [tuple(r) for r in responses],
        [np.full(len(r), -0.5) for r in responses],
        np.asarray(rewards, dtype=np.float64),
        step,
        finish_reasons=["stop"] * len(responses),
        advantages=advantages,
    )


def metrics_without_timing(path: Any) -> list[dict[str, Any]]:
    """The rows of a ``metrics.jsonl`` without wall-time keys (what bit-identity tests compare)."""
    from llm_harness.trainer.runlog import is_timing_key, read_metrics

    return [{k: v for k, v in r.items() if not is_timing_key(k)} for r in read_metrics(path)]


def check_resume_is_bit_identical(make: Any, root: Any, *, stop_after: int, checkpoint_step: int) -> tuple[Any, Any, list]:
    """Run ``make(run_dir, **run_overrides)`` three ways — uninterrupted in ``root/full``; stopped after
    ``stop_after`` steps in ``root/half`` ("killed" past its last checkpoint); resumed there — and assert
    the resumed run's metrics (timing keys aside) and final weights equal the uninterrupted run's.

    ``make`` builds a trainer; ``run_overrides`` are :class:`RunConfig` fields (``stop_after``,
    ``resume``). Returns ``(full_trainer, resumed_trainer, full_metric_rows)``.
    """
    import torch

    from pathlib import Path

    root = Path(root)
    full = make(root / "full")
    full.fit()
    full.close()
    half = make(root / "half", stop_after=stop_after)
    half.fit()
    half.close()
    resumed = make(root / "half", resume=True)
    assert resumed.resume() == checkpoint_step
    resumed.fit()
    resumed.close()
    ma = metrics_without_timing(root / "full" / "metrics.jsonl")
    mc = metrics_without_timing(root / "half" / "metrics.jsonl")
    assert [r["step"] for r in mc] == list(range(full.cfg.steps)) and ma == mc
    for (n1, p1), (n2, p2) in zip(full.model.state_dict().items(), resumed.model.state_dict().items()):
        assert n1 == n2 and torch.equal(p1, p2), n1
    return full, resumed, ma


def assert_plain_equal(a: Any, b: Any, where: str = "state") -> None:
    """Assert two plain-data trees (:func:`~llm_harness.trainer.checkpoint.check_plain`) are identical: same
    types at every node, equal scalars, arrays of equal dtype, shape and bits (NaN equals NaN)."""
    import numpy as np

    assert type(a) is type(b), f"{where}: {type(a).__name__} != {type(b).__name__}"
    if isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape, f"{where}: {a.dtype}{a.shape} != {b.dtype}{b.shape}"
        assert a.tobytes() == b.tobytes(), f"{where}: array values differ"
    elif isinstance(a, dict):
        assert list(a) == list(b), f"{where}: keys {list(a)} != {list(b)}"
        for k in a:
            assert_plain_equal(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list):
        assert len(a) == len(b), f"{where}: length {len(a)} != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            assert_plain_equal(x, y, f"{where}[{i}]")
    else:
        assert a == b or (a != a and b != b), f"{where}: {a!r} != {b!r}"


class FileOnUnpickle:
    """Unpickling this object creates the empty file ``path``: a stand-in for the code a crafted
    pickle runs, for tests that show a checkpoint reader never unpickles."""

    def __init__(self, path: Any):
        self.path = str(path)

    def __reduce__(self) -> tuple:
        return (open, (self.path, "w"))


def torch_pickle(obj: Any) -> bytes:
    """``torch.save(obj)`` as bytes."""
    import io

    import torch

    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def plant_checkpoint(ck: Any, files: dict[str, bytes], version: int, step: int = 1) -> None:
    """Replace checkpoint folder ``ck``'s files by ``files``, with a ``meta.json`` of format ``version``
    and ``step`` whose checksums match and whose fingerprint is kept (what whoever crafts a checkpoint can do)."""
    import hashlib
    import json
    from pathlib import Path

    ck = Path(ck)
    fingerprint = json.loads((ck / "meta.json").read_text())["fingerprint"]
    for f in ck.iterdir():
        f.unlink()
    for name, data in files.items():
        (ck / name).write_bytes(data)
    meta = {"format_version": version, "step": int(step), "fingerprint": fingerprint, "n_plugins": 1,
            "sha256": {n: hashlib.sha256(d).hexdigest() for n, d in files.items()}}
    from llm_harness.trainer.checkpoint import write_meta

    write_meta(ck, meta)


def assert_fresh_stream_is_grpos(rec: Any, trainer: Any) -> None:
    """The fresh prompts ``rec`` (a ``StepRecorder``) saw drawn are GRPO's stream, in order, none lost, none twice."""
    from llm_harness.trainer.prompts import FreshPromptSource

    drawn = [s.state.problem.id for st in rec.records for s in st.slots + st.refills if s.drawn]
    want = FreshPromptSource(trainer.fresh.problems, trainer.fresh.encode, trainer.cfg.seed).peek(0, len(drawn))
    assert drawn == [p.id for p in want]
