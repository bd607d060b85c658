"""What a finished lab's records say, as numbers: each allocation's predictions (VSR App. B, :mod:`llm_harness.lab.predict`),
its realised statistics and gains over uniform, its measured components (noise ratio, ``‖E g‖²`` and held-out
projection differences, the signal's source) with labels, and the resolution plan. Pure functions of the moment
records (:mod:`llm_harness.lab.moments`) and the probe; no model, no files (:mod:`llm_harness.lab.run` writes them,
:mod:`llm_harness.lab.report` renders them).
"""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any

import numpy as np

from llm_harness.lab.allocations import ALLOCATIONS, AllocationParams
from llm_harness.lab.config import FORMAT, LabConfig
from llm_harness.lab.moments import (MomentRecord, batches_to_resolve, difference_interval, estimate, jackknife,
                                     log_ratio_interval, ratio_label, sign_label, statistic)
from llm_harness.lab.predict import Prediction, duplicate_second_moment, leave_one_out_inflation, predict
from llm_harness.lab.probe import ProbeResult

__all__ = ["GAINS", "STATS", "allocation_rows", "components", "predictions", "resolution_plan", "summarise"]


def predictions(probe: ProbeResult, params: AllocationParams, names: tuple[str, ...], group_size: int) -> dict[str, dict[str, Any]]:
    """Per allocation: the :class:`~llm_harness.lab.predict.Prediction` under B.4 and B.3 (with Assumption S for the
    signal) and the gains over uniform. Proposals come from the probe's selection half, σ², P(mixed) from the other
    half (:meth:`~llm_harness.lab.probe.ProbeResult.selection`)."""
    inflate = leave_one_out_inflation(group_size)
    sel, ev = probe.selection(), probe.evaluation()
    var = np.clip(ev.var, 0.0, None)
    G = probe.score_sq_filled()
    terms = {"b4": (var * inflate, np.sqrt(var)), "b3": (var * inflate * G, np.sqrt(var * G))}
    if probe.dup_success is not None and probe.dup_failure is not None:
        dup = duplicate_second_moment(group_size, G, np.clip(ev.k / ev.n, 0, 1), probe.dup_success, probe.dup_failure)
        terms["b3d"] = (var * inflate * G + dup, np.sqrt(var * G))
    if not float(np.sum(var[: probe.space.n_prompts])) > 0:  # no prompt mixed in the probe: S has no scale
        terms = {k: (M, None) for k, (M, _) in terms.items()}
    out: dict[str, dict[str, Any]] = {}
    base: dict[str, Prediction] = {}
    uni = ALLOCATIONS.lookup("uniform", where="predict").proposal(sel, params, group_size)
    for key, (M, sig) in terms.items():
        base[key] = predict(uni.mu, uni.weights, M, probe.tokens, signal=sig, d=uni.mu)
    for name in names:
        entry = ALLOCATIONS.lookup(name, where="lab.allocations")
        prop = entry.proposal(sel, params, group_size)
        keep = None if prop.keep is None else entry.proposal(ev, params, group_size).keep
        row: dict[str, Any] = {"biased": prop.biased, "shaped": prop.shaped}
        for key, (M, sig) in terms.items():
            if prop.shaped:
                row[key] = None
                continue
            pr = predict(prop.mu, prop.weights, M, probe.tokens, keep=keep, signal=sig, d=uni.mu)
            row[key] = {"second_moment": pr.second_moment, "tokens_per_sample": pr.tokens, "signal_scale": pr.signal_scale,
                        "gain": pr.gain_over(base[key])}
        out[name] = row
    return out


STATS = ("trvar", "mean_sq", "snr", "snr_per_ktok", "tokens", "dot:pool", "dot:heldout", "aligned_sq:pool",
         "aligned_snr_per_ktok:pool", "aligned_snr_per_ktok:heldout", "cos:pool", "cos:heldout")
#: realised gains over ``uniform``: the headline (SNR along the pool's gradient per token), the same along the held-out
#: gradient, and the full SNR (noisier: ``‖E g‖²`` needs many more batches; moments module doc)
GAINS = {"aligned_pool": "aligned_snr_per_ktok:pool", "aligned_heldout": "aligned_snr_per_ktok:heldout",
         "full_snr": "snr_per_ktok"}


