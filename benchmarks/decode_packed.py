"""The static decoder's sampling call with and without packed weights, float32 and bf16 (``HFBackend.generate``).

One model load; per repeat the four variants (float32 / bf16 autocast x plain / packed matmuls) run one after the
other (interleaved), each a full ``generate`` call (prefill, decode, packing included) of ``--prompts`` chat prompts x
``--n`` samples x ``--max-new-tokens`` tokens with ``ignore_eos`` (every row decodes the whole budget: equal work).
Reports the median seconds per call, the packed/plain ratio per repeat (median, range) and the 1-minute load.

    .venv/bin/python benchmarks/decode_packed.py --model smollm2-135m-instruct --out benchmarks/results/decode_packed
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--n", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, nargs="+", default=[32, 64])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="runs/decode_packed")
    a = ap.parse_args(argv)
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from llm_harness.backends import HFBackend, HFBackendConfig, SamplingParams
    from llm_harness.backends.packed_linear import pack_kind
    from llm_harness.models.gguf_import import resolve_model_folder
    from vsr_util.atomic import write_json, write_text

    torch.set_num_threads(a.threads)
    path = resolve_model_folder(a.model)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(path)
    prompts = []
    for i in range(a.prompts):
        text = f"What is {i + 2} + {i + 5}? Think step by step."
        if getattr(tok, "chat_template", None):
            ids = tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True)
            ids = ids if isinstance(ids, list) else ids["input_ids"]
        else:  # the test bed's character tokenizer
            ids = tok(f"Q:{i + 2}+{i + 5}=")["input_ids"]
        prompts.append(list(ids))
    variants = [(bf16, packed) for bf16 in (False, True) for packed in (False, True)]
    name = lambda v: ("bf16" if v[0] else "float32") + ("_packed" if v[1] else "_plain")  # noqa: E731
    rows = []
    for t in a.max_new_tokens:
        sp = SamplingParams(max_new_tokens=t, seed=0, ignore_eos=True)
        times: dict[str, list[float]] = {name(v): [] for v in variants}
        loads = [os.getloadavg()[0]]
        for _ in range(a.repeats):
            for v in variants:
                be = HFBackend(model, tok, config=HFBackendConfig(static_decode=True, packed_weights=v[1],
                                                                  autocast_bf16=v[0], sampler="inverse_cdf"))
                t0 = time.perf_counter()
                be.generate(prompts, a.n, sp)
                times[name(v)].append(time.perf_counter() - t0)
            loads.append(os.getloadavg()[0])
        for dt in ("float32", "bf16"):
            r = [p / q for p, q in zip(times[f"{dt}_packed"], times[f"{dt}_plain"])]
            rows.append({"max_new_tokens": t, "dtype": dt, "plain_s": statistics.median(times[f"{dt}_plain"]),
                         "packed_s": statistics.median(times[f"{dt}_packed"]), "ratio_median": statistics.median(r),
                         "ratio_min": min(r), "ratio_max": max(r), "load_max": max(loads)})
        print(json.dumps(rows[-2:]), flush=True)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    w = model.get_decoder().layers[0].mlp.down_proj.weight
    meta = {"model": a.model, "rows": a.prompts * a.n, "repeats": a.repeats, "threads": a.threads,
            "torch": torch.__version__, "kind_float32": pack_kind(w, torch.float32),
            "kind_bf16": pack_kind(w, torch.bfloat16), "results": rows}
    write_json(out / "decode_packed.json", meta)
    lines = ["| new tokens | dtype | plain s/call | packed s/call | packed / plain, median [min, max] | max load |",
             "| --- | --- | --- | --- | --- | --- |"]
    lines += [f"| {r['max_new_tokens']} | {r['dtype']} | {r['plain_s']:.2f} | {r['packed_s']:.2f} | "
              f"{r['ratio_median']:.2f} [{r['ratio_min']:.2f}, {r['ratio_max']:.2f}] | {r['load_max']:.2f} |" for r in rows]
    write_text(out / "table.md", "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
