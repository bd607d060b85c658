"""``vsr lab``: probe, predict and realise every allocation on one model and task; report predicted vs realised.

Steps (each resumable: a finished step's file is reused when its configuration matches). The report goes to ``out``;
what the lab reads back — ``lab.json``, the probe, the references, the allocations' records, the replay step — goes to
the records store, :func:`vsr_util.store.store_folder` of ``out`` (``figures/lab/real`` -> ``records/lab/real``; a
trial folder ``DIR`` -> ``DIR/records``), the rule ``vsr compare`` and ``vsr study`` follow (``records/README.md``):

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

The records folder belongs to one lab: ``lab.json`` records what its probe depends on (model, backend, task and its
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
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from llm_harness.lab.allocations import ALLOCATIONS, AllocationParams, allocation_names, draw_batch
from llm_harness.lab.config import FORMAT, PROBE_FORMAT, LabConfig, check_memory
from llm_harness.lab.moments import BlockMoments, MomentRecord, estimate
from llm_harness.lab.probe import ProbeResult, pool_state_space, run_probe, state_for
from llm_harness.lab.report import gain_figure, plan_text, render_report, split_timings
from llm_harness.lab.summary import allocation_rows, predictions, resolution_plan, summarise
from vsr_util.store import misplaced_records, move_into_store, store_folder

__all__ = ["LAB_FILES", "REPORT_FILES", "lab_command", "make_lab_figure", "move_lab_records", "reanalyze_lab", "records_dir",
           "run_lab"]


def _train_cfg(cfg: LabConfig) -> Any:
    from llm_harness.trainer.config import TrainConfig
    from vsr_util.config_io import deep_merge, from_dict, read_mapping

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


#: files a lab keeps in its records folder (``store_folder(out)``; removed by ``--overwrite``, with ``alloc_*.json``)
LAB_FILES = ("lab.json", "probe.json", "reference_pool.json", "reference_pool.npy", "reference_heldout.json",
             "reference_heldout.npy", "replay.json")
#: the report a lab writes in ``out`` (removed by ``--overwrite``)
REPORT_FILES = ("summary.json", "report.md", "lab_gain.png")


def records_dir(out: str | Path) -> Path:
    """Where the lab whose report goes to ``out`` keeps what it reads back (module doc)."""
    return store_folder(out)


def _misplaced(out: Path) -> list[Path]:
    """The lab records ``out`` still holds inside, where a lab kept them before the store."""
    return misplaced_records(out, LAB_FILES, ("alloc_*.json",))


def _old_layout(out: Path) -> None:
    """Refuse a report folder that still holds a lab's records (written before they moved to the store)."""
    stale = [f.name for f in _misplaced(out)]
    if stale:
        raise ValueError(f"out: {out} holds a lab's records ({', '.join(stale[:4])}{', ...' if len(stale) > 4 else ''}) from "
                         f"before they moved to the records store; move them to {records_dir(out)} with python -c \"from "
                         f"llm_harness.lab.run import move_lab_records; move_lab_records('{out}')\"")


def move_lab_records(out: str | Path) -> list[Path]:
    """Move a lab's records from its report folder ``out`` (the layout before the store) to :func:`records_dir`
    (:func:`vsr_util.store.move_into_store`: nothing replaced, nothing moved on a clash); returns the moved files."""
    files = _misplaced(Path(out))
    store = move_into_store(out, files, "lab records")
    return [store / f.name for f in files]


def _identity(cfg: LabConfig, tcfg: Any) -> dict[str, Any]:
    """What a lab's probe depends on, known before the model is loaded (``lab.json``; module doc)."""
    return json.loads(json.dumps({
        "model": tcfg.model.path, "backend": tcfg.model.backend, "task": tcfg.task.name,
        "task_params": dict(tcfg.task.params), "pool": tcfg.task.pool, "rollout": asdict(tcfg.rollout),
        "prompts": cfg.prompts, "alphas": list(cfg.alphas), "probe_samples": cfg.probe_samples,
        "score_samples": cfg.score_samples, "seed": cfg.seed}, default=str))


