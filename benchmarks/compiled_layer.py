"""Does ``torch.compile`` make the float32 training pass faster on this CPU? The packed group layer, eager vs compiled.

The lean step's training pass (``run.group_prompt_once`` + ``run.packed_forward``:
``llm_harness.trainer.packed_group``) spends about a third of its time outside matmuls — RMS norms, RoPE, SwiGLU,
residual adds, the attention's softmax and masks, and their backward — as many small operators. Kernel fusion is
what would remove that time; ``torch.compile`` (TorchInductor: C++ kernels for the elementwise and reduction work, the
matmuls left to the BLAS) is the off-the-shelf way to get it. This module measures whether it does, on the real model:

* the same per-layer function, :func:`llm_harness.trainer.packed_group.group_layer`, eager and as
  ``torch.compile(group_layer, dynamic=True)`` (one graph for every layer and every batch shape: the weights are
  inputs, the token counts symbolic), passed to ``packed_group_hidden(..., layer_fn=...)``;
* a synthetic GRPO batch per repeat shaped like the trainer-vs-TRL benchmark's (``--groups`` prompts x
  ``--group-size`` samples, a ``--context``-token prompt per group, responses of ``--response // 2`` to
  ``--response`` tokens drawn per row with the repeat's seed), one forward and backward of the decoder (the loss
  ``sum(hidden * w)`` with a fixed random ``w``; the head is not part of the layer);
* interleaved repeats (eager, compiled, eager, compiled, ...) on the same batch within a repeat, each timing the
  median of ``--inner`` passes; the first compiled call (compilation) is timed separately, before the repeats;
* the two modes' gradients on repeat 0's batch (max |difference| / max |eager gradient| over all parameters), the
  machine's copy bandwidth before and after (``vsr_util.machine``) and the 1-minute load.

    .venv/bin/python benchmarks/compiled_layer.py --model smollm2-135m-instruct \\
        --out benchmarks/results/compiled_layer/compiled_layer.json      # ~4 minutes, most of it compiling

``--backend eager`` (dynamo's graph capture without code generation) checks the wiring in seconds; the test does that.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

from benchmarks.decode_limit import median_time


def synthetic_batch(vocab: int, groups: int, group_size: int, context: int, response: int, seed: int):
    """``(input_ids, attention_mask, loss_mask)`` of ``groups`` x ``group_size`` right-padded rows: one random
    ``context``-token prompt per group, a random response of ``response // 2 .. response`` tokens per row, the
    response's targets trained (``loss_mask [B, L - 1]``)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(max(1, response // 2), response + 1, (groups * group_size,), generator=g)
    B, L = groups * group_size, context + int(lens.max())
    ids = torch.zeros((B, L), dtype=torch.long)
    att = torch.zeros_like(ids)
    lm = torch.zeros((B, L - 1))
    for u in range(groups):
        prompt = torch.randint(3, vocab, (context,), generator=g)
        for j in range(group_size):
            b = u * group_size + j
            n = int(lens[b])
            ids[b, :context] = prompt
            ids[b, context: context + n] = torch.randint(3, vocab, (n,), generator=g)
            att[b, : context + n] = 1
            lm[b, context - 1: context + n - 1] = 1
    return ids, att, lm


