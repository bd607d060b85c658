"""``vsr testbed build``: train a test-bed model from scratch and save its checkpoints (step
arithmetic or an agent family).

``--family`` (:data:`FAMILIES`) picks what is trained: ``arith`` (the default: step arithmetic,
shipped as ``checkpoints/{low,mid,high}``) or an agent family of
:data:`llm_harness.testbed.agents.AGENT_FAMILIES` (``sokoban``, ``babyai``: per-turn expert
demonstrations, shipped as ``checkpoints/<family>/{low,mid,high}``). Fields left at None take the
family's defaults (``out_dir``, ``save_steps``, ``max_new_tokens`` and the ``agent`` section).

One deterministic SFT run (``sft.py``) with checkpoints saved at ``save_steps`` under
``out_dir/<name>`` with ``save_pretrained`` (model + tokenizer in one folder, safetensors), then
each saved folder is re-loaded with ``from_pretrained`` and evaluated for its card
(``card.json`` + ``README.md``: training config, step, seed, timing, and for ``arith`` accuracies
by number of terms on the validation, test and hard splits at temperature 1; for an agent family
success over the 128 fixed evaluation seeds with Wilson intervals, episode length, invalid-action
rate and the continuation-success-vs-α curve, ``agent_eval.py``).

The defaults rebuild the shipped checkpoints: with the ``"constant"`` schedule a run's prefix does
not depend on its length, so the checkpoint at step ``s`` is the same whichever other steps are
saved. Bitwise equality needs the same torch build and thread count (``num_threads``, recorded in
the card); elsewhere expect the same accuracy within sampling noise.
"""

from __future__ import annotations

import os
import platform
import shutil
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from llm_harness.testbed.agents import AGENT_FAMILIES
from llm_harness.testbed.model import TestbedModelConfig
from llm_harness.testbed.paths import CHECKPOINT_DIR
from llm_harness.trainer.schedules import SCHEDULES
from vsr_util.checks import check_number
from vsr_util.registry import Registry

__all__ = [
    "FAMILIES",
    "AgentBuildSettings",
    "TestbedBuildConfig",
    "TrainRecord",
    "build",
    "save_checkpoint",
    "train_and_save",
    "write_card",
]

CARD_FILE = "card.json"
#: the arithmetic family's defaults of the fields that depend on the family
_ARITH_DEFAULTS = {"out_dir": str(CHECKPOINT_DIR), "save_steps": (500, 550, 675), "max_new_tokens": 160}