def summarise(records: dict[str, MomentRecord], costs: dict[str, dict[str, float]], preds: dict[str, dict[str, Any]],
              ctx: dict[str, float], probe: ProbeResult, cfg: LabConfig, n_params: int) -> dict[str, Any]:
    """Every statistic with its interval, the realised gains over ``uniform`` and the predictions, as plain data."""
    rows = allocation_rows(records, costs, preds, ctx, cfg.groups * cfg.group_size)
    pre = probe.space.is_prefix
    return {
        "format": FORMAT, "config": _plain(cfg), "n_params": n_params,
        "probe": {"states": probe.space.size, "prompts": probe.space.n_prompts, "prefix_states": int(pre.sum()),
                  "prompt_pass_rate": float(np.mean(probe.k[~pre] / probe.n[~pre])),
                  "prompt_mixed_share": float(np.mean((probe.k[~pre] > 0) & (probe.k[~pre] < probe.n[~pre]))),
                  "prefix_pass_rate_by_alpha": {f"{a:g}": float(np.mean(probe.k[pre & (probe.space.alpha == a)]
                                                                      / probe.n[pre & (probe.space.alpha == a)]))
                                                for a in sorted(set(probe.space.alpha[pre].tolist()))},
                  "score_sq_prompt": _nanmean(probe.score_sq[~pre]), "score_sq_prefix": _nanmean(probe.score_sq[pre]),
                  "score_by_outcome": probe.score_by_outcome(),
                  "duplicate_pairs": None if probe.dup_success is None else {
                      kind: {"success": float(np.mean(probe.dup_success[sel])), "failure": float(np.mean(probe.dup_failure[sel]))}
                      for kind, sel in (("prompt", ~pre), ("prefix", pre)) if sel.any()},
                  "tokens_prompt": float(np.mean(probe.tokens[~pre])),
                  "tokens_prefix": float(np.mean(probe.tokens[pre])) if pre.any() else None,
                  "wall_s": probe.wall_s},
        "reference_norm2": ctx, "allocations": rows,
    }


def allocation_rows(records: dict[str, MomentRecord], costs: dict[str, dict[str, float]], preds: dict[str, dict[str, Any]],
                    ctx: dict[str, float], n_kept: int) -> list[dict[str, Any]]:
    """One row per allocation of :func:`summarise` (``n_kept`` samples per batch: groups × group size)."""
    rows = []
    base = records.get("uniform")
    for name, rec in records.items():
        st = {k: estimate(rec, k, ctx).to_plain() for k in STATS}
        gains = {g: (log_ratio_interval(rec, base, stat, ctx, ctx).to_plain() if base is not None else None)
                 for g, stat in GAINS.items()}
        signal = log_ratio_interval(rec, base, "aligned_sq:pool", ctx, ctx).to_plain() if base is not None else None
        noise = log_ratio_interval(rec, base, "noise_per_ktok") if base is not None else None
        kind, s2 = _signal_sq(name, costs, preds)
        gains["variance"] = _variance_gain(noise, kind, s2) if base is not None and preds[name].get("b3") else None
        if rec is base:  # the reference row: 1 by definition (its noise is inside every other row's interval)
            one = {"value": 1.0, "lo": None, "hi": None, "se": None}
            gains = {k: (dict(one, signal_from="unbiased") if k == "variance" else dict(one)) for k in gains}
            signal = dict(one)
        var_ratio: dict[str, float] | None = None
        if preds[name].get("b3") is not None and st["trvar"]["value"] > 0:
            var_ratio = {k: (preds[name][k]["second_moment"] / n_kept) / st["trvar"]["value"]
                         for k in ("b3", "b3d") if preds[name].get(k) is not None}
        rows.append({"name": name, "summary": ALLOCATIONS.lookup(name, where="summary").summary, "stats": st,
                     "components": (components(rec, base, name, noise, kind, s2, preds, ctx)
                                    if base is not None and rec is not base else None),
                     "realised_gain": gains["aligned_pool"], "realised_gains": gains, "signal_sq_ratio": signal,
                     "predicted": preds[name], "predicted_over_realised_trvar": var_ratio, "cost": costs[name],
                     "batches": rec.n})
    return rows


def _signal_sq(name: str, costs: dict[str, dict[str, float]], preds: dict[str, dict[str, Any]]) -> tuple[str, float | None]:
    """How an allocation's signal scale ``s²`` (its ⟨E g, ∇J⟩ over uniform's, squared) is known, and its value:
    ``shaped`` (ExTra: no model, None), ``biased`` (only Assumption S's prediction), ``dapo`` (realised
    ``(generated / kept groups)²``) or ``unbiased`` (1, a theorem for importance-weighted allocations)."""
    c = costs[name]
    if preds[name].get("shaped"):
        return "shaped", None
    if preds[name].get("biased"):
        p3 = preds[name].get("b3") or {}
        u3 = preds.get("uniform", {}).get("b3") or {}
        s = (p3.get("signal_scale") / u3["signal_scale"]) if p3.get("signal_scale") and u3.get("signal_scale") else None
        return "biased", None if s is None else s * s
    if c.get("kept_groups", 0) and c["generated_groups"] != c["kept_groups"]:
        return "dapo", (c["generated_groups"] / c["kept_groups"]) ** 2
    return "unbiased", 1.0