def _another_lab(out: Path, what: str) -> ValueError:
    return ValueError(f"out: {out} holds {what}; choose another output folder or pass --overwrite to discard them")


def _claim_folder(cfg: LabConfig, out: Path, rec: Path, identity: dict[str, Any]) -> None:
    """Refuse (before the model is loaded) a records folder holding another lab's results, or a report folder holding
    another command's summary; with ``overwrite``, remove the lab's files there instead (module doc)."""
    if cfg.overwrite:
        for name in LAB_FILES:
            (rec / name).unlink(missing_ok=True)
        for f in rec.glob("alloc_*.json"):
            f.unlink()
        for name in REPORT_FILES:
            (out / name).unlink(missing_ok=True)
        return
    _old_layout(out)
    old = _read_doc(rec / "lab.json")
    if old is not None:
        was = old.get("identity")
        if not isinstance(was, dict):
            raise _damaged(rec / "lab.json", "no identity object")
        diff = [f"{k}: {was.get(k, '<absent>')!r} -> {identity.get(k, '<absent>')!r}"
                for k in sorted(set(was) | set(identity)) if was.get(k) != identity.get(k)]
        if diff:
            raise _another_lab(rec, f"the results of another lab (changed: {'; '.join(diff)})")
        return
    summary = _read_doc(out / "summary.json")
    if summary is not None and not ({"allocations", "probe", "config"} <= set(summary)):
        raise _another_lab(out, "a summary.json that is not a lab's (another command's results)")


def _probe_mismatch(out: Path) -> ValueError:
    return _another_lab(out, "the results of another lab: its probe.json was made from other problems or settings "
                             "(model, task, pool, rollout, prompts, hint ratios, probe samples or seed)")


def _say(cfg: Any, text: str) -> None:
    if cfg.progress:
        from tqdm.auto import tqdm

        tqdm.write(text)


def _realise(engine: Any, name: str, prop: Any, probe: ProbeResult, cfg: LabConfig, refs: dict[str, Any],
             state_of: Any, shaper: Any, desc: str, n_batches: int) -> tuple[MomentRecord, dict[str, float], Any]:
    from tqdm.auto import tqdm

    from vsr_util.seeding import derive_seed

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
    from vsr_util.atomic import atomic_path, json_safe, write_json
    from vsr_util.runlock import locked_folder

    names = allocation_names(cfg.allocations)
    out = Path(cfg.out)
    store = records_dir(out)
    with locked_folder(store, field="out"):
        tcfg = _train_cfg(cfg)
        identity = _identity(cfg, tcfg)
        _claim_folder(cfg, out, store, identity)
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
            stored = _read_doc(store / "probe.json")
            if stored is not None and stored.get("format") == PROBE_FORMAT and stored.get("fingerprint") != fp_probe:
                raise _probe_mismatch(store)  # (an older format is recomputed)
            doc = _load(store / "probe.json", fp_probe)
            if doc is None:
                probe = run_probe(engine, space, samples=cfg.probe_samples, score_samples=cfg.score_samples,
                                  seed=cfg.seed * 1_000_003 + 17, progress=cfg.progress)
                write_json(store / "probe.json", {"format": PROBE_FORMAT, "fingerprint": fp_probe, **probe.to_plain()})
            else:
                probe = _load_probe(store / "probe.json", doc, space)
            if _read_doc(store / "lab.json") is None:  # the folder is this lab's from now on
                write_json(store / "lab.json", {"format": FORMAT, "identity": identity})
            preds = predictions(probe, cfg.allocation, names, cfg.group_size)

            state_of = functools.partial(state_for, engine, space)

            # realisations depend on the probe only through their proposals (hashed per allocation) and the states
            space_key = _fingerprint([space.problem.tolist(), space.alpha.tolist(), space.cut.tolist()])
            common = {**base, "space": space_key, "groups": cfg.groups, "group_size": cfg.group_size, "blocks": cfg.blocks}
            refs, ref_norm2, ref_docs = {}, {}, {}
            held = engine.heldout_problems(cfg.heldout)
            for ref in ("pool", "heldout"):
                fp = _fingerprint({**common, "reference": ref, "batches": cfg.reference_batches, "heldout": cfg.heldout})
                path = store / f"reference_{ref}.json"
                vec_path = store / f"reference_{ref}.npy"
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
            plan = resolution_plan(_parsed(store / "reference_pool.json", lambda d: MomentRecord.from_plain(d["moments"]),
                                           ref_docs["pool"]), cfg.batches)
            _say(cfg, plan_text(plan))
            records: dict[str, MomentRecord] = {}
            costs: dict[str, dict[str, float]] = {}
            for name in names:
                prop = ALLOCATIONS.lookup(name, where="lab.allocations").proposal(probe.selection(), cfg.allocation,
                                                                                  cfg.group_size)
                fp = _fingerprint({**common, "allocation": name, "proposal": _proposal_key(prop, cfg.allocation),
                                   "batches": cfg.batches, "references": {k: d["fingerprint"] for k, d in ref_docs.items()}})
                path = store / f"alloc_{name}.json"
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
                summary["replay"] = _replay_step(engine, cfg, common, store)
            summary["wall_s"] = time.perf_counter() - t_start
            summary = json_safe(summary)
            out.mkdir(parents=True, exist_ok=True)
            write_json(out / "summary.json", summary)
            (out / "report.md").write_text(render_report(summary), encoding="utf-8")
            gain_figure(summary, out / "lab_gain.png")
            return summary
        finally:
            engine.close()


