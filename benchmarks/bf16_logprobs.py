"""Is bfloat16 a speed path for the test-bed trainer on this CPU, and how far are its log-probs off?

Reported (is bf16 worth it where the CPU has it, and do log-probs stay exact enough?):

* the CPU's vector capability as torch sees it (``torch.backends.cpu.get_cpu_capability()``;
  bf16 matmuls run natively only with AVX512-BF16 / AMX, otherwise they are converted);
* ``torch.mm`` time of the model's decode and training matmul shapes in bf16 over float32
  (fastest of ``repeats`` timings each; interleaved f32, bf16, f32, bf16 ...);
* the error of teacher-forced per-token log-probs (the quantity the PPO ratio uses) of a bf16
  copy of the model against the float32 model, on ``samples`` responses the float32 model
  sampled: max and mean |Δ log p| and the implied ratio error ``exp(|Δ|) - 1``, against the
  clip width ε = 0.2 it would blur.

Run: ``python benchmarks/bf16_logprobs.py`` (seconds). Timing numbers need a quiet machine.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

# as the vsr CLI: idle OpenMP threads sleep instead of spinning (on a busy machine a spinning
# thread that lost its core stalls every parallel region; set before torch loads OpenMP)
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np
import torch

from vsr_util.atomic import write_text


@dataclass(frozen=True)
class Bf16Config:
    """Options of the bf16 check."""

    model: str = "llm_harness/testbed/checkpoints/mid"
    """Saved test-bed checkpoint."""
    prompts: int = 8
    """Validation prompts sampled."""
    samples: int = 8
    """Responses per prompt."""
    max_new_tokens: int = 96
    """Response budget."""
    threads: int = 1
    """torch CPU threads."""
    repeats: int = 5
    """Timings per matmul shape and dtype (three interleaved rounds of them)."""
    seed: int = 0
    """Sampling seed."""
    out: str = "runs/bench/bf16_logprobs.json"
    """JSON of the results."""


def _best_mm(m: int, k: int, n: int, dtype: torch.dtype, repeats: int) -> float:
    """Fastest seconds of one ``[m, k] @ [k, n]`` in ``dtype`` (each timing >= 1 ms of back-to-back calls)."""
    a, b = torch.randn(m, k).to(dtype), torch.randn(k, n).to(dtype)
    torch.mm(a, b)
    inner = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(inner):
            torch.mm(a, b)
        if time.perf_counter() - t0 >= 1e-3 or inner >= 1 << 14:
            break
        inner *= 2
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(inner):
            torch.mm(a, b)
        best = min(best, (time.perf_counter() - t0) / inner)
    return best


def run(cfg: Bf16Config) -> dict:
    """Measure (module doc), print, write the JSON; returns the result."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from llm_harness.backends import HFBackend, HFBackendConfig, SamplingParams
    from llm_harness.tasks import get_task
    from llm_harness.trainer.modeling import Codec

    torch.set_num_threads(cfg.threads)
    path = Path(cfg.model)
    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True).float().eval()
    tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    task = get_task("step_arith")
    codec = Codec(tok)
    prompts = [list(codec.encode(task.render_prompt(p, tok))) for p in task.problems("validation")[: cfg.prompts]]
    be = HFBackend(model, tok, config=HFBackendConfig(pad_token_id=tok.pad_token_id))
    out = be.generate(prompts, cfg.samples, SamplingParams(temperature=1.0, max_new_tokens=cfg.max_new_tokens,
                                                           seed=cfg.seed))
    ctx = [p for p, row in zip(prompts, out) for _ in row]
    comp = [list(s.token_ids) for row in out for s in row]
    lp32 = be.score_batch(ctx, comp, with_entropy=False)
    m16 = AutoModelForCausalLM.from_pretrained(path, local_files_only=True).to(torch.bfloat16).eval()
    lp16 = HFBackend(m16, tok, config=HFBackendConfig(pad_token_id=tok.pad_token_id, verify_head=False)).score_batch(
        ctx, comp, with_entropy=False)
    print("log-probs scored", file=sys.stderr)
    d = np.concatenate([np.abs(a.logprobs - b.logprobs) for a, b in zip(lp32, lp16)])
    seq = np.array([abs(float(np.sum(a.logprobs) - np.sum(b.logprobs))) for a, b in zip(lp32, lp16)])
    shapes = [(cfg.prompts * cfg.samples, 128, 512), (cfg.prompts * cfg.samples, 512, 128),
              (2048, 128, 512), (2048, 512, 128)]
    mm = []
    for m, k, n in shapes:
        f32 = bf16 = float("inf")
        for _ in range(3):  # interleaved
            f32 = min(f32, _best_mm(m, k, n, torch.float32, cfg.repeats))
            bf16 = min(bf16, _best_mm(m, k, n, torch.bfloat16, cfg.repeats))
        mm.append({"shape": [m, k, n], "f32_s": f32, "bf16_s": bf16, "bf16_over_f32": bf16 / f32})
    res = {
        "cpu_capability": torch.backends.cpu.get_cpu_capability(), "threads": cfg.threads,
        "load_avg": list(os.getloadavg()), "tokens": int(d.size), "sequences": len(comp),
        "max_abs_dlogp": float(d.max()), "mean_abs_dlogp": float(d.mean()), "p99_abs_dlogp": float(np.quantile(d, 0.99)),
        "max_ratio_error": float(np.expm1(d.max())), "max_abs_dlogp_sequence": float(seq.max()), "mm": mm,
    }
    Path(cfg.out).parent.mkdir(parents=True, exist_ok=True)
    write_text(Path(cfg.out), json.dumps(res, indent=2) + "\n")
    print(f"cpu capability {res['cpu_capability']}, {cfg.threads} thread(s), load {res['load_avg']}")
    print(f"bf16 vs f32 teacher-forced log-probs over {res['tokens']} tokens ({res['sequences']} responses): "
          f"max |dlogp| {res['max_abs_dlogp']:.3g}, mean {res['mean_abs_dlogp']:.3g}, p99 {res['p99_abs_dlogp']:.3g}; "
          f"max per-token ratio error {res['max_ratio_error']:.3g} (clip width 0.2); max per-sequence "
          f"|d sum log p| {res['max_abs_dlogp_sequence']:.3g}")
    for r in mm:
        print(f"mm {r['shape']}: f32 {r['f32_s'] * 1e6:.1f} us, bf16 {r['bf16_s'] * 1e6:.1f} us "
              f"(bf16/f32 = {r['bf16_over_f32']:.2f})")
    return res


if __name__ == "__main__":
    import tyro

    run(tyro.cli(Bf16Config))
    sys.exit(0)