@dataclass(frozen=True)
class AgentBuildSettings:
    """Agent families only (``--family sokoban`` / ``babyai``); None = the family's default."""

    level: str | None = None
    """Environment level trained and evaluated (BabyAI: SynthLoc, OneRoomS8, MiniBoss); None = the family's."""
    window: int | None = None
    """History window of the prompts (``render_agent_prompt``); None = the family's."""
    context: int | None = None
    """``max_position_embeddings`` of the model (replaces ``arch.max_position_embeddings``); None = the family's."""
    n_train_seeds: int | None = None
    """Training map seeds in the demonstration pool; None = the family's."""
    card_seeds: int = 128
    """Evaluation seeds in the cards: the first ones of the 128 fixed seeds (fewer only for smoke tests)."""
    card_samples: int = 8
    """Episodes per evaluation seed and start state in the cards (G)."""
    card_chunk_seeds: int = 8
    """Evaluation seeds per runner call (a chunk reproduces on its own, ``agent_eval``)."""
    alphas: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 0.9)
    """Fractions of the expert episode replayed before the policy plays (0 = the initial state)."""
    curve_checkpoints: tuple[str, ...] | None = None
    """Checkpoints whose card has the whole α curve (the others: α = 0 only); None = the family's."""

    def __post_init__(self) -> None:
        if self.window is not None:
            check_number("agent.window", self.window, 0, integer=True)
        for name in ("context", "n_train_seeds"):
            if getattr(self, name) is not None:
                check_number(f"agent.{name}", getattr(self, name), 1, integer=True)
        from llm_harness.testbed.agents import EVAL_SEEDS

        check_number("agent.card_seeds", self.card_seeds, 1, len(EVAL_SEEDS), integer=True)
        check_number("agent.card_samples", self.card_samples, 1, integer=True)
        check_number("agent.card_chunk_seeds", self.card_chunk_seeds, 1, integer=True)
        if not self.alphas or self.alphas[0] != 0.0:
            raise ValueError(f"agent.alphas: must start with 0.0 (the initial state, the card's success), got {self.alphas}")
        for i, a in enumerate(self.alphas):
            check_number(f"agent.alphas[{i}]", a, 0, 1, hi_open=True)

    def resolved(self, family: Any) -> "AgentBuildSettings":
        """These settings with every None replaced by ``family``'s default (an ``AgentFamily``);
        the level is checked against the environment's levels."""
        from llm_harness.envs import ENVS

        level = family.level if self.level is None else self.level
        levels = ENVS[family.env].levels
        if (level is not None or levels) and level not in levels:
            raise ValueError(f"agent.level: {family.env} has no level {level!r}; levels: {list(levels) or 'none'}")
        return replace(
            self,
            level=level,
            window=family.window if self.window is None else self.window,
            context=family.context if self.context is None else self.context,
            n_train_seeds=family.n_train_seeds if self.n_train_seeds is None else self.n_train_seeds,
            curve_checkpoints=family.curve_checkpoints if self.curve_checkpoints is None else self.curve_checkpoints,
        )


