"""``make figures`` job of the prefix-value studies: all five on the shipped CPU test bed.

``make_prefixvalue_figures(out_dir, quick)`` loads the ``mid`` checkpoint once and runs every
registered study into ``out_dir/<study>/`` (summary, figure), its records (identity, config, table) going to the
records folder beside it (``prefixvalue.store``: ``records/prefixvalue/<study>`` for ``make figures``). With
``quick=False`` (what ``make figures`` passes) each study runs at its *quick* sizes (a few
minutes in all on 2 CPU cores); with ``quick=True`` (smoke tests) at :data:`TINY` sizes (seconds
per study). Full sizes are for ``vsr study <name>`` without ``--quick``.
"""

from __future__ import annotations

import sys
import time
from dataclasses import replace
from pathlib import Path

__all__ = ["TINY", "make_prefixvalue_figures"]

#: Per-study overrides of the quick sizes for smoke runs (``quick=True``).
TINY: dict[str, dict] = {
    "hint-ratio": {"n_problems": 6, "chunk_problems": 3, "n_continuations": 4},
    "failed-prefix": {"n_problems": 8, "chunk_problems": 4, "init_samples": 6, "n_continuations": 4},
    "sigma-validation": {"n_problems": 10, "chunk_problems": 5, "init_samples": 6, "n_continuations": 6},
    "mte-correlation": {"n_problems": 3, "chunk_problems": 3, "n_trajectories": 6, "n_continuations": 4},
    "prefix-selection": {"n_problems": 8, "chunk_problems": 4, "n_trajectories": 4, "mc_continuations": 4,
                         "eval_continuations": 4, "group_filter": "any"},
}


def make_prefixvalue_figures(out_dir: Path, quick: bool = False) -> int:
    """Run all five studies on the test bed into ``out_dir/<study>`` (records: ``prefixvalue.store.records_dir``);
    returns 0 on success."""
    import torch

    out_dir = Path(out_dir)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a 1M-parameter model: one thread is fastest, and the cores are shared
    try:
        return _run_all(out_dir, quick)
    finally:
        torch.set_num_threads(threads)


def _run_all(out_dir: Path, quick: bool) -> int:
    from llm_harness.backends import HFBackend, HFBackendConfig

    from prefixvalue.engine import resolve_model
    from prefixvalue.registry import get_study, study_names
    from prefixvalue.runner import resolved_config, run_study

    path = resolve_model("mid")
    backend = HFBackend.from_pretrained(path, config=HFBackendConfig(model=path, device="cpu", max_batch_sequences=512))
    for name in study_names():
        t0 = time.perf_counter()
        base = get_study(name).config_cls(quick=True, out=str(out_dir / name), overwrite=True, progress=False)
        cfg = resolved_config(name, base)
        if quick:
            cfg = replace(cfg, **TINY[name])
        run_study(name, cfg, backend=backend, tokenizer=backend.tokenizer)
        print(f"  {name}: {time.perf_counter() - t0:.1f} s -> {out_dir / name}", file=sys.stderr, flush=True)
    return 0
