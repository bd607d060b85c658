"""The episode runner: whole episodes played by a policy model, all active episodes batched per turn
(the one implementation behind the trainer's ``multiturn`` collector, ``vsr eval
--env``, the test-bed agents' cards and continuation curves, and ``benchmarks/multiturn.py``).

One turn::

    prompts  = [turn_text(instruction, history, observation, window, tokenizer) for each active episode]
    replies  = backend.generate(encoded prompts, n=1, SamplingParams(..., seed=turn_seed(seed, t)))
    for each active episode: env.step(reply text) -> next observation, reward, done
    finished episodes drop out; the next turn batches the rest

so a turn costs **one** ``backend.generate`` call whatever the number of episodes (the backend
micro-batches internally), and an episode leaves the batch on the turn it ends (success, failure,
the environment's action budget, or the runner's ``max_turns``). The loop ends when no episode is
active.

* **Starts** (:class:`EpisodeStart`): a map seed, and optionally the state to start from --
  either a ``prefix`` of action words replayed after ``reset`` (the test-bed continuation curves:
  the state after k expert moves), or an environment ``snapshot`` restored exactly together with
  the ``history`` of turns played before it (VSR's replayed interaction states). Either way the
  turns before the start are the episode's history: they appear in the prompt as ``O:``/``A:``
  turns (within ``window``), they count against the environment's action budget exactly as if
  they had been played, and the policy's first turn is numbered ``len(history)``. Several starts
  may be equal (G episodes of one start state form an episode group).
* **Prompts**: :func:`~llm_harness.envs.prompt.render_agent_prompt` (the instruction with its reply
  format, ``REPLY_FORMATS``), wrapped as one user message in
  the tokenizer's chat template when it has one (:func:`turn_text`); a test-bed character
  tokenizer has none, so its prompts are the bare format the agents were fine-tuned on.
* **Replies**: the sampled tokens up to the stop token, decoded as the trainer's evaluator does
  (:func:`llm_harness.trainer.evaluation.completion_text`); the environment parses the action
  (:func:`llm_harness.envs.base.parse_action`), an unparseable reply is an invalid, penalised no-op
  turn. Later prompts show the reply as one line of printable characters (:func:`shown_reply`: a
  sampled newline or control character would otherwise forge a line of the prompt format).
* **Per turn** (:class:`PolicyTurn`) the runner keeps the prompt (text and ids), the sampled ids and
  their behaviour log-probs, the observation acted on (GiGPO's anchor, no history), the
  environment snapshot before the turn (where VSR restarts), the reward and the penalty.
* **Randomness**: turn ``t``'s call samples with seed ``derive_seed(seed, "episodes", t)``. Its
  draws depend on which episodes are in the call (one random stream per call, like every
  backend call of the project), so an episode's outcome is a deterministic function of the whole
  list of starts and ``seed`` -- not of its start alone. Callers that need a subset to reproduce
  (the cards' tests) run fixed chunks of starts (``agent_eval``). With a backend whose samples
  depend only on each prompt and the seed (greedy decoding, or the tests' stub) the batched loop
  equals an episode-at-a-time loop exactly (tested).
* Prompts that do not fit the model (``len(prompt) + max_new_tokens > backend.max_context``) are
  refused with a ValueError naming the episode, never truncated.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from llm_harness.envs.base import TextEnv, check_seed
from llm_harness.envs.prompt import Turn, render_agent_prompt, with_reply_format
from vsr_util.checks import check_number
from vsr_util.seeding import derive_seed

__all__ = [
    "EpisodeResult",
    "EpisodeStart",
    "PolicyTurn",
    "play_turn",
    "prepare_episode",
    "run_episodes",
    "shown_reply",
    "turn_seed",
    "turn_text",
    "verify_episode_snapshots",
]


@dataclass(frozen=True)
class EpisodeStart:
    """Where an episode starts (module doc): the map ``seed``, then either ``prefix`` (action words
    replayed after ``reset``) or ``snapshot`` + ``history`` (restored exactly; ``history`` are the
    turns played before the snapshot, shown in the prompt)."""

    seed: int
    prefix: tuple[str, ...] = ()
    snapshot: Mapping[str, Any] | None = None
    history: tuple[Turn, ...] = ()

    def __post_init__(self) -> None:
        check_seed(self.seed, "start.seed")
        object.__setattr__(self, "prefix", tuple(self.prefix))
        object.__setattr__(self, "history", tuple(self.history))
        if self.snapshot is None and self.history:
            raise ValueError("start.history: a history needs the snapshot it leads to (start.snapshot)")
        if self.snapshot is not None and self.prefix:
            raise ValueError("start: give either a prefix to replay or a snapshot to restore, not both")
        if any(not isinstance(t, Turn) for t in self.history):
            raise ValueError("start.history: must hold llm_harness.envs.prompt.Turn items")


@dataclass(frozen=True)
class PolicyTurn:
    """One turn the policy played."""

    turn: int
    """Turn number within the environment episode (``len(history)`` for the first policy turn)."""
    prompt: str
    """The prompt text of the turn (:func:`turn_text`)."""
    prompt_ids: tuple[int, ...]
    """``prompt`` encoded (the context of the turn's reply)."""
    observation: str
    """The observation the turn acted on, without history (GiGPO's anchor)."""
    snapshot: Mapping[str, Any]
    """The environment before the turn (plain data; where VSR restarts this state)."""
    reply: str
    """The decoded reply (stop token dropped)."""
    shown: str
    """The reply as later prompts show it (:func:`shown_reply`)."""
    token_ids: tuple[int, ...]
    """The sampled token ids (stop token included when the reply stopped)."""
    sampling_logprobs: tuple[float, ...]
    """Behaviour log-probs of ``token_ids`` (the backend's convention)."""
    finish_reason: str
    """``"stop"`` or ``"length"`` (the reply ran out of ``max_new_tokens``)."""
    valid: bool
    """The environment parsed an action word from the reply."""
    reward: float
    """The environment's reward of the turn (an invalid action's penalty already subtracted)."""
    penalty: float
    """The invalid-action penalty inside ``reward`` (0 for a valid action)."""


@dataclass(frozen=True)
class EpisodeResult:
    """A finished episode: its start, the turns before it, the policy's turns and the outcome."""

    start: EpisodeStart
    history: tuple[Turn, ...]
    """The turns before the policy's first (a replayed prefix or a restored state's history)."""
    turns: tuple[PolicyTurn, ...]
    """The policy's turns in order."""
    success: bool
    """The environment's success criterion at the end."""

    @property
    def length(self) -> int:
        """Turns the policy played."""
        return len(self.turns)

    @property
    def invalid_actions(self) -> int:
        """Policy turns whose reply was not a legal action."""
        return sum(1 for t in self.turns if not t.valid)

    @property
    def actions(self) -> tuple[str, ...]:
        """The policy's replies in order."""
        return tuple(t.reply for t in self.turns)

    @property
    def ret(self) -> float:
        """Return of the policy's turns (the sum of their rewards, penalties included)."""
        return float(sum(t.reward for t in self.turns))

    @property
    def new_tokens(self) -> int:
        """Tokens the policy generated in this episode (stop tokens included)."""
        return sum(len(t.token_ids) for t in self.turns)


def turn_seed(seed: int, turn: int) -> int:
    """Sampling seed of the ``backend.generate`` call of turn ``turn`` (0-based, counted from the
    start of the run, whatever the starts' histories)."""
    return derive_seed(seed, "episodes", turn)


def shown_reply(reply: str) -> str:
    """A reply as later turns' prompts show it: one line of printable characters (module doc)."""
    return "".join(c for c in reply.replace("\n", " ") if c.isprintable()).strip()


def turn_text(instruction: str, turns: Sequence[Turn], observation: str, *, window: int | None, tokenizer: Any = None,
              reply_format: str = "word") -> str:
    """The text of one turn's prompt: :func:`render_agent_prompt` of the instruction with its reply
    format (:func:`~llm_harness.envs.prompt.with_reply_format`), inside the tokenizer's chat template
    (one user message, generation prompt added) when it has one."""
    from llm_harness.tasks.base import has_chat_template

    text = render_agent_prompt(with_reply_format(instruction, reply_format), turns, observation, window=window)
    if has_chat_template(tokenizer):
        return tokenizer.apply_chat_template([{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True)
    return text


def prepare_episode(env: TextEnv, start: EpisodeStart) -> tuple[list[Turn], str]:
    """Put ``env`` at ``start`` (reset + replayed prefix, or restored snapshot); return ``(history
    turns, observation)``. ValueError if the start state has already ended, or if the snapshot is of
    another seed than ``start.seed``."""
    if start.snapshot is not None:
        if start.snapshot.get("seed") != start.seed:
            raise ValueError(f"start.snapshot: taken in the episode of seed {start.snapshot.get('seed')!r}, "
                             f"not of start.seed {start.seed}")
        obs = env.restore(start.snapshot)
        turns = list(start.history)
        if env.done:
            raise ValueError(f"start.snapshot: the episode of seed {start.seed} has ended in this snapshot")
        return turns, obs
    obs = env.reset(start.seed)
    turns = []
    for i, word in enumerate(start.prefix):
        if env.done:
            raise ValueError(f"start.prefix: the episode of seed {start.seed} ended after {i} of {len(start.prefix)} actions")
        nxt = env.step(word)[0]
        turns.append(Turn(obs, word))
        obs = nxt
    if env.done:
        raise ValueError(f"start.prefix: the episode of seed {start.seed} has ended after its {len(start.prefix)} actions")
    return turns, obs


def verify_episode_snapshots(env: TextEnv, seed: int, snapshots: Sequence[Any], where: str = "snapshots") -> None:
    """Check that every one of ``snapshots`` is a state of the episode of ``seed`` that has not ended --
    what :func:`prepare_episode` checks before an episode starts from it -- raising ValueError naming
    ``where[i]`` and why. ``env`` is scratch (it ends in some state of the episode).

    One pass over the episode: while a snapshot's history extends the actions played so far, the
    environment plays the rest and the snapshot must equal ``env.snapshot()`` exactly (checksum
    included), so the states of one episode cost one reset plus one step per action instead of one
    re-execution each (quadratic for BabyAI, whose restore re-executes). Any other snapshot, and one
    that differs, is restored as :func:`prepare_episode` restores it, which refuses it naming the
    problem (checksum, environment, parameters, seed, world against seed and history)."""
    seed = check_seed(seed, f"{where}.seed")
    env.reset(seed)
    for i, snap in enumerate(snapshots):
        hist = snap.get("history") if isinstance(snap, Mapping) else None
        played = list(env.history)
        if (isinstance(hist, list) and env.seed == seed and hist[: len(played)] == played
                and _play_on(env, hist[len(played):]) and env.snapshot() == dict(snap)):
            if env.done:
                raise ValueError(f"{where}[{i}]: the episode of seed {seed} has ended in this snapshot")
            continue
        try:
            prepare_episode(env, EpisodeStart(seed, snapshot=snap))
        except ValueError as exc:
            raise ValueError(f"{where}[{i}]: {exc}") from None


def _play_on(env: TextEnv, words: Sequence[Any]) -> bool:
    """Play ``words`` (action words, None for an invalid turn); False if the episode ends before one of them."""
    for word in words:
        if env.done or not (word is None or isinstance(word, str)):
            return False
        env.step(word)
    return True


def play_turn(env: TextEnv, turns: list[Turn], observation: str, prompt: str, prompt_ids: Sequence[int], sample: Any,
              codec: Any) -> tuple[PolicyTurn, str, bool]:
    """One policy turn: ``sample`` (``token_ids``, ``sampling_logprobs``, ``finish_reason``) generated from
    ``prompt`` is the reply to ``observation``; the environment steps on its text. Appends the shown turn to
    ``turns`` and returns ``(the turn, the next observation, done)`` — the one step of :func:`run_episodes`
    and of the verl agent loop (``llm_harness.integrations.verl.env_loop``)."""
    from llm_harness.backends.completions import completion_text

    snap = env.snapshot()
    reply = completion_text(codec, sample.token_ids, sample.finish_reason == "stop")
    obs, reward, done, info = env.step(reply)
    valid = bool(info["valid"])
    shown = shown_reply(reply)
    pt = PolicyTurn(len(turns), prompt, tuple(int(t) for t in prompt_ids), observation, snap, reply, shown,
                    tuple(int(t) for t in sample.token_ids), tuple(float(x) for x in sample.sampling_logprobs),
                    sample.finish_reason, valid, float(reward), 0.0 if valid else float(env.invalid_penalty))
    turns.append(Turn(observation, shown))
    return pt, obs, bool(done)


def run_episodes(
    make_env: Callable[[], TextEnv],
    starts: Sequence[EpisodeStart],
    backend: Any,
    codec: Any,
    *,
    window: int | None,
    temperature: float = 1.0,
    top_p: float = 1.0,
    max_new_tokens: int = 8,
    seed: int = 0,
    max_turns: int = 0,
    on_turn: Callable[[int, int], None] | None = None,
    budget_name: str = "max_new_tokens",
    reply_format: str = "word",
) -> list[EpisodeResult]:
    """Play one episode per start to its end, one ``backend.generate`` call per turn (module doc).

    ``make_env()`` builds a fresh environment (one per episode); ``codec`` encodes prompts and
    decodes replies (``llm_harness.trainer.modeling.Codec``; its ``tokenizer``'s chat template, if
    any, wraps the prompts); ``window`` is the prompt's history window; ``max_new_tokens`` the reply
    budget per turn; ``max_turns`` (0: none) caps the policy's turns of every episode on top of the
    environment's own budget. ``on_turn(turn, n_active)`` is called before each call (progress,
    tests). ``budget_name`` is how errors name the reply budget (the caller's config field);
    ``reply_format`` is added to the instruction (:data:`~llm_harness.envs.prompt.REPLY_FORMATS`).
    Results are in the order of ``starts``.
    """
    from llm_harness.backends import SamplingParams

    if not starts:
        raise ValueError("starts: must name at least one episode")
    check_seed(seed)
    check_number(budget_name, max_new_tokens, 1, integer=True)
    check_number("max_turns", max_turns, 0, integer=True)
    tokenizer = getattr(codec, "tokenizer", None)
    limit = getattr(backend, "max_context", None)
    envs = [make_env() for _ in starts]
    state = [prepare_episode(env, s) for env, s in zip(envs, starts)]
    history = [tuple(h) for h, _ in state]
    played: list[list[PolicyTurn]] = [[] for _ in starts]
    active = list(range(len(starts)))
    turn = 0
    while active:
        if on_turn is not None:
            on_turn(turn, len(active))
        prompts = [turn_text(envs[i].instruction, state[i][0], state[i][1], window=window, tokenizer=tokenizer,
                             reply_format=reply_format) for i in active]
        ids = [tuple(codec.encode(p)) for p in prompts]
        if limit is not None:
            for i, p in zip(active, ids):
                if len(p) + max_new_tokens > limit:
                    raise ValueError(
                        f"{budget_name}: the prompt of episode {i} (seed {starts[i].seed}, turn {len(state[i][0])}, "
                        f"window {window}) has {len(p)} tokens; with {max_new_tokens} reply tokens it does not fit the "
                        f"model context of {limit} positions (lower the history window or the reply budget)"
                    )
        sp = SamplingParams(temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens, seed=turn_seed(seed, turn))
        samples = backend.generate([list(p) for p in ids], 1, sp)
        still = []
        for i, prompt, p_ids, (s,) in zip(active, prompts, ids, samples):
            turns, _ = state[i]
            pt, obs, done = play_turn(envs[i], turns, state[i][1], prompt, p_ids, s, codec)
            played[i].append(pt)
            state[i] = (turns, obs)
            if not (done or (max_turns and len(played[i]) >= max_turns)):
                still.append(i)
        active = still
        turn += 1
    return [EpisodeResult(s, h, tuple(p), bool(env.success)) for s, h, p, env in zip(starts, history, played, envs)]
