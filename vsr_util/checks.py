"""The one number checker of the project: :func:`check_number`.

Config fields and function arguments that must be a finite number (or an int) in a range call
``check_number(name, v, lo, hi, ...)``; the ``ValueError`` starts with the field's name so the
user sees which setting is wrong:

* ``"<name>: must be an int, got 1.5"`` / ``"<name>: must be a number, got 'x'"`` (``bool`` is never a number);
* ``"<name>: must be finite, got nan"``;
* ``"<name>: must be >= 0, got -1"`` (``> 0`` with ``lo_open``), ``"<name>: must be <= 1, got 2"``
  (``< 1`` with ``hi_open``).

NumPy scalars count as numbers (``numbers.Integral`` / ``numbers.Real``). The checked value is
returned as a Python ``int`` (``integer=True``) or ``float``.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

__all__ = ["check_number"]


def check_number(name: str, v: Any, lo: float | None = None, hi: float | None = None, *, lo_open: bool = False,
                 hi_open: bool = False, integer: bool = False) -> int | float:
    """``v`` as an int (``integer``) or float; ValueError naming ``name`` unless ``v`` is a finite
    number (an int if ``integer``) in ``[lo, hi]`` (ends excluded with ``lo_open`` / ``hi_open``)."""
    kind = numbers.Integral if integer else numbers.Real
    if isinstance(v, bool) or not isinstance(v, kind):
        raise ValueError(f"{name}: must be {'an int' if integer else 'a number'}, got {v!r}")
    if not math.isfinite(v):
        raise ValueError(f"{name}: must be finite, got {v!r}")
    if lo is not None and (v < lo or (lo_open and v == lo)):
        raise ValueError(f"{name}: must be {'>' if lo_open else '>='} {lo}, got {v!r}")
    if hi is not None and (v > hi or (hi_open and v == hi)):
        raise ValueError(f"{name}: must be {'<' if hi_open else '<='} {hi}, got {v!r}")
    return int(v) if integer else float(v)