@dataclass(frozen=True)
class TestbedBuildConfig:
    """``vsr testbed build``: deterministic SFT of the test-bed model and its checkpoints."""

    __test__ = False  # not a pytest test class despite the name

    family: str = "arith"
    """Test-bed family (``FAMILIES``): ``arith`` (step arithmetic) or an agent family (``sokoban``, ``babyai``)."""
    out_dir: str | None = None
    """Folder that receives one sub-folder per saved checkpoint (and ``build_log.json``); None = the
    family's shipped folder (``checkpoints/``, ``checkpoints/<family>/``)."""
    seed: int = 0
    """Seed of the weight initialisation and of the training data stream."""
    save_steps: tuple[int, ...] | None = None
    """Optimizer steps at which checkpoints are saved (increasing); training stops at the last.
    None = the family's (arith: 500, 550, 675)."""
    save_names: tuple[str, ...] = ("low", "mid", "high")
    """Folder name of each checkpoint in ``save_steps`` (same length)."""
    batch_size: int = 64
    """Sequences per optimizer step."""
    lr: float = 2e-3
    """Peak AdamW learning rate."""
    weight_decay: float = 0.01
    """AdamW weight decay (matrices only)."""
    warmup_steps: int = 100
    """Linear warm-up steps."""
    schedule: str = "constant"
    """Learning-rate schedule after warm-up (a ``llm_harness.trainer.schedules.SCHEDULES`` name; only
    ``constant`` rebuilds the shipped checkpoints, see the module doc)."""
    grad_clip: float = 1.0
    """Gradient-norm clip (<= 0 disables)."""
    arch: TestbedModelConfig = field(default_factory=TestbedModelConfig)
    """Shape of the Qwen2 model (agent families take ``max_position_embeddings`` from ``agent.context``)."""
    agent: AgentBuildSettings = field(default_factory=AgentBuildSettings)
    """Agent families only: level, prompt window, demonstrations, card evaluation."""
    task_seed: int = 0
    """``StepArithConfig.seed`` (which validation/test/hard problems are drawn; arith only)."""
    log_every: int = 100
    """Every this many steps, log the loss (arith: and a quick validation accuracy) (0 = never)."""
    log_eval_problems: int = 200
    """Validation problems (1 sample each, temperature ``card_temperature``) of the quick accuracy log (arith only)."""
    card_validation_problems: int = 500
    """Validation problems in each card (0 = skip the split; the ``card_*_problems``/``samples`` fields are arith only)."""
    card_validation_samples: int = 4
    """Samples per validation problem in each card."""
    card_test_problems: int = 1000
    """Test problems in each card (their per-problem outcomes are the reference the integration
    tests compare a fresh sample with)."""
    card_test_samples: int = 4
    """Samples per test problem in each card."""
    card_hard_problems: int = 300
    """Hard problems (7-9 terms) in each card."""
    card_hard_samples: int = 4
    """Samples per hard problem in each card."""
    card_temperature: float = 1.0
    """Sampling temperature of the card evaluations."""
    card_seed: int = 0
    """Seed of the card evaluations' sampling."""
    max_new_tokens: int | None = None
    """Completion budget when evaluating; None = the family's (arith 160, an agent's reply budget)."""
    cards: bool = True
    """Evaluate every saved checkpoint and write its card (False: train and save only, e.g. to pick save steps)."""
    num_threads: int = 1
    """``torch.set_num_threads`` during the build (results are bitwise reproducible per thread count)."""
    progress: bool = True
    """Show tqdm progress bars."""

    def __post_init__(self) -> None:
        fam = FAMILIES.lookup(self.family, where="family")
        for name, value in fam.defaults.items():  # None -> the family's default (frozen: set once, here)
            if getattr(self, name) is None:
                object.__setattr__(self, name, value)
        if fam.agent is None:
            if self.agent != AgentBuildSettings():
                raise ValueError(f"agent: agent settings given with family {self.family!r}, which is not an agent family")
        else:
            object.__setattr__(self, "agent", self.agent.resolved(fam.agent))
            if self.arch.max_position_embeddings not in (TestbedModelConfig().max_position_embeddings, self.agent.context):
                raise ValueError(
                    f"arch.max_position_embeddings: agent families take it from agent.context ({self.agent.context}), "
                    f"got {self.arch.max_position_embeddings}"
                )
            object.__setattr__(self, "arch", replace(self.arch, max_position_embeddings=self.agent.context))
        if not self.save_steps:
            raise ValueError("save_steps: must name at least one step")
        for i, s in enumerate(self.save_steps):
            check_number(f"save_steps[{i}]", s, 1, integer=True)
        if list(self.save_steps) != sorted(set(self.save_steps)):
            raise ValueError(f"save_steps: must be strictly increasing, got {self.save_steps}")
        if len(self.save_names) != len(self.save_steps):
            raise ValueError(f"save_names: expected {len(self.save_steps)} names (one per save step), got {len(self.save_names)}")
        if len(set(self.save_names)) != len(self.save_names) or any(
            not n or n.startswith(".") or "/" in n or "\\" in n for n in self.save_names
        ):
            raise ValueError(f"save_names: must be distinct plain folder names, got {self.save_names}")
        for name, lo in (("seed", 0), ("batch_size", 1), ("warmup_steps", 0), ("task_seed", 0), ("log_every", 0),
                         ("log_eval_problems", 0), ("card_validation_problems", 0), ("card_validation_samples", 1),
                         ("card_test_problems", 0), ("card_test_samples", 1), ("card_hard_problems", 0), ("card_hard_samples", 1),
                         ("card_seed", 0), ("max_new_tokens", 1), ("num_threads", 1)):
            check_number(name, getattr(self, name), lo, integer=True)
        check_number("lr", self.lr, 0, lo_open=True)
        check_number("weight_decay", self.weight_decay, 0)
        check_number("card_temperature", self.card_temperature, 0)
        SCHEDULES.check(self.schedule, where="schedule")

    @property
    def steps(self) -> int:
        """Total optimizer steps (the last save step)."""
        return self.save_steps[-1]

    def card_plan(self) -> dict[str, tuple[int, int]]:
        """``split -> (n_problems, samples_per_problem)`` of the card evaluation (zero-size splits left out)."""
        plan = {
            "validation": (self.card_validation_problems, self.card_validation_samples),
            "test": (self.card_test_problems, self.card_test_samples),
            "hard": (self.card_hard_problems, self.card_hard_samples),
        }
        return {k: v for k, v in plan.items() if v[0] > 0}


