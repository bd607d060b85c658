"""Rollout replay at ages 1…τ: the variance *and* the bias of a batch that reuses rollouts of an older policy.

The Replay paper (§3, Eq. 1–2) trains on a batch of fresh rollouts plus stored rollouts of the last ``τ_max``
updates. Reused rollouts cost no generation, so they can only raise the SNR per generated token, but they were drawn
from an older policy: without a correction their expected gradient is not the current ``∇J``. This step of the lab
measures both effects at one point of training.

Procedure (:func:`run_staleness`), from the lab's starting parameters ``θ_0``:

1. for ``k = 0 … τ − 1`` (``τ`` the largest age asked for): when some age ``a`` has ``τ − a = k``, sample a pool
   ``P_k`` of groups on uniformly drawn prompts at ``θ_k`` and score each sample's log-probability under ``θ_k``
   (a no-grad forward, the same computation as the gradient's); then take **one GRPO update with the training
   config's recipe** (the trainer's own ``train_step``: its optimiser, learning rate, clipping, mini-batches);
2. at ``θ_τ``: a large-batch reference gradient of fresh uniform batches (the current ``∇J``), the fresh uniform
   allocation itself, and per age ``a`` two allocations whose share ``r`` of groups come from ``P_{τ−a}`` (disjoint
   across batches, so batches stay independent) and the rest are fresh:
   ``replay_a<a>`` (no correction: ``A_i ∇ log π_θτ(y_i)``, the stored rewards' leave-one-out advantages) and
   ``replay_a<a>_iw`` (sequence importance weights ``exp(log π_θτ(y_i) − log π_θ(τ−a)(y_i))``: unbiased for
   ``∇J(θ_τ)``, since the leave-one-out baseline does not depend on ``y_i``).

Reported per allocation, against fresh uniform batches at ``θ_τ``: the variance side (tr Var × generated tokens,
uniform's over the allocation's; replayed groups generate nothing), the **signal scale** ``⟨E g, r⟩ / ‖∇J‖²``
(``r`` the independent reference; 1 for an unbiased estimator), the cosine of ``E g`` with ``r``, and the squared
bias relative to the signal, ``‖E g − ∇J‖² / ‖∇J‖²`` (from unbiased pieces: ``‖E g‖² − 2⟨E g, r⟩ + ‖∇J‖²``).
"""

from __future__ import annotations

import math
import time
from typing import Any, Sequence

import numpy as np

from llm_harness.lab.engine import leave_one_out_advantages
from llm_harness.lab.moments import BlockMoments, MomentRecord, estimate, log_ratio_interval

#: the replay step's result format (part of its resume fingerprint)
STALENESS_FORMAT = 2

__all__ = ["STALENESS_FORMAT", "check_ages", "replay_advantages", "replay_arms", "replay_names", "run_staleness", "staleness_rows"]


def replay_arms(ages: Sequence[int]) -> list[tuple[str, int | None, bool]]:
    """``(name, age, importance-weighted)`` of the allocations of :func:`run_staleness`: ``uniform`` (no age) first,
    then per age without and with importance weights."""
    return [("uniform", None, False)] + [(f"replay_a{a}{'_iw' if iw else ''}", a, iw)
                                         for a in sorted(set(int(x) for x in ages)) for iw in (False, True)]


def replay_names(ages: Sequence[int]) -> list[str]:
    """The names of :func:`replay_arms`."""
    return [name for name, _, _ in replay_arms(ages)]


def check_ages(ages: Sequence[int], share: float, groups: int) -> tuple[int, ...]:
    """Validated ages (positive integers, sorted, distinct) and a replay share that leaves both parts non-empty."""
    out = tuple(sorted({int(a) for a in ages}))
    if any(a < 1 or a != x for a, x in zip(out, sorted(set(ages)))) or not out:
        raise ValueError(f"replay_ages: positive integers expected, got {list(ages)}")
    k = int(round(share * groups))
    if not 0 < k < groups:
        raise ValueError(f"replay_share: {share} x {groups} groups leaves {k} replayed groups; need 1 .. {groups - 1}")
    return out


