"""Write verl parquet files (train/val) from a toolkit task (docs/scaling-out.md).

    python scripts/verl/make_data.py --task step_arith --out DATA [--agent vsr_prefix] [--tokenizer PATH]
    python scripts/verl/make_data.py --task env --params '{"env": "sokoban", "window": 2}' --out DATA   # agents (vsr_env)
        [--params '{"n_train": 2000}'] [--train-split train] [--val-split validation] [--limit N]

Columns: ``data_source`` (``vsr/<task>``), ``prompt`` (the task's chat messages), ``reward_model``
(``{"ground_truth": answer, "style": "rule"}``), ``extra_info`` (``{"index", "problem_id", "params"}``),
``agent_name`` (the train split's agent loop: ``single_turn_agent`` or ``vsr_prefix``; validation
always ``single_turn_agent``, see the agent loop's doc; an ``env`` task's rows run ``vsr_env`` /
``vsr_env_eval`` and ``extra_info`` also carries the episode ``seed``) and, with ``--tokenizer``, ``vsr_prompt_ids``
(the task's own rendered prompt, for tokenizers without a chat template such as the test bed's).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def rows(task, name: str, params: dict, split: str, agent: str, tokenizer, limit: int) -> list[dict]:
    """One verl row per problem of ``split``."""
    from llm_harness.trainer.modeling import Codec

    codec = Codec(tokenizer) if tokenizer is not None else None
    out = []
    for i, p in enumerate(task.problems(split)):
        if limit and i >= limit:
            break
        r = {"data_source": f"vsr/{name}", "prompt": task.messages(p), "agent_name": agent,
             "reward_model": {"ground_truth": p.answer, "style": "rule"},
             "extra_info": {"index": i, "problem_id": p.id, "params": json.dumps(params, sort_keys=True)}}
        if hasattr(task, "seed_of"):  # an env task: the episode seed the vsr_env agent loop plays
            r["extra_info"]["seed"] = int(task.seed_of(p))
        if codec is not None:
            r["vsr_prompt_ids"] = list(codec.encode(task.render_prompt(p, tokenizer)))
        out.append(r)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="step_arith")
    ap.add_argument("--params", default="{}", help="task parameters as JSON")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--agent", default=None, choices=["single_turn_agent", "vsr_prefix", "vsr_env"],
                    help="the train split's agent loop (default: single_turn_agent; vsr_env for --task env)")
    ap.add_argument("--tokenizer", default=None, help="local tokenizer folder: also write vsr_prompt_ids")
    ap.add_argument("--train-split", default="train")
    ap.add_argument("--val-split", default="validation")
    ap.add_argument("--limit", type=int, default=0, help="at most this many problems per split (0: all)")
    a = ap.parse_args(argv)
    import pandas as pd

    from llm_harness.tasks import get_task
    from vsr_util.atomic import atomic_path

    params = json.loads(a.params)
    task = get_task(a.task, **params)
    env_task = hasattr(task, "make_env")
    agent = a.agent or ("vsr_env" if env_task else "single_turn_agent")
    if env_task != (agent == "vsr_env"):
        ap.error(f"--agent {agent}: episodes of an env task run in the vsr_env agent loop, and only they do")
    val_agent = "vsr_env_eval" if env_task else "single_turn_agent"
    tok = None
    if a.tokenizer:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(a.tokenizer, local_files_only=True)
    a.out.mkdir(parents=True, exist_ok=True)
    for split, fname, ag in ((a.train_split, "train.parquet", agent), (a.val_split, "val.parquet", val_agent)):
        df = pd.DataFrame(rows(task, a.task, params, split, ag, tok, a.limit))
        with atomic_path(a.out / fname) as tmp:
            df.to_parquet(tmp)
        print(f"{a.out / fname}: {len(df)} rows ({split}, agent {ag})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
