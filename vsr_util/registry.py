"""One generic registry type for every name -> entry table of the project.

A :class:`Registry` is a read-only mapping with a ``register`` decorator: a second entry under a
name already taken is refused, and looking up an unknown name raises a ``ValueError`` that names
the field being resolved and lists the registered names. Config validation asks the registry
(``REG.check(name, where="algo.advantage")``) instead of repeating its keys.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Callable, Generic, TypeVar

__all__ = ["Registry"]

T = TypeVar("T")


class Registry(Mapping[str, T], Generic[T]):
    """``name -> entry`` with duplicate refusal and self-explaining lookups (module doc).

    ``kind`` is what an entry is (``"advantage estimator"``, ``"plug-in"``), used in messages.
    Iteration follows registration order.
    """

    def __init__(self, kind: str, entries: Mapping[str, T] | None = None):
        self.kind = str(kind)
        self._entries: dict[str, T] = {}
        for name, entry in (entries or {}).items():
            self.add(name, entry)

    # -------------------------------------------------------------- Mapping protocol
    def __getitem__(self, name: str) -> T:
        return self._entries[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {sorted(self._entries)})"

    # -------------------------------------------------------------- registration
    def add(self, name: str, entry: T) -> T:
        """Register ``entry`` under ``name`` (ValueError if the name is taken or not a non-empty str)."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"name: a {self.kind} name must be a non-empty string, got {name!r}")
        if name in self._entries:
            raise ValueError(f"name: {self.kind} {name!r} is already registered")
        self._entries[name] = entry
        return entry

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator form of :meth:`add`."""

        def deco(entry: T) -> T:
            return self.add(name, entry)

        return deco

    def remove(self, name: str) -> T:
        """Unregister ``name`` (tests that register temporary entries); KeyError if absent."""
        return self._entries.pop(name)

    # -------------------------------------------------------------- lookups
    def check(self, name: object, where: str) -> str:
        """``name`` if registered, else ValueError ``"<where>: unknown <kind> 'x'; registered: [...]"``."""
        if not isinstance(name, str) or name not in self._entries:
            raise ValueError(f"{where}: unknown {self.kind} {name!r}; registered: {sorted(self._entries)}")
        return name

    def lookup(self, name: object, where: str) -> T:
        """The entry registered as ``name`` (ValueError naming ``where`` and the known names otherwise)."""
        return self._entries[self.check(name, where)]

    def names(self) -> tuple[str, ...]:
        """Registered names in registration order."""
        return tuple(self._entries)
