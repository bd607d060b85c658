"""``vsr advise``: a probe of a few minutes that predicts which allocation of rollouts pays on a model and task.

It runs the lab's probe (:mod:`llm_harness.lab.probe`: pass rates of the pool's prompts and of prefix states of their
reference solutions, lengths, score norms) at a small size, predicts every allocation's SNR per generated token
relative to GRPO's uniform prompts from VSR App. B (:func:`llm_harness.lab.summary.predictions` over
:mod:`llm_harness.lab.predict`, the lab's own prediction step), with percentile-bootstrap
intervals over prompts (a prompt and its prefix states resampled together), tunes each allocation's main knob
(VSR's ρ, the prompt-level ε) on the prediction, and prints a recommendation. It realises nothing: what it cannot
know (the signal of a biased allocation, ExTra's bonus, staleness of replay) it says, and points to ``vsr lab``.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from llm_harness.lab.allocations import ALLOCATIONS, AllocationParams
from llm_harness.lab.moments import RESOLVE_FACTOR, ratio_label
from llm_harness.lab.probe import ProbeResult, StateSpace, pool_state_space, run_probe

__all__ = ["AdviseConfig", "advise", "advise_command", "bootstrap_gains", "recommend"]

@dataclass(frozen=True)
class AdviseConfig:
    """Options of ``vsr advise``."""

    model: str = ""
    """Model path or registered name; empty: the training config's."""
    backend: str = ""
    """Generation backend (``hf``, ``vllm``); empty: the training config's."""
    task: str = ""
    """Task name (a registered task); empty: the training config's."""
    task_params: tuple[str, ...] = ()
    """Task parameters as ``key=value`` strings (values parsed as YAML), merged over the task's."""
    train_config: str = "configs/regime_grpo.yaml"
    """Training config giving the rollout settings (group size, temperature, response budget) and the defaults."""
    pool: str = ""
    """Pool file of training prompts; empty: the training config's, else the first ``prompts`` of the training split."""
    prompts: int = 48
    """Prompts probed."""
    alphas: tuple[float, ...] = (0.25, 0.5, 0.75, 0.9)
    """Hint ratios of the prefix states."""
    probe_samples: int = 8
    """Samples per state (half build the allocations, half predict them)."""
    score_samples: int = 1
    """Samples per state whose score norm is measured (0: assume it constant)."""
    bootstrap: int = 400
    """Bootstrap resamples of the prompts for the intervals."""
    min_gain: float = 1.1
    """Smallest predicted gain (lower end of its interval) worth recommending a change for."""
    allocation: AllocationParams = field(default_factory=AllocationParams)
    """Allocation knobs (those in the tuned grids are chosen by the prediction)."""
    seed: int = 0
    """Seed of the probe and the bootstrap."""
    out: str = ""
    """Also write the table and recommendation as JSON to this file (and the printed text beside it, ``.txt``)."""
    progress: bool = True
    """Progress bar for the probe."""

    def __post_init__(self) -> None:
        from vsr_util.checks import check_number

        check_number("prompts", self.prompts, 2, 100_000, integer=True)
        check_number("probe_samples", self.probe_samples, 4, 4096, integer=True)
        check_number("score_samples", self.score_samples, 0, 4096, integer=True)
        check_number("bootstrap", self.bootstrap, 0, 100_000, integer=True)
        check_number("min_gain", self.min_gain, 1.0)
        for a in self.alphas:
            check_number("alphas", a, 0, 1, lo_open=True, hi_open=True)
        from llm_harness.tasks.base import check_task_params

        object.__setattr__(self, "task_params", check_task_params(self.task_params))


def _subset(probe: ProbeResult, prompts: np.ndarray) -> ProbeResult:
    """The probe restricted to ``prompts`` (with repeats: a bootstrap sample), prompts renumbered in order."""
    sp = probe.space
    rows_p, rows_x, prob = [], [], []
    for new, old in enumerate(prompts):
        rows_p.append(int(old))
        prob.append(new)
    for new, old in enumerate(prompts):
        for s in np.flatnonzero((sp.problem == old) & sp.is_prefix):
            rows_x.append(int(s))
            prob.append(new)
    idx = np.asarray(rows_p + rows_x, dtype=np.int64)
    space = StateSpace(np.asarray(prob, dtype=np.int64), sp.alpha[idx], sp.cut[idx], len(prompts))
    pick = lambda a: None if a is None else a[idx]  # noqa: E731
    return ProbeResult(space, probe.n[idx], probe.k[idx], probe.tokens[idx], probe.score_sq[idx], probe.wall_s,
                       pick(probe.k_split), dup_success=pick(probe.dup_success), dup_failure=pick(probe.dup_failure))


