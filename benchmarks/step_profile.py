"""Benchmark: where one GRPO step's time goes, by phase and operator class (``torch.profiler``).

The trainer-vs-TRL benchmark (``benchmarks/trainer_vs_trl.py``) measures the lean step at 0.24-0.35 of its GEMM
limit, and a bf16 training pass no faster than float32's although bf16 matmuls run ~4.5x float32 at the training
shapes. A step that far from its matmul limit is spending its time elsewhere; this benchmark says where.

Design:

* **The same step.** Each contender is one of ``trainer_vs_trl.OURS_OPTIONS`` (``ours_lean`` float32,
  ``ours_lean_bf16_inpass`` bf16, ...) on the same model, task, batch and response budget, built the same way
  (``trainer_vs_trl._ours``'s recipe), from a fresh load; ``warmup_steps`` untimed steps first (first-call
  allocations, oneDNN's per-shape JIT), then ``steps`` steps under ``torch.profiler`` (CPU activity, FLOPs of the
  matmuls recorded).
* **Phases.** ``generate`` = inside ``backend.generate`` (prefill, decode, sampling); ``optimizer`` = inside the
  optimizer's ``step``; ``train`` = the rest of ``train_step`` (the loss pass forward and backward, the old-log-prob
  pass, advantages, bookkeeping). An operator belongs to the phase whose interval holds its start.
* **Operator classes** (:data:`CLASSES`, first match of the aten name): ``matmul`` (mm, addmm, bmm, baddbmm, packed
  linear), ``attention`` (softmax, scaled-dot-product), ``vocab`` (log-softmax, logsumexp, gather, the sampler's
  cumsum / searchsorted), ``elementwise`` (add, mul, silu, rsqrt, ...), ``memory`` (copy, cat, index, fill, empty,
  ...), ``optimizer`` (fused AdamW); anything else is ``other``. Each operator's *self* time is counted (its children
  are counted in their own classes), so the classes add up to the time spent inside operators; ``outside`` = wall
  time minus that (Python, the autograd engine's bookkeeping, the profiler's own cost).
* **Matmuls inside the step.** The profiler's FLOP count of ``mm`` / ``addmm`` / ``bmm`` / ``baddbmm`` over their self
  time gives the matmul rate *inside* the step, per phase, to compare with ``trainer_vs_trl.gemm_rate`` in isolation
  (measured in the same run at the step's shapes). Packed-weight matmuls (MKL / oneDNN packed ops) carry no FLOP
  count: their time is in ``matmul``, their FLOPs are not in the rate (reported as ``packed_matmul_s``).

The profiler adds overhead per operator (a few microseconds), so wall times here are longer than unprofiled ones;
compare shares within a run, and take s/step from ``trainer_vs_trl.py``. Run on a quiet machine::

    python benchmarks/step_profile.py --model smollm2-135m-instruct --task arith_ladder \
        --contenders ours_lean ours_lean_bf16_inpass --out benchmarks/results/step_profile/step_profile.json
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as the vsr CLI (before torch loads OpenMP)

import torch

from vsr_util.atomic import write_text
from vsr_util.config_io import save_config
from vsr_util.machine import STARVED_GBPS, machine_check

#: operator class -> pattern on the aten / library operator name (first match wins; order matters)
CLASSES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("optimizer", re.compile(r"adam|_foreach", re.I)),
    ("matmul", re.compile(r"^aten::(mm|addmm|bmm|baddbmm|addbmm|_addmm_activation)$|mkl_linear|linear_pointwise|"
                          r"mkldnn_linear|_weight_int|packed", re.I)),
    ("vocab", re.compile(r"log_softmax|logsumexp|gather|searchsorted|cumsum|multinomial|exponential|nll_loss", re.I)),
    ("attention", re.compile(r"softmax|scaled_dot_product|flash_attention|_efficient_attention", re.I)),
    ("memory", re.compile(r"copy|clone|contiguous|^aten::(cat|stack|index|index_select|index_put_?|_index_put_impl_|"
                          r"scatter_?|scatter_add_?|empty|empty_strided|empty_like|zeros|zeros_like|ones|ones_like|"
                          r"fill_|zero_|to|_to_copy|narrow|masked_select|nonzero|repeat|repeat_interleave|expand|"
                          r"resize_|set_|full|full_like|new_empty|new_zeros|constant_pad_nd|pad|split|chunk|unbind)$",
                          re.I)),
    ("elementwise", re.compile(r"^aten::(add|add_|sub|sub_|mul|mul_|div|div_|neg|silu|silu_|silu_backward|sigmoid|"
                               r"rsqrt|sqrt|pow|mean|sum|exp|exp_|log|cos|sin|where|masked_fill_?|clamp|clamp_|"
                               r"clamp_min|minimum|maximum|lt|gt|le|ge|eq|ne|abs|addcmul_?|addcdiv_?|lerp_?|"
                               r"rms_norm|_fused_rms_norm|_fused_rms_norm_backward|max|min|amax|argmax|sort|topk|"
                               r"reciprocal|square|norm|linalg_vector_norm|_foreach_.*|rsub|threshold_backward|"
                               r"mul_out|add_out|isfinite|isnan|all|any|bitwise_.*|logical_.*|sign|floor|ceil|round|"
                               r"type_as|float|bfloat16|t|transpose|permute|view|reshape|_reshape_alias|unsqueeze|"
                               r"squeeze|select|slice|as_strided|alias|detach|detach_|_unsafe_view|flatten|"
                               r"unflatten|view_as|expand_as|numel|item|_local_scalar_dense|is_nonzero)$", re.I)),
)
#: matmul operators the profiler counts FLOPs for
FLOP_OPS = frozenset({"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"})
PHASES = ("generate", "train", "optimizer")


def op_class(name: str) -> str:
    """The class of operator ``name`` (:data:`CLASSES`; ``other`` when none matches)."""
    for cls, pat in CLASSES:
        if pat.search(name):
            return cls
    return "other"


@dataclass(frozen=True)
class ProfileConfig:
    """Options of the step profile."""

    model: str = "llm_harness/testbed/checkpoints/mid"
    """Saved model folder, or a registered real model (``smollm2-135m-instruct``)."""
    task: str = "step_arith"
    """Registered task (``arith_ladder`` for the real model)."""
    contenders: tuple[str, ...] = ("ours_lean",)
    """Step variants (keys of ``trainer_vs_trl.OURS_OPTIONS``), profiled in this order."""
    steps: int = 1
    """Profiled steps per contender."""
    warmup_steps: int = 1
    """Untimed steps first (first-call allocations and JIT)."""
    prompts: int = 4
    """Prompts per step."""
    group_size: int = 4
    """Samples per prompt."""
    max_new_tokens: int = 32
    """Response budget."""
    lr: float = 5e-6
    """Learning rate."""
    threads: int = 2
    """torch CPU threads (the isolated GEMM rates are measured at the same count)."""
    seed: int = 0
    """Seed of every contender's run."""
    gemm_repeats: int = 10
    """Timings per matmul shape of the isolated rates (the fastest is used)."""
    top: int = 20
    """Operators listed per contender (by self time)."""
    out: str = "runs/bench/step_profile.json"
    """JSON of the results (the config and a markdown table beside it)."""

    def __post_init__(self) -> None:
        from benchmarks.trainer_vs_trl import OURS_OPTIONS
        from vsr_util.checks import check_number

        for n in ("steps", "prompts", "group_size", "max_new_tokens", "threads", "gemm_repeats", "top"):
            check_number(n, getattr(self, n), 1, integer=True)
        check_number("warmup_steps", self.warmup_steps, 0, integer=True)
        if not self.contenders or any(c not in OURS_OPTIONS for c in self.contenders):
            raise ValueError(f"contenders: each must be one of {sorted(OURS_OPTIONS)}, got {list(self.contenders)}")
        if len(set(self.contenders)) != len(self.contenders):
            raise ValueError(f"contenders: duplicates in {list(self.contenders)}")
        if self.group_size < 2:
            raise ValueError("group_size: GRPO needs >= 2 samples per prompt")


