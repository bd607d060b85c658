"""Benchmark: what one agentic update costs on each BabyAI level with a CPU test-bed agent.

The agents suite (``vsr compare --suite agents``) runs BabyAI at one level, OneRoomS8, with the shipped
test-bed agent. This measures whether SynthLoc and MiniBoss fit the same design on this machine:

* **Episodes** (no model): the BabyAI bot's expert episode of each of the first ``seeds`` evaluation
  seeds, played out -- its length in turns, and the token length of every turn's window-0 prompt
  (the test-bed agents' format, ``render_agent_prompt``; the character tokenizer of the agents).
* **Cost per turn** (a random Qwen2 shaped like the test-bed agents: hidden 128, 4 layers, with enough
  positions for the level's longest prompt): on ``rows`` prompts drawn from each level's expert turns,
  (a) generation of ``turn_tokens`` new tokens for all rows in one ``backend.generate`` call (prefix
  sharing off, as the BabyAI configs run it) and (b) the trainer's loss pass, forward + backward of
  ``sequence_logprobs`` over the rows with a two-token reply as the target. The levels are timed
  interleaved (A B C A B C ...) and each level's seconds per turn is the median over
  repeats, with its ratio to OneRoomS8's.
* **Projection**: turns per update for the suite's batch (``states`` initial states x ``group`` episodes)
  between two bounds -- every episode as long as the expert's (all succeed) and every episode at the
  budget (all fail) -- times the OneRoomS8 seconds per turn measured by the committed agents suite
  (its GiGPO records: ``time_step_s`` / ``gen_new_actions``), scaled by the measured per-turn ratio.
  Then a suite of ``arms`` x ``suite_seeds`` x ``steps`` updates. A trained agent's episodes lie between
  the bounds; the test-bed agent that is in VSR's regime fails most of them (OneRoomS8's mid agent: 15.7
  turns per episode under a 16-turn budget).

Run: ``python benchmarks/agent_level_cost.py`` (a few minutes on 2 CPU cores; ``--quick``: under one).
Quote the machine load with the numbers.
"""

from __future__ import annotations

import gzip
import json
import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import tyro

__all__ = ["LevelCostConfig", "run"]

ROOT = Path(__file__).resolve().parents[1]
#: the committed GiGPO records of the agents suite's BabyAI regime (OneRoomS8): the calibration
SUITE_RECORDS = ROOT / "records" / "compare_agents" / "babyai" / "gigpo"


@dataclass(frozen=True)
class LevelCostConfig:
    """``python benchmarks/agent_level_cost.py``."""

    levels: tuple[str, ...] = ("OneRoomS8", "SynthLoc", "MiniBoss")
    """BabyAI levels; the first is the calibration level (the suite's)."""
    budgets: tuple[int, ...] = (16, 192, 128)
    """Action budget of each level: OneRoomS8's test-bed family budget, the GPU recipes' for the others
    (``configs/agent_babyai_{synthloc,miniboss}_*_gpu.yaml``)."""
    seeds: int = 128
    """Evaluation seeds whose expert episodes are played (the first ones of the 128 fixed seeds)."""
    rows: int = 64
    """Prompt rows per timed call (one generate call, one loss pass)."""
    turn_tokens: int = 8
    """New tokens generated per row (the test-bed agents' reply budget)."""
    repeats: int = 5
    """Interleaved repeats."""
    states: int = 4
    """Initial states per update (the suite's BabyAI regime)."""
    group: int = 8
    """Episodes per initial state (G)."""
    arms: int = 5
    """Methods of the suite (GiGPO, VSR + GiGPO and three ablations)."""
    suite_seeds: int = 8
    """Training seeds per method."""
    steps: int = 10
    """Updates per run (the BabyAI regime's)."""
    threads: int = 1
    """torch CPU threads (the suite's workers run one each)."""
    quick: bool = False
    """Small sizes (16 seeds, 16 rows, 2 repeats)."""
    seed: int = 0
    """Seed of the model, the row draw and the sampling."""
    out: str = ""
    """Write the result as JSON here (empty: print only)."""


