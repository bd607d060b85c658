"""Learning-rate schedules: one registry for the trainer and the test-bed SFT.

A schedule is a linear warm-up over ``warmup`` steps, ``(s + 1) / warmup`` at 0-based step
``s < warmup``, followed by a *decay shape* ``shape(frac)`` of the progress after warm-up,
``frac = min(1, (s - warmup) / max(1, total - warmup))`` in ``[0, 1]``. :data:`SCHEDULES` maps a
name to its shape:

* ``constant`` — ``1`` (a run's prefix does not depend on ``total``: checkpoints saved along
  one run are rebuilt by a longer or shorter one);
* ``linear`` — ``1 - frac`` (to 0 at ``total``);
* ``cosine`` — ``(1 + cos(pi frac)) / 2`` (to 0 at ``total``);
* ``cosine_to_10pct`` — ``0.1 + 0.9 (1 + cos(pi frac)) / 2`` (to 10% of the peak at ``total``;
  the schedule the test-bed SFT called ``cosine`` before the two were merged).

:func:`lr_lambda` returns the multiplier of the peak rate as a function of the step (what
``torch.optim.lr_scheduler.LambdaLR`` takes); the values of ``constant``/``linear``/``cosine``
are exactly those of the trainer's former ``loop.lr_lambda``, and ``constant`` /
``cosine_to_10pct`` those of the test-bed's former ``sft.LR_SCHEDULES``, float for float.
"""

from __future__ import annotations

import math
from typing import Callable

from vsr_util.registry import Registry

__all__ = ["SCHEDULES", "lr_lambda", "register_schedule"]

Shape = Callable[[float], float]
#: name -> decay shape ``shape(frac) -> multiplier`` after warm-up (module doc).
SCHEDULES: Registry[Shape] = Registry("learning-rate schedule")
register_schedule = SCHEDULES.register


@register_schedule("constant")
def _constant(frac: float) -> float:
    return 1.0


@register_schedule("linear")
def _linear(frac: float) -> float:
    return 1.0 - frac


@register_schedule("cosine")
def _cosine(frac: float) -> float:
    return 0.5 * (1.0 + math.cos(math.pi * frac))


@register_schedule("cosine_to_10pct")
def _cosine_to_10pct(frac: float) -> float:
    return 0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * frac))


def lr_lambda(schedule: str, warmup: int, total: int, *, where: str = "optim.schedule") -> Callable[[int], float]:
    """Multiplier of the peak rate at 0-based step ``s``: linear warm-up, then ``SCHEDULES[schedule]``.

    An unknown ``schedule`` raises ValueError naming ``where`` (the config field) and the
    registered names.
    """
    shape = SCHEDULES.lookup(schedule, where)

    def f(s: int) -> float:
        if warmup > 0 and s < warmup:
            return (s + 1) / warmup
        return shape(min(1.0, (s - warmup) / max(1, total - warmup)))

    return f