def gains(probe: ProbeResult, params: AllocationParams, group_size: int, names: tuple[str, ...]) -> dict[str, float]:
    """Predicted gain over ``uniform`` per allocation (:func:`llm_harness.lab.summary.predictions`: B.3, plus the duplicate
    term when the probe measured it); NaN for ExTra's shaped advantages or an undefined gain."""
    from llm_harness.lab.summary import predictions

    out = {}
    for n, row in predictions(probe, params, names, group_size).items():
        pr = row.get("b3d") or row.get("b3")
        out[n] = math.nan if pr is None or not math.isfinite(pr["gain"]) else pr["gain"]
    return out


def tuned(probe: ProbeResult, params: AllocationParams, group_size: int) -> dict[str, tuple[str, float, float]]:
    """Per allocation with a knob: ``(knob, best value, its predicted gain)`` on the full probe."""
    out = {}
    for name, entry in ALLOCATIONS.items():
        if entry.knob is None:
            continue
        knob, grid = entry.knob
        best = max(grid, key=lambda v: _safe(gains(probe, replace(params, **{knob: v}), group_size, (name,))[name]))
        out[name] = (knob, best, gains(probe, replace(params, **{knob: best}), group_size, (name,))[name])
    return out


def _safe(x: float) -> float:
    return x if math.isfinite(x) else -math.inf


