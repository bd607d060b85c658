"""Multi-turn episodes in the trainer's data model: the batched ``multiturn`` collector and episode-level
advantages (VSR App. D.3 agentic; GiGPO as in verl-agent).

**A start state** of an ``env`` task (:class:`~llm_harness.envs.task.EnvTask`) is an episode: the
problem's seed, or — for a state restarted mid-episode (VSR's replayed interaction states) — an
environment ``snapshot`` plus the ``history`` of turns played before it (``{"observation",
"action"}`` plain mappings). The collector plays ``G`` episodes from each state (the state's ``n``
or ``rollout.group_size``) through the project's one episode runner,
:func:`llm_harness.envs.episodes.run_episodes`: **all active episodes of all states advance together,
one batched ``backend.generate`` call per turn** (finished episodes drop out). Each turn the policy
reads :func:`~llm_harness.envs.episodes.turn_text` (instruction, the task's history ``window``, the
current observation; chat template when the tokenizer has one) and replies within
``agent.turn_tokens`` tokens (``agent.max_turns`` caps the turns); the reply goes to ``env.step``
as the action text. Collection ``(step, round)`` samples with the runner's turn seeds under
``derive_seed(seed, step, round, 0x3E7)``.

**A group** (one per start state) has one row per *turn*: ``contexts[k]`` the turn's prompt ids
(context, masked from the loss), ``response_ids[k]`` the reply (the only tokens in the loss), the
behaviour log-probs cached at generation, ``rewards[k]`` = the row's episode return (so
``group.mixed`` means "the episodes' returns differ") and, in ``info``: ``episode[k]``, ``turn[k]``
(counted from the start of the environment episode, so a restarted state's first turn is
``len(history)``), ``step_reward[k]`` (the environment's reward *before* an invalid-action
penalty), ``penalty[k]``, ``anchor[k]`` (the observation the turn acted on, without history), ``action[k]``
(the reply as later prompts show it), ``snapshot[k]`` (the environment before the turn: where VSR
restarts an interaction state),
``episode_success[e]`` and ``episode_return[e]``. The last row of each episode carries a
``VerifyResult`` with reward 1/0 for success, so accuracy metrics count episodes, not turns.

**Advantages** (:func:`episode_group_advantages`): a group-normalised estimator (``grpo``, ``rloo``,
``drgrpo``) normalises the *episode returns* within the group and gives every turn of an episode
its episode's advantage; ``gigpo`` (:mod:`llm_harness.trainer.gigpo`) adds the anchor-state step
advantages. An episode group is the ``G`` episodes of one start state — for a restarted state,
those ``G`` restarts only (they never share a group with the episodes the state was cut from).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from llm_harness.envs.episodes import EpisodeResult, EpisodeStart, run_episodes, turn_text
from llm_harness.envs.prompt import Turn
from llm_harness.tasks import ParseStatus, VerifyResult
from llm_harness.trainer.data import RolloutGroup, StartState
from llm_harness.trainer.advantages import episode_group_advantages  # noqa: F401  (its home before; re-exported)
from llm_harness.trainer.rollout import CollectStats, register_collector
from vsr_util.seeding import derive_seed

if TYPE_CHECKING:
    from llm_harness.trainer.plugins import TrainContext

__all__ = ["agent_group_metrics", "episode_group", "episode_start", "evaluate_agent", "expert_episode_states", "multiturn_groups",
           "play_episodes", "turn_prompt"]


def episode_start(task: Any, s: StartState) -> EpisodeStart:
    """The runner's start of a trainer state: the problem's seed, plus the snapshot and history of a
    state restarted mid-episode."""
    seed = task.seed_of(s.problem)
    if s.snapshot is None:
        if s.history:
            raise ValueError(f"start state of {s.problem.id!r}: a history without an environment snapshot")
        return EpisodeStart(seed)
    return EpisodeStart(seed, snapshot=s.snapshot, history=tuple(Turn(str(t["observation"]), str(t["action"])) for t in s.history))


def turn_prompt(task: Any, instruction: str, turns: Sequence[Turn], observation: str, tokenizer: Any) -> str:
    """The text of one turn's prompt with the task's history window (:func:`llm_harness.envs.episodes.turn_text`)."""
    return turn_text(instruction, turns, observation, window=task.config.window, tokenizer=tokenizer,
                     reply_format=task.config.reply_format)


def expert_episode_states(task: Any, codec: Any, seed: int) -> list[dict[str, Any]]:
    """The interaction states before each turn of the expert's episode from ``seed`` (plain data:
    ``prompt_ids``, ``history``, ``snapshot``), as the collector would render them — VSR's expert
    cold start and static-reset control for agents."""
    env = task.make_env()
    obs = env.reset(seed)
    turns: list[Turn] = []
    out = []
    for action in env.expert_actions(seed):
        out.append({"prompt_ids": list(codec.encode(turn_prompt(task, env.instruction, turns, obs, codec.tokenizer))),
                    "history": [{"observation": t.observation, "action": t.action} for t in turns],
                    "snapshot": env.snapshot()})
        turns.append(Turn(obs, action))
        obs = env.step(action)[0]
    if not env.success:
        raise ValueError(f"expert: the expert's actions for seed {seed} do not solve the episode")
    return out


def play_episodes(states: Sequence[StartState], *, task: Any, codec: Any, backend: Any, group_size: int, seed: int,
                  temperature: float, top_p: float, turn_tokens: int, max_turns: int = 0) -> list[list[EpisodeResult]]:
    """``out[i]``: the ``n`` (state ``i``'s own, else ``group_size``) episodes played from state ``i``,
    all episodes of all states advancing in one ``backend.generate`` call per turn
    (:func:`llm_harness.envs.episodes.run_episodes` with the task's environment and history window)."""
    if not hasattr(task, "make_env"):
        raise ValueError(f"algo.collector: 'multiturn' needs an environment task (task.name: env), got {getattr(task, 'name', task)!r}")
    sizes = [s.n if s.n is not None else group_size for s in states]
    starts = [episode_start(task, s) for s, n in zip(states, sizes) for _ in range(n)]
    results = run_episodes(task.make_env, starts, backend, codec, window=task.config.window, temperature=temperature, top_p=top_p,
                           max_new_tokens=turn_tokens, seed=seed, max_turns=max_turns, budget_name="agent.turn_tokens",
                           reply_format=task.config.reply_format)
    out, lo = [], 0
    for n in sizes:
        out.append(results[lo : lo + n])
        lo += n
    return out


def evaluate_agent(backend: Any, codec: Any, task: Any, problems: Sequence[Any], *, k: int, temperature: float, top_p: float,
                   turn_tokens: int, seed: int, max_turns: int = 0) -> dict[str, Any]:
    """Success of the policy over ``problems`` (episodes of an ``env`` task; the 128 fixed evaluation
    seeds for ``vsr eval --env`` and the trainer's validation), ``k`` episodes each, all in one run of
    the episode runner (:func:`play_episodes`).

    Keys: ``success`` (= ``avg_at_k``, the mean over seeds and episodes) with ``ci_low``/``ci_high``
    (95 %, seeds as clusters: ``theory.metrics.binomial.clustered_interval``), ``pass_at``
    ({j: pass@j}, unbiased, j = 1, 2, 4, ..., k), ``length_mean`` (generated tokens per episode),
    ``turns_mean`` (policy turns per episode), ``invalid_rate`` (invalid turns / turns), ``return_mean``,
    ``new_tokens``, ``success_by_seed``, ``seeds``, ``n_problems``, ``k``."""
    from theory.metrics.binomial import clustered_interval
    from theory.metrics import pass_at_k_table

    if not problems:
        raise ValueError("problems: the evaluation needs at least one episode seed")
    states = [StartState(codec.encode(task.render_prompt(p, codec.tokenizer)), p) for p in problems]
    by_state = play_episodes(states, task=task, codec=codec, backend=backend, group_size=k, seed=seed, temperature=temperature,
                             top_p=top_p, turn_tokens=turn_tokens, max_turns=max_turns)
    episodes = [ep for eps in by_state for ep in eps]
    success = np.array([[float(ep.success) for ep in eps] for eps in by_state])
    rate, lo, hi = clustered_interval(success)
    ks = sorted({1, k} | {2**e for e in range(1, 8) if 2**e < k})
    turns = [t for ep in episodes for t in ep.turns]
    return {
        "success": rate, "ci_low": lo, "ci_high": hi, "avg_at_k": rate,
        "pass_at": {int(j): float(v) for j, v in pass_at_k_table(success.astype(np.int64), ks).items()},
        "length_mean": float(np.mean([ep.new_tokens for ep in episodes])),
        "turns_mean": float(np.mean([ep.length for ep in episodes])),
        "invalid_rate": float(np.mean([not t.valid for t in turns])),
        "return_mean": float(np.mean([ep.ret for ep in episodes])),
        "new_tokens": int(sum(ep.new_tokens for ep in episodes)),
        "success_by_seed": success.mean(axis=1).tolist(), "seeds": [int(task.seed_of(p)) for p in problems],
        "n_problems": len(problems), "k": int(k),
    }


def agent_group_metrics(generated: Sequence[RolloutGroup], trained: Sequence[RolloutGroup]) -> dict[str, float]:
    """Episode accounting of a step's multi-turn groups (the trainer logs it with its group metrics):
    ``gen_new_actions`` / ``trained_new_actions`` (policy turns generated / in the loss: a replayed
    state's history is not counted), ``episodes``, ``episode_turns_mean``, ``invalid_action_rate`` (turns charged the invalid-action penalty),
    and per origin ``o`` (``fresh``, ``replayed_prefix``): ``episode_success_o`` and
    ``success_mixed_frac_o`` (groups whose episodes neither all succeed nor all fail -- VSR's regime;
    ``mixed_frac_o`` compares *returns*, which per-step rewards make differ almost always)."""
    from llm_harness.trainer.data import ORIGINS

    gen = [g for g in generated if g.multiturn]
    if not gen:
        return {}
    succ = [np.asarray(g.info["episode_success"], dtype=bool) for g in gen]
    m = {
        "gen_new_actions": float(sum(g.size for g in gen)),
        "trained_new_actions": float(sum(g.size for g in trained if g.multiturn)),
        "episodes": float(sum(s.size for s in succ)),
        "episode_turns_mean": float(sum(g.size for g in gen) / max(1, sum(s.size for s in succ))),
        "invalid_action_rate": float(np.mean(np.concatenate([g.info["penalty"] > 0 for g in gen]))),
    }
    for o in ORIGINS:
        mine = [s for g, s in zip(gen, succ) if g.start.origin is o]
        if mine:
            m[f"episode_success_{o.value}"] = float(np.mean(np.concatenate(mine)))
            m[f"success_mixed_frac_{o.value}"] = float(np.mean([bool(s.any() and not s.all()) for s in mine]))
    return m


def episode_group(state: StartState, eps: Sequence[EpisodeResult], step: int) -> RolloutGroup:
    """The trainer's group of the episodes ``eps`` played from ``state`` (module doc: one row per turn)."""
    rows = [(e, t) for e, ep in enumerate(eps) for t in ep.turns]
    returns = np.array([ep.ret for ep in eps])
    verify: list[VerifyResult | None] = []
    for ep in eps:
        verify += [None] * (ep.length - 1) + [VerifyResult(1.0 if ep.success else 0.0, ParseStatus.OK)]
    info = {
        "episode": np.array([e for e, _ in rows], dtype=np.int64),
        "turn": np.array([t.turn for _, t in rows], dtype=np.int64),
        "step_reward": np.array([t.reward + t.penalty for _, t in rows]),
        "penalty": np.array([t.penalty for _, t in rows]),
        "anchor": [t.observation for _, t in rows],
        "action": [t.shown for _, t in rows],
        "snapshot": [t.snapshot for _, t in rows],
        "episode_success": np.array([ep.success for ep in eps]),
        "episode_return": returns,
    }
    return RolloutGroup(
        start=state,
        response_ids=[t.token_ids for _, t in rows],
        behaviour_logprobs=[np.asarray(t.sampling_logprobs, dtype=np.float64) for _, t in rows],
        rewards=np.array([returns[e] for e, _ in rows]),
        birth_step=step,
        verify=verify,
        finish_reasons=[t.finish_reason for _, t in rows],
        info=info,
        contexts=[t.prompt_ids for _, t in rows],
    )


@register_collector("multiturn")
def multiturn_groups(states: Sequence[StartState], *, step: int, round: int, ctx: "TrainContext") -> tuple[list[RolloutGroup], CollectStats]:
    """Episodes from every state (module doc), one group per state in input order."""
    cfg = ctx.config
    by_state = play_episodes(
        states, task=ctx.task, codec=ctx.codec, backend=ctx.backend, group_size=cfg.rollout.group_size, seed=derive_seed(cfg.seed, step, round, 0x3E7),
        temperature=cfg.rollout.temperature, top_p=cfg.rollout.top_p, turn_tokens=cfg.agent.turn_tokens,
        max_turns=cfg.agent.max_turns,
    )
    groups = [episode_group(s, eps, step) for s, eps in zip(states, by_state)]
    return groups, CollectStats(new_tokens=sum(g.n_new_tokens for g in groups), prompt_instances=len(states),
                                samples=sum(len(eps) for eps in by_state))