def _wrap(obj: Any, attr: str, label: str) -> None:
    """Mark every call of ``obj.attr`` as phase ``label`` in the profile (a ``phase::label`` range)."""
    real = getattr(obj, attr)

    def wrapped(*a, **kw):
        with torch.profiler.record_function(f"phase::{label}"):
            return real(*a, **kw)

    setattr(obj, attr, wrapped)


def attribute(events: list[Any], wall_s: float) -> dict[str, Any]:
    """Per phase and operator class: self seconds, and the in-step matmul rate (module doc). ``events``: the
    profiler's ``FunctionEvent`` list (name, self_cpu_time_total µs, flops, time_range, thread)."""
    spans = [(e.name.split("::", 1)[1], e.time_range.start, e.time_range.end) for e in events
             if e.name.startswith("phase::")]

    def phase_of(t: float) -> str:
        for label, a, b in spans:
            if a <= t <= b:
                return label
        return "train"

    table: dict[str, dict[str, float]] = {p: {} for p in PHASES}
    flops = {p: 0.0 for p in PHASES}
    flop_s = {p: 0.0 for p in PHASES}
    packed_s = 0.0
    ops: dict[str, list[float]] = {}
    for e in events:
        if e.name.startswith("phase::") or e.name.startswith("ProfilerStep"):
            continue
        self_s = e.self_cpu_time_total / 1e6
        if self_s <= 0:
            continue
        ph, cls = phase_of(e.time_range.start), op_class(e.name)
        table[ph][cls] = table[ph].get(cls, 0.0) + self_s
        o = ops.setdefault(e.name, [0.0, 0.0])
        o[0] += self_s
        o[1] += 1
        if e.name in FLOP_OPS and getattr(e, "flops", 0):
            flops[ph] += float(e.flops)
            flop_s[ph] += self_s
        elif cls == "matmul":
            packed_s += self_s
    inside = sum(v for t in table.values() for v in t.values())
    return {
        "wall_s": wall_s,
        "inside_ops_s": inside,
        "outside_s": wall_s - inside,
        "by_phase": {p: {"total_s": sum(t.values()), **dict(sorted(t.items(), key=lambda kv: -kv[1]))}
                     for p, t in table.items()},
        "by_class": {c: sum(t.get(c, 0.0) for t in table.values()) for c in
                     sorted({c for t in table.values() for c in t}, key=lambda c: -sum(t.get(c, 0.0) for t in table.values()))},
        "matmul_gflops_in_step": {p: (flops[p] / flop_s[p] / 1e9 if flop_s[p] else None) for p in PHASES},
        "matmul_gflop": {p: flops[p] / 1e9 for p in PHASES},
        "packed_matmul_s": packed_s,
        "top_ops": [{"name": n, "self_s": v[0], "calls": int(v[1])}
                    for n, v in sorted(ops.items(), key=lambda kv: -kv[1][0])],
    }