def expert_stats(level: str, budget: int, n_seeds: int, codec) -> dict:
    """Expert episode lengths and window-0 prompt lengths (tokens) of ``level`` over the first ``n_seeds`` evaluation seeds."""
    from llm_harness.envs import make_env
    from llm_harness.testbed.agents import EVAL_SEEDS, demonstration

    env = make_env("babyai", level=level, max_steps=budget)
    lengths, prompts = [], []
    for s in EVAL_SEEDS[:n_seeds]:
        demo = demonstration(env, s, 0)
        lengths.append(len(demo))
        prompts.extend(codec.encode(p) for p, _ in demo)
    toks = [len(p) for p in prompts]
    return {"level": level, "budget": budget, "episode_turns_mean": statistics.fmean(lengths),
            "episode_turns_median": statistics.median(lengths), "episode_turns_max": max(lengths),
            "episodes_over_budget": sum(n > budget for n in lengths), "prompt_tokens_mean": statistics.fmean(toks),
            "prompt_tokens_max": max(toks), "_prompts": prompts}


def suite_seconds_per_turn(records: Path = SUITE_RECORDS) -> dict:
    """OneRoomS8 seconds per policy turn in the committed agents suite's GiGPO runs (median over updates)."""
    per_turn, per_update, turns = [], [], []
    for f in sorted(records.glob("seed*/metrics.jsonl.gz")):
        with gzip.open(f, "rt") as fh:
            for line in fh:
                m = json.loads(line)
                if m.get("gen_new_actions") and m.get("time_step_s"):
                    per_turn.append(m["time_step_s"] / m["gen_new_actions"])
                    per_update.append(m["time_step_s"])
                    turns.append(m["gen_new_actions"])
    if not per_turn:
        raise FileNotFoundError(f"no GiGPO metrics under {records} (the committed agents suite's records)")
    return {"s_per_turn": statistics.median(per_turn), "s_per_update": statistics.median(per_update),
            "turns_per_update": statistics.median(turns), "updates": len(per_turn)}


