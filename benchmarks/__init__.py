"""Benchmarks (``vsr bench ...``); each module has ``run(cfg)`` and a ``__main__`` entry."""