@dataclass(frozen=True)
class TrainRecord:
    """Facts about one saved checkpoint, known at save time."""

    name: str
    """Folder name."""
    step: int
    """Optimizer steps done."""
    loss: float
    """Training loss of the last step."""
    train_seconds: float
    """Wall time of the training steps so far (evaluation and saving excluded)."""

    @property
    def seconds_per_step(self) -> float:
        """Mean wall time of one optimizer step."""
        return self.train_seconds / self.step


def save_checkpoint(model, tokenizer, path: str | os.PathLike) -> Path:
    """``save_pretrained`` model (safetensors) and tokenizer into ``path``, replacing it.

    Written to a temporary sibling folder first and renamed, so an interrupted save never leaves
    a half-written checkpoint under ``path``.
    """
    from llm_harness.testbed.tokenizer import save_tokenizer

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.tmp-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    was_training = model.training
    model.eval()
    model.save_pretrained(tmp, safe_serialization=True)
    model.train(was_training)
    save_tokenizer(tokenizer, tmp)
    if path.exists():
        shutil.rmtree(path)
    os.replace(tmp, path)
    return path


def _train_with_saves(
    cfg: TestbedBuildConfig, model, tokenizer, train: Callable[[Callable[[int, float], None]], Any],
    log_metrics: Callable[[], dict[str, float]] | None = None,
) -> tuple[list[TrainRecord], dict[str, Any]]:
    """Run ``train(on_step)``, saving at ``cfg.save_steps`` and logging every ``cfg.log_every``
    steps (the mean loss since the last entry plus ``log_metrics()``); evaluation and saving time
    is excluded from the training time. Returns the records and the log."""
    from llm_harness.testbed.model import n_parameters

    out_dir = Path(cfg.out_dir)
    names = dict(zip(cfg.save_steps, cfg.save_names))
    records: list[TrainRecord] = []
    log: list[dict[str, Any]] = []
    pending: list[float] = []
    t0 = time.perf_counter()
    side = 0.0  # seconds spent in evaluation / saving, excluded from training time

    def on_step(step: int, loss: float) -> None:
        nonlocal side
        pending.append(loss)
        t_in = time.perf_counter()
        if cfg.log_every and step % cfg.log_every == 0:
            entry: dict[str, Any] = {"step": step, "loss": sum(pending) / len(pending),
                                     "train_seconds": t_in - t0 - side}
            pending.clear()
            if log_metrics is not None:
                entry.update(log_metrics())
            log.append(entry)
            if cfg.progress:
                from tqdm.auto import tqdm

                tqdm.write(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in entry.items()))
        if step in names:
            save_checkpoint(model, tokenizer, out_dir / names[step])
            records.append(TrainRecord(names[step], step, loss, t_in - t0 - side))
        side += time.perf_counter() - t_in

    train(on_step)
    meta = {
        "n_parameters": n_parameters(model),
        "train_seconds": time.perf_counter() - t0 - side,
        "seconds_per_step": (time.perf_counter() - t0 - side) / cfg.steps,
        "log": log,
    }
    return records, meta


