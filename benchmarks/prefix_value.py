"""Benchmark of the prefix-value studies.

1. **Shared-prefix batching**: continuation tokens per second of the studies' sampling path
   (``StudyContext.sample``, i.e. the trainer's ``llm_harness.trainer.rollout.sample_groups``:
   *all* prefix states of a chunk in ONE ``generate`` call, ``n`` continuations each, the HF backend prefilling each state once and repeating its KV
   cache) against a per-prefix loop (one ``generate`` call per prefix state, still sharing the
   prefill across that state's ``n`` samples) on the same states, in the same process; target
   ratio >= 3. States: expert solutions of test-bed problems cut at 25/50/75% (the hint-ratio /
   VSR replay state). Each contender's time is the minimum over ``repeats`` timed runs after a
   warm-up, contenders alternating; tokens count every generated token (stop token included).
2. **Study wall times**: every registered study end to end (sampling, scoring, analysis, figure)
   at its quick sizes (``--study-sizes quick``), or full sizes (``full``; tens of minutes on 2 CPU
   cores), with the model already loaded.

torch runs on ``threads`` CPU threads (default 1, recorded in the table). No fraction of a
physical limit is reported: a 1M-parameter model on CPU is bound by per-step framework overhead,
not by FLOP/s or memory bandwidth, so such a fraction would say nothing.

Run: ``python benchmarks/prefix_value.py --quick`` (tiny sizes, under a minute) or without
``--quick`` (about 5 minutes: the batching comparison at full size plus every study's quick size).
Results: a table on stdout and ``prefix_value.csv`` + the resolved config in ``out``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import time
from dataclasses import dataclass, fields, replace
from pathlib import Path

from vsr_util.checks import check_number

COLUMNS = ("benchmark", "scenario", "threads", "ours_s", "baseline_s", "ours_tok_per_s", "baseline_tok_per_s", "ratio",
           "target", "meets_target", "detail")


@dataclass(frozen=True)
class PrefixValueBenchConfig:
    """Options of the prefix-value benchmark."""

    model: str = "mid"
    """Test-bed checkpoint name or model folder."""
    device: str = "cpu"
    """Torch device (``cpu``, ``cuda``)."""
    threads: int = 1
    """torch CPU threads (recorded in the table)."""
    n_problems: int = 24
    """Problems whose expert solutions give the prefix states (3 cuts each)."""
    n: int = 8
    """Continuations per prefix state."""
    response_budget: int = 160
    """Response token budget (prefix + continuation)."""
    temperature: float = 1.0
    """Sampling temperature of both contenders."""
    repeats: int = 3
    """Timed repetitions per contender (minimum reported)."""
    study_sizes: str = "quick"
    """Study timing: ``quick``, ``full`` or ``none``."""
    quick: bool = False
    """Tiny sizes everywhere (smoke tests)."""
    out: str = "runs/bench/prefix_value"
    """Folder for the CSV and the config."""

    def __post_init__(self) -> None:
        if self.study_sizes not in ("quick", "full", "none"):
            raise ValueError(f"study_sizes: must be quick, full or none, got {self.study_sizes!r}")
        for name in ("threads", "n_problems", "n", "response_budget", "repeats"):
            check_number(name, getattr(self, name), 1, integer=True)


def _states(ctx, n_problems: int):
    from prefixvalue.engine import select_problems
    from prefixvalue.prefixes import alpha_cut

    probs = select_problems(ctx.task, "validation", n_problems, 5.0, float("inf"))
    out = []
    for p in probs:
        sol = ctx.codec.encode(p.solution)
        for a in (0.25, 0.5, 0.75):
            out.append(ctx.state(p, sol[: alpha_cut(a, len(sol))]))
    return out


def _tokens(groups) -> int:
    return sum(g.n_new_tokens for g in groups)


def bench_batching(ctx, cfg: PrefixValueBenchConfig) -> dict:
    """Batched shared-prefix call vs one call per prefix on the same states (module doc)."""
    states = _states(ctx, cfg.n_problems)

    def batched(seed):
        return _tokens(ctx.sample(states, cfg.n, temperature=cfg.temperature, top_p=1.0, seed=seed))

    def loop(seed):
        return sum(_tokens(ctx.sample([s], cfg.n, temperature=cfg.temperature, top_p=1.0, seed=seed + i))
                   for i, s in enumerate(states))

    batched(0), loop(0)  # warm-up
    best = {"batched": (float("inf"), 0), "loop": (float("inf"), 0)}
    for rep in range(cfg.repeats):
        for name, fn in (("batched", batched), ("loop", loop)):
            t0 = time.perf_counter()
            toks = fn(1000 + rep)
            dt = time.perf_counter() - t0
            if dt < best[name][0]:
                best[name] = (dt, toks)
    (tb, kb), (tl, kl) = best["batched"], best["loop"]
    ratio = (kb / tb) / (kl / tl)
    return {"benchmark": "continuation throughput", "scenario": f"{len(states)} prefix states x {cfg.n}",
            "threads": cfg.threads, "ours_s": tb, "baseline_s": tl, "ours_tok_per_s": kb / tb,
            "baseline_tok_per_s": kl / tl, "ratio": ratio, "target": 3.0, "meets_target": ratio >= 3.0,
            "detail": f"batched: 1 generate call, {kb} tokens; loop: {len(states)} calls, {kl} tokens"}


def time_studies(backend, tokenizer, cfg: PrefixValueBenchConfig, out: Path) -> list[dict]:
    """Wall time of every study at the chosen sizes (model already loaded)."""
    from prefixvalue.figures import TINY
    from prefixvalue.registry import get_study, study_names
    from prefixvalue.runner import resolved_config, run_study

    rows = []
    for name in study_names():
        base = get_study(name).config_cls(quick=cfg.study_sizes == "quick" or cfg.quick, out=str(out / "studies" / name),
                                          overwrite=True, progress=False, device=cfg.device)
        scfg = resolved_config(name, base)
        if cfg.quick:
            scfg = replace(scfg, **TINY[name])
        t0 = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()):  # the studies print their summaries
            run_study(name, scfg, backend=backend, tokenizer=tokenizer)
        dt = time.perf_counter() - t0
        rows.append({"benchmark": "study wall time", "scenario": f"{name} ({'tiny' if cfg.quick else cfg.study_sizes})",
                     "threads": cfg.threads, "ours_s": dt, "baseline_s": "", "ours_tok_per_s": "", "baseline_tok_per_s": "",
                     "ratio": "", "target": "", "meets_target": "", "detail": f"n_problems={scfg.n_problems}"})
    return rows


def run(cfg: PrefixValueBenchConfig) -> int:
    """Run the benchmark, print the table, write the CSV and config; 0 iff the batching target is met."""
    import torch

    from llm_harness.backends import HFBackend, HFBackendConfig
    from vsr_util.atomic import write_csv
    from vsr_util.config_io import save_config

    from prefixvalue.config import StudyConfig
    from prefixvalue.engine import build_context, resolve_model

    if cfg.quick:
        cfg = replace(cfg, n_problems=min(cfg.n_problems, 6), n=min(cfg.n, 4), repeats=1)
    torch.set_num_threads(cfg.threads)
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    save_config(cfg, out / "config.yaml")
    path = resolve_model(cfg.model)
    backend = HFBackend.from_pretrained(path, config=HFBackendConfig(model=path, device=cfg.device, max_batch_sequences=512))
    ctx = build_context(StudyConfig(split="validation", response_budget=cfg.response_budget, device=cfg.device),
                        backend=backend, tokenizer=backend.tokenizer)
    try:
        rows = [bench_batching(ctx, cfg)]
    finally:
        ctx.close()
    if cfg.study_sizes != "none":
        rows += time_studies(backend, backend.tokenizer, cfg, out)
    write_csv(out / "prefix_value.csv", COLUMNS, rows, lineterminator="\r\n")
    print(format_table(rows))
    return 0 if rows[0]["meets_target"] else 1


def format_table(rows: list[dict]) -> str:
    """Plain-text table of the benchmark rows."""
    lines = [f"{'benchmark':<24} {'scenario':<34} {'thr':>3} {'ours s':>8} {'base s':>8} {'ours tok/s':>10} "
             f"{'base tok/s':>10} {'ratio':>6}  detail"]
    for r in rows:
        def f(v, spec):
            return format(v, spec) if isinstance(v, (int, float)) and not isinstance(v, bool) else str(v)
        lines.append(f"{r['benchmark']:<24} {r['scenario']:<34} {r['threads']:>3} {f(r['ours_s'], '8.2f'):>8} "
                     f"{f(r['baseline_s'], '8.2f'):>8} {f(r['ours_tok_per_s'], '10.0f'):>10} "
                     f"{f(r['baseline_tok_per_s'], '10.0f'):>10} {f(r['ratio'], '6.2f'):>6}  {r['detail']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``python benchmarks/prefix_value.py [--quick] [--threads N] [--study-sizes quick|full|none] ...``."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for f in fields(PrefixValueBenchConfig):
        flag = "--" + f.name.replace("_", "-")
        if f.type in (bool, "bool"):
            p.add_argument(flag, action=argparse.BooleanOptionalAction, default=f.default)
        else:
            conv = {"int": int, "float": float}.get(f.type if isinstance(f.type, str) else f.type.__name__, str)
            p.add_argument(flag, type=conv, default=f.default)
    args = p.parse_args(argv)
    return run(PrefixValueBenchConfig(**vars(args)))


if __name__ == "__main__":
    sys.exit(main())
