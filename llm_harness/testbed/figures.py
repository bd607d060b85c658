"""The test-bed agents' continuation curves for ``make figures``.

``make_agent_figures(out_dir, quick)`` reads the cards of the shipped agent checkpoints
(``checkpoints/<family>/<name>/card.json``; nothing is re-run, so it takes a second) and writes,
per family with shipped cards, ``continuation_<family>.png`` and ``continuation_<family>.csv``
(every plotted number): success from the state after k(α) expert actions vs α for each
checkpoint with its Wilson interval band (left), and how the mid checkpoint's groups of G
episodes of one seed split into all-fail / mixed / all-success (right) -- VSR's regime is
mostly all-fail at α = 0 and mixed at intermediate α.
"""

from __future__ import annotations

from pathlib import Path

from vsr_util.atomic import read_json

__all__ = ["CURVE_COLUMNS", "continuation_rows", "make_agent_figures"]

CURVE_COLUMNS = ("family", "level", "checkpoint", "step", "alpha", "mean_prefix", "n_seeds", "samples_per_seed",
                 "success", "ci_low", "ci_high", "groups_all_fail", "groups_mixed", "groups_all_success",
                 "mean_length", "invalid_rate")


def continuation_rows(checkpoint_dir: Path, family: str) -> list[dict]:
    """One row per (shipped checkpoint, α) of ``family``'s cards under ``checkpoint_dir`` (none: [])."""
    from llm_harness.testbed.paths import SHIPPED_CHECKPOINTS

    rows = []
    for name in SHIPPED_CHECKPOINTS:
        path = Path(checkpoint_dir) / family / name / "card.json"
        if not path.is_file():
            continue
        card = read_json(path)
        for r in card["evaluation"]["continuation"]:
            rows.append({"family": family, "level": card["agent"]["level_label"], "checkpoint": name,
                         "step": card["step"], **{k: r[k] for k in CURVE_COLUMNS[4:]}})
    return rows


def make_agent_figures(out_dir: Path, quick: bool = False, checkpoint_dir: Path | None = None) -> list[Path]:
    """Write the figures and CSVs (module doc); returns the PNG paths (``quick`` changes nothing:
    the figure only reads cards)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from llm_harness.testbed.agents import AGENT_FAMILIES
    from llm_harness.testbed.paths import CHECKPOINT_DIR
    from vsr_util.atomic import save_figure, write_csv

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    checkpoint_dir = CHECKPOINT_DIR if checkpoint_dir is None else Path(checkpoint_dir)
    pngs = []
    for family in AGENT_FAMILIES:
        rows = continuation_rows(checkpoint_dir, family)
        if not rows:
            continue
        write_csv(out_dir / f"continuation_{family}.csv", CURVE_COLUMNS, rows, lineterminator="\r\n")
        fig, (ax, bx) = plt.subplots(1, 2, figsize=(10.5, 4.0))
        names = list(dict.fromkeys(r["checkpoint"] for r in rows))
        for name in names:
            rs = [r for r in rows if r["checkpoint"] == name]
            a = [r["alpha"] for r in rs]
            if len(rs) < 2:  # a card with the initial state only: its success as a point with its interval
                ax.errorbar(a, [rs[0]["success"]], yerr=[[rs[0]["success"] - rs[0]["ci_low"]], [rs[0]["ci_high"] - rs[0]["success"]]],
                            fmt="s", capsize=3, label=f"{name} (step {rs[0]['step']}, initial state only)")
                continue
            line, = ax.plot(a, [r["success"] for r in rs], "o-", label=f"{name} (step {rs[0]['step']})")
            ax.fill_between(a, [r["ci_low"] for r in rs], [r["ci_high"] for r in rs], color=line.get_color(), alpha=0.2)
        ax.set_xlabel("alpha (fraction of the expert episode replayed; bands: 95% Wilson)")
        ax.set_ylabel("continuation success")
        ax.set_ylim(0, 1)
        ax.grid(alpha=0.3)
        ax.legend(loc="upper left", fontsize=8)
        ref = "mid" if any(r["checkpoint"] == "mid" and r["alpha"] > 0 for r in rows) else names[0]
        rs = [r for r in rows if r["checkpoint"] == ref]
        x = range(len(rs))
        bottom = [0.0] * len(rs)
        for key, label, color in (("groups_all_fail", "all-fail", "#c44e52"), ("groups_mixed", "mixed", "#dd8452"),
                                  ("groups_all_success", "all-success", "#55a868")):
            vals = [r[key] for r in rs]
            bx.bar(x, vals, bottom=bottom, color=color, label=label)
            bottom = [b + v for b, v in zip(bottom, vals)]
        bx.set_xticks(list(x), [f"{r['alpha']:g}" for r in rs])
        bx.set_xlabel("alpha")
        bx.set_ylabel(f"fraction of seeds (groups of G={rs[0]['samples_per_seed']})")
        bx.set_title(f"'{ref}' groups", fontsize=10)
        bx.set_ylim(0, 1)
        bx.legend(loc="upper center", bbox_to_anchor=(0.5, -0.15), ncol=3, fontsize=8)
        where = family if rows[0]["level"] == family else f"{family} {rows[0]['level']}"
        fig.suptitle(f"Test-bed agent {where}: success from intermediate expert states, "
                     f"{rows[0]['n_seeds']} fixed seeds, T=1", fontsize=10)
        fig.tight_layout()
        pngs.append(save_figure(fig, out_dir, f"continuation_{family}")[0])
    return pngs
