"""Benchmark: the batched multi-turn engine vs an episode-at-a-time loop (issue 15, "Performance").

Both contenders play the same episodes (the first ``episodes`` evaluation seeds of an environment)
with the same model through the project's episode runner (:func:`llm_harness.trainer.multiturn.play_episodes`,
i.e. :func:`llm_harness.envs.episodes.run_episodes`): **batched** = all episodes in one call (one
``backend.generate`` per turn for every active episode), **looped** = one call per episode (one
``generate`` per turn per episode). Reported: turns per
second of each, and the ratio batched / looped as the median over interleaved repeats (A B A B …)
with its min–max (STYLE rule 13; target ≥ 4× on the test bed). The model is a random Qwen2 shaped like
the test-bed model (hidden 128, 4 layers) over the text alphabet, or ``--model`` (a saved folder).
Quote the machine load with the numbers: on a shared 2-core machine only ratios mean anything.

Run: ``python benchmarks/multiturn.py --quick`` (about a minute on 2 CPU cores).
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass

import tyro

__all__ = ["MultiturnBenchConfig", "run"]


@dataclass(frozen=True)
class MultiturnBenchConfig:
    """``python benchmarks/multiturn.py``."""

    env: str = "sokoban"
    """Environment (``llm_harness.envs.ENVS``)."""
    episodes: int = 32
    """Episodes per contender per repeat (the first evaluation seeds)."""
    repeats: int = 5
    """Interleaved repeats (A B A B ...)."""
    turn_tokens: int = 6
    """Reply budget per turn."""
    window: int = 1
    """History window of the prompt."""
    model: str = ""
    """A saved model folder (default: a random test-bed-shaped model over the text alphabet)."""
    hidden_size: int = 128
    """Random model: hidden width (the test bed's 128)."""
    num_layers: int = 4
    """Random model: layers (the test bed's 4)."""
    threads: int = 1
    """torch CPU threads."""
    quick: bool = False
    """Small sizes (8 episodes, 3 repeats)."""
    seed: int = 0
    """Sampling seed."""


def run(cfg: MultiturnBenchConfig) -> dict:
    """Measure both contenders (module doc); prints a table and returns the numbers."""
    import torch

    from llm_harness.tasks import get_task
    from llm_harness.trainer.config import ModelConfig, TrainConfig
    from llm_harness.trainer.data import StartState
    from llm_harness.trainer.entry import build_backend
    from llm_harness.trainer.modeling import Codec, build_model
    from llm_harness.trainer.multiturn import play_episodes

    torch.set_num_threads(cfg.threads)
    n_ep, repeats = (min(8, cfg.episodes), min(3, cfg.repeats)) if cfg.quick else (cfg.episodes, cfg.repeats)
    mcfg = ModelConfig(path=cfg.model) if cfg.model else ModelConfig(
        random_init=True, alphabet="text", hidden_size=cfg.hidden_size, num_layers=cfg.num_layers, num_heads=4, max_context=1024)
    model, tok = build_model(mcfg, 0)
    model.eval()
    backend = build_backend(model, tok, TrainConfig(model=mcfg))
    codec = Codec(tok)
    task = get_task("env", env=cfg.env, window=cfg.window)
    problems = task.problems("validation")[:n_ep]
    states = [StartState(codec.encode(p.prompt), p) for p in problems]
    kw = dict(task=task, codec=codec, backend=backend, group_size=1, temperature=1.0, top_p=1.0, turn_tokens=cfg.turn_tokens)

    def batched() -> tuple[float, int]:
        t0 = time.perf_counter()
        eps = play_episodes(states, seed=cfg.seed, **kw)
        return time.perf_counter() - t0, sum(e.length for g in eps for e in g)

    def looped() -> tuple[float, int]:
        t0, turns = time.perf_counter(), 0
        for s in states:
            eps = play_episodes([s], seed=cfg.seed, **kw)
            turns += sum(e.length for g in eps for e in g)
        return time.perf_counter() - t0, turns

    batched(), looped()  # warm-up
    ratios, rows = [], []
    for r in range(repeats):
        (tb, nb), (tl, nl) = batched(), looped()
        ratios.append((nb / tb) / (nl / tl))
        rows.append({"repeat": r, "batched_turns_per_s": nb / tb, "looped_turns_per_s": nl / tl})
        print(f"repeat {r}: batched {nb / tb:8.1f} turns/s ({nb} turns)   looped {nl / tl:8.1f} turns/s ({nl} turns)")
    load = os.getloadavg()[0]
    res = {"ratio_median": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios),
           "episodes": n_ep, "repeats": repeats, "load_1min": load, "rows": rows}
    print(f"batched / looped turns per second: median {res['ratio_median']:.2f}x "
          f"(min {res['ratio_min']:.2f}, max {res['ratio_max']:.2f}) over {repeats} interleaved repeats; "
          f"load average {load:.2f}")
    return res


if __name__ == "__main__":  # pragma: no cover
    run(tyro.cli(MultiturnBenchConfig))