def train_and_save(cfg: TestbedBuildConfig, task: Any = None) -> tuple[list[TrainRecord], dict[str, Any]]:
    """Train the arithmetic model for ``cfg.steps`` steps, saving at ``cfg.save_steps``; return the
    records and the log.

    ``task``: the step-arithmetic task (default ``get_task("step_arith", seed=cfg.task_seed)``).

    The log holds the loss every ``log_every`` steps (mean of the steps since the previous entry)
    and the quick validation accuracy.
    """
    import torch

    from llm_harness.tasks import get_task
    from llm_harness.testbed.evaluate import sample_correct, split_problems
    from llm_harness.testbed.model import make_model
    from llm_harness.testbed.sft import train_sft
    from llm_harness.testbed.tokenizer import build_tokenizer

    torch.set_num_threads(cfg.num_threads)
    tokenizer = build_tokenizer(model_max_length=cfg.arch.max_position_embeddings)
    model = make_model(cfg.arch, tokenizer, seed=cfg.seed)
    task = task if task is not None else get_task("step_arith", seed=cfg.task_seed)
    log_probs = split_problems(task, "validation", cfg.log_eval_problems) if cfg.log_eval_problems else ()

    def quick_accuracy() -> dict[str, float]:
        if not log_probs:
            return {}
        correct, _ = sample_correct(
            model, tokenizer, task, log_probs, samples_per_problem=1, temperature=cfg.card_temperature,
            max_new_tokens=cfg.max_new_tokens, seed=cfg.card_seed, split="validation",
        )
        return {"validation_accuracy": float(correct.mean())}

    def train(on_step):
        train_sft(
            model, tokenizer, task, steps=cfg.steps, batch_size=cfg.batch_size, lr=cfg.lr, seed=cfg.seed,
            weight_decay=cfg.weight_decay, warmup_steps=cfg.warmup_steps, schedule=cfg.schedule,
            grad_clip=cfg.grad_clip, callback=on_step, progress=cfg.progress,
        )

    return _train_with_saves(cfg, model, tokenizer, train, quick_accuracy)


def _environment(num_threads: int) -> dict[str, Any]:
    import torch
    import transformers

    return {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "num_threads": num_threads,
        "cpu_count": os.cpu_count(),
    }


def _markdown_card(card: dict[str, Any]) -> str:
    from llm_harness.testbed.evaluate import format_report

    ev = card["evaluation"]
    lines = [
        f"# Test-bed checkpoint `{card['name']}`",
        "",
        "A ~1M-parameter Qwen2 causal LM with a character-level tokenizer, trained from scratch by SFT on",
        "step-arithmetic expert solutions (`llm_harness/testbed`, rebuilt by `vsr testbed build`).",
        "",
        f"* step {card['step']} of seed {card['seed']}; {card['n_parameters']:,} parameters; "
        f"{card['seconds_per_step']:.3f} s/step (batch {card['build_config']['batch_size']}, "
        f"{card['environment']['num_threads']} thread(s))",
        f"* load: `AutoModelForCausalLM.from_pretrained(path)`, `AutoTokenizer.from_pretrained(path)` "
        "(or `llm_harness.testbed.load_testbed(path)`)",
        f"* accuracy at T={ev['temperature']} (sampled; intervals {round(ev['confidence'] * 100)}%):",
        "",
        "```",
        format_report(ev["results"], ev["confidence"]),
        "```",
        "",
        "Full configuration, environment and counts: `card.json`.",
        "",
    ]
    return "\n".join(lines)


def _card_head(path: Path, cfg: TestbedBuildConfig, record: TrainRecord, meta: dict[str, Any]) -> dict[str, Any]:
    """The card fields every family shares: training facts, configuration, environment."""
    weights = path / "model.safetensors"
    return {
        "name": record.name,
        "step": record.step,
        "seed": cfg.seed,
        "train_loss": record.loss,
        "train_seconds": record.train_seconds,
        "seconds_per_step": record.seconds_per_step,
        "n_parameters": int(meta["n_parameters"]),
        "weights_bytes": weights.stat().st_size if weights.exists() else None,
        "build_config": asdict(cfg),
        "environment": _environment(cfg.num_threads),
    }


