"""Report sections a suite opts into (``Suite.sections``): one registry, one module per paper family.

* :mod:`.common` — ``pool`` (how the prompt pool was chosen), ``eval_metrics`` (length, diversity, AES), ``ablations``
  (the method against each ablation), ``sweep`` (a regime sweep at a glance), and the paper-table renderer the
  families share;
* :mod:`.vsr` — ``curriculum`` (VSR's reverse curriculum), ``calibration`` (calibrated σ̂ against the oracle),
  ``assumptions`` (which link of VSR's argument holds);
* :mod:`.replay` — ``replay_tables`` (the Replay paper's Tables 1–4 and 9), ``replay_aes`` (Table 13);
* :mod:`.extra` — ``extra_tables`` (ExTra Tables 1, 5, 6), ``passk``, ``extra_dynamics`` (Fig. 2),
  ``prompt_efficiency`` (Fig. 3);
* :mod:`.agents` — ``agent_accounting`` (tokens, actions and success-mixed groups of multi-turn runs);
* :mod:`.prefix` — ``prefix_dynamics`` (the prefix-restart family's training stream: mixed groups, bare-prompt pass
  rate, prefix share, tokens and seconds per update);
* :mod:`.crossed` — ``crossed_intervals`` (each contrast with the evaluation problems counted as a sample too, from the
  runs' per-problem outcomes).

A section is ``fn(cfg, jobs, summary, suite, out) -> list[str]`` (markdown lines; it may save figures and CSVs in
``out``), registered under its name with :func:`register_section`. Sections look arms up by the suite's data
(``Method.family``, ``Method.roles``, ``Suite.figure_arms``, the paper tables), never by a method's name.
"""

from __future__ import annotations

from typing import Any

from vsr_util.registry import Registry

__all__ = ["SECTIONS", "load_sections", "register_section"]

#: name -> ``fn(cfg, jobs, summary, suite, out) -> list[str]``
SECTIONS: Registry[Any] = Registry("report section")

#: the modules that register the built-in sections
SECTION_MODULES = ("common", "vsr", "replay", "extra", "agents", "prefix", "crossed")


def register_section(name: str):
    """Decorator: add a report section a suite can name in ``Suite.sections``."""
    def deco(fn):
        SECTIONS.add(name, fn)
        return fn
    return deco


def load_sections() -> Registry[Any]:
    """Import the built-in section modules (they register themselves) and return :data:`SECTIONS`."""
    import importlib

    for mod in SECTION_MODULES:
        importlib.import_module(f"{__name__}.{mod}")
    return SECTIONS
