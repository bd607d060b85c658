"""The fresh prompt stream of a training run: one seeded order that every method shares.

Plug-ins never draw from or return prompts to the stream: a start-state source *claims* slots
before the trainer draws ``B − claimed`` fresh prompts, so every method sees exactly GRPO's
prompt order minus the claimed slots (refills that ask for fresh prompts get the next ones).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import numpy as np

from llm_harness.trainer.data import Origin, StartState

__all__ = ["FreshPromptSource"]


class FreshPromptSource:
    """Fresh prompts from the training split in a seeded, epoch-wise shuffled order.

    The ``i``-th prompt ever drawn is ``perm_e[i mod N]`` with ``e = i // N`` and ``perm_e`` a
    permutation seeded by ``(seed, e)``, so the whole state is one counter (bit-identical resume).
    """

    def __init__(self, problems: Sequence[Any], encode: Callable[[Any], tuple[int, ...]], seed: int):
        if len(problems) == 0:
            raise ValueError("problems: the training split is empty")
        self.problems = tuple(problems)
        self.encode = encode
        self.seed = int(seed)
        self.cursor = 0
        self._perm_epoch = -1
        self._perm: np.ndarray | None = None

    def _index(self, i: int) -> int:
        n = len(self.problems)
        e = i // n
        if e != self._perm_epoch:
            self._perm = np.random.default_rng([self.seed, e, 0x5EED]).permutation(n)
            self._perm_epoch = e
        return int(self._perm[i % n])

    def peek(self, start: int, k: int) -> list[Any]:
        """Problems number ``start .. start + k − 1`` of the stream (no state change)."""
        return [self.problems[self._index(i)] for i in range(start, start + k)]

    def draw(self, k: int) -> list[StartState]:
        """The next ``k`` fresh start states (advances the cursor)."""
        if k < 0:
            raise ValueError(f"k: cannot draw {k} prompts")
        out = [StartState(prompt_ids=self.encode(p), problem=p, origin=Origin.FRESH) for p in self.peek(self.cursor, k)]
        self.cursor += int(k)
        return out

    def state_dict(self) -> dict[str, Any]:
        """The stream position (plain data)."""
        return {"cursor": self.cursor}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        self.cursor = int(state["cursor"])
