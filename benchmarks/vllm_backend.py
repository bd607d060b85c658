"""Benchmark of the vLLM backend: the harness's overhead over raw vLLM, and vLLM against the HF backend.

Contenders, each sampling the *same request* (``prompts`` test-bed prompts x ``n`` samples, temperature 1,
``max_new_tokens``, the same per-prompt seeds) from the same weights:

* ``ours_vllm`` — ``VLLMBackend.generate`` (validation, per-state seeds, behaviour log-probs, ``Sample`` objects);
* ``raw_vllm`` — ``vllm.LLM.generate`` on the *same engine* with the ``SamplingParams`` our backend would send
  (``logprobs=0``, no detokenisation): the harness's overhead is ours' tokens/s over raw's, target >= 0.9;
* ``hf`` — ``HFBackend.generate`` (its own sampling loop, the trainer's default settings), and ``hf_static`` — the same
  with the static-KV decode step (``HFBackendConfig(static_decode=True)``; Qwen2-style models only, left out
  with a message for others).

Timing: one warm-up call per contender, then ``repeats`` rounds in which every contender runs once, in the
order given (A B C D A B C D ...), on the round's seed (the vLLM prefix cache emptied before each call). Reported per contender: new tokens/s, median [min, max] over the rounds;
per pair ``a/b``: a's tokens/s over b's *within a round*, median [min, max]; the 1-minute load average before and
during. Results: JSON (atomic) plus the resolved config beside it; ``benchmarks/results/vllm_backend/`` holds
the committed runs with a README.

Run (in the vLLM environment, ``make vllm-test`` builds it)::

    .venv-vllm/bin/python benchmarks/vllm_backend.py --repeats 5 --out benchmarks/results/vllm_backend/testbed.json
    .venv-vllm/bin/python benchmarks/vllm_backend.py --model <folder of `vsr model import`> --max-new-tokens 64 ...
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from vsr_util.atomic import write_text
from vsr_util.config_io import save_config

CONTENDERS = ("ours_vllm", "raw_vllm", "hf", "hf_static")
#: (a, b): the reported ratio is a's tokens/s over b's, within a round (> 1: a is faster)
RATIOS = (("ours_vllm", "raw_vllm"), ("ours_vllm", "hf"), ("ours_vllm", "hf_static"), ("raw_vllm", "hf"))


@dataclass(frozen=True)
class VLLMBenchConfig:
    """Options of the vLLM backend benchmark."""

    model: str = "llm_harness/testbed/checkpoints/mid"
    """Saved causal LM folder (the test bed, or a model imported with ``vsr model import``)."""
    task: str = "step_arith"
    """Registered task whose validation prompts are sampled (rendered with the model's chat template if any)."""
    task_params: str = "{}"
    """Task parameters as a JSON object."""
    prompts: int = 64
    """Prompts per request."""
    n: int = 8
    """Samples per prompt."""
    max_new_tokens: int = 160
    """New-token budget per sample."""
    repeats: int = 5
    """Interleaved rounds (after one warm-up call per contender)."""
    threads: int = 2
    """torch intra-op threads for every contender."""
    contenders: tuple[str, ...] = CONTENDERS
    """Which contenders run, in round order."""
    seed: int = 0
    """Sampling seed of round 0 (round i: seed + i, the same for every contender in the round)."""
    kv_cache_gib: float = 2.0
    """vLLM's KV cache on the CPU."""
    out: str = "benchmarks/results/vllm_backend/vllm_backend.json"
    """Where the JSON goes (the config is written beside it)."""

    def __post_init__(self) -> None:
        from vsr_util.checks import check_number

        for name in ("prompts", "n", "max_new_tokens", "repeats", "threads"):
            check_number(name, getattr(self, name), 1, integer=True)
        bad = [c for c in self.contenders if c not in CONTENDERS]
        if bad or not self.contenders:
            raise ValueError(f"contenders: must be a non-empty subset of {CONTENDERS}, got {self.contenders}")


def _load_avg() -> float:
    return round(os.getloadavg()[0], 2)


def _prompts(cfg: VLLMBenchConfig, tokenizer: Any) -> list[list[int]]:
    from llm_harness.tasks import get_task
    from llm_harness.trainer.modeling import Codec

    task = get_task(cfg.task, **json.loads(cfg.task_params))
    codec = Codec(tokenizer)
    probs = task.problems("validation")[: cfg.prompts]
    if len(probs) < cfg.prompts:
        raise ValueError(f"prompts: the task's validation split has {len(probs)} problems, fewer than {cfg.prompts}")
    return [codec.encode(task.render_prompt(p, tokenizer)) for p in probs]


def build_contenders(cfg: VLLMBenchConfig) -> tuple[dict[str, Any], dict[str, Any], list[list[int]]]:
    """``({name: (seed) -> new tokens}, {name: () -> None run before each timed call}, prompts)``.

    The vLLM contenders' prefix cache is emptied before each call (untimed): a round repeats no earlier
    request, but vLLM caches completed KV blocks of *generated* tokens too, so a repeated request would time
    a cache replay."""
    import torch

    from llm_harness.backends import HFBackend, HFBackendConfig, SamplingParams, VLLMBackend, VLLMBackendConfig
    from llm_harness.backends.vllm_backend import _derived_seed

    torch.set_num_threads(cfg.threads)
    hf = HFBackend.from_pretrained(cfg.model, config=HFBackendConfig(model=cfg.model, dtype="float32"))
    prompts = _prompts(cfg, hf.tokenizer)
    def sp(seed: int) -> SamplingParams:
        return SamplingParams(temperature=1.0, max_new_tokens=cfg.max_new_tokens, seed=seed)

    out: dict[str, Any] = {}
    before: dict[str, Any] = {}

    def count(rows) -> int:
        return sum(len(s.token_ids) for r in rows for s in r)

    if "hf" in cfg.contenders:
        out["hf"] = lambda seed: count(hf.generate(prompts, cfg.n, sp(seed)))
    from llm_harness.backends.static_decode import supports

    if "hf_static" in cfg.contenders and supports(hf.model) is not None:
        print(f"hf_static left out: {supports(hf.model)}", file=sys.stderr)
    elif "hf_static" in cfg.contenders:
        hs = HFBackend(hf.model, hf.tokenizer, config=HFBackendConfig(static_decode=True))
        out["hf_static"] = lambda seed: count(hs.generate(prompts, cfg.n, sp(seed)))
    if {"ours_vllm", "raw_vllm"} & set(cfg.contenders):
        v = VLLMBackend.from_config(VLLMBackendConfig(model=cfg.model, dtype="float32", cpu_kv_cache_gib=cfg.kv_cache_gib),
                                    scorer=hf)
        torch.set_num_threads(cfg.threads)
        if "ours_vllm" in cfg.contenders:
            out["ours_vllm"] = lambda seed: count(v.generate(prompts, cfg.n, sp(seed)))
            before["ours_vllm"] = v.llm.reset_prefix_cache
        if "raw_vllm" in cfg.contenders:
            from vllm import SamplingParams as VSP
            from vllm.inputs import TokensPrompt

            stop = v._stop_ids(sp(0))

            def raw(seed: int) -> int:
                params = [VSP(n=cfg.n, temperature=1.0, top_p=1.0, top_k=-1, max_tokens=cfg.max_new_tokens,
                              seed=_derived_seed(seed, i), logprobs=0, stop_token_ids=stop, ignore_eos=True,
                              detokenize=False) for i in range(len(prompts))]
                res = v.llm.generate([TokensPrompt(prompt_token_ids=list(p)) for p in prompts], sampling_params=params,
                                     use_tqdm=False)
                return sum(len(c.token_ids) for r in res for c in r.outputs)

            out["raw_vllm"] = raw
            before["raw_vllm"] = v.llm.reset_prefix_cache
    return {c: out[c] for c in cfg.contenders if c in out}, before, prompts


def summarise(rounds: list[dict[str, dict]], contenders: tuple[str, ...]) -> dict:
    """Median [min, max] tokens/s per contender and the within-round time ratios of :data:`RATIOS`."""
    s: dict[str, Any] = {"contenders": {}, "ratios": {}}
    for c in contenders:
        tps = [r[c]["tokens"] / r[c]["s"] for r in rounds]
        s["contenders"][c] = {"tok_per_s_median": statistics.median(tps), "tok_per_s_min": min(tps),
                              "tok_per_s_max": max(tps),
                              "tokens_median": statistics.median(r[c]["tokens"] for r in rounds)}
    for a, b in RATIOS:
        if a in contenders and b in contenders:
            q = [(r[a]["tokens"] / r[a]["s"]) / (r[b]["tokens"] / r[b]["s"]) for r in rounds]
            s["ratios"][f"{a}/{b}"] = {"median": statistics.median(q), "min": min(q), "max": max(q), "per_round": q}
    return s


def run(cfg: VLLMBenchConfig) -> int:
    fns, before, prompts = build_contenders(cfg)
    load_before = _load_avg()
    for fn in fns.values():  # warm-up, on a seed no round uses
        fn(cfg.seed + cfg.repeats)
    rounds = []
    loads = []
    for i in range(cfg.repeats):
        row = {}
        for name, fn in fns.items():
            if name in before:
                before[name]()
            t = time.perf_counter()
            tokens = fn(cfg.seed + i)  # every contender samples the same request in a round
            row[name] = {"s": time.perf_counter() - t, "tokens": tokens}
        rounds.append(row)
        loads.append(_load_avg())
        print(f"round {i + 1}/{cfg.repeats}: " + ", ".join(f"{k} {v['tokens'] / v['s']:.0f} tok/s" for k, v in row.items()),
              file=sys.stderr)
    res = {"config": asdict(cfg), "prompt_tokens_mean": statistics.mean(len(p) for p in prompts),
           "load_1min_before": load_before, "load_1min_during_max": max(loads), "rounds": rounds,
           "summary": summarise(rounds, tuple(fns)), "cpu_count": os.cpu_count(),
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    out = Path(cfg.out)
    write_text(out, json.dumps(res, indent=2))
    save_config(cfg, out.with_suffix(".config.yaml"))
    print(format_table(res))
    return 0


def format_table(res: dict) -> str:
    s = res["summary"]
    lines = ["| contender | new tokens/s, median [min, max] |", "| --- | --- |"]
    for c, v in s["contenders"].items():
        lines.append(f"| {c} | {v['tok_per_s_median']:.0f} [{v['tok_per_s_min']:.0f}, {v['tok_per_s_max']:.0f}] |")
    lines += ["", "| tokens/s ratio a/b, same round | median [min, max] |",
              "| --- | --- |"]
    for k, v in s["ratios"].items():
        lines.append(f"| {k} | {v['median']:.2f} [{v['min']:.2f}, {v['max']:.2f}] |")
    lines.append(f"\nload (1 min) before {res['load_1min_before']}, at most {res['load_1min_during_max']} during")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    import tyro

    return run(tyro.cli(VLLMBenchConfig, args=argv))


if __name__ == "__main__":
    sys.exit(main())
