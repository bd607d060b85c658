"""``vsr figures`` (what ``make figures`` runs): regenerate every figure of the project on CPU.

Each entry of :data:`FIGURES` is a ``module:function`` taking ``(out_dir: Path, quick: bool)``
and writing its files (PNG, plus a PDF when ``VSR_FIGURE_FORMATS=png,pdf``; the CSV/JSON of every plotted number) under ``out_dir``.
Later packages add their rows here.
"""

from __future__ import annotations

import importlib
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from vsr_util.registry import Registry

#: name -> (target, one-line description)
FIGURES: Registry[tuple[str, str]] = Registry("figure", {
    "theory": ("theory.report:make_theory_figure", "every check of `vsr theory check` (table + error plot)"),
    "gridworld_figure2": ("gridworld.figures:make_figure2", "VSR Figure 2 on the 7x7 gridworld (exact d, sigma, mu_var; learners; two contrast regimes)"),
    "gridworld_compare": ("gridworld.figures:make_compare_figure", "policy-gradient learners: states from d, mu_var (IS/GRPO), mu_eps, uniform"),
    "gridworld_svmd": ("gridworld.svmd_experiment:make_svmd_figure", "SVMD measured gap vs the Theorem C.5 bound as T, N_h, eps vary"),
    "prefixvalue": ("prefixvalue.figures:make_prefixvalue_figures", "the five Monte-Carlo prefix-value studies on the test bed (quick sizes)"),
    "training_curve": ("llm_harness.trainer.figures:make_training_curve_figure", "short GRPO run from the test-bed 'mid' checkpoint"),
    "vsr_curriculum": ("llm_harness.compare.runner:make_curriculum_figure", "VSR's reverse curriculum on the test bed: replayed alpha, success vs alpha, mixed groups over training (small vsr_regime run)"),
    "testbed_agents": ("llm_harness.testbed.figures:make_agent_figures", "test-bed agents' continuation success vs alpha (from their cards)"),
    "lab_small": ("llm_harness.lab.run:make_lab_figure", "allocation lab, small: predicted vs realised gradient SNR per token (test-bed 'mid', 4 allocations)"),
})


@dataclass(frozen=True)
class FiguresConfig:
    """Options of ``vsr figures``."""

    out: Path = Path("figures")
    """Folder that receives one sub-folder per figure."""
    only: tuple[str, ...] = ()
    """Regenerate only these figures (names of FIGURES)."""
    quick: bool = False
    """Smaller sizes (used by the smoke tests)."""


def run_figures(cfg: FiguresConfig) -> int:
    names = list(FIGURES) if not cfg.only else list(cfg.only)
    unknown = [n for n in names if n not in FIGURES]
    if unknown:
        raise SystemExit(f"vsr figures: unknown figure(s) {unknown}; known: {sorted(FIGURES)}")
    failures = 0
    for i, name in enumerate(names, 1):
        target, desc = FIGURES[name]
        print(f"[{i}/{len(names)}] {name}: {desc}", flush=True)
        mod, fn = target.split(":")
        t0 = time.perf_counter()
        rc = getattr(importlib.import_module(mod), fn)(cfg.out / name, cfg.quick)
        dt = time.perf_counter() - t0
        failed = isinstance(rc, int) and not isinstance(rc, bool) and rc != 0  # jobs may return a path
        status = f"FAILED (exit {rc})" if failed else "ok"
        failures += failed
        print(f"    -> {cfg.out / name} [{status}, {dt:.1f} s]", flush=True)
    if failures:
        print(f"{failures} figure job(s) failed", file=sys.stderr)
    return 1 if failures else 0