def run(cfg: LevelCostConfig) -> dict:
    """Measure and project (module doc); prints a table and returns the numbers."""
    import numpy as np
    import torch

    from llm_harness.backends.protocol import SamplingParams
    from llm_harness.trainer.config import ModelConfig, TrainConfig
    from llm_harness.trainer.entry import build_backend
    from llm_harness.trainer.modeling import Codec, build_model, sequence_logprobs

    if len(cfg.budgets) != len(cfg.levels):
        raise ValueError(f"budgets: one per level ({len(cfg.levels)}), got {len(cfg.budgets)}")
    torch.set_num_threads(cfg.threads)
    n_seeds, rows, repeats = (min(16, cfg.seeds), min(16, cfg.rows), min(2, cfg.repeats)) if cfg.quick else (cfg.seeds, cfg.rows, cfg.repeats)

    probe_cfg = ModelConfig(random_init=True, alphabet="text", hidden_size=128, num_layers=4, num_heads=4, max_context=64)
    _, tok = build_model(probe_cfg, cfg.seed)
    codec = Codec(tok)
    t0 = time.perf_counter()
    stats = [expert_stats(lv, b, n_seeds, codec) for lv, b in zip(cfg.levels, cfg.budgets)]
    print(f"expert episodes of {n_seeds} seeds x {len(cfg.levels)} levels: {time.perf_counter() - t0:.1f} s")
    context = 64 * (-(-(max(s["prompt_tokens_max"] for s in stats) + cfg.turn_tokens + 2) // 64))
    mcfg = ModelConfig(random_init=True, alphabet="text", hidden_size=128, num_layers=4, num_heads=4, max_context=context)
    model, tok = build_model(mcfg, cfg.seed)
    codec = Codec(tok)
    backend = build_backend(model, tok, TrainConfig(model=mcfg), share_prefix=False)
    rng = np.random.default_rng(cfg.seed)
    picks = {s["level"]: [s["_prompts"][i] for i in rng.choice(len(s["_prompts"]), size=rows, replace=False)] for s in stats}
    reply = codec.encode("left")[:2]
    sampling = SamplingParams(temperature=1.0, max_new_tokens=cfg.turn_tokens, ignore_eos=True, seed=cfg.seed)

    def gen(level: str) -> float:
        model.eval()
        t = time.perf_counter()
        with torch.no_grad():
            backend.generate(picks[level], 1, sampling)
        return time.perf_counter() - t

    def loss(level: str) -> float:
        seqs = [p + reply for p in picks[level]]
        width = max(map(len, seqs))
        ids = torch.full((rows, width), codec.pad_token_id, dtype=torch.long)
        am = torch.zeros((rows, width), dtype=torch.long)
        lm = torch.zeros((rows, width - 1))
        for b, s in enumerate(seqs):
            ids[b, : len(s)] = torch.tensor(s)
            am[b, : len(s)] = 1
            lm[b, len(s) - 1 - len(reply) : len(s) - 1] = 1
        model.train()
        t = time.perf_counter()
        model.zero_grad(set_to_none=True)
        lp, _ = sequence_logprobs(model, ids, am, lm)
        (lp * lm).sum().backward()
        return time.perf_counter() - t

    for lv in cfg.levels:  # warm-up
        gen(lv), loss(lv)
    times = {lv: {"gen": [], "loss": []} for lv in cfg.levels}
    for r in range(repeats):
        for lv in cfg.levels:
            times[lv]["gen"].append(gen(lv))
            times[lv]["loss"].append(loss(lv))
        print(f"repeat {r}: " + "   ".join(f"{lv} gen {times[lv]['gen'][-1]:.2f} s loss {times[lv]['loss'][-1]:.2f} s" for lv in cfg.levels))

    calib = suite_seconds_per_turn()
    base = cfg.levels[0]
    base_turn = [(g + l) / rows for g, l in zip(times[base]["gen"], times[base]["loss"])]
    out_levels = []
    for s in stats:
        s.pop("_prompts")
        lv = s["level"]
        per_turn = [(g + l) / rows for g, l in zip(times[lv]["gen"], times[lv]["loss"])]
        ratios = [a / b for a, b in zip(per_turn, base_turn)]
        ratio = statistics.median(ratios)
        s_turn = calib["s_per_turn"] * ratio
        episodes = cfg.states * cfg.group
        lo_turns, hi_turns = episodes * s["episode_turns_mean"], episodes * s["budget"]
        updates = cfg.arms * cfg.suite_seeds * cfg.steps
        out_levels.append({
            **s,
            "gen_s_per_turn": statistics.median(times[lv]["gen"]) / rows,
            "loss_s_per_turn": statistics.median(times[lv]["loss"]) / rows,
            "cost_ratio_median": ratio, "cost_ratio_min": min(ratios), "cost_ratio_max": max(ratios),
            "projected_s_per_turn": s_turn,
            "update_s_all_expert_length": lo_turns * s_turn, "update_s_all_at_budget": hi_turns * s_turn,
            "suite_h_all_expert_length": updates * lo_turns * s_turn / 3600 / 2,
            "suite_h_all_at_budget": updates * hi_turns * s_turn / 3600 / 2,
        })
    load = os.getloadavg()
    res = {"config": {k: getattr(cfg, k) for k in cfg.__dataclass_fields__}, "seeds": n_seeds, "rows": rows, "repeats": repeats,
           "context": context, "calibration": calib, "levels": out_levels, "load_1min": load[0], "load_5min": load[1]}
    print(f"\ncalibration (committed agents suite, OneRoomS8 GiGPO): {calib['s_per_turn']:.3f} s per turn, "
          f"{calib['turns_per_update']:.0f} turns per update, {calib['s_per_update']:.0f} s per update")
    print(f"{'level':10} {'turns mean/med/max':>20} {'prompt tok':>11} {'cost/turn vs ' + base:>22} {'update s (expert..budget)':>27} "
          f"{'suite h on 2 workers':>22}")
    for r in out_levels:
        print(f"{r['level']:10} {r['episode_turns_mean']:8.1f}/{r['episode_turns_median']:4.0f}/{r['episode_turns_max']:4d} "
              f"{r['prompt_tokens_mean']:11.0f} {r['cost_ratio_median']:9.2f}x [{r['cost_ratio_min']:.2f}, {r['cost_ratio_max']:.2f}] "
              f"{r['update_s_all_expert_length']:12.0f} .. {r['update_s_all_at_budget']:6.0f} "
              f"{r['suite_h_all_expert_length']:9.1f} .. {r['suite_h_all_at_budget']:6.1f}")
    print(f"suite = {cfg.arms} arms x {cfg.suite_seeds} seeds x {cfg.steps} updates of {cfg.states} x {cfg.group} episodes, "
          f"two runs at a time; load average {load[0]:.2f} / {load[1]:.2f} (1 / 5 min)")
    if cfg.out:
        from vsr_util.atomic import write_text

        Path(cfg.out).parent.mkdir(parents=True, exist_ok=True)
        write_text(cfg.out, json.dumps(res, indent=2) + "\n")
    return res


if __name__ == "__main__":  # pragma: no cover
    run(tyro.cli(LevelCostConfig))
