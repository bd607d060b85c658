"""``vsr lab``: probe, predict and realise every allocation on one model and task; report predicted vs realised.

Steps (each resumable: a finished step's file in ``out`` is reused when its configuration matches):

1. **probe** (``probe.json``): Monte-Carlo pass rates, lengths and score norms of the pool's prompts and of prefix
   states of their reference solutions (:mod:`llm_harness.lab.probe`).
2. **predict**: each allocation's variance per generated token from VSR App. B (:mod:`llm_harness.lab.predict`),
   under Assumption B.4 (constant score norm) and B.3 (the probe's score norms).
3. **references** (``reference_pool.json``, ``reference_heldout.json`` and their vectors, not kept): large-batch
   gradients of the uniform allocation on the pool and on held-out problems.
4. **realise** (``alloc_<name>.json``): ``batches`` independent mini-batches of ``groups`` × ``group_size`` samples
   per allocation from the same parameters; tr Var, ‖E g‖², SNR per 1,000 generated tokens, cosines to the
   references, ``⟨E g, ∇J_heldout⟩`` (the first-order change of held-out success per unit step along the mean
   gradient) and the wall time split into sampling and gradients (:mod:`llm_harness.lab.moments`).
5. **report** (``report.md``, ``summary.json``, ``lab_gain.png``): predicted vs realised gain over the uniform
   allocation with intervals.
6. **replay** (``replay.json``, only with ``replay_ages``; last, because it trains the model): rollout replay at ages
   1…τ, its variance and its bias without and with importance weights (:mod:`llm_harness.lab.staleness`).

The output folder belongs to one lab: ``lab.json`` records what its probe depends on (model, backend, task and its
parameters, pool, rollout settings, prompts, hint ratios, probe samples, seed). A rerun whose settings differ there,
or a folder whose ``probe.json`` was made by another lab, is refused naming the differences (``--overwrite``
discards the lab's files first); allocation knobs, batches and replay settings may change between runs (the steps
they touch are recomputed). A damaged result file is refused naming it.

Not measured: the one-step change of held-out *accuracy* itself. At the learning rates of the recipes (2.5e-5 to
1e-4) one update moves held-out success by far less than the binomial noise of any affordable evaluation (a
change of 1e-3 needs ~10^6 evaluated samples to resolve), so the lab reports the first-order change
``⟨E g, ∇J_heldout⟩`` per unit step instead, from an independent held-out reference gradient.
"""

from __future__ import annotations

import functools
import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from llm_harness.lab.allocations import ALLOCATIONS, AllocationParams, allocation_names, draw_batch
from llm_harness.lab.moments import (BlockMoments, MomentRecord, batches_to_resolve, difference_interval, estimate, jackknife,
                                     log_ratio_interval, ratio_label, sign_label, statistic)
from llm_harness.lab.predict import Prediction, duplicate_second_moment, leave_one_out_inflation, predict
from llm_harness.lab.probe import ProbeResult, pool_state_space, run_probe, state_for

__all__ = ["LAB_FILES", "LabConfig", "check_memory", "lab_command", "make_lab_figure", "predictions", "run_lab"]

FORMAT = 2
PROBE_FORMAT = 3


