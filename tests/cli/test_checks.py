"""The one number checker (vsr_util.checks.check_number): types, finiteness, open and closed bounds, messages."""

from __future__ import annotations

import math

import numpy as np
import pytest

from vsr_util.checks import check_number


@pytest.mark.parametrize(
    ("kwargs", "v", "message"),
    [
        ({}, "1", "x: must be a number, got '1'"),
        ({}, True, "x: must be a number, got True"),
        ({"integer": True}, 1.0, "x: must be an int, got 1.0"),
        ({"integer": True}, False, "x: must be an int, got False"),
        ({}, math.nan, "x: must be finite, got nan"),
        ({}, math.inf, "x: must be finite, got inf"),
        ({"lo": 0}, -1, "x: must be >= 0, got -1"),
        ({"lo": 0, "lo_open": True}, 0, "x: must be > 0, got 0"),
        ({"hi": 1}, 1.5, "x: must be <= 1, got 1.5"),
        ({"hi": 1, "hi_open": True}, 1.0, "x: must be < 1, got 1.0"),
        ({"lo": 1, "integer": True}, 0, "x: must be >= 1, got 0"),
    ],
)
def test_messages_name_the_field_and_the_rule(kwargs, v, message):
    with pytest.raises(ValueError) as exc:
        check_number("x", v, **kwargs)
    assert str(exc.value) == message


def test_accepted_values_come_back_as_python_numbers():
    assert check_number("x", 3, 1, integer=True) == 3 and type(check_number("x", np.int64(3), integer=True)) is int
    assert check_number("x", 0.5, 0, 1, lo_open=True, hi_open=True) == 0.5
    assert type(check_number("x", np.float32(0.25), 0, 1)) is float
    assert check_number("x", 1, 0, 1) == 1.0 and check_number("x", 0, 0, 1) == 0.0  # closed ends
    assert check_number("x", -1e300) == -1e300  # no bounds: any finite number