def replay_advantages(rewards: Any, logp_now: Any = None, logp_then: Any = None) -> np.ndarray:
    """The per-sample coefficient of ``∇ log π_now(y_i)`` for a stored group: the leave-one-out advantage of its
    rewards, times the sequence importance weight ``π_now(y_i) / π_then(y_i)`` when both log-probabilities are given
    (then ``E_then[Σ_i coef_i ∇ log π_now(y_i)] = G ∇J(now)``: the baseline of sample ``i`` does not depend on
    ``y_i``). The log-ratio is clipped at ±50 only to keep ``exp`` finite."""
    a = leave_one_out_advantages(rewards)
    if logp_now is None and logp_then is None:
        return a
    if logp_now is None or logp_then is None:
        raise ValueError("replay_advantages: give both log-probabilities (importance weights) or neither")
    now, then = np.asarray(logp_now, dtype=np.float64), np.asarray(logp_then, dtype=np.float64)
    if now.shape != a.shape or then.shape != a.shape:
        raise ValueError(f"replay_advantages: shapes {now.shape}, {then.shape} for {a.shape[0]} rewards")
    return a * np.exp(np.clip(now - then, -50.0, 50.0))


def _draw_prompts(engine: Any, prompts: Sequence[Any], rng: np.random.Generator, k: int, G: int) -> list[Any]:
    idx = rng.choice(len(prompts), size=k, replace=True)
    return [engine.prompt_state(prompts[int(i)], G) for i in idx]


def _tokens(groups: Sequence[Any]) -> float:
    return float(sum(len(ids) for g in groups for ids in g.response_ids))


def _sample_pool(engine: Any, prompts: Sequence[Any], n_groups: int, G: int, seed: int) -> list[tuple[Any, np.ndarray]]:
    """``n_groups`` groups on uniformly drawn prompts at the current parameters, each with its samples' log π."""
    from vsr_util.seeding import derive_seed

    rng = np.random.default_rng(derive_seed(seed, "pool"))
    groups = engine.sample(_draw_prompts(engine, prompts, rng, n_groups, G), seed=derive_seed(seed, "sample"), group_size=G)
    lps = engine.sequence_logprobs(groups)
    return list(zip(groups, lps))


def run_staleness(engine: Any, prompts: Sequence[Any], *, ages: Sequence[int], share: float, groups: int, group_size: int,
                  batches: int, blocks: int, reference_batches: int, seed: int, progress: bool = False
                  ) -> dict[str, Any]:
    """The procedure of the module doc; **moves the engine's model** (τ training steps). Returns plain data:
    ``records`` (name → :class:`MomentRecord` plain), ``costs``, ``train`` (the steps' metrics), ``reference``."""
    from tqdm.auto import tqdm

    from vsr_util.seeding import derive_seed

    ages = check_ages(ages, share, groups)
    tau = max(ages)
    k_rep = int(round(share * groups))
    pools: dict[int, list[tuple[Any, np.ndarray]]] = {}
    train: list[dict[str, float]] = []
    t0 = time.perf_counter()
    for k in tqdm(range(tau), desc="replay: pools and updates", disable=not progress, unit="update"):
        if any(tau - a == k for a in ages):
            pools[k] = _sample_pool(engine, prompts, batches * k_rep, group_size, derive_seed(seed, "replay", "pool", k))
        m = engine.trainer.train_step()
        train.append({key: float(v) for key, v in m.items() if isinstance(v, (int, float)) and key in
                      ("step", "loss", "grad_norm", "reward_mean", "gen_new_tokens", "time_step_s")})
    engine.model.eval()
    t_pools = time.perf_counter() - t0

    def fresh(rng: np.random.Generator, k: int, s: int) -> list[Any]:
        return engine.sample(_draw_prompts(engine, prompts, rng, k, group_size), seed=s, group_size=group_size)

    def realise(name: str, age: int | None, iw: bool, n_batches: int,
                refs: dict[str, Any]) -> tuple[MomentRecord, dict[str, float], Any]:
        acc = BlockMoments(engine.n_params, blocks=blocks, references=refs)
        rng = np.random.default_rng(derive_seed(seed, "replay", name, "prompts"))
        t_s = t_g = 0.0
        log_w: list[np.ndarray] = []
        for n in tqdm(range(n_batches), desc=f"replay: {name}", disable=not progress, unit="batch"):
            t1 = time.perf_counter()
            k_new = groups if age is None else groups - k_rep
            new = fresh(rng, k_new, derive_seed(seed, "replay", name, n))
            gs, advs = list(new), [leave_one_out_advantages(g.rewards) for g in new]
            if age is not None:
                stored = pools[tau - age][n * k_rep:(n + 1) * k_rep]  # disjoint across batches
                now = engine.sequence_logprobs([g for g, _ in stored]) if iw else None
                if iw:
                    log_w.extend(now[j] - lp_old for j, (_, lp_old) in enumerate(stored))
                for j, (g, lp_old) in enumerate(stored):
                    gs.append(g)
                    advs.append(replay_advantages(g.rewards, now[j], lp_old) if iw else replay_advantages(g.rewards))
            t2 = time.perf_counter()
            grad = engine.gradient(gs, [1.0] * len(gs), advantages=advs, normaliser=sum(g.size for g in gs))
            t_g += time.perf_counter() - t2
            t_s += t2 - t1
            acc.add(grad, tokens=_tokens(new))
        cost: dict[str, float] = {"sampling_s": t_s, "gradient_s": t_g}
        if log_w:  # how far the policy moved, as the weights see it
            lw = np.concatenate(log_w)
            w = np.exp(np.clip(lw, -50.0, 50.0))
            cost["log_weight_abs_mean"] = float(np.mean(np.abs(lw)))
            cost["weight_ess_frac"] = float(w.sum() ** 2 / (w.size * float(np.sum(w * w))))  # Kish's ESS / n
        return acc.record(), cost, acc.mean()

    ref_rec, ref_cost, ref_mean = realise("reference", None, False, reference_batches, {})
    records, costs = {}, {}
    for name, age, iw in replay_arms(ages):
        rec, cost, _ = realise(name, age, iw, batches, {"pool": ref_mean})
        records[name] = rec.to_plain()
        costs[name] = cost
    return {"ages": list(ages), "share": share, "tau": tau, "records": records, "costs": costs, "train": train,
            "reference": {"moments": ref_rec.to_plain(), "cost": ref_cost}, "pools_and_updates_s": t_pools}