@dataclass(frozen=True)
class LabConfig:
    """Options of ``vsr lab``."""

    train_config: str = "configs/regime_grpo.yaml"
    """Training config naming the model, task, backend and rollout settings (nothing is trained, except by the
    replay step, with this config's recipe and its plug-ins left out)."""
    model: str = ""
    """Model path or registered name; empty: the training config's."""
    backend: str = ""
    """Generation backend (``hf``, ``vllm``); empty: the training config's."""
    task: str = ""
    """Registered task name; empty: the training config's (a different task drops the config's task
    parameters and pool)."""
    task_params: tuple[str, ...] = ()
    """Task parameters as ``key=value`` strings (values parsed as YAML), merged over the task's."""
    pool: str = ""
    """Pool file of training prompts (``vsr pool select``); empty: the training config's ``task.pool`` (then the
    first ``prompts`` problems of its training split)."""
    prompts: int = 128
    """Prompts of the pool (or of the training split) the lab uses (its ``d`` is uniform over them)."""
    alphas: tuple[float, ...] = (0.25, 0.5, 0.75, 0.9)
    """Hint ratios of the prefix states (fractions of each prompt's reference solution)."""
    allocations: tuple[str, ...] = ()
    """Allocations to realise (registered names; empty: all)."""
    probe_samples: int = 16
    """Monte-Carlo samples per state in the probe (half build the allocations, half predict them: >= 4)."""
    score_samples: int = 2
    """Samples per state whose score norm ‖∇ log π‖² the probe measures (0: assume it constant, B.4)."""
    groups: int = 8
    """Groups per mini-batch (K)."""
    group_size: int = 8
    """Samples per group (G)."""
    batches: int = 32
    """Independent mini-batches per allocation (N)."""
    blocks: int = 8
    """Jackknife blocks (block sums held in memory: blocks × parameters floats)."""
    reference_batches: int = 64
    """Mini-batches of the large-batch reference gradients (pool and held-out)."""
    heldout: int = 128
    """Held-out problems (validation split) of the held-out reference gradient."""
    allocation: AllocationParams = field(default_factory=AllocationParams)
    """Knobs of the allocations (VSR's ρ, the ε mixture, DAPO's round cap, ExTra's γ)."""
    out: str = "runs/lab"
    """Output folder (one writer at a time; reruns reuse finished steps; a folder holding another lab's results is
    refused, see ``overwrite``)."""
    replay_ages: tuple[int, ...] = ()
    """Rollout replay at these ages (updates since the stored rollouts were drawn; empty: skip): the lab's last step,
    which trains ``max(ages)`` GRPO updates from the starting parameters and compares fresh batches with batches
    whose share ``replay_share`` of groups is replayed, without and with importance weights
    (:mod:`llm_harness.lab.staleness`)."""
    replay_share: float = 0.5
    """Share of a replay batch's groups that are stored (the rest fresh): the Replay paper's ratio ``r/(1 + r)``."""
    seed: int = 0
    """Seed of every draw."""
    progress: bool = True
    """Progress bars."""
    overwrite: bool = False
    """Discard the results of another lab found in ``out`` (its probe, references, allocations, summary) instead of
    refusing the folder."""
    reanalyze: bool = False
    """Rebuild the finished lab in ``out`` from its stored records only (summary, report, figure; no model is loaded,
    nothing is resampled): for a lab written by an earlier version of the summary."""

    def __post_init__(self) -> None:
        from llm_harness.tasks.base import MAX_SPLIT_PROBLEMS
        from llm_harness.trainer.config import LIMITS
        from vsr.checks import check_number

        for name, lo, hi in (("prompts", 2, 100_000), ("probe_samples", 4, 4_096), ("score_samples", 0, 4_096),
                             ("groups", 1, LIMITS["prompts_per_step"]), ("group_size", 2, LIMITS["group_size"]),
                             ("batches", 2, 100_000), ("blocks", 2, None), ("reference_batches", 2, 100_000),
                             ("heldout", 1, MAX_SPLIT_PROBLEMS), ("seed", 0, None)):
            check_number(name, getattr(self, name), lo, hi, integer=True)
        if self.groups * self.group_size > LIMITS["rollouts_per_step"]:
            raise ValueError(f"groups x group_size: {self.groups} x {self.group_size} = {self.groups * self.group_size} "
                             f"samples per mini-batch exceeds the limit {LIMITS['rollouts_per_step']}")
        if self.batches < self.blocks or self.reference_batches < self.blocks:
            raise ValueError(f"batches / reference_batches: need >= blocks ({self.blocks}) so every jackknife block "
                             "holds a batch")
        if not self.alphas:
            raise ValueError("alphas: need at least one hint ratio")
        for a in self.alphas:
            check_number("alphas", a, 0, 1, lo_open=True, hi_open=True)
        allocation_names(self.allocations)
        if self.task:
            from llm_harness.tasks import TASK_REGISTRY

            TASK_REGISTRY.check(self.task, where="task")
        from llm_harness.tasks.base import check_task_params

        object.__setattr__(self, "task_params", check_task_params(self.task_params))
        if self.replay_ages:
            from llm_harness.lab.staleness import check_ages

            check_ages(self.replay_ages, self.replay_share, self.groups)
            if max(self.replay_ages) > 1000:
                raise ValueError(f"replay_ages: at most 1,000 updates, got {max(self.replay_ages)}")