def _profile_one(path: Path, task: Any, cfg: ProfileConfig, name: str) -> dict[str, Any]:
    from torch.profiler import ProfilerActivity, profile

    from benchmarks.trainer_vs_trl import OURS_OPTIONS, _load, ours_train_config
    from llm_harness.trainer.entry import build_backend
    from llm_harness.trainer.loop import Trainer

    filter_zero, run_over = OURS_OPTIONS[name]
    model, tok = _load(path)
    tcfg = ours_train_config(path, cfg, cfg.seed, filter_zero=filter_zero, run_over=run_over, name=name)
    tr = Trainer(tcfg, model=model, tokenizer=tok, backend=build_backend(model, tok, tcfg), task=task)
    if tcfg.run.precision == "bf16" and not tr.bf16:
        raise RuntimeError(f"{name}: bf16 is not native on this machine ({tr.device}); drop the bf16 contenders")
    _wrap(tr.backend, "generate", "generate")
    _wrap(tr.optimizer, "step", "optimizer")
    for _ in range(cfg.warmup_steps):
        tr.train_step()
    rows = []
    with profile(activities=[ProfilerActivity.CPU], with_flops=True) as prof:
        t0 = time.perf_counter()
        for _ in range(cfg.steps):
            rows.append(tr.train_step())
        wall = time.perf_counter() - t0
    tr.close()
    res = attribute(list(prof.events()), wall)
    res["top_ops"] = res["top_ops"][: cfg.top]
    res.update(contender=name, steps=cfg.steps, bf16=bool(tr.bf16), run_options=dict(run_over),
               gen_new_tokens=sum(r["gen_new_tokens"] for r in rows) / len(rows),
               trained_samples=sum(r["trained_samples"] for r in rows) / len(rows),
               split={k: sum(r[k] for r in rows) / len(rows) for k in ("time_generate_s", "time_score_s", "time_train_s")})
    return res


