"""A text environment as a trainer task: episodes from seeds (VSR App. D.3).

``get_task("env", env="sokoban", env_params={...}, n_train=..., window=...)`` gives a
:class:`~llm_harness.tasks.base.Task` whose problems are *episodes*: problem ``sokoban/s123`` is the
episode ``reset(123)`` starts. The fresh prompt stream draws training episodes exactly as it draws
math prompts, and the ``multiturn`` collector (:mod:`llm_harness.trainer.multiturn`) plays G
episodes from each drawn start state. Splits:

* ``train`` — seeds ``train_seed_start .. train_seed_start + n_train − 1``;
* ``validation`` / ``test`` — :data:`EVAL_SEEDS`, the 128 fixed evaluation seeds ``0..127`` (the VSR
  paper's protocol evaluates success over 128 episodes), disjoint from the training seeds.

The "prompt" of a problem is the first turn's text (:func:`~llm_harness.envs.prompt.render_agent_prompt`
with no history); the reward comes from the environment, so :meth:`EnvTask.verify` is never used
for training and refuses to be called.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from llm_harness.envs.base import TextEnv
from llm_harness.envs.prompt import REPLY_FORMATS, render_agent_prompt, with_reply_format
from llm_harness.tasks.base import Problem, Step, Task, VerifyResult
from llm_harness.tasks.registry import build_config, register_task
from vsr_util.checks import check_number

__all__ = ["EVAL_SEEDS", "EnvTask", "EnvTaskConfig"]

#: the fixed evaluation episodes of every environment (128, as in the VSR paper's agentic protocol)
EVAL_SEEDS: tuple[int, ...] = tuple(range(128))
#: most training episode seeds of a task: the training split materialises one problem (a reset and its first
#: prompt) per seed when it is first read
MAX_TRAIN_EPISODES = 1_000_000


@dataclass(frozen=True)
class EnvTaskConfig:
    """Parameters of the ``env`` task."""

    env: str = "sokoban"
    """Registered environment (``llm_harness.envs.ENVS``)."""
    env_params: Mapping[str, Any] = field(default_factory=dict)
    """Parameters of the environment (e.g. ``{level: OneRoomS8}`` for BabyAI, ``{reward: binary}``)."""
    n_train: int = 5000
    """Training episodes (seeds)."""
    train_seed_start: int = 10_000
    """First training seed (training seeds never overlap :data:`EVAL_SEEDS`)."""
    window: int | None = 2
    """Previous turns shown in each turn's prompt (None: all)."""
    reply_format: str = "word"
    """How the instruction asks for the action (``llm_harness.envs.prompt.REPLY_FORMATS``): ``word``
    (nothing added; the test-bed agents) or ``tagged`` (``<action>WORD</action>``; instruct models)."""

    def __post_init__(self) -> None:
        REPLY_FORMATS.check(self.reply_format, "reply_format")
        check_number("n_train", self.n_train, 1, MAX_TRAIN_EPISODES, integer=True)
        check_number("train_seed_start", self.train_seed_start, len(EVAL_SEEDS), integer=True)
        if self.window is not None:
            check_number("window", self.window, 0, integer=True)
        object.__setattr__(self, "env_params", dict(self.env_params))


class EnvTask(Task):
    """Episodes of a text environment as problems (module doc)."""

    name = "env"

    def __init__(self, config: EnvTaskConfig):
        from llm_harness.envs import make_env

        self.config = config
        self._probe = make_env(config.env, **config.env_params)  # validates the env and its parameters
        c = config
        train = range(c.train_seed_start, c.train_seed_start + c.n_train)  # lazy: nothing built per seed here
        self._splits = {"train": train, "validation": EVAL_SEEDS, "test": EVAL_SEEDS}
        self._problems: dict[str, tuple[Problem, ...]] = {}

    # ---------------------------------------------------------------- the environment
    def make_env(self) -> TextEnv:
        """A fresh environment instance with the task's parameters."""
        from llm_harness.envs import make_env

        return make_env(self.config.env, **self.config.env_params)

    @property
    def env_name(self) -> str:
        """Registered environment name."""
        return self.config.env

    def seed_of(self, problem: Problem) -> int:
        """The episode seed of ``problem``."""
        return int(problem.metadata["seed"])

    # ---------------------------------------------------------------- Task protocol
    @property
    def splits(self) -> tuple[str, ...]:
        return tuple(self._splits)

    def problems(self, split: str) -> tuple[Problem, ...]:
        split = self.check_split(split)
        if split not in self._problems:
            self._problems[split] = tuple(
                Problem(id=f"{self.config.env}/s{s}", prompt=self._first_prompt(s), answer="", metadata={"seed": s})
                for s in self._splits[split]
            )
        return self._problems[split]

    def _first_prompt(self, seed: int) -> str:
        env = self._probe
        obs = env.reset(seed)
        return render_agent_prompt(with_reply_format(env.instruction, self.config.reply_format), [], obs, window=self.config.window)

    def messages(self, problem: Problem) -> list[dict[str, str]]:
        return [{"role": "user", "content": problem.prompt}]

    def plain_prompt(self, problem: Problem) -> str:
        return problem.prompt

    def verify(self, problem: Problem, completion: str) -> VerifyResult:
        raise ValueError(f"task {self.name!r}: episodes are scored by the environment; use the 'multiturn' collector "
                         "(algo.collector: multiturn)")

    def split_steps(self, text: str) -> tuple[Step, ...]:
        return (Step(0, len(text), text),) if text else ()


@register_task("env")
def _make_env_task(**params: Any) -> EnvTask:
    """``get_task("env", env="sokoban", env_params={}, n_train=5000, train_seed_start=10000, window=2, reply_format="word")``."""
    return EnvTask(build_config(EnvTaskConfig, params))