def check_memory(n_params: int, vectors: int) -> None:
    """Refuse a run whose gradient statistics need more memory than is available (``vectors`` float32 vectors)."""
    import os

    from llm_harness.trainer.memory_check import available_bytes

    need = 4 * n_params * vectors
    avail = available_bytes()
    if os.environ.get("VSR_NO_MEMORY_CHECK", "") in ("", "0") and avail is not None and need > 0.8 * avail:
        raise ValueError(f"lab.blocks: {vectors} gradient vectors of {n_params:,} parameters need {need / 2**30:.1f} GiB, "
                         f"{avail / 2**30:.1f} GiB available; lower --blocks (>= 2)")


def _train_cfg(cfg: LabConfig) -> Any:
    from llm_harness.trainer.config import TrainConfig
    from vsr.config_io import deep_merge, from_dict, read_mapping

    # run_dir inside the lab's folder: the replay step's GRPO updates may write there (a non-finite loss's batch)
    over: dict[str, Any] = {"run": {"progress": False, "run_dir": str(Path(cfg.out) / "train")},
                            "rollout": {"group_size": cfg.group_size}}
    if cfg.model or cfg.backend:
        over["model"] = {k: v for k, v in (("path", cfg.model), ("backend", cfg.backend)) if v}
    if cfg.pool:
        over["task"] = {"pool": cfg.pool}
    mapping = deep_merge(read_mapping(cfg.train_config), over)
    task = mapping.setdefault("task", {})
    if cfg.task and cfg.task != task.get("name"):  # another task: the config's parameters and pool were the old one's
        task.update(name=cfg.task, params={}, pool=cfg.pool)
    if cfg.task_params:
        from llm_harness.tasks.base import parse_task_params

        task["params"] = {**(task.get("params") or {}), **parse_task_params(cfg.task_params)}
    mapping["plugins"] = {}  # the lab draws its own states: the config's plug-ins are not built
    return from_dict(TrainConfig, mapping, where=cfg.train_config)


def _fingerprint(obj: Any) -> str:
    import hashlib

    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _proposal_key(prop: Any, params: AllocationParams) -> dict[str, Any]:
    """What a realisation depends on: the proposal's arrays (so ρ or ε changes only the allocations they change) and
    the knobs used while drawing (DAPO's round cap, ExTra's γ and novelty signal)."""
    import hashlib

    h = hashlib.sha256()
    for a in (prop.mu, prop.weights):  # (DAPO's keep probabilities only feed the prediction)
        h.update(np.ascontiguousarray(a, dtype=np.float64).tobytes())
    key: dict[str, Any] = {"arrays": h.hexdigest()[:16], "prefix_share": prop.prefix_share}
    if prop.keep is not None:
        key["dapo_max_rounds"] = params.dapo_max_rounds
    if prop.shaped:
        key["extra"] = [params.extra_gamma, params.extra_novelty]
    return key


def _damaged(path: Path, why: str) -> ValueError:
    return ValueError(f"out: {path} is damaged ({why}); delete it to recompute that step, or pass --overwrite to start "
                      "the lab over")


