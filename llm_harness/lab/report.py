"""A lab's summary as text and a figure: ``report.md`` (:func:`render_report`), the plan line printed before the
allocations run (:func:`plan_text`), ``lab_gain.png`` (:func:`gain_figure`), and the split of wall-clock fields out
of committed summaries (:func:`split_timings`).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

__all__ = ["TIMING_FIELDS", "gain_figure", "plan_text", "render_report", "split_timings"]


def plan_text(plan: dict[str, Any]) -> str:
    need = plan["batches_needed_25pct"]
    if not math.isfinite(need):
        return "lab: the reference batches do not say how many batches resolve a noise ratio (too few blocks)"
    return (f"lab: about {math.ceil(need)} batches per allocation resolve a noise ratio to ±25 % (from "
            f"{plan['reference_batches']} reference batches); this run has {plan['batches']}"
            + ("" if plan["enough"] else " — its ratios will be wider (labelled when they span more than 2x)"))


def _fmt(e: dict[str, float] | None, spec: str = ".2f") -> str:
    if not e or e.get("value") is None:
        return "n/a"
    if e.get("lo") is None or e.get("hi") is None:
        return f"{e['value']:{spec}}"
    return f"{e['value']:{spec}} [{e['lo']:{spec}}, {e['hi']:{spec}}]"


def _num(x: float | None, spec: str = ".2f") -> str:
    return "n/a" if x is None else f"{x:{spec}}"


_PLURAL = {"prompt": "prompts", "prefix": "prefixes"}


def _dup_text(d: dict[str, Any]) -> str:
    parts = [f"{_PLURAL.get(kind, kind)} {100 * v['success']:.1f} % / {100 * v['failure']:.1f} %" for kind, v in d.items()]
    return (" Pairs of samples that are the same continuation (successes / failures): " + ", ".join(parts) + "."
            if parts else "")


def _b3_check(b: dict[str, Any]) -> str:
    parts = [f"{_PLURAL[kind]} {b[kind + '_ratio']:.2f} ({b[kind + '_success_n']} successes measured)"
             for kind in ("prompt", "prefix") if b.get(kind + "_ratio") is not None]
    return (" Assumption B.3 check, ‖∇ log π‖² of successes over failures: " + ", ".join(parts) + " (1 under B.3)."
            if parts else "")


def render_report(s: dict[str, Any]) -> str:
    """Markdown: the probe, then one row per allocation: predicted gain (B.4, B.3) vs realised, and the terms; the
    seconds per batch when the summary holds them (not after :func:`split_timings`)."""
    from vsr_util.atomic import TIMINGS_FILE

    c, p = s["config"], s["probe"]
    timed = all("sampling_s" in r["cost"] for r in s["allocations"])
    lines = [
        "# Allocation lab: predicted vs realised gradient signal per generated token", "",
        f"Model `{c['model'] or 'as in the training config'}`, training config `{c['train_config']}`, {p['prompts']} prompts and "
        f"{p['prefix_states']} prefix states (α {', '.join(f'{a:g}' for a in c['alphas'])}); mini-batches of "
        f"{c['groups']} groups × {c['group_size']}, {c['batches']} per allocation, {c['blocks']} jackknife blocks "
        f"(95 % t intervals); references from {c['reference_batches']} batches; seed {c['seed']}; "
        f"{s['n_params']:,} parameters.", "",
        f"Probe: prompt pass rate {p['prompt_pass_rate']:.3f}, {100 * p['prompt_mixed_share']:.0f} % of prompts mixed "
        f"in {c['probe_samples']} samples; prefix pass rate by α: "
        + ", ".join(f"{a}: {v:.2f}" for a, v in p["prefix_pass_rate_by_alpha"].items()) + "; mean tokens per sample "
        f"{p['tokens_prompt']:.1f} (prompts)" + (f", {p['tokens_prefix']:.1f} (prefixes)" if p["tokens_prefix"] else "")
        + (f"; score norm ‖∇ log π‖² {p['score_sq_prompt']:.3g} (prompts), {p['score_sq_prefix']:.3g} (prefixes)"
           if p["score_sq_prompt"] and p["score_sq_prefix"] else "") + "." + _b3_check(p.get("score_by_outcome") or {})
        + _dup_text(p.get("duplicate_pairs") or {}), "",
        "Gain = SNR per generated token relative to `uniform` (GRPO). **Predicted** from VSR App. B (Lemma B.1) with "
        "M(s) = G(s) σ²(s) G/(G−1): B.4 takes the score norm G(s) constant, B.3 the probe's, B.3 + dup adds the "
        "covariance of identical continuations within a group (the probe's duplicate shares); the signal of a biased "
        "allocation from Assumption S (each state's expected gradient σ(s) √G(s) along one direction; "
        "`llm_harness/lab/predict.py`). **Realised** from "
        "independent mini-batches at the same parameters: first the variance side, (tr Var × tokens) of uniform over "
        "the allocation's, times the signal² that theory gives (1 for importance-weighted allocations, whose E g = ∇J "
        "is a theorem; 1/P(kept)² for DAPO from its realised kept share; Assumption S for the biased ones, marked *) — "
        "resolved with few batches; then the SNR of the signal along the large-batch pool gradient "
        "r, ⟨E g, r⟩² / tr Var per token, the same along the held-out "
        "gradient, and the full ‖E g‖² / tr Var (noisier). `signal²`: ⟨E g, r⟩² relative to uniform (1 for an "
        "unbiased allocation; DAPO's scale is 1/P(kept)²). `pred/real tr Var`: the predicted per-batch variance "
        "over the realised one, B.3 / B.3 + dup (1 = the variance term is right). cos: cosine of E g with r (noisy "
        "when ‖E g‖² is not resolved). Δ held-out: ⟨E g, ∇J_heldout⟩, the first-order change of held-out success "
        "per unit step along E g.", "",
        "| allocation | predicted (B.4) | predicted (B.3) | predicted (B.3 + dup) | realised: variance, signal from theory "
        "| realised: pool direction | realised: held-out direction | realised: full SNR | signal² | pred/real tr Var "
        "| cos pool | Δ held-out | tokens / batch |" + (" s / batch (sample + grad) |" if timed else ""),
        "|" + " --- |" * (14 if timed else 13),
    ]
    for r in s["allocations"]:
        st, pr, g = r["stats"], r["predicted"], r["realised_gains"]
        b4 = _num(pr["b4"]["gain"]) if pr.get("b4") else "—"
        b3 = _num(pr["b3"]["gain"]) if pr.get("b3") else "—"
        b3d = _num(pr["b3d"]["gain"]) if pr.get("b3d") else "—"
        if pr.get("biased") and pr.get("b3"):
            b4, b3, b3d = b4 + "*", b3 + "*", b3d + ("*" if pr.get("b3d") else "")
        vr = r["predicted_over_realised_trvar"]
        vr = None if not vr else " / ".join(_num(vr.get(k)) for k in ("b3", "b3d") if k in vr)
        cost = r["cost"]
        nb = max(1, r["batches"])
        lines.append(
            f"| `{r['name']}` | {b4} | {b3} | {b3d} | {_fmt(g.get('variance'))}{'*' if (g.get('variance') or {}).get('signal_from') == 'assumption S' else ''} | "
            f"{_fmt(g['aligned_pool'])} | {_fmt(g['aligned_heldout'])} | "
            f"{_fmt(g['full_snr'])} | {_fmt(r['signal_sq_ratio'])} | {'—' if vr is None else vr} | "
            f"{_fmt(st['cos:pool'])} | {_fmt(st['dot:heldout'], '.3g')} | {st['tokens']['value']:.0f} |"
            + (f" {(cost['sampling_s'] + cost['gradient_s']) / nb:.2f} ({cost['sampling_s'] / nb:.2f} + "
               f"{cost['gradient_s'] / nb:.2f}) |" if timed else ""))
    lines += ["", "\\* biased allocation: E g is not a multiple of ∇J; its predicted signal rests on Assumption S "
              "(the realised signal² and cosines test it).  — : ExTra's shaped advantages, no prediction."
              + ("" if timed else f" Seconds per batch: `{TIMINGS_FILE}` beside this report (not committed)."), ""]
    lines += _component_lines(s)
    if s.get("replay"):
        lines += _replay_lines(s["replay"])
    return "\n".join(lines)


def _component_lines(s: dict[str, Any]) -> list[str]:
    """The components table (:func:`components`), when the summary has them."""
    rows = [r for r in s["allocations"] if r.get("components")]
    if not rows:
        return []
    plan = s.get("plan") or {}
    need = plan.get("batches_needed_25pct")
    lines = ["## What each realised gain is made of", "",
             "Each measured apart, with its 95 % interval, beside its prediction. **Noise ratio**: (tr Var × generated "
             "tokens) per batch over uniform's — below 1 is less noise per token; predicted by B.3 / B.3 + dup; "
             "*not resolved* when its interval spans more than a factor 2. **‖E g‖² − uniform's** and **held-out "
             "projection − uniform's** (⟨E g, ∇J_heldout⟩): differences of independently realised allocations; *not "
             "detected* when the interval contains 0. **Signal²**: realised for DAPO, 1 by theorem for an "
             "importance-weighted allocation, and for a biased one Assumption S's prediction only (no realised number "
             "uses it). **Batches for ±25 %**: per allocation, for its noise ratio at this run's spread."
             + (f" Planned before the run from the reference batches: about {need:.0f} per allocation for ±25 %; this run "
                f"has {plan['batches']}." if need is not None and math.isfinite(need) else ""), "",
             "| allocation | noise ratio (measured) | predicted B.3 / B.3 + dup | ‖E g‖² − uniform's | held-out projection − "
             "uniform's | signal² (source) | batches for ±25 % |", "|" + " --- |" * 7]
    for r in rows:
        c = r["components"]
        nr = c["noise_ratio"]
        pred = " / ".join("—" if nr.get(k) is None else f"{nr[k]:.2f}" for k in ("predicted_b3", "predicted_b3d"))
        sig = c["signal_sq"]
        need_a = nr.get("batches_for_25pct")
        lines.append(
            f"| `{r['name']}` | {_fmt(nr)} {nr['label'] if nr['label'] != 'resolved' else ''} | {pred} | "
            f"{_fmt(c['mean_sq_minus_uniform'], '.3g')} {c['mean_sq_minus_uniform']['label']} | "
            f"{_fmt(c['heldout_projection_minus_uniform'], '.3g')} {c['heldout_projection_minus_uniform']['label']} | "
            f"{'—' if sig['value'] is None else format(sig['value'], '.2f')} ({sig['source']}) | "
            f"{'—' if need_a is None or not math.isfinite(need_a) else f'{need_a:.0f}'} |")
    return lines + [""]


def _replay_lines(r: dict[str, Any]) -> list[str]:
    share = r["share"]
    lines = [f"## Rollout replay at ages {', '.join(map(str, r['ages']))} (`llm_harness/lab/staleness.py`)", "",
             f"After {r['tau']} GRPO updates from the starting parameters (the training config's recipe), fresh uniform "
             f"batches against batches whose {100 * share:.0f} % of groups are rollouts stored `a` updates earlier "
             "(no generation), without correction and with sequence importance weights (`_iw`, unbiased). Variance side: "
             "(tr Var × generated tokens) of fresh batches over the allocation's (95 % CI). Signal scale: "
             "⟨E g, r⟩ over fresh batches' ⟨E g, r⟩, r an independent fresh reference (1 = unbiased). Bias²: "
             "‖E g − ∇J‖² / ‖∇J‖², a ratio of noisy terms: ‖∇J‖² is "
             + (_fmt({"value": r["rows"][0].get("grad_j_sq"), "lo": r["rows"][0].get("grad_j_sq_lo"),
                      "hi": r["rows"][0].get("grad_j_sq_hi")}, ".3g") if r["rows"] else "n/a")
             + " here (resolved only if its interval excludes 0).", "",
             "| allocation | variance side | signal scale | cos with ∇J | bias² / ‖∇J‖² | tr Var | tokens / batch "
             "| mean \\|log w\\| | weights' ESS / n | s (all batches) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for row in r["rows"]:
        c = r["costs"].get(row["name"], {})
        lines.append(f"| `{row['name']}` | {_fmt({'value': row['variance_side'], 'lo': row['variance_side_lo'], 'hi': row['variance_side_hi']})} "
                     f"| {_fmt({'value': row['signal_scale'], 'lo': row['signal_scale_lo'], 'hi': row['signal_scale_hi']})} "
                     f"| {_num(row['cos'])} | {_num(row['bias_sq_rel'])} | {_num(row['trvar'], '.3g')} | {_num(row['tokens'], '.0f')} | "
                     f"{_num(c.get('log_weight_abs_mean'), '.3f') if c.get('log_weight_abs_mean') is not None else '—'} | "
                     f"{_num(c.get('weight_ess_frac')) if c.get('weight_ess_frac') is not None else '—'} | "
                     + (f"{(c.get('sampling_s', 0) + c.get('gradient_s', 0)):.0f} s total |" if "sampling_s" in c else "— |"))
    return lines + [""]


def gain_figure(s: dict[str, Any], path: Path) -> Path | None:
    """A forest of the one component every allocation's prediction and measurement share without Assumption S: the
    variance side, uniform's (tr Var × tokens) over the allocation's (1 / its noise ratio; filled, 95 % CI) against
    B.3's (+ dup when measured; hollow), log scale, sorted by the measurement; biased allocations marked *."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from vsr_util.atomic import atomic_path

    key = "predicted_b3d" if any((r.get("components") or {}).get("noise_ratio", {}).get("predicted_b3d") for r in s["allocations"]) \
        else "predicted_b3"
    rows = []
    for r in s["allocations"]:
        nr = (r.get("components") or {}).get("noise_ratio")
        if not nr or not nr.get(key) or not (nr.get("value") or 0) > 0:
            continue
        inv = {"value": 1.0 / nr["value"], "lo": 1.0 / nr["hi"] if nr.get("hi") else None,
               "hi": 1.0 / nr["lo"] if nr.get("lo") and nr["lo"] > 0 else None}
        rows.append((r["name"] + ("*" if r["predicted"].get("biased") else ""), 1.0 / nr[key], inv))
    if not rows:
        return None
    rows.sort(key=lambda t: t[2]["value"])
    fig, ax = plt.subplots(figsize=(6.4, 0.42 * len(rows) + 1.4))
    for i, (name, pred, real) in enumerate(rows):
        lo, hi = real["lo"], real["hi"]
        if lo is not None and hi is not None and lo > 0:
            ax.plot([lo, hi], [i, i], color="C0", lw=2)
        ax.plot([real["value"]], [i], "o", color="C0", label="measured, 95 % CI" if i == 0 else None)
        ax.plot([pred], [i], "D", mfc="none", color="C3", label=f"predicted ({'B.3 + dup' if key.endswith('b3d') else 'B.3'})"
                if i == 0 else None)
    ax.axvline(1.0, color="black", lw=0.8)
    ax.set_xscale("log")
    ax.set_ylim(-1.6, len(rows) - 0.4)  # room for the legend under the rows
    ax.set_yticks(range(len(rows)), [r[0] for r in rows], fontsize=9)
    ax.set_xlabel("variance side: (tr Var × tokens) of uniform over the allocation's")
    ax.set_title("Allocation lab: predicted (VSR App. B) vs measured noise per token", fontsize=10)
    ax.legend(fontsize=8, loc="lower center", ncol=2, frameon=False)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=130)
    plt.close(fig)
    return path


TIMING_FIELDS = frozenset({"wall_s", "sampling_s", "gradient_s", "pools_and_updates_s", "time_step_s"})


def split_timings(s: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(summary, timings)``: the summary ``s`` without :data:`TIMING_FIELDS` (its :func:`render_report` then has no
    seconds column), and those fields alone, each allocation's with its name."""
    from vsr_util.atomic import split_fields

    kept, timings = split_fields(s, TIMING_FIELDS, ids=("name",))
    return kept, timings or {}
