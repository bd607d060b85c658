"""The one seed derivation of the project: ``derive_seed(*parts) -> [0, 2**31 - 1)``.

Every sampling stream (the trainer's rollouts, replay and VSR draws, validation, the test-bed
evaluation, the prefix-value studies) gets its seed from a BLAKE2b hash of its parts, so a
stream depends only on *what* it is (run seed, step, role, chunk), never on which calls ran
before it (resumption, reordering).

Encoding of the parts, joined by ``","`` and hashed (BLAKE2b, 8-byte digest, big-endian,
reduced mod ``2**31 - 1``):

* an integer (``int``, ``bool``, ``numpy`` integers) is its decimal form, ``str(int(p))`` — the
  trainer's original definition, so int-only seeds are unchanged (bit-identical runs);
* a string is ``s<len>:<text>`` (length in characters, then the text). A decimal form never
  starts with ``s``, and the length prefix makes the join unambiguous even when the text holds
  commas, so distinct part tuples give distinct hash inputs;
* anything else (floats, ``None``, bytes) is refused: a float key would silently depend on its
  printed precision.
"""

from __future__ import annotations

import hashlib
import numbers

__all__ = ["derive_seed", "seed_text"]


def _part(p: object, i: int) -> str:
    if isinstance(p, str):
        return f"s{len(p)}:{p}"
    if isinstance(p, numbers.Integral):
        return str(int(p))
    raise ValueError(f"parts[{i}]: a seed part must be an int or a str, got {type(p).__name__} {p!r}")


def seed_text(*parts: object) -> str:
    """The text that :func:`derive_seed` hashes (module doc: ints in decimal, strings length-prefixed)."""
    return ",".join(_part(p, i) for i, p in enumerate(parts))


def derive_seed(*parts: object) -> int:
    """A seed in ``[0, 2**31 - 1)`` from ints and strings (BLAKE2b of :func:`seed_text`; stable across machines)."""
    h = hashlib.blake2b(seed_text(*parts).encode(), digest_size=8).digest()
    return int.from_bytes(h, "big") % (2**31 - 1)