def _read_doc(path: Path) -> dict[str, Any] | None:
    """The JSON object in ``path`` (None when there is no file); ValueError naming a file that is not one."""
    if not path.exists():
        return None
    try:
        doc = json.loads(path.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise _damaged(path, f"not valid JSON: {e}") from None
    if not isinstance(doc, dict):
        raise _damaged(path, f"a JSON {type(doc).__name__}, not an object")
    return doc


def _load(path: Path, fp: str) -> dict[str, Any] | None:
    doc = _read_doc(path)
    if doc is None:
        return None
    return doc if doc.get("fingerprint") == fp and doc.get("format") in (FORMAT, PROBE_FORMAT) else None


def _parsed(path: Path, parse: Any, *args: Any) -> Any:
    """``parse(*args)`` for a document read from ``path``; a missing key or a value of the wrong kind is reported
    as a damaged file named by its path."""
    try:
        return parse(*args)
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as e:
        raise _damaged(path, f"{type(e).__name__}: {e}") from None


def _load_probe(path: Path, doc: dict[str, Any], space: Any) -> ProbeResult:
    """The stored probe, checked against the state space it was made for (its fingerprint covers the space, so a
    mismatch is a damaged file)."""
    probe = _parsed(path, ProbeResult.from_plain, doc)
    n = probe.space.size
    same = (n == space.size and np.array_equal(probe.space.problem, space.problem)
            and np.array_equal(probe.space.alpha, space.alpha) and np.array_equal(probe.space.cut, space.cut))
    sizes = {len(a) for a in (probe.n, probe.k, probe.tokens, probe.score_sq)}
    if not same or sizes != {n}:
        raise _damaged(path, f"its states or per-state arrays do not match the {space.size} states of this lab")
    return probe


def _load_vector(path: Path, n_params: int) -> Any:
    """A stored reference gradient (``.npy``): ``n_params`` floats, else a damaged file."""
    import torch

    try:
        vec = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as e:
        raise _damaged(path, f"{type(e).__name__}: {e}") from None
    if vec.shape != (n_params,) or vec.dtype.kind != "f":
        raise _damaged(path, f"{vec.dtype} array of shape {vec.shape}, expected {n_params} floats (one per parameter)")
    return torch.from_numpy(vec)


#: files a lab writes in its folder (removed by ``--overwrite``)
LAB_FILES = ("lab.json", "probe.json", "reference_pool.json", "reference_pool.npy", "reference_heldout.json",
             "reference_heldout.npy", "replay.json", "summary.json", "report.md", "lab_gain.png")


def _identity(cfg: LabConfig, tcfg: Any) -> dict[str, Any]:
    """What a lab's probe depends on, known before the model is loaded (``lab.json``; module doc)."""
    return json.loads(json.dumps({
        "model": tcfg.model.path, "backend": tcfg.model.backend, "task": tcfg.task.name,
        "task_params": dict(tcfg.task.params), "pool": tcfg.task.pool, "rollout": asdict(tcfg.rollout),
        "prompts": cfg.prompts, "alphas": list(cfg.alphas), "probe_samples": cfg.probe_samples,
        "score_samples": cfg.score_samples, "seed": cfg.seed}, default=str))


def _another_lab(out: Path, what: str) -> ValueError:
    return ValueError(f"out: {out} holds {what}; choose another output folder or pass --overwrite to discard them")


def _claim_folder(cfg: LabConfig, out: Path, identity: dict[str, Any]) -> None:
    """Refuse (before the model is loaded) a folder holding another lab's results or another command's summary;
    with ``overwrite``, remove the lab's files there instead (module doc)."""
    if cfg.overwrite:
        for name in LAB_FILES:
            (out / name).unlink(missing_ok=True)
        for f in out.glob("alloc_*.json"):
            f.unlink()
        return
    old = _read_doc(out / "lab.json")
    if old is not None:
        was = old.get("identity")
        if not isinstance(was, dict):
            raise _damaged(out / "lab.json", "no identity object")
        diff = [f"{k}: {was.get(k, '<absent>')!r} -> {identity.get(k, '<absent>')!r}"
                for k in sorted(set(was) | set(identity)) if was.get(k) != identity.get(k)]
        if diff:
            raise _another_lab(out, f"the results of another lab (changed: {'; '.join(diff)})")
        return
    summary = _read_doc(out / "summary.json")
    if summary is not None and not ({"allocations", "probe", "config"} <= set(summary)):
        raise _another_lab(out, "a summary.json that is not a lab's (another command's results)")


def _probe_mismatch(out: Path) -> ValueError:
    return _another_lab(out, "the results of another lab: its probe.json was made from other problems or settings "
                             "(model, task, pool, rollout, prompts, hint ratios, probe samples or seed)")


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


def _realise(engine: Any, name: str, prop: Any, probe: ProbeResult, cfg: LabConfig, refs: dict[str, Any],
             state_of: Any, shaper: Any, desc: str, n_batches: int) -> tuple[MomentRecord, dict[str, float], Any]:
    from tqdm.auto import tqdm

    from vsr.seeding import derive_seed

    acc = BlockMoments(engine.n_params, blocks=cfg.blocks, references=refs)
    rng = np.random.default_rng(derive_seed(cfg.seed, "lab", name, "states"))
    t_s = t_g = 0.0
    generated = kept = 0
    for n in tqdm(range(n_batches), desc=desc, disable=not cfg.progress, unit="batch"):
        t0 = time.perf_counter()
        b = draw_batch(name, prop, probe, cfg.allocation, engine=engine, rng=rng, K=cfg.groups, G=cfg.group_size,
                       seed=derive_seed(cfg.seed, "lab", name, n), state_of=state_of, shaper=shaper)
        t1 = time.perf_counter()
        g = engine.gradient(list(b.groups), list(b.weights), advantages=b.advantages, normaliser=b.normaliser)
        t_g += time.perf_counter() - t1
        t_s += t1 - t0
        acc.add(g, tokens=b.tokens)
        generated += b.generated_groups
        kept += len(b.groups)
    cost = {"sampling_s": t_s, "gradient_s": t_g, "generated_groups": float(generated), "kept_groups": float(kept)}
    return acc.record(), cost, acc.mean()


def run_lab(cfg: LabConfig) -> dict[str, Any]:
    """Run (or resume) the lab into ``cfg.out`` and return the summary (module doc)."""
    from vsr.atomic import atomic_path, json_safe, write_json
    from vsr.runlock import locked_folder

    names = allocation_names(cfg.allocations)
    out = Path(cfg.out)
    with locked_folder(out, field="out"):
        tcfg = _train_cfg(cfg)
        identity = _identity(cfg, tcfg)
        _claim_folder(cfg, out, identity)
        from llm_harness.lab.engine import LabEngine

        t_start = time.perf_counter()
        engine = LabEngine(tcfg)
        try:
            check_memory(engine.n_params, cfg.blocks + 4)
            space = pool_state_space(engine, cfg.prompts, cfg.alphas)
            problems = engine.problems
            base = {"format": FORMAT, "model": tcfg.model.path, "task": tcfg.task.name, "task_params": dict(tcfg.task.params),
                    "pool": tcfg.task.pool, "problems": [p.id for p in problems], "rollout": asdict(tcfg.rollout),
                    "seed": cfg.seed}
            fp_probe = _fingerprint({**base, "probe_format": PROBE_FORMAT, "alphas": list(cfg.alphas),
                                     "probe_samples": cfg.probe_samples, "score_samples": cfg.score_samples})
            stored = _read_doc(out / "probe.json")
            if stored is not None and stored.get("format") == PROBE_FORMAT and stored.get("fingerprint") != fp_probe:
                raise _probe_mismatch(out)  # (an older format is recomputed)
            doc = _load(out / "probe.json", fp_probe)
            if doc is None:
                probe = run_probe(engine, space, samples=cfg.probe_samples, score_samples=cfg.score_samples,
                                  seed=cfg.seed * 1_000_003 + 17, progress=cfg.progress)
                write_json(out / "probe.json", {"format": PROBE_FORMAT, "fingerprint": fp_probe, **probe.to_plain()})
            else:
                probe = _load_probe(out / "probe.json", doc, space)
            if _read_doc(out / "lab.json") is None:  # the folder is this lab's from now on
                write_json(out / "lab.json", {"format": FORMAT, "identity": identity})
            preds = predictions(probe, cfg.allocation, names, cfg.group_size)

            state_of = functools.partial(state_for, engine, space)

            # realisations depend on the probe only through their proposals (hashed per allocation) and the states
            space_key = _fingerprint([space.problem.tolist(), space.alpha.tolist(), space.cut.tolist()])
            common = {**base, "space": space_key, "groups": cfg.groups, "group_size": cfg.group_size, "blocks": cfg.blocks}
            refs, ref_norm2, ref_docs = {}, {}, {}
            held = engine.heldout_problems(cfg.heldout)
            for ref in ("pool", "heldout"):
                fp = _fingerprint({**common, "reference": ref, "batches": cfg.reference_batches, "heldout": cfg.heldout})
                path = out / f"reference_{ref}.json"
                vec_path = out / f"reference_{ref}.npy"
                doc = _load(path, fp)
                if doc is not None and vec_path.exists():
                    refs[ref] = _load_vector(vec_path, engine.n_params)
                    rec = _parsed(path, lambda d: MomentRecord.from_plain(d["moments"]), doc)
                else:
                    rec, cost, mean = _reference(engine, ref, probe, cfg, state_of, held)
                    refs[ref] = mean
                    with atomic_path(vec_path) as tmp:  # the vector, only to resume (not a result: .gitignore leaves it out)
                        with open(tmp, "wb") as fh:
                            np.save(fh, mean.numpy())
                    doc = {"format": FORMAT, "fingerprint": fp, "moments": rec.to_plain(), "cost": cost}
                    write_json(path, doc)
                ref_docs[ref] = doc
                ref_norm2[f"{ref}_norm2"] = estimate(rec, "mean_sq").value
            plan = resolution_plan(_parsed(out / "reference_pool.json", lambda d: MomentRecord.from_plain(d["moments"]),
                                           ref_docs["pool"]), cfg.batches)
            _say(cfg, plan_text(plan))
            records: dict[str, MomentRecord] = {}
            costs: dict[str, dict[str, float]] = {}
            for name in names:
                prop = ALLOCATIONS.lookup(name, where="lab.allocations").proposal(probe.selection(), cfg.allocation,
                                                                                  cfg.group_size)
                fp = _fingerprint({**common, "allocation": name, "proposal": _proposal_key(prop, cfg.allocation),
                                   "batches": cfg.batches, "references": {k: d["fingerprint"] for k, d in ref_docs.items()}})
                path = out / f"alloc_{name}.json"
                doc = _load(path, fp)
                if doc is None:
                    shaper = _extra_shaper(engine, cfg.allocation) if prop.shaped else None
                    rec, cost, _ = _realise(engine, name, prop, probe, cfg, refs, state_of, shaper, name, cfg.batches)
                    doc = {"format": FORMAT, "fingerprint": fp, "moments": rec.to_plain(), "cost": cost}
                    write_json(path, doc)
                records[name] = _parsed(path, lambda d: MomentRecord.from_plain(d["moments"]), doc)
                costs[name] = _parsed(path, lambda d: {k: float(v) for k, v in dict(d["cost"]).items()}, doc)
            summary = summarise(records, costs, preds, ref_norm2, probe, cfg, engine.n_params)
            summary["plan"] = plan
            if cfg.replay_ages:  # last: it trains the model
                summary["replay"] = _replay_step(engine, cfg, common, out)
            summary["wall_s"] = time.perf_counter() - t_start
            summary = json_safe(summary)
            write_json(out / "summary.json", summary)
            (out / "report.md").write_text(render_report(summary), encoding="utf-8")
            gain_figure(summary, out / "lab_gain.png")
            return summary
        finally:
            engine.close()


def _replay_step(engine: Any, cfg: LabConfig, common: dict[str, Any], out: Path) -> dict[str, Any]:
    """``replay.json`` (resumable by its fingerprint) and its rows (:mod:`llm_harness.lab.staleness`)."""
    from llm_harness.lab.staleness import run_staleness, staleness_rows
    from vsr.atomic import json_safe, write_json

    from llm_harness.lab.staleness import STALENESS_FORMAT

    tc = engine.cfg
    if tc.rollout.top_p < 1.0:  # a nucleus that moves with the policy breaks the weights' unbiasedness
        raise ValueError(f"replay_ages: the training config samples with top_p {tc.rollout.top_p}; importance weights "
                         "between two policies are unbiased only without nucleus truncation (top_p 1)")
    # everything that moves theta_tau or the draws (the probe's state space does not enter)
    keep = ("format", "model", "task", "task_params", "pool", "problems", "rollout", "seed", "groups", "group_size", "blocks")
    fp = _fingerprint({**{k: common[k] for k in keep}, "staleness_format": STALENESS_FORMAT,
                       "replay_ages": sorted(set(cfg.replay_ages)), "replay_share": cfg.replay_share,
                       "batches": cfg.batches, "reference_batches": cfg.reference_batches, "prompts": cfg.prompts,
                       "algo": asdict(tc.algo), "optim": asdict(tc.optim), "model_config": asdict(tc.model),
                       "train_seed": tc.seed, "steps": tc.steps})
    path = out / "replay.json"
    doc = _load(path, fp)
    if doc is None:
        prompts = engine.problems[: cfg.prompts]
        res = run_staleness(engine, prompts, ages=cfg.replay_ages, share=cfg.replay_share, groups=cfg.groups,
                            group_size=cfg.group_size, batches=cfg.batches, blocks=cfg.blocks,
                            reference_batches=cfg.reference_batches, seed=cfg.seed, progress=cfg.progress)
        doc = json_safe({"format": FORMAT, "fingerprint": fp, **res})
        write_json(path, doc)
    return _parsed(path, lambda d: {"ages": d["ages"], "share": d["share"], "tau": d["tau"], "train": d["train"],
                                    "rows": staleness_rows(d), "costs": d["costs"]}, doc)


def _reference(engine: Any, ref: str, probe: ProbeResult, cfg: LabConfig, state_of: Any, held: tuple[Any, ...]) -> Any:
    """The uniform allocation over the pool (``pool``) or over held-out problems (``heldout``), ``reference_batches`` batches."""
    if ref == "pool":
        prop = ALLOCATIONS.lookup("uniform", where="reference").proposal(probe.selection(), cfg.allocation, cfg.group_size)
        return _realise(engine, "reference_pool", prop, probe, cfg, {}, state_of, None, "reference pool",
                        cfg.reference_batches)
    from llm_harness.lab.allocations import Proposal
    from llm_harness.lab.probe import StateSpace

    H = len(held)
    space = StateSpace(np.arange(H), np.zeros(H), np.zeros(H, dtype=np.int64), H)
    fake = ProbeResult(space, np.full(H, 2), np.ones(H, dtype=np.int64), np.ones(H), np.full(H, np.nan))
    prop = Proposal(np.full(H, 1.0 / H), np.ones(H))
    return _realise(engine, "reference_heldout", prop, fake, cfg, {}, lambda s, n: engine.prompt_state(held[s], n), None,
                    "reference held-out", cfg.reference_batches)


def _extra_shaper(engine: Any, params: AllocationParams) -> Any:
    from llm_harness.methods.extra import NOVELTY_SIGNALS

    signal = NOVELTY_SIGNALS.lookup(params.extra_novelty, where="allocation.extra_novelty")({}, engine.ctx, "allocation.extra")

    def shape(groups: list[Any]) -> list[np.ndarray]:
        return signal.bonuses(groups, {}, 1)

    return shape


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


def plan_text(plan: dict[str, Any]) -> str:
    need = plan["batches_needed_25pct"]
    if not math.isfinite(need):
        return "lab: the reference batches do not say how many batches resolve a noise ratio (too few blocks)"
    return (f"lab: about {math.ceil(need)} batches per allocation resolve a noise ratio to ±25 % (from "
            f"{plan['reference_batches']} reference batches); this run has {plan['batches']}"
            + ("" if plan["enough"] else " — its ratios will be wider (labelled when they span more than 2x)"))


def _say(cfg: Any, text: str) -> None:
    if cfg.progress:
        from tqdm.auto import tqdm

        tqdm.write(text)


def _nanmean(x: np.ndarray) -> float | None:
    x = np.asarray(x, dtype=np.float64)
    return float(np.nanmean(x)) if np.isfinite(x).any() else None


def _plain(cfg: LabConfig) -> dict[str, Any]:
    d = asdict(cfg)
    d["alphas"] = list(cfg.alphas)
    d["allocations"] = list(cfg.allocations)
    return d


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
    from vsr.atomic import TIMINGS_FILE

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

    from vsr.atomic import atomic_path

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


def reanalyze_lab(folder: str | Path) -> dict[str, Any]:
    """Rebuild a finished lab's ``summary.json``, ``report.md`` and ``lab_gain.png`` from its stored records alone (no
    model, nothing resampled): the allocations' moment records and costs, the reference batches, and the probe section
    and predictions of the existing summary. For a lab written before the summary had its components."""
    from vsr.atomic import json_safe, read_json, write_json

    out = Path(folder)
    old = _read_doc(out / "summary.json")
    if old is None:
        raise ValueError(f"reanalyze: {out} has no summary.json (run the lab first)")
    records, costs = {}, {}
    for row in old["allocations"]:
        path = out / f"alloc_{row['name']}.json"
        doc = read_json(path)
        records[row["name"]] = _parsed(path, lambda d: MomentRecord.from_plain(d["moments"]), doc)
        costs[row["name"]] = _parsed(path, lambda d: {k: float(v) for k, v in dict(d["cost"]).items()}, doc)
    preds = {row["name"]: row["predicted"] for row in old["allocations"]}
    c = old["config"]
    s = {**old, "allocations": allocation_rows(records, costs, preds, dict(old["reference_norm2"]), c["groups"] * c["group_size"])}
    ref = out / "reference_pool.json"
    s["plan"] = resolution_plan(_parsed(ref, lambda d: MomentRecord.from_plain(d["moments"]), read_json(ref)), c["batches"])
    s = json_safe(s)
    write_json(out / "summary.json", s)
    (out / "report.md").write_text(render_report(s), encoding="utf-8")
    gain_figure(s, out / "lab_gain.png")
    return s


def lab_command(cfg: LabConfig) -> int:
    """``vsr lab``: run or resume the lab and print the report's table (``--reanalyze``: rebuild a finished lab's
    summary and report from its records, :func:`reanalyze_lab`)."""
    if cfg.reanalyze:
        s = reanalyze_lab(cfg.out)
        print(render_report(s))
        print(f"-> {cfg.out}/report.md, summary.json, lab_gain.png (rebuilt from the records)")
        return 0
    s = run_lab(cfg)
    print(render_report(s))
    print(f"-> {cfg.out}/report.md, summary.json, lab_gain.png ({s['wall_s']:.0f} s)")
    return 0


#: the wall-clock fields of a lab summary (the probe's, each allocation's and the replay step's costs, the whole run's)
TIMING_FIELDS = frozenset({"wall_s", "sampling_s", "gradient_s", "pools_and_updates_s", "time_step_s"})


def split_timings(s: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(summary, timings)``: the summary ``s`` without :data:`TIMING_FIELDS` (its :func:`render_report` then has no
    seconds column), and those fields alone, each allocation's with its name."""
    from vsr.atomic import split_fields

    kept, timings = split_fields(s, TIMING_FIELDS, ids=("name",))
    return kept, timings or {}


def make_lab_figure(out_dir: Path, quick: bool) -> int:
    """``make figures``' small lab: the test bed's ``mid`` checkpoint on the normal split, four allocations, small
    batches (a few minutes on 2 cores; the full runs are ``scripts/lab_runs.sh`` -> ``figures/lab/``). Recomputed
    from scratch in a temporary folder each time; its report, summary and figure land in ``out_dir``, the report and
    summary without the wall-clock numbers (:func:`split_timings`: ``timings.json`` beside them, not committed) and
    with ``config.out`` naming ``out_dir`` rather than the temporary folder, so ``make figures`` rewrites them byte for
    byte."""
    import shutil
    import tempfile

    from vsr.atomic import TIMINGS_FILE, write_json, write_text

    out_dir = Path(out_dir)
    sizes = (dict(prompts=8, probe_samples=4, groups=2, batches=4, blocks=2, reference_batches=4, heldout=8) if quick
             else dict(prompts=32, probe_samples=8, groups=4, batches=24, blocks=6, reference_batches=32, heldout=64))
    with tempfile.TemporaryDirectory(prefix="vsr-lab-") as tmp:
        cfg = LabConfig(train_config="configs/testbed_grpo.yaml", score_samples=1, progress=False,
                        allocations=("uniform", "dapo", "prompt_neyman", "vsr_calibrated"), out=tmp, **sizes)
        s = run_lab(cfg)
        out_dir.mkdir(parents=True, exist_ok=True)
        if (Path(tmp) / "lab_gain.png").exists():
            shutil.copyfile(Path(tmp) / "lab_gain.png", out_dir / "lab_gain.png")
    kept, timings = split_timings({**s, "config": {**s["config"], "out": str(out_dir)}})
    write_json(out_dir / "summary.json", kept)
    write_text(out_dir / "report.md", render_report(kept))
    write_json(out_dir / TIMINGS_FILE, timings)
    print(f"    lab: {len(s['allocations'])} allocations, {s['wall_s']:.0f} s", flush=True)
    return 0