def _variance_gain(noise: Any, kind: str, s2: float | None) -> dict[str, Any] | None:
    """Realised gain with the signal known without measuring it: ``s² · (tr Var · tokens)_uniform / (tr Var · tokens)_A``
    (``noise`` is the allocation's noise ratio over uniform's, so the gain is ``s² / noise``).

    ``s`` is 1 for an importance-weighted allocation (unbiasedness is a theorem: this is then its realised SNR gain,
    resolved long before ‖E g‖² is) and the realised ``generated / kept`` groups for DAPO (``signal_from`` says which).
    None for a biased allocation, whose ``s`` only Assumption S gives: a number with the prediction on both sides
    would test nothing (its measured noise ratio and the predicted ``s²`` are reported apart, :func:`components`),
    and None for ExTra (no signal model)."""
    if kind not in ("unbiased", "dapo"):
        return None
    inv = lambda x: s2 / x if x and math.isfinite(x) and x > 0 else math.nan  # noqa: E731
    lo, hi = inv(noise.hi), inv(noise.lo)
    return {"value": inv(noise.value), "lo": lo, "hi": hi, "se": noise.se,
            "signal_from": "unbiased" if kind == "unbiased" else "1/P(kept), realised", "label": ratio_label(lo, hi)}


def _predicted_noise_ratio(preds: dict[str, dict[str, Any]], name: str, key: str) -> float | None:
    """Predicted ``(second moment × tokens)`` of ``name`` over uniform's under prediction ``key`` (B.3, B.3 + dup)."""
    a, u = preds[name].get(key), preds.get("uniform", {}).get(key)
    if not a or not u:
        return None
    den = u["second_moment"] * u["tokens_per_sample"]
    return a["second_moment"] * a["tokens_per_sample"] / den if den > 0 else None


def _with_label(e: Any, kind: str) -> dict[str, Any]:
    d = e.to_plain()
    d["label"] = ratio_label(d["lo"], d["hi"]) if kind == "ratio" else sign_label(d["lo"], d["hi"])
    return d


#: how each kind of :func:`_signal_sq` is reported
_SIGNAL_SOURCES = {"shaped": "no model (shaped advantages)", "biased": "predicted (assumption S)",
                   "dapo": "realised (1/P(kept))²", "unbiased": "unbiased (theorem)"}


def components(rec: MomentRecord, base: MomentRecord, name: str, noise: Any, kind: str, s2: float | None,
               preds: dict[str, dict[str, Any]], ctx: dict[str, float]) -> dict[str, Any]:
    """What the realised gain is made of, each measured with its own 95 % interval and label, beside what theory
    predicts for it: the noise ratio ``noise`` (tr Var × generated tokens per batch, over uniform's; ``resolved`` when
    its interval spans at most a factor :data:`~llm_harness.lab.moments.RESOLVE_FACTOR`), ‖E g‖² and the projection
    ⟨E g, ∇J_heldout⟩ with their differences from uniform's (``> 0`` / ``< 0`` / ``not detected``), and the signal
    scale ``s²`` of :func:`_signal_sq` — realised for DAPO (1/P(kept)²), 1 for an importance-weighted allocation, and
    for a biased one Assumption S's prediction only."""
    signal = {"value": s2, "source": _SIGNAL_SOURCES[kind]}
    return {
        "noise_ratio": {**_with_label(noise, "ratio"), "predicted_b3": _predicted_noise_ratio(preds, name, "b3"),
                        "predicted_b3d": _predicted_noise_ratio(preds, name, "b3d"),
                        "batches_for_25pct": batches_to_resolve(noise.se, rec.n)},
        "mean_sq": _with_label(estimate(rec, "mean_sq", ctx), "sign"),
        "mean_sq_minus_uniform": _with_label(difference_interval(rec, base, "mean_sq", ctx, ctx), "sign"),
        "heldout_projection": _with_label(estimate(rec, "dot:heldout", ctx), "sign"),
        "heldout_projection_minus_uniform": _with_label(difference_interval(rec, base, "dot:heldout", ctx, ctx), "sign"),
        "signal_sq": signal,
    }


def resolution_plan(reference: MomentRecord, batches: int) -> dict[str, Any]:
    """Before the allocations run: how many batches per allocation resolve a noise ratio to ±25 % (95 %), from the
    reference batches (uniform, the same batch shape), taking each allocation's per-batch spread as uniform's."""
    _, se, _ = jackknife(reference, statistic("noise_per_ktok"), None, lambda x: math.log(x) if x > 0 else math.nan)
    need = batches_to_resolve(math.sqrt(2.0) * se, reference.n)  # a ratio of two such records
    return {"reference_batches": reference.n, "noise_log_se": se, "batches_needed_25pct": need, "batches": batches,
            "enough": bool(math.isfinite(need) and batches >= need)}


def _nanmean(x: np.ndarray) -> float | None:
    x = np.asarray(x, dtype=np.float64)
    return float(np.nanmean(x)) if np.isfinite(x).any() else None


def _plain(cfg: LabConfig) -> dict[str, Any]:
    d = asdict(cfg)
    d["alphas"] = list(cfg.alphas)
    d["allocations"] = list(cfg.allocations)
    return d
