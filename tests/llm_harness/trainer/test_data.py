"""The data model's plain-data converters: restored start states, groups and verify results equal the originals."""

from __future__ import annotations

from dataclasses import fields

import numpy as np
import pytest

from llm_harness.tasks import ParseStatus, Problem, VerifyResult
from llm_harness.trainer.checkpoint import check_plain, load_checkpoint, write_checkpoint
from llm_harness.trainer.data import (
    Origin,
    RolloutGroup,
    StartState,
    group_from_plain,
    group_to_plain,
    problem_index,
    start_state_from_plain,
    start_state_to_plain,
    verify_from_plain,
    verify_to_plain,
)
from trainer_support import assert_plain_equal

PROBLEMS = (Problem("p0", "Q0?", "0", solution="0", difficulty=2.0, metadata={"src": "a"}), Problem("p1", "Q1?", "1"))
INDEX = problem_index(PROBLEMS)


def _same(a, b) -> None:
    """Field-wise equality of two data-model objects (arrays: dtype, shape and values)."""
    assert type(a) is type(b)
    for f in fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, (StartState, RolloutGroup)):
            _same(x, y)
        elif isinstance(x, np.ndarray) or (isinstance(x, list) and x and isinstance(x[0], np.ndarray)):
            xs, ys = (x, y) if isinstance(x, list) else ([x], [y])
            assert len(xs) == len(ys) and all(u.dtype == v.dtype and np.array_equal(u, v, equal_nan=True) for u, v in zip(xs, ys)), f.name
        elif isinstance(x, dict):  # meta, info: plain data
            assert_plain_equal(x, y, f.name)
        else:
            assert type(x) is type(y) and x == y, f.name


STATES = [
    StartState((5, 6), PROBLEMS[0]),
    StartState([7], PROBLEMS[1], (1, 2, 3), Origin.GUIDED, n=3, history=({"role": "user", "text": "hi"},),
               meta={"extra_mte": 0.25, "extra_source_step": 4}),
]


@pytest.mark.parametrize("s", STATES)
def test_start_state_round_trip(s):
    d = start_state_to_plain(s)
    check_plain(d)
    back = start_state_from_plain(d, INDEX)
    _same(back, s)
    assert back.problem is PROBLEMS[PROBLEMS.index(s.problem)] and back.key == s.key


def test_verify_result_round_trip():
    for v in (None, VerifyResult(1.0, ParseStatus.OK, "3"), VerifyResult(0.0, ParseStatus.TIMEOUT, None, True, "deadline")):
        d = verify_to_plain(v)
        check_plain(d)
        assert verify_from_plain(d) == v


GROUPS = [
    RolloutGroup(STATES[0], [(1, 2), (), (3,)], [[-0.5, -0.25], [], [-1.0]], [1.0, 0.0, 0.5], 3,
                 verify=[VerifyResult(1.0, ParseStatus.OK, "1"), None, VerifyResult(0.5, ParseStatus.OK, "x")],
                 finish_reasons=["stop", "length", "stop"], advantages=[1.0, -1.0, 0.0], weights=[1.0, 0.5, 2.0],
                 info={"replay_sigma_g": 0.4, "extra_novelty": np.array([0.1, 0.0, np.nan])}),
    RolloutGroup(STATES[1], [(4,)], [[-0.1]], [0.0], 0),
]


@pytest.mark.parametrize("g", GROUPS)
def test_rollout_group_round_trip_through_a_checkpoint(tmp_path, g):
    d = group_to_plain(g)
    check_plain(d)
    write_checkpoint(tmp_path / "ck", 0, {"model": {}, "optim": {}, "sched": {}, "rng": {}, "plugins": [d]}, fingerprint="-")
    _same(group_from_plain(load_checkpoint(tmp_path / "ck")["plugins"][0], INDEX), g)


def test_unknown_problem_id_is_refused():
    d = start_state_to_plain(STATES[0])
    with pytest.raises(ValueError, match="'p0' is not in the training split"):
        start_state_from_plain(d, problem_index(PROBLEMS[1:]))