def format_report(res: dict[str, Any]) -> str:
    """The markdown tables of a profile (per contender: phase x class seconds, matmul rates, top operators)."""
    lines = [f"# Step profile: {res['model']} ({res['task']}), {res['threads']} threads, torch {res['torch']}", ""]
    iso = res["isolated_gemm_gflops"]
    lines.append("Isolated float32 `torch.mm` rates at the step's shapes (GFLOP/s): "
                 + ", ".join(f"{k} {v:.0f}" for k, v in iso.items()) + "; memory copy bandwidth "
                 + " / ".join(f"{b:.1f}" for b in res.get("copy_bandwidth_gbs", [])) + f" GB/s before / after ({'huge' if res.get('torch_huge_pages') else '4 KiB'} pages, as torch's allocations)"
                 + (" — **a starved machine: the memory-bound shares are not representative**" if res.get("starved") else "")
                 + ".")
    for r in res["contenders"]:
        s = r["steps"]
        lines += ["", f"## {r['contender']} ({'bf16' if r['bf16'] else 'float32'}), per step (profiled wall "
                  f"{r['wall_s'] / s:.2f} s; inside operators {r['inside_ops_s'] / s:.2f} s, outside "
                  f"{r['outside_s'] / s:.2f} s)", ""]
        classes = list(r["by_class"])
        lines.append("| phase | total s | " + " | ".join(classes) + " |")
        lines.append("| --- | --- | " + " | ".join("---" for _ in classes) + " |")
        for p in PHASES:
            t = r["by_phase"][p]
            lines.append(f"| {p} | {t['total_s'] / s:.3f} | " + " | ".join(f"{t.get(c, 0.0) / s:.3f}" for c in classes) + " |")
        rate = ", ".join(f"{p} {v:.0f} GFLOP/s ({r['matmul_gflop'][p] / s:.1f} GFLOP)" for p, v in
                         r["matmul_gflops_in_step"].items() if v)
        lines += ["", f"Matmul rate inside the step (profiler FLOPs / self time): {rate or 'n/a'}; packed-weight "
                      f"matmuls (no FLOP count) {r['packed_matmul_s'] / s:.3f} s.", "",
                  "| operator | self s / step | calls / step |", "| --- | --- | --- |"]
        lines += [f"| `{o['name']}` | {o['self_s'] / s:.3f} | {o['calls'] / s:.0f} |" for o in r["top_ops"]]
    return "\n".join(lines) + "\n"


def run(cfg: ProfileConfig) -> int:
    """Profile each contender (module doc); write the JSON, the markdown table and the config."""
    from benchmarks.trainer_vs_trl import _load, gemm_rate, model_shapes
    from llm_harness.models.named import MODELS
    from llm_harness.tasks import get_task

    torch.set_num_threads(cfg.threads)
    task = get_task(cfg.task)
    path = Path(cfg.model)
    if cfg.model in MODELS:
        from llm_harness.models.gguf_import import ImportConfig, import_model

        path = import_model(ImportConfig(source=cfg.model))
    if not (path / "config.json").is_file():
        raise ValueError(f"model: {path} has no config.json (a saved model folder or a registered model name)")
    model, _ = _load(path)
    shapes = model_shapes(model)
    del model
    rows = cfg.prompts * cfg.group_size
    iso = {"decode": gemm_rate(shapes, rows, cfg.gemm_repeats, backward=False),
           "training": gemm_rate(shapes, rows * (cfg.max_new_tokens + 16), cfg.gemm_repeats, backward=True)}
    load0 = os.getloadavg()
    m0 = machine_check()  # vsr_util.machine: single-thread copy on 4 KiB and huge pages, GB/s
    out_runs = []
    for c in cfg.contenders:
        print(f"profiling {c} ...", file=sys.stderr)
        out_runs.append(_profile_one(path, task, cfg, c))
    m1 = machine_check()
    torch_huge = os.environ.get("THP_MEM_ALLOC_ENABLE") == "1"  # torch's allocations on huge pages
    key = "copy_gbps_huge" if torch_huge else "copy_gbps"
    bw = [m0[key], m1[key]]
    if min(bw) < STARVED_GBPS:
        print(f"warning: memory copy bandwidth {min(bw):.1f} GB/s (< {STARVED_GBPS}): a starved machine; the "
              "memory-bound operators' shares are not representative", file=sys.stderr)
    res = {"model": cfg.model, "task": cfg.task, "threads": cfg.threads, "torch": torch.__version__,
           "load_before": list(load0), "load_after": list(os.getloadavg()), "copy_bandwidth_gbs": bw,
           "torch_huge_pages": torch_huge, "machine": [m0, m1],
           "starved": min(bw) < STARVED_GBPS,
           "isolated_gemm_gflops": {k: v / 1e9 for k, v in iso.items()}, "contenders": out_runs}
    out = Path(cfg.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text(out, json.dumps(res, indent=1))
    report = format_report(res)
    write_text(out.with_suffix(".md"), report)
    save_config(cfg, out.with_suffix(".config.yaml"))
    print(report)
    return 0


if __name__ == "__main__":
    import tyro

    raise SystemExit(run(tyro.cli(ProfileConfig)))