def _pass(model, batch, w, layer_fn):
    from llm_harness.trainer.packed_group import packed_group_hidden

    model.zero_grad(set_to_none=True)
    h = packed_group_hidden(model, *batch, attention="matmul", layer_fn=layer_fn)
    (h * w).sum().backward()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m-instruct", help="registered model name or saved model folder")
    ap.add_argument("--groups", type=int, default=4)
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--context", type=int, default=50, help="prompt tokens per group")
    ap.add_argument("--response", type=int, default=32, help="most response tokens per row")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--inner", type=int, default=3, help="passes per timing (their median)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--backend", default="inductor", help="torch.compile backend (eager: graph capture only)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="runs/compiled_layer/compiled_layer.json")
    a = ap.parse_args(argv)
    for name in ("groups", "group_size", "context", "response", "repeats", "inner", "threads"):
        if getattr(a, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(a, name)}")
    if a.group_size < 2:
        ap.error("--group-size must be >= 2 (a GRPO group)")
    import torch
    from transformers import AutoModelForCausalLM

    from llm_harness.models.named import MODELS
    from llm_harness.trainer.packed_group import group_layer
    from llm_harness.trainer.packed_forward import supports
    from vsr_util.atomic import write_text
    from vsr_util.machine import machine_check

    torch.set_num_threads(a.threads)
    path = Path(a.model)
    if a.model in MODELS:
        from llm_harness.models.gguf_import import ImportConfig, import_model

        path = import_model(ImportConfig(source=a.model))
    if not (path / "config.json").is_file():
        ap.error(f"--model: {path} has no config.json (a saved model folder or a registered model name)")
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    why = supports(model)
    if why is not None:
        ap.error(f"--model: the packed group pass does not support it ({why})")
    vocab, hidden = int(model.config.vocab_size), int(model.config.hidden_size)
    batches = [synthetic_batch(vocab, a.groups, a.group_size, a.context, a.response, a.seed + r)
               for r in range(a.repeats)]
    ws = [torch.randn(*b[2].shape, hidden, generator=torch.Generator().manual_seed(a.seed + 1000 + r)) * b[2][..., None]
          for r, b in enumerate(batches)]
    compiled = torch.compile(group_layer, dynamic=True, backend=a.backend)
    modes = {"eager": group_layer, "compiled": compiled}
    m0 = machine_check()
    load0 = os.getloadavg()[0]
    grads = {}
    first_s = {}
    for name, fn in modes.items():  # repeat 0's batch: the first call (compiling, for the compiled mode), gradients
        t0 = time.perf_counter()
        _pass(model, batches[0], ws[0], fn)
        first_s[name] = time.perf_counter() - t0
        grads[name] = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    scale = max(float(g.abs().max()) for g in grads["eager"].values())
    grad_rel = max(float((grads["compiled"][n] - g).abs().max()) for n, g in grads["eager"].items()) / scale
    del grads
    times: dict[str, list[float]] = {m: [] for m in modes}
    loads = []
    for r in range(a.repeats):
        for name, fn in modes.items():
            times[name].append(median_time(lambda: _pass(model, batches[r], ws[r], fn), a.inner))
        loads.append(os.getloadavg()[0])
        print(f"repeat {r}: eager {times['eager'][-1]:.3f} s  compiled {times['compiled'][-1]:.3f} s  "
              f"load {loads[-1]:.2f}", file=sys.stderr)
    m1 = machine_check()
    ratio = [c / e for c, e in zip(times["compiled"], times["eager"])]
    res = {
        "model": str(path), "torch": torch.__version__, "threads": a.threads, "backend": a.backend,
        "batch": {"groups": a.groups, "group_size": a.group_size, "context": a.context, "response": a.response},
        "tokens_per_repeat": [int(b[1].sum()) for b in batches],
        "first_call_s": first_s, "grad_max_rel_diff": grad_rel,
        "seconds_per_pass": times, "compiled_over_eager": ratio,
        "summary": {"eager_s_median": statistics.median(times["eager"]),
                    "compiled_s_median": statistics.median(times["compiled"]),
                    "ratio_median": statistics.median(ratio), "ratio_min": min(ratio), "ratio_max": max(ratio)},
        "load_1min": [load0, *loads], "copy_gbps": [m0["copy_gbps"], m1["copy_gbps"]],
    }
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text(out, json.dumps(res, indent=2) + "\n")
    s = res["summary"]
    print(f"compile (first compiled call) {first_s['compiled']:.1f} s against {first_s['eager']:.2f} s eager; "
          f"gradients differ by {grad_rel:.1e} of their largest\n"
          f"forward + backward of the decoder: eager {s['eager_s_median']:.3f} s, compiled {s['compiled_s_median']:.3f} s; "
          f"compiled / eager median {s['ratio_median']:.2f}x [{s['ratio_min']:.2f}, {s['ratio_max']:.2f}] over "
          f"{a.repeats} interleaved repeats; load {min(res['load_1min']):.2f}-{max(res['load_1min']):.2f}; copies "
          f"{m0['copy_gbps']:.1f} / {m1['copy_gbps']:.1f} GB/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
