"""The theory figure: every check of ``vsr theory check`` as a table and an error plot."""

from __future__ import annotations

from pathlib import Path


from theory.checks import RTOL


def make_theory_figure(out_dir: Path, quick: bool = False) -> int:
    """Run all checks (200 cases, or 20 when ``quick``) and write JSON, Markdown and PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from theory.cli import TheoryCheckConfig, format_table, run_all
    from vsr_util.atomic import save_figure, write_json, write_text

    cases = 20 if quick else 200
    rows = run_all(TheoryCheckConfig(cases=cases, seed=0))
    out_dir = Path(out_dir)
    write_json(out_dir / "theory_check.json", [r.as_json() for r in rows])
    n_fail = sum(not r.passed for r in rows)
    md = [
        "# Theory checks",
        "",
        f"{len(rows)} checks x {cases} random instances each (seed 0); {len(rows) - n_fail} passed, {n_fail} failed.",
        f"Identities pass when |lhs - rhs| <= {RTOL:.1e} x magnitude; inequalities when the slack is >= -that.",
        "",
        "```",
        format_table(rows),
        "```",
        "",
    ]
    write_text(out_dir / "theory_check.md", "\n".join(md))

    ident = [r for r in rows if r.worst_slack is None]
    ineq = [r for r in rows if r.worst_slack is not None]
    fig, axes = plt.subplots(1, 2, figsize=(13, max(4, 0.28 * max(len(ident), len(ineq)) + 1.5)))
    ax = axes[0]
    vals = [max(r.worst_rel_error, 1e-18) for r in ident]
    ax.barh([r.name for r in ident], vals, color=["tab:blue" if r.passed else "tab:red" for r in ident])
    ax.axvline(RTOL, color="k", ls="--", lw=1, label=f"tolerance {RTOL:.0e}")
    ax.set_xscale("log")
    ax.set_xlabel("worst relative error over all instances")
    ax.set_title("Identities")
    ax.legend(loc="lower right", fontsize=8)
    ax.tick_params(axis="y", labelsize=7)
    ax = axes[1]
    slack = [r.worst_slack for r in ineq]
    ax.barh([r.name for r in ineq], [max(s, 1e-18) if s >= 0 else 1e-18 for s in slack], color=["tab:green" if r.passed else "tab:red" for r in ineq])
    ax.set_xscale("log")
    ax.set_xlabel("smallest slack (rhs - lhs) over all instances; tiny = tight")
    ax.set_title("Inequalities")
    ax.tick_params(axis="y", labelsize=7)
    fig.suptitle(f"vsr theory check: {len(rows)} claims of VSR / Replay / ExTra, {cases} random instances each")
    fig.tight_layout()
    save_figure(fig, out_dir, "theory_check", dpi=130)
    print(f"    {len(rows) - n_fail}/{len(rows)} theory checks passed; worst identity error {max([r.worst_rel_error for r in ident] or [0]):.1e}")
    return 1 if n_fail else 0