def write_card(
    path: str | os.PathLike, cfg: TestbedBuildConfig, record: TrainRecord, meta: dict[str, Any], task: Any = None
) -> dict[str, Any]:
    """Load the arithmetic checkpoint at ``path`` with ``from_pretrained``, evaluate it and write its card.

    ``card.json`` (atomic) and ``README.md`` go into the checkpoint folder; returns the card.
    """
    import torch

    from llm_harness.tasks import get_task
    from llm_harness.testbed.evaluate import evaluate_model
    from llm_harness.testbed.model import load_testbed
    from vsr_util.atomic import write_json, write_text

    torch.set_num_threads(cfg.num_threads)
    path = Path(path)
    model, tokenizer = load_testbed(path)
    task = task if task is not None else get_task("step_arith", seed=cfg.task_seed)
    confidence = 0.95
    results = evaluate_model(
        model, tokenizer, task, cfg.card_plan(), temperature=cfg.card_temperature, max_new_tokens=cfg.max_new_tokens,
        seed=cfg.card_seed, confidence=confidence, progress=cfg.progress,
    )
    card = {
        **_card_head(path, cfg, record, meta),
        "evaluation": {
            "temperature": cfg.card_temperature,
            "top_p": 1.0,
            "seed": cfg.card_seed,
            "max_new_tokens": cfg.max_new_tokens,
            "task_seed": cfg.task_seed,
            "confidence": confidence,
            "results": results,
        },
    }
    write_json(path / CARD_FILE, card)
    write_text(path / "README.md", _markdown_card(card))
    return card


def _write_build_log(cfg: TestbedBuildConfig, meta: dict[str, Any], **extra: Any) -> None:
    from vsr_util.atomic import write_json

    write_json(Path(cfg.out_dir) / "build_log.json", {"build_config": asdict(cfg), "n_parameters": meta["n_parameters"],
                                                      "seconds_per_step": meta["seconds_per_step"], "log": meta["log"], **extra})


def _build_arith(cfg: TestbedBuildConfig) -> int:
    """The arithmetic family: train, save every checkpoint, evaluate each and write its card."""
    from llm_harness.tasks import get_task

    task = get_task("step_arith", seed=cfg.task_seed)  # one task: its splits are generated once
    records, meta = train_and_save(cfg, task)
    _write_build_log(cfg, meta)
    out_dir = Path(cfg.out_dir)
    for rec in records if cfg.cards else ():
        card = write_card(out_dir / rec.name, cfg, rec, meta, task)
        res = card["evaluation"]["results"]
        summary = ", ".join(f"{split} {r['overall']['accuracy']:.3f}" for split, r in res.items())
        print(f"{rec.name}: step {rec.step}, {summary} -> {out_dir / rec.name}")
    return 0


# ----------------------------------------------------------------------------- agent families
def _agent_data(cfg: TestbedBuildConfig):
    from llm_harness.testbed.agents import build_sft_data

    a = cfg.agent
    return build_sft_data(cfg.family, a.level, a.window, a.n_train_seeds)


def train_and_save_agent(cfg: TestbedBuildConfig) -> tuple[list[TrainRecord], dict[str, Any]]:
    """Train an agent family's model on its demonstrations (``agents.py``), saving at ``cfg.save_steps``.

    The prompts of the whole demonstration pool must fit ``agent.context`` with the reply budget
    (ValueError otherwise). Training shares each batch's common prompt prefix (``sft.sft_logits``).
    """
    import torch

    from llm_harness.testbed.model import make_model
    from llm_harness.testbed.sft import train_sft_batches
    from llm_harness.testbed.tokenizer import build_tokenizer

    torch.set_num_threads(cfg.num_threads)
    fam = AGENT_FAMILIES[cfg.family]
    data = _agent_data(cfg)
    tokenizer = build_tokenizer(fam.alphabet, model_max_length=cfg.agent.context)
    longest = max(len(tokenizer.encode(p)) for p in {p for p, _ in data.samples})
    if longest + cfg.max_new_tokens > cfg.agent.context:
        raise ValueError(
            f"agent.context: the longest demonstration prompt has {longest} tokens; with max_new_tokens={cfg.max_new_tokens} "
            f"it needs more than {cfg.agent.context} positions (window {cfg.agent.window})"
        )
    model = make_model(cfg.arch, tokenizer, seed=cfg.seed)

    def train(on_step):
        train_sft_batches(
            model, tokenizer, lambda step: data.batch(step, cfg.batch_size, cfg.seed), steps=cfg.steps, lr=cfg.lr,
            weight_decay=cfg.weight_decay, warmup_steps=cfg.warmup_steps, schedule=cfg.schedule, grad_clip=cfg.grad_clip,
            share_prefix=True, callback=on_step, progress=cfg.progress,
        )

    records, meta = _train_with_saves(cfg, model, tokenizer, train)
    meta["longest_prompt_tokens"] = longest
    return records, meta


