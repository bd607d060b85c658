"""How fast can a float32 decode step be on this CPU? The GEMM limit with the weights reused vs streamed.

``trainer_vs_trl.py`` charges a step's decode FLOPs at the rate of ``torch.mm`` re-multiplying *one* matrix of each
shape (``gemm_rate``): that matrix stays in the caches. A decode step of the whole model reads *every* weight once per
token — 538 MB for SmolLM2-135M in float32, more than this machine's L3 — so its matmuls may be bounded by memory, not
by the GEMM kernel. This module times, interleaved within each repeat, at ``--rows`` live rows:

* ``reused``: exactly ``trainer_vs_trl.gemm_rate`` at ``--rows`` rows (per distinct shape of the unfused model the
  fastest of ``--inner`` timings of ``torch.mm`` on one matrix), as seconds for one token's matmul FLOPs;
* ``streamed``: one sweep over the model's own weights in the decoder's order (fused q/k/v, o, fused gate/up, down per
  layer, then the head), ``F.linear`` on random activations — the matmuls of one decode token and nothing else;
* ``streamed_packed``: the same sweep on MKL-packed weights (``llm_harness.backends.packed_linear``, the static
  decoder's default); ``streamed_packed_layers``: that sweep without the head;
* ``decoder_step``: the static decoder's whole step (``StaticQwen2Decoder.step`` on packed weights: norms, RoPE,
  attention over a cache of ``--context`` columns, the layers' matmuls, no head, no sampling);

and reports seconds per token (median over repeats, each the median of ``--sweeps`` sweeps), the matmuls' GFLOP/s, the
bytes of weights per sweep over its time, and the machine's copy bandwidth (``vsr_util.machine``) before and after.
``streamed / reused`` is how far the reused-matrix limit overstates what a decode token can reach;
``decoder_step / streamed_packed_layers`` is what the step's other operators (norms, RoPE, attention, cache writes,
Python) add to its matmuls.

    .venv/bin/python benchmarks/decode_limit.py --model smollm2-135m-instruct \\
        --out benchmarks/results/decode_limit/decode_limit.json      # ~1 minute
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import time
from pathlib import Path


def median_time(fn, n: int) -> float:
    """Median seconds of ``n`` calls of ``fn``."""
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--rows", type=int, default=16, help="live rows of the decode step (prompts x group size)")
    ap.add_argument("--context", type=int, default=96, help="cache columns the decoder step attends to")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--sweeps", type=int, default=20, help="sweeps per timing (their median)")
    ap.add_argument("--inner", type=int, default=20, help="timings per shape for 'reused' (gemm_rate's repeats)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="runs/decode_limit/decode_limit.json")
    a = ap.parse_args(argv)
    for name in ("rows", "context", "repeats", "sweeps", "inner", "threads"):
        if getattr(a, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(a, name)}")
    import torch
    import torch.nn.functional as F
    from transformers import AutoModelForCausalLM, DynamicCache

    from llm_harness.backends.packed_linear import PackCache, packed_linear
    from llm_harness.backends.static_decode import StaticQwen2Decoder, fused_gate_up, fused_qkv, supports
    from llm_harness.models.gguf_import import resolve_model_folder
    from benchmarks.trainer_vs_trl import gemm_rate, model_shapes
    from vsr_util.atomic import write_json, write_text
    from vsr_util.machine import copy_bandwidth

    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(resolve_model_folder(a.model), dtype=torch.float32).eval()
    why = supports(model)
    if why is not None:
        raise SystemExit(f"--model: the static decoder does not support it ({why})")
    bw_before = copy_bandwidth()
    layers = model.get_decoder().layers
    head = model.get_output_embeddings().weight.detach()
    with torch.no_grad():
        mats = []  # the decoder's matmuls of one token, in order: (weight, bias)
        for layer in layers:
            w_qkv, b_qkv = fused_qkv(layer)
            mats += [(w_qkv.detach().contiguous(), None if b_qkv is None else b_qkv.detach()),
                     (layer.self_attn.o_proj.weight.detach(), None),
                     (fused_gate_up(layer).detach().contiguous(), None),
                     (layer.mlp.down_proj.weight.detach(), None)]
        mats.append((head, None))
    xs = {w.shape[1]: torch.randn(a.rows, w.shape[1]) for w, _ in mats}
    # one sweep = each matmul on its input: (input, linear) pairs, plain and on packed weights
    plain = [(xs[w.shape[1]], functools.partial(F.linear, weight=w, bias=b)) for w, b in mats]
    packed = [(xs[w.shape[1]], packed_linear(w, b, torch.float32)) for w, b in mats]
    flops = sum(2.0 * a.rows * w.shape[0] * w.shape[1] for w, _ in mats)
    weight_bytes = sum(w.numel() * w.element_size() for w, _ in mats)
    model_sh = model_shapes(model)

    def reused() -> float:  # seconds per token at trainer_vs_trl's decode limit (unfused shapes, torch.mm, reused)
        return flops / gemm_rate(model_sh, a.rows, a.inner, backward=False)

    def sweep(lins: list) -> None:
        for x, lin in lins:
            lin(x)

    # the static decoder over a cache of --context columns (random keys/values: the arithmetic, not the numbers)
    cfg = model.config
    n_kv = int(cfg.num_key_value_heads)
    head_dim = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads)
    cache = DynamicCache()
    for li in range(len(layers)):
        kv_shape = (a.rows, n_kv, a.context - 1, head_dim)
        cache.update(torch.randn(kv_shape), torch.randn(kv_shape), li)
    packs = PackCache()
    tok = torch.randint(0, head.shape[0], (a.rows,))
    pos = torch.full((a.rows,), a.context - 1)

    def decoder_step() -> float:
        dec = StaticQwen2Decoder.from_cache(model, cache, a.sweeps + 1, packs)
        ts = []
        with torch.no_grad():
            for _ in range(a.sweeps):
                m = torch.ones(a.rows, dec.used + 1, dtype=torch.long)
                t0 = time.perf_counter()
                dec.step(tok, pos, m)
                ts.append(time.perf_counter() - t0)
        return statistics.median(ts)

    with torch.no_grad():  # warm-up: page the weights in and pack them
        sweep(plain), sweep(packed), decoder_step()
        times: dict[str, list[float]] = {k: [] for k in ("reused", "streamed", "streamed_packed",
                                                         "streamed_packed_layers", "decoder_step")}
        loads = [os.getloadavg()[0]]
        for _ in range(a.repeats):  # interleaved: every variant once per repeat
            times["reused"].append(reused())
            times["streamed"].append(median_time(lambda: sweep(plain), a.sweeps))
            times["streamed_packed"].append(median_time(lambda: sweep(packed), a.sweeps))
            times["streamed_packed_layers"].append(median_time(lambda: sweep(packed[:-1]), a.sweeps))  # no head
            times["decoder_step"].append(decoder_step())
            loads.append(os.getloadavg()[0])
    bw_after = copy_bandwidth()
    summary = {
        "model": a.model, "rows": a.rows, "context": a.context, "threads": a.threads, "repeats": a.repeats,
        "torch": torch.__version__, "matmul_flops_per_token": flops, "weight_bytes": weight_bytes,
        "copy_gb_s_before": bw_before, "copy_gb_s_after": bw_after, "load_1min": [round(x, 2) for x in loads],
        "variants": {},
    }
    for k, ts in times.items():
        med = statistics.median(ts)
        row = {"s_per_token": med, "min": min(ts), "max": max(ts), "all": ts}
        if k not in ("decoder_step", "streamed_packed_layers"):
            row["gflop_s"] = flops / med / 1e9
            row["weight_gb_s"] = weight_bytes / med / 1e9
        summary["variants"][k] = row
    ratios = {}
    for num, den in (("streamed", "reused"), ("streamed_packed", "reused"), ("streamed_packed", "streamed"),
                     ("decoder_step", "streamed_packed_layers")):
        r = [x / y for x, y in zip(times[num], times[den])]
        ratios[f"{num}/{den}"] = {"median": statistics.median(r), "min": min(r), "max": max(r)}
    summary["ratios"] = ratios
    lines = [f"# decode limit: {a.model}, {a.rows} rows, {a.threads} threads, torch {torch.__version__}", "",
             f"matmuls of one decode token: {flops / 1e9:.2f} GFLOP over {weight_bytes / 1e6:.0f} MB of float32 weights; "
             f"copy bandwidth {bw_before:.1f} / {bw_after:.1f} GB/s before / after; 1-minute load "
             f"{min(loads):.2f}-{max(loads):.2f}", "",
             "| variant | ms / token, median [min, max] | GFLOP/s | weights GB/s |", "| --- | --- | --- | --- |"]
    for k, row in summary["variants"].items():
        g = f"{row['gflop_s']:.0f}" if "gflop_s" in row else ""
        b = f"{row['weight_gb_s']:.1f}" if "weight_gb_s" in row else ""
        ms = [1e3 * row[q] for q in ("s_per_token", "min", "max")]
        lines.append(f"| {k} | {ms[0]:.1f} [{ms[1]:.1f}, {ms[2]:.1f}] | {g} | {b} |")
    lines += ["", "| ratio (same repeat) | median [min, max] |", "| --- | --- |"]
    for k, q in ratios.items():
        lines.append(f"| {k} | {q['median']:.2f} [{q['min']:.2f}, {q['max']:.2f}] |")
    out = Path(a.out)
    write_json(out, summary)
    write_text(out.with_suffix(".md"), "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
