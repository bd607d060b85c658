"""Benchmark: the batched multi-turn engine vs an episode-at-a-time loop.

Both contenders play the same episodes (the first ``episodes`` evaluation seeds of an environment)
with the same model through the project's episode runner (:func:`llm_harness.trainer.multiturn.play_episodes`,
i.e. :func:`llm_harness.envs.episodes.run_episodes`): **batched** = all episodes in one call (one
``backend.generate`` per turn for every active episode; with ``share_prefix``, as the agent configs
run it), **looped** = one call per episode (one
``generate`` per turn per episode). Reported: turns per
second of each, and the ratio batched / looped as the median over interleaved repeats (A B A B …)
with its min–max (target ≥ 4× on the test bed). Second measurement (the loss side of
a GiGPO step): the trainer's log-prob forward + backward over the turns of the batched episodes
(one row per turn, ``build_batch``), without vs with ``share_prefix`` (the rows' common instruction
run once), interleaved the same way; ``train_rows`` caps the rows (0: all). The model is a random Qwen2 shaped like
the test-bed model (hidden 128, 4 layers) over the text alphabet, or ``--model`` (a saved folder).
Quote the machine load with the numbers: on a shared 2-core machine only ratios mean anything.

Run: ``python benchmarks/multiturn.py --quick`` (about a minute on 2 CPU cores).

Measured 2026-12-01 with the shipped agent (``--model llm_harness/testbed/checkpoints/sokoban/mid
--window 0 --turn-tokens 8 --episodes 32 --repeats 5 --train-rows 256``, one torch thread) on the
2-core development machine under a load average of 7.6 from other jobs -- indicative only:
batched + shared prefix / looped turns per second, median 4.74x (min 4.02, max 6.37); loss pass
plain / shared prefix, median 5.32x (min 4.73, max 7.17), 256 rows of ~325 tokens. Before the
shared prefix (the previous session, random model): 1.53x.
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
    share_prefix: bool = True
    """The batched contender's HF backend prefills the prompts' common prefix once (the agent configs'
    ``rollout.share_prefix``); the looped contender has one prompt per call, where it does not apply."""
    train_rows: int = 256
    """Rows of the loss-pass measurement (0: every turn of the batched episodes)."""
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
    backend = build_backend(model, tok, TrainConfig(model=mcfg), share_prefix=cfg.share_prefix)
    single = build_backend(model, tok, TrainConfig(model=mcfg))
    codec = Codec(tok)
    task = get_task("env", env=cfg.env, window=cfg.window)
    problems = task.problems("validation")[:n_ep]
    states = [StartState(codec.encode(p.prompt), p) for p in problems]
    kw = dict(task=task, codec=codec, group_size=1, temperature=1.0, top_p=1.0, turn_tokens=cfg.turn_tokens)

    def batched() -> tuple[float, int]:
        t0 = time.perf_counter()
        eps = play_episodes(states, seed=cfg.seed, backend=backend, **kw)
        return time.perf_counter() - t0, sum(e.length for g in eps for e in g)

    def looped() -> tuple[float, int]:
        t0, turns = time.perf_counter(), 0
        for s in states:
            eps = play_episodes([s], seed=cfg.seed, backend=single, **kw)
            turns += sum(e.length for g in eps for e in g)
        return time.perf_counter() - t0, turns

    batched(), looped()  # warm-up
    ratios, rows = [], []
    for r in range(repeats):
        (tb, nb), (tl, nl) = batched(), looped()
        ratios.append((nb / tb) / (nl / tl))
        rows.append({"repeat": r, "batched_turns_per_s": nb / tb, "looped_turns_per_s": nl / tl})
        print(f"repeat {r}: batched {nb / tb:8.1f} turns/s ({nb} turns)   looped {nl / tl:8.1f} turns/s ({nl} turns)")
    train = _loss_pass_ratios(cfg, model, codec, states, backend, kw, repeats)
    load = os.getloadavg()
    res = {"ratio_median": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios),
           "episodes": n_ep, "share_prefix": cfg.share_prefix, "repeats": repeats, "load_1min": load[0],
           "load_5min": load[1], "rows": rows, **train}
    print(f"batched / looped turns per second: median {res['ratio_median']:.2f}x "
          f"(min {res['ratio_min']:.2f}, max {res['ratio_max']:.2f}) over {repeats} interleaved repeats")
    print(f"loss pass, plain / shared prefix time: median {res['train_ratio_median']:.2f}x (min {res['train_ratio_min']:.2f}, "
          f"max {res['train_ratio_max']:.2f}) on {res['train_rows']} rows; load average {load[0]:.2f} / {load[1]:.2f} (1 / 5 min)")
    return res


def _loss_pass_ratios(cfg: MultiturnBenchConfig, model, codec, states, backend, kw, repeats: int) -> dict:
    """Forward + backward of ``sequence_logprobs`` over the episodes' turn rows, plain vs shared prefix."""
    import numpy as np
    import torch

    from llm_harness.trainer.data import build_batch
    from llm_harness.trainer.modeling import sequence_logprobs
    from llm_harness.trainer.multiturn import episode_group, play_episodes

    eps = play_episodes(states, seed=cfg.seed + 1, backend=backend, **kw)
    groups = [episode_group(s, e, 0) for s, e in zip(states, eps)]
    batch = build_batch([g.with_advantages(np.ones(g.size)) for g in groups], codec.pad_token_id)
    if cfg.train_rows:
        batch = batch.rows(torch.arange(min(cfg.train_rows, batch.size)))
    model.train()

    def once(share: bool) -> float:
        t0 = time.perf_counter()
        model.zero_grad(set_to_none=True)
        lp, _ = sequence_logprobs(model, batch.input_ids, batch.attention_mask, batch.loss_mask, share_prefix=share)
        (lp * batch.loss_mask).sum().backward()
        return time.perf_counter() - t0

    once(False), once(True)  # warm-up
    ratios = []
    for _ in range(repeats):
        plain, shared = once(False), once(True)
        ratios.append(plain / shared)
    model.eval()
    return {"train_ratio_median": statistics.median(ratios), "train_ratio_min": min(ratios), "train_ratio_max": max(ratios),
            "train_rows": int(batch.size), "train_row_tokens": int(batch.input_ids.shape[1])}


if __name__ == "__main__":  # pragma: no cover
    run(tyro.cli(MultiturnBenchConfig))