def bootstrap_gains(probe: ProbeResult, params_of: dict[str, AllocationParams], group_size: int, B: int,
                    rng: np.random.Generator) -> dict[str, tuple[float, float]]:
    """95 % percentile intervals of each allocation's predicted gain, prompts resampled with replacement."""
    P = probe.space.n_prompts
    draws: dict[str, list[float]] = {n: [] for n in params_of}
    for _ in range(B):
        sub = _subset(probe, rng.integers(0, P, size=P))
        for n, prm in params_of.items():
            try:
                draws[n].append(gains(sub, prm, group_size, (n,))[n])
            except ValueError:  # e.g. a resample without any prefix state
                draws[n].append(math.nan)
    out = {}
    for n, v in draws.items():
        a = np.asarray([x for x in v if math.isfinite(x)])
        out[n] = (float(np.percentile(a, 2.5)), float(np.percentile(a, 97.5))) if a.size >= max(10, B // 2) else (math.nan, math.nan)
    return out


def recommend(rows: list[dict[str, Any]], min_gain: float) -> str:
    """One paragraph: the allocation whose predicted gain's lower bound is largest, if it clears ``min_gain``."""
    cands = [r for r in rows if r["name"] not in ("uniform", "dapo", "extra") and math.isfinite(r["lo"])]
    if not cands:
        return "No allocation could be predicted (too few mixed prompts or prefix states); run `vsr lab` with more samples."
    best = max(cands, key=lambda r: r["lo"])
    if best["lo"] < min_gain:
        return (f"Stay with uniform prompts (GRPO): no allocation is predicted to gain {min_gain:.2f}x or more in SNR per "
                f"generated token at 95 % (best: {best['name']} {best['gain']:.2f}x [{best['lo']:.2f}, {best['hi']:.2f}]). "
                "DAPO's filtering saves backward passes, not samples (predicted 1.00x per generated token).")
    knob = f" with {best['knob']} = {best['value']:g}" if best.get("knob") else ""
    caveat = (" It is a biased allocation (restarts without importance weights): its predicted signal rests on "
              "Assumption S (every state's gradient along one direction); check the direction with `vsr lab` before a "
              "long run." if best["biased"] else "")
    return (f"Use {best['name']}{knob}: predicted {best['gain']:.2f}x [{best['lo']:.2f}, {best['hi']:.2f}] SNR per generated "
            f"token over uniform prompts.{caveat}")


def advise(cfg: AdviseConfig) -> dict[str, Any]:
    """Probe, predict, tune and recommend (module doc); returns the table and the recommendation as plain data."""
    from llm_harness.lab.engine import LabEngine
    from llm_harness.lab.config import LabConfig
    from llm_harness.lab.run import _train_cfg

    t0 = time.perf_counter()
    lab = LabConfig(train_config=cfg.train_config, model=cfg.model, backend=cfg.backend, task=cfg.task,
                    task_params=cfg.task_params, pool=cfg.pool, prompts=cfg.prompts, alphas=cfg.alphas,
                    probe_samples=cfg.probe_samples, score_samples=cfg.score_samples, seed=cfg.seed)
    tcfg = _train_cfg(lab)
    engine = LabEngine(tcfg)
    try:
        space = pool_state_space(engine, cfg.prompts, cfg.alphas)
        probe = run_probe(engine, space, samples=cfg.probe_samples, score_samples=cfg.score_samples,
                          seed=cfg.seed * 1_000_003 + 29, progress=cfg.progress)
    finally:
        engine.close()
    G = tcfg.rollout.group_size
    names = tuple(n for n, a in ALLOCATIONS.items() if space.is_prefix.any() or not a.prefixes)
    knobs = tuned(probe, cfg.allocation, G) if space.is_prefix.any() else {}
    params_of = {n: (replace(cfg.allocation, **{knobs[n][0]: knobs[n][1]}) if n in knobs else cfg.allocation) for n in names}
    point = {n: gains(probe, params_of[n], G, (n,))[n] for n in names}
    ci = bootstrap_gains(probe, {n: p for n, p in params_of.items() if math.isfinite(point[n])}, G, cfg.bootstrap,
                         np.random.default_rng(cfg.seed + 7)) if cfg.bootstrap else {}
    rows = []
    for n in names:
        prop = ALLOCATIONS.lookup(n, where="advise").proposal(probe.selection(), params_of[n], G)
        lo, hi = ci.get(n, (math.nan, math.nan))
        rows.append({"name": n, "gain": point[n], "lo": lo, "hi": hi, "biased": prop.biased, "label": ratio_label(lo, hi),
                     "knob": knobs[n][0] if n in knobs else None, "value": knobs[n][1] if n in knobs else None})
    pre = space.is_prefix
    return {"rows": rows, "recommendation": recommend(rows, cfg.min_gain), "wall_s": time.perf_counter() - t0,
            "probe_wall_s": dict(probe.wall_s), "prompts": int(space.n_prompts), "prefix_states": int(pre.sum()),
            "prompt_pass_rate": float(np.mean(probe.k[~pre] / probe.n[~pre])),
            "prompt_mixed_share": float(np.mean((probe.k[~pre] > 0) & (probe.k[~pre] < probe.n[~pre]))),
            "model": tcfg.model.path, "task": tcfg.task.name}


def render(res: dict[str, Any]) -> str:
    lines = [f"vsr advise: {res['model']} on {res['task']}: {res['prompts']} prompts ({100 * res['prompt_mixed_share']:.0f} % "
             f"mixed, pass rate {res['prompt_pass_rate']:.3f}), {res['prefix_states']} prefix states; probe "
             f"{res['wall_s']:.0f} s (sampling {res['probe_wall_s'].get('sampling', 0):.0f} s, score norms "
             f"{res['probe_wall_s'].get('score_norms', 0):.0f} s)", "",
             f"{'allocation':<17} {'knob':<12} {'predicted gain per token (VSR App. B)':<40}", "-" * 70]
    for r in res["rows"]:
        knob = f"{r['knob']}={r['value']:g}" if r["knob"] else ""
        if not math.isfinite(r["gain"]):
            g = "no prediction (shaped advantages: run `vsr lab`)"
        else:
            g = f"{r['gain']:.2f}x" + (f" [{r['lo']:.2f}, {r['hi']:.2f}]" if math.isfinite(r["lo"]) else "")
            g += " *" if r["biased"] else ""
            g += " (not resolved)" if ratio_label(r["lo"], r["hi"]) != "resolved" and math.isfinite(r["lo"]) else ""
        lines.append(f"{r['name']:<17} {knob:<12} {g}")
    lines += ["", "* biased (no importance weights): its signal rests on Assumption S; `vsr lab` measures it.",
              f"(not resolved): the interval spans more than a factor {RESOLVE_FACTOR:g}; a larger probe narrows it.", "",
              res["recommendation"]]
    return "\n".join(lines)


def advise_command(cfg: AdviseConfig) -> int:
    """``vsr advise``: print the table and the recommendation (and write them with ``--out``, checked before the
    probe: a folder or an unwritable place is refused at once, not after minutes of sampling)."""
    if cfg.out:
        from pathlib import Path

        from vsr_util.atomic import check_output_file

        check_output_file(cfg.out, "out")
        check_output_file(Path(cfg.out).with_suffix(".txt"), "out")
    res = advise(cfg)
    text = render(res)
    print(text)
    if cfg.out:
        from pathlib import Path

        from vsr_util.atomic import json_safe, write_json

        write_json(cfg.out, json_safe({**res, "config": {k: (list(v) if isinstance(v, tuple) else v)
                                                        for k, v in vars(cfg).items() if k != "allocation"}}))
        Path(cfg.out).with_suffix(".txt").write_text(text + "\n", encoding="utf-8")
    return 0
