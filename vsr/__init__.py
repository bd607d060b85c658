"""The ``vsr`` command line and small shared utilities (atomic I/O, config files)."""

__version__ = "0.1.0"
