"""Where the shipped test-bed checkpoints live (inside the package, so installs carry them)."""

from __future__ import annotations

from pathlib import Path

__all__ = ["CHECKPOINT_DIR", "SHIPPED_CHECKPOINTS", "shipped_checkpoint"]

#: Folder of the shipped checkpoints (one sub-folder per checkpoint).
CHECKPOINT_DIR = Path(__file__).resolve().parent / "checkpoints"
#: Names of the shipped checkpoints, from lowest to highest accuracy.
SHIPPED_CHECKPOINTS = ("low", "mid", "high")


def shipped_checkpoint(name: str) -> Path:
    """Path of the shipped checkpoint ``name`` (``"low"``, ``"mid"`` or ``"high"``)."""
    if name not in SHIPPED_CHECKPOINTS:
        raise ValueError(f"name: unknown checkpoint {name!r}; shipped: {', '.join(SHIPPED_CHECKPOINTS)}")
    return CHECKPOINT_DIR / name