def _markdown_agent_card(card: dict[str, Any]) -> str:
    from llm_harness.testbed.agent_eval import format_continuation

    ev, ag = card["evaluation"], card["agent"]
    init = ev["continuation"][0]
    pct = round(ev["confidence"] * 100)
    lines = [
        f"# Test-bed agent `{card['family']}/{card['name']}` ({ag['level_label']})",
        "",
        "A ~1M-parameter Qwen2 causal LM with a character-level tokenizer, trained from scratch by SFT on",
        f"expert demonstrations of `{ag['env']}` (`llm_harness/testbed/agents.py`, rebuilt by",
        f"`vsr testbed build --family {card['family']}`). Its input at each turn is",
        f"`render_agent_prompt(instruction, turns, observation, window={ag['window']})`; its reply is the action word and `<eos>`.",
        "",
        f"* step {card['step']} of seed {card['seed']}; {card['n_parameters']:,} parameters; "
        f"{card['seconds_per_step']:.3f} s/step (batch {card['build_config']['batch_size']}, "
        f"{card['environment']['num_threads']} thread(s)); {ag['context']} positions (longest demonstration prompt "
        f"{ag['longest_prompt_tokens']} tokens)",
        f"* demonstrations: {ag['n_train_samples']:,} turns of {ag['n_train_seeds']:,} training map seeds from "
        f"{ag['train_seed_start']:,} ({len(ag['excluded_train_seeds'])} more left out: same first prompt as an evaluation seed)",
        "* load: `AutoModelForCausalLM.from_pretrained(path)`, `AutoTokenizer.from_pretrained(path)` "
        "(or `llm_harness.testbed.load_testbed(path)`)",
        f"* evaluation: the {init['n_seeds']} fixed map seeds {ag['eval_seeds']}, {init['samples_per_seed']} episodes per seed "
        f"sampled at T={ev['temperature']} (seed {ev['seed']}; not greedy), Wilson {pct}% intervals at the Korn-Graubard "
        "effective size (episodes of one seed are correlated)",
        "",
        f"**Success from the initial state: {init['success']:.3f} [{init['ci_low']:.3f}, {init['ci_high']:.3f}]** "
        f"({init['successes']}/{init['n_episodes']} episodes); groups of {init['samples_per_seed']}: "
        f"{init['groups_all_fail']:.0%} all-fail, {init['groups_mixed']:.0%} mixed, {init['groups_all_success']:.0%} all-success; "
        f"mean episode length {init['mean_length']:.2f} turns; invalid-action rate {init['invalid_rate']:.4f}.",
        "",
    ]
    if len(ev["continuation"]) > 1:
        lines += [
            "Continuation success from the expert episode's state after k = min(L-1, round(alpha L)) of its L actions",
            "(those turns are the prompt's history and count against the budget):",
            "",
        ]
    lines += ["```", format_continuation(ev["continuation"], ev["confidence"]), "```", "",
              "Full configuration, environment and per-seed outcomes: `card.json`.", ""]
    return "\n".join(lines)


