"""Repository layout rules that the test runner relies on."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def test_test_module_basenames_are_unique():
    # the test folders have no __init__.py (rootdir-relative imports): two test modules with one
    # basename make pytest's collection fail with "import file mismatch"
    names = Counter(p.name for p in TESTS.rglob("test_*.py"))
    assert [n for n, c in names.items() if c > 1] == []