def staleness_rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Per allocation of a :func:`run_staleness` result: the variance side and the signal scale relative to fresh
    uniform batches (intervals from the jackknife of the logs), the cosine with the reference, and the squared bias
    relative to the signal (module doc)."""
    ref = MomentRecord.from_plain(doc["reference"]["moments"])
    j2 = estimate(ref, "mean_sq")  # ‖∇J‖², unbiased (noisy where the gradient is not resolved: reported beside)
    ctx = {"pool_norm2": j2.value}
    recs = {k: MomentRecord.from_plain(v) for k, v in doc["records"].items()}
    base = recs["uniform"]
    base_tokens = estimate(base, "tokens").value
    out = []
    for name, rec in recs.items():
        tokens = estimate(rec, "tokens").value
        if name == "uniform":  # the yardstick itself: 1 by definition
            tv = sc = None
        else:
            tv = log_ratio_interval(base, rec, "trvar")  # uniform's tr Var over the allocation's
            # ⟨E g, r⟩ over uniform's ⟨E g, r⟩ with the same r: 1 for an unbiased allocation whatever r's own noise
            sc = log_ratio_interval(rec, base, "dot:pool")
        tok = base_tokens / max(tokens, 1e-12)
        dot = estimate(rec, "dot:pool").value
        m2 = estimate(rec, "mean_sq").value
        bias2 = (m2 - 2.0 * dot + j2.value) / j2.value if j2.value > 0 else math.nan
        out.append({"name": name,
                    "variance_side": 1.0 if tv is None else tv.value * tok,
                    "variance_side_lo": None if tv is None else tv.lo * tok,
                    "variance_side_hi": None if tv is None else tv.hi * tok,
                    "signal_scale": 1.0 if sc is None else sc.value,
                    "signal_scale_lo": None if sc is None else sc.lo, "signal_scale_hi": None if sc is None else sc.hi,
                    "cos": estimate(rec, "cos:pool", ctx).value, "bias_sq_rel": bias2, "tokens": tokens,
                    "trvar": estimate(rec, "trvar").value, "grad_j_sq": j2.value, "grad_j_sq_lo": j2.lo,
                    "grad_j_sq_hi": j2.hi})
    return out