def write_agent_card(
    path: str | os.PathLike, cfg: TestbedBuildConfig, record: TrainRecord, meta: dict[str, Any]
) -> dict[str, Any]:
    """Load the agent checkpoint at ``path`` with ``from_pretrained``, evaluate it over the fixed
    evaluation seeds (``agent_eval``; the whole α curve when ``record.name`` is in
    ``agent.curve_checkpoints``) and write ``card.json`` + ``README.md``; returns the card."""
    import torch

    from llm_harness.testbed.agent_eval import AgentEvalPlan, continuation_curve, level_label
    from llm_harness.testbed.agents import EVAL_SEEDS, TRAIN_SEED_START
    from llm_harness.testbed.model import load_testbed
    from vsr_util.atomic import write_json, write_text

    torch.set_num_threads(cfg.num_threads)
    path = Path(path)
    model, tokenizer = load_testbed(path)
    fam, a = AGENT_FAMILIES[cfg.family], cfg.agent
    plan = AgentEvalPlan(samples_per_seed=a.card_samples, chunk_seeds=a.card_chunk_seeds, temperature=cfg.card_temperature,
                         seed=cfg.card_seed, max_new_tokens=cfg.max_new_tokens)
    alphas = a.alphas if record.name in a.curve_checkpoints else (0.0,)
    seeds = EVAL_SEEDS[: a.card_seeds]
    rows = continuation_curve(model, tokenizer, cfg.family, a.level, a.window, plan, alphas, seeds, cfg.progress)
    data = _agent_data(cfg)
    card = {
        **_card_head(path, cfg, record, meta),
        "family": cfg.family,
        "agent": {
            "env": fam.env,
            "env_params": fam.env_params(a.level),
            "level_label": level_label(cfg.family, a.level),
            "window": a.window,
            "context": a.context,
            "alphabet": fam.alphabet,
            "longest_prompt_tokens": meta["longest_prompt_tokens"],
            "train_seed_start": TRAIN_SEED_START,
            "n_train_seeds": len(data.seeds),
            "n_train_samples": len(data.samples),
            "excluded_train_seeds": list(data.excluded),
            "eval_seeds": f"{seeds[0]}..{seeds[-1]}",
            "notes": fam.notes,
        },
        "evaluation": {**asdict(plan), "interval": "Wilson at the Korn-Graubard effective size", "continuation": rows},
    }
    write_json(path / CARD_FILE, card)
    write_text(path / "README.md", _markdown_agent_card(card))
    return card


def _build_agent(cfg: TestbedBuildConfig) -> int:
    """An agent family: train, save every checkpoint, evaluate each and write its card."""
    records, meta = train_and_save_agent(cfg)
    _write_build_log(cfg, meta, longest_prompt_tokens=meta["longest_prompt_tokens"],
                     saved=[asdict(r) for r in records])
    out_dir = Path(cfg.out_dir)
    for rec in records if cfg.cards else ():
        card = write_agent_card(out_dir / rec.name, cfg, rec, meta)
        init = card["evaluation"]["continuation"][0]
        print(f"{rec.name}: step {rec.step}, success {init['success']:.3f} [{init['ci_low']:.3f}, {init['ci_high']:.3f}] "
              f"-> {out_dir / rec.name}")
    return 0


@dataclass(frozen=True)
class TestbedFamily:
    """A ``FAMILIES`` entry: the family's defaults of the None fields, its builder, its agent spec."""

    __test__ = False

    defaults: dict[str, Any]
    run: Callable[[TestbedBuildConfig], int]
    agent: Any = None
    """The :class:`~llm_harness.testbed.agents.AgentFamily` (None for arith)."""


def _agent_family_entry(name: str) -> TestbedFamily:
    fam = AGENT_FAMILIES[name]
    return TestbedFamily(
        {"out_dir": str(CHECKPOINT_DIR / name), "save_steps": fam.save_steps, "max_new_tokens": fam.max_new_tokens},
        _build_agent, fam,
    )


#: ``--family`` name -> its defaults and builder (the agent families are AGENT_FAMILIES' names)
FAMILIES: Registry[TestbedFamily] = Registry(
    "test-bed family",
    {"arith": TestbedFamily(_ARITH_DEFAULTS, _build_arith), **{n: _agent_family_entry(n) for n in AGENT_FAMILIES}},
)


def build(cfg: TestbedBuildConfig) -> int:
    """``vsr testbed build``: train the family's model, save every checkpoint, evaluate each, write its card."""
    return FAMILIES[cfg.family].run(cfg)
