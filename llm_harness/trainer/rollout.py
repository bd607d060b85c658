"""Generation and verification of rollout groups (GRPO groups, Replay §3).

* :func:`derive_seed` (:mod:`vsr_util.seeding`, re-exported) — a fresh, deterministic sampling seed per
  (run seed, step, round, call).
* :class:`SafeVerifier` (:mod:`llm_harness.trainer.verifier`, re-exported) — ``task.verify`` under a deadline;
  an exception or a timeout gives reward 0 and is counted (never a crash).
* :func:`sample_groups` — ``n`` continuations of many start states in one backend call per
  sample count, cut to each state's budget and verified: the one sampling path of the trainer's
  ``generate`` collector and of the prefix-value studies (``prefixvalue``).
* ``COLLECTORS`` — how a list of start states becomes rollout groups: ``generate`` (policy
  samples through the backend; a fixed prefix counts against the response budget) and ``expert``
  (the task's expert solution as the single sample: the SFT baseline's data, same pipeline).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from llm_harness.backends import Sample, SamplingParams, continuation_budget
from llm_harness.tasks.base import problem_budget
from llm_harness.trainer.data import RolloutGroup, StartState, completion_ids
from vsr_util.registry import Registry
from llm_harness.trainer.verifier import SafeVerifier  # noqa: F401  (re-exported: its home before)
from vsr_util.seeding import derive_seed  # noqa: F401  (re-exported: the one seed derivation)

if TYPE_CHECKING:
    from llm_harness.trainer.plugins import TrainContext

__all__ = [
    "COLLECTORS",
    "SafeVerifier",
    "call_budgets",
    "collect",
    "derive_seed",
    "merge_groups",
    "register_collector",
    "sample_groups",
    "truncate_sample",
]


@dataclass
class CollectStats:
    """Accounting of one collection round."""

    new_tokens: int = 0
    """Generated tokens (responses only, every sample)."""
    prompt_instances: int = 0
    """States generated from (each (state, round) once)."""
    samples: int = 0
    """Samples drawn."""


Collector = Callable[..., tuple[list[RolloutGroup], CollectStats]]
#: name -> collector(states, *, step, round, ctx) -> (groups, stats)
COLLECTORS: Registry[Collector] = Registry("collector")


def register_collector(name: str) -> Callable[[Collector], Collector]:
    """Decorator adding a collector; duplicates are rejected."""
    return COLLECTORS.register(name)


def truncate_sample(sample: Any, budget: int) -> Any:
    """``sample`` cut to its first ``budget`` tokens (finish reason ``length`` when cut).

    States with different prefix lengths have different response budgets; they are sampled in one
    backend call with the largest budget and cut here, which gives each state exactly the
    distribution of a call with its own budget (the first ``budget`` tokens of an autoregressive
    sample do not depend on the later ones); the discarded tokens are not counted.
    """
    if len(sample.token_ids) <= budget:
        return sample
    return Sample(tuple(sample.token_ids[:budget]), tuple(sample.sampling_logprobs[:budget]), "length")


def call_budgets(states: Sequence[StartState], response_budget: int, max_context: int | None = None) -> tuple[int, list[int]]:
    """``(max_new_tokens, budgets[i])`` of one backend call over ``states``.

    State ``i`` may add ``budgets[i] = b_i - len(prefix_i)`` tokens, where ``b_i`` is ``response_budget`` or the
    state's problem's own smaller budget (:func:`~llm_harness.tasks.base.problem_budget`, e.g. a level's budget) and a
    prefix counts against it (:func:`continuation_budget`). One call takes one
    ``max_new_tokens``: the largest budget, and with ``max_context`` given at most what the longest
    state leaves of the model context; samples longer than their own budget are cut afterwards
    (:func:`truncate_sample`).
    """
    budgets = [continuation_budget(len(s.prefix_ids), problem_budget(s.problem, response_budget)) for s in states]
    max_new = max(budgets)
    if max_context is not None:
        max_new = min(max_new, min(max_context - len(s.context_ids) for s in states))
        if max_new < 1:
            raise ValueError(f"states: the longest state leaves no room in the model context of {max_context} tokens")
    return max_new, budgets


def sample_groups(
    states: Sequence[StartState],
    *,
    backend: Any,
    codec: Any,
    verifier: SafeVerifier,
    n_default: int,
    temperature: float,
    top_p: float,
    max_new_tokens: int,
    seed: int | Callable[[int], int],
    step: int = 0,
    max_context: int | None = None,
) -> tuple[list[RolloutGroup], CollectStats]:
    """Sample continuations of many start states and verify them: one :class:`RolloutGroup` per
    state (input order), born at ``step``.

    States are bucketed by sample count (``state.n``, or ``n_default``); each bucket is ONE
    ``backend.generate`` call (call index ``c`` in increasing ``n``) with
    ``SamplingParams(temperature, top_p, max_new_tokens=call_budgets(...)[0], seed)``, where
    ``seed`` is an int (only for a single call) or ``seed(c)``. ``max_new_tokens`` is the response
    budget shared by prefix and continuation; ``max_context`` (optional) also caps each call by the
    model context. Every sample is cut to its own state's budget (:func:`truncate_sample`), and
    ``prefix + continuation`` without the stop token is verified against the state's own problem
    through ``verifier.verify_many`` (as ExTra App. B.4 verifies prefix + suffix).
    """
    if not states:
        return [], CollectStats()
    buckets: dict[int, list[int]] = defaultdict(list)
    for i, s in enumerate(states):
        buckets[s.n if s.n is not None else n_default].append(i)
    if not callable(seed) and len(buckets) > 1:
        raise ValueError(f"seed: one seed for {len(buckets)} backend calls (states with different n); "
                         "pass a function of the call index")
    calls = [(n, idx, *call_budgets([states[i] for i in idx], max_new_tokens, max_context))
             for n, idx in sorted(buckets.items())]  # every budget checked before the first call
    samples: list[list[Any]] = [[] for _ in states]
    for call, (n, idx, max_new, budgets) in enumerate(calls):
        sp = SamplingParams(temperature=temperature, top_p=top_p, max_new_tokens=max_new,
                            seed=seed(call) if callable(seed) else seed)
        res = backend.generate([list(states[i].context_ids) for i in idx], n, sp)
        for i, b, r in zip(idx, budgets, res):
            samples[i] = [truncate_sample(x, b) for x in r]
    problems, texts = [], []
    for s, ss in zip(states, samples):
        for smp in ss:
            problems.append(s.problem)
            texts.append(codec.decode(s.prefix_ids + completion_ids(smp.token_ids, smp.finish_reason == "stop")))
    results = verifier.verify_many(problems, texts)
    stats = CollectStats(prompt_instances=len(states))
    groups, k = [], 0
    for s, ss in zip(states, samples):
        vr = results[k : k + len(ss)]
        k += len(ss)
        stats.samples += len(ss)
        stats.new_tokens += sum(len(x.token_ids) for x in ss)
        groups.append(
            RolloutGroup(
                start=s,
                response_ids=[x.token_ids for x in ss],
                behaviour_logprobs=[np.asarray(x.sampling_logprobs) for x in ss],
                rewards=np.array([v.reward for v in vr]),
                birth_step=step,
                verify=list(vr),
                finish_reasons=[x.finish_reason for x in ss],
            )
        )
    return groups, stats


@register_collector("generate")
def generate_groups(states: Sequence[StartState], *, step: int, round: int, ctx: "TrainContext") -> tuple[list[RolloutGroup], CollectStats]:
    """Sample ``n`` (state's own or G) continuations of every state, verify prefix + continuation
    against the state's own problem (ExTra App. B.4), and return one group per state (input order):
    :func:`sample_groups` with the rollout config and call ``c``'s seed
    ``derive_seed(config.seed, step, round, c)``."""
    cfg = ctx.config.rollout
    return sample_groups(
        states,
        backend=ctx.backend,
        codec=ctx.codec,
        verifier=ctx.verifier,
        n_default=cfg.group_size,
        temperature=cfg.temperature,
        top_p=cfg.top_p,
        max_new_tokens=cfg.max_new_tokens,
        seed=lambda call: derive_seed(ctx.config.seed, step, round, call),
        step=step,
    )


@register_collector("expert")
def expert_groups(states: Sequence[StartState], *, step: int, round: int, ctx: "TrainContext") -> tuple[list[RolloutGroup], CollectStats]:
    """One sample per state: the problem's expert solution followed by EOS (SFT baseline data).

    Behaviour log-probs are 0 (unused by the ``sft`` objective); the solution is verified like a
    policy sample, so a broken expert solution shows up as reward 0 in the metrics.
    """
    eos = getattr(ctx.codec.tokenizer, "eos_token_id", None)
    groups = []
    texts = [s.problem.solution for s in states]
    for s, t in zip(states, texts):
        if t is None:
            raise ValueError(f"problem: {s.problem.id!r} has no expert solution (collector 'expert')")
    results = ctx.verifier.verify_many([s.problem for s in states], texts)
    for s, t, vr in zip(states, texts, results):
        ids = tuple(ctx.codec.encode(t)) + ((int(eos),) if eos is not None else ())
        ids = ids[: ctx.config.rollout.max_new_tokens]
        groups.append(
            RolloutGroup(s, [ids], [np.zeros(len(ids))], np.array([vr.reward]), step, verify=[vr], finish_reasons=["stop"])
        )
    return groups, CollectStats(new_tokens=0, prompt_instances=len(states), samples=len(states))


def merge_groups(groups: Sequence[RolloutGroup]) -> list[RolloutGroup]:
    """Merge groups with equal start-state ``key`` and birth step (first occurrence keeps its place)."""
    out: list[RolloutGroup] = []
    where: dict[tuple, int] = {}
    for g in groups:
        k = (g.start.key, g.start.origin, g.birth_step)
        if k in where and g.advantages is None and out[where[k]].advantages is None:
            a = out[where[k]]
            out[where[k]] = RolloutGroup(
                a.start,
                a.response_ids + g.response_ids,
                a.behaviour_logprobs + g.behaviour_logprobs,
                np.concatenate([a.rewards, g.rewards]),
                a.birth_step,
                verify=list(a.verify) + list(g.verify),
                finish_reasons=list(a.finish_reasons) + list(g.finish_reasons),
                info={**a.info, **g.info},
            )
        else:
            where[k] = len(out)
            out.append(g)
    return out


def collect(states: Sequence[StartState], *, step: int, round: int, ctx: "TrainContext") -> tuple[list[RolloutGroup], CollectStats]:
    """Dispatch to the configured collector (``config.algo.collector``)."""
    if not states:
        return [], CollectStats()
    return COLLECTORS.lookup(ctx.config.algo.collector, where="algo.collector")(states, step=step, round=round, ctx=ctx)