def _replay_step(engine: Any, cfg: LabConfig, common: dict[str, Any], rec: Path) -> dict[str, Any]:
    """``replay.json`` (resumable by its fingerprint) and its rows (:mod:`llm_harness.lab.staleness`)."""
    from llm_harness.lab.staleness import run_staleness, staleness_rows
    from vsr_util.atomic import json_safe, write_json

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
    path = rec / "replay.json"
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


def reanalyze_lab(folder: str | Path) -> dict[str, Any]:
    """Rebuild a finished lab's ``summary.json``, ``report.md`` and ``lab_gain.png`` from its stored records alone (no
    model, nothing resampled): the allocations' moment records and costs (in :func:`records_dir`), the reference
    batches, and the probe section and predictions of the existing summary. For a lab written before the summary had
    its components."""
    from vsr_util.atomic import json_safe, read_json, write_json

    out = Path(folder)
    rec = records_dir(out)
    _old_layout(out)
    old = _read_doc(out / "summary.json")
    if old is None:
        raise ValueError(f"reanalyze: {out} has no summary.json (run the lab first)")
    records, costs = {}, {}
    for row in old["allocations"]:
        path = rec / f"alloc_{row['name']}.json"
        doc = read_json(path)
        records[row["name"]] = _parsed(path, lambda d: MomentRecord.from_plain(d["moments"]), doc)
        costs[row["name"]] = _parsed(path, lambda d: {k: float(v) for k, v in dict(d["cost"]).items()}, doc)
    preds = {row["name"]: row["predicted"] for row in old["allocations"]}
    c = old["config"]
    s = {**old, "allocations": allocation_rows(records, costs, preds, dict(old["reference_norm2"]), c["groups"] * c["group_size"])}
    ref = rec / "reference_pool.json"
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


def make_lab_figure(out_dir: Path, quick: bool) -> int:
    """``make figures``' small lab: the test bed's ``mid`` checkpoint on the normal split, four allocations, small
    batches (a few minutes on 2 cores; the full runs are ``scripts/lab_runs.sh`` -> ``figures/lab/``). Recomputed
    from scratch in a temporary folder each time; its report, summary and figure land in ``out_dir``, the report and
    summary without the wall-clock numbers (:func:`split_timings`: ``timings.json`` beside them, not committed) and
    with ``config.out`` naming ``out_dir`` rather than the temporary folder, so ``make figures`` rewrites them byte for
    byte."""
    import shutil
    import tempfile

    from vsr_util.atomic import TIMINGS_FILE, write_json, write_text

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
