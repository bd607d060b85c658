"""The generic registry type: duplicates refused, unknown names listed, mapping behaviour."""

from __future__ import annotations

import pytest

from vsr_util.registry import Registry


def test_register_lookup_and_order():
    reg: Registry[int] = Registry("widget")
    reg.register("b")(2)
    reg.add("a", 1)
    assert list(reg) == ["b", "a"] and reg["a"] == 1 and "b" in reg and len(reg) == 2
    assert reg.lookup("b", where="cfg.widget") == 2
    assert dict(reg) == {"b": 2, "a": 1}


def test_duplicates_are_refused():
    reg: Registry[int] = Registry("widget", {"a": 1})
    with pytest.raises(ValueError, match="widget 'a' is already registered"):
        reg.add("a", 3)
    assert reg["a"] == 1


def test_unknown_name_error_names_field_and_lists_entries():
    reg: Registry[int] = Registry("widget", {"x": 1, "y": 2})
    with pytest.raises(ValueError, match=r"cfg\.w: unknown widget 'z'; registered: \['x', 'y'\]"):
        reg.lookup("z", where="cfg.w")
    with pytest.raises(ValueError, match="unknown widget 3"):
        reg.check(3, where="cfg.w")
    with pytest.raises(ValueError, match="non-empty string"):
        reg.add("", 0)
