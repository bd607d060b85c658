"""The five real-model studies under the two verifiers of the arithmetic ladder, side by side: each study's headline
numbers from its lenient run (a declared answer, else the last number: the runs committed first) and its strict rerun
(a declared final answer only, with the instruction to declare one: ``scripts/real_model_studies.sh``'s default),
read from the two folders' ``summary.json``. Writes ``<out>/readers.md`` and ``readers.json`` (atomically).

Usage: python scripts/real_model_readers.py [--root figures/real_model] [--out figures/real_model]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Callable

from vsr_util.atomic import write_json, write_text

STUDIES = ("hint-ratio", "failed-prefix", "sigma-validation", "mte-correlation", "prefix-selection")
#: the lenient folders compared with their ``-strict`` reruns: the five studies at the script's sizes, then full sizes
FOLDERS = (*STUDIES, "failed-prefix-full", "sigma-validation-full", "mte-correlation-full")


def _ci(d: dict | None, est: str = "estimate", lo: str = "lo", hi: str = "hi", fmt: str = "+.3f") -> str:
    if not d or d.get(est) is None:
        return "-"
    return f"{d[est]:{fmt}} [{d[lo]:{fmt}}, {d[hi]:{fmt}}]"


def hint_ratio(s: dict) -> dict[str, str]:
    curve = " / ".join(f"{c['mean']:.2f}" for c in s["curve"])
    return {"problems used": str(s["counts"]["eligible"]),
            "success at α = " + " / ".join(f"{c['alpha']:g}" for c in s["curve"]): curve,
            "Spearman α vs success": _ci(s["alpha_success_spearman"], fmt=".2f"),
            "largest gap below the chord": f"{s['linearity']['max_abs_chord_deviation']:.2f}"}


def failed_prefix(s: dict) -> dict[str, str]:
    failed = sorted((c for c in s["cells"] if c["source"] == "failed"), key=lambda c: c["position"])
    won = sorted((c for c in s["cells"] if c["source"] == "successful"), key=lambda c: c["position"])
    return {"problems used": str(s["counts"]["eligible"]),
            "failed prefixes: success at 25 / 50 / 75 %": " / ".join(f"{c['mean_success']:.3f}" for c in failed),
            "successful prefixes: success at 25 / 50 / 75 %": " / ".join(f"{c['mean_success']:.3f}" for c in won),
            "all-fail groups at 25 / 50 / 75 %": " / ".join(f"{c['all_fail']['rate']:.2f}" for c in failed),
            "last − first (paired by problem)": _ci(s["trend"]["failed_last_minus_first"])}


def sigma_validation(s: dict) -> dict[str, str]:
    lin = s["sigma_hat"]["pooled_problem_bootstrap"]["pearson"]
    cal = s["sigma_hat_calibrated"]["pooled_problem_bootstrap"]["pearson"]
    return {"problems used (states)": f"{s['n_problems']} ({s['n_states']})",
            "Pearson, linear σ̂ (problem bootstrap)": _ci(lin),
            "Pearson, calibrated σ̂ (problem bootstrap)": _ci(cal)}


def mte_correlation(s: dict) -> dict[str, str]:
    rank = [r["metric"] for r in s["ranking"]].index("mte") + 1 if any(r["metric"] == "mte" for r in s["ranking"]) else None
    return {"problems used (prefixes)": f"{s['counts']['eligible']} ({s['n_prefixes']})",
            "MTE within-problem Spearman (cluster bootstrap)": _ci(s["mte"].get("within_bootstrap")),
            "MTE's rank of the metrics": f"{rank} of {len(s['ranking'])}" if rank else "-"}


def prefix_selection(s: dict) -> dict[str, str]:
    m = s["methods"]
    out = {"all-fail problems used (candidates)": f"{s['counts']['eligible']} ({s['counts']['candidates']})",
           "pass@1: scratch / low MTE / random / oracle": " / ".join(
               f"{m[k]['pass_at_1']['mean']:.3f}" if k in m and m[k]["pass_at_1"]["mean"] is not None else "-"
               for k in ("scratch", "low_mte", "random", "oracle"))}
    for c in s["contrasts"]:
        if (c["a"], c["b"]) in (("low_mte", "random"), ("low_mte", "scratch")):
            out[f"{c['a']} − {c['b']} (Holm p)"] = f"{c['diff']:+.3f} [{c['lo']:+.3f}, {c['hi']:+.3f}] ({c['p_holm']:.2g})"
    return out


HEADLINES: dict[str, Callable[[dict], dict[str, str]]] = {
    "hint-ratio": hint_ratio, "failed-prefix": failed_prefix, "sigma-validation": sigma_validation,
    "mte-correlation": mte_correlation, "prefix-selection": prefix_selection,
}


def _read(folder: Path) -> dict | None:
    f = folder / "summary.json"
    return json.loads(f.read_text()) if f.is_file() else None


def compare(root: Path) -> dict[str, Any]:
    """``{folder: {"lenient": {row: text}, "strict": {row: text}}}`` for every folder of :data:`FOLDERS` that has a
    ``-strict`` rerun beside it."""
    out: dict[str, Any] = {}
    for folder in FOLDERS:
        pair = {kind: _read(root / name) for kind, name in (("lenient", folder), ("strict", f"{folder}-strict"))}
        if all(pair.values()):
            study = next(s for s in STUDIES if folder.startswith(s))
            out[folder] = {kind: HEADLINES[study](s) for kind, s in pair.items()}
    return out


def render(table: dict[str, Any]) -> str:
    lines = ["# The five studies under the lenient and the strict verifier", "",
             "Each study's headline numbers from its lenient run (`<study>/`: a declared answer, else the last number of "
             "the response: the verifier of the runs committed first) and its strict rerun (`<study>-strict/`: a declared "
             "final answer only, the prompt asking for one), the same sizes, seed and problems; `-full` rows are the full-size runs "
             "(`scripts/real_model_studies.sh`; this page: `scripts/real_model_readers.py`). Intervals 95 %.", "",
             "| study | measure | lenient | strict |", "| --- | --- | --- | --- |"]
    for study, pair in table.items():
        for i, row in enumerate(pair["lenient"]):
            lines.append(f"| {study if i == 0 else ''} | {row} | {pair['lenient'][row]} | {pair['strict'].get(row, '-')} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default="figures/real_model", help="folder holding <study>/ and <study>-strict/")
    ap.add_argument("--out", default="", help="where readers.md / readers.json go (default: --root)")
    a = ap.parse_args(argv)
    root = Path(a.root)
    table = compare(root)
    if not table:
        raise SystemExit(f"{root}: no study has both a lenient and a strict folder")
    out = Path(a.out or a.root)
    write_json(out / "readers.json", table)
    write_text(out / "readers.md", render(table))
    print(render(table))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
