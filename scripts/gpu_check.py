"""GPU check of the generation backend and the test-bed model; run by gpu_check.sh.

Needs only torch (with CUDA) and transformers (+ numpy, which transformers brings); nothing is
downloaded: the models are the shipped test-bed checkpoints and random Qwen2 models built from a
config. It

1. checks the backend contract on the GPU without pytest: behaviour log-probs from ``generate``
   equal teacher-forced ``score`` log-probs (fp32, <= 1e-4) for several sampling settings; same
   seed -> same samples, another seed -> others; a prefix is continued, never re-generated
   (a one-hot "successor" model); GPU ``score`` agrees with CPU ``score`` (<= 1e-4) and the GPU
   full-vocabulary entropies with a direct ``softmax`` computation;
2. times ``HFBackend.generate`` on the test-bed model at large batch (``--prompts`` x
   ``--samples``, T=1) against plain ``model.generate`` in the same process (tokens/s ratio) and
   reports the sampled accuracy;
3. writes ``gpu_check.json`` into ``--out``.

It exits 2 when CUDA is unavailable (unless ``--allow-cpu``, meant only for trying the script on a
CPU machine with small sizes) and 1 when a check fails. The pytest backend suite is run by the
shell script, when pytest is installed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

LOGPROB_ATOL = 1e-4


def _tiny_qwen2(vocab: int, seed: int, device: str):
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    cfg = Qwen2Config(vocab_size=vocab, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, intermediate_size=64, max_position_embeddings=128,
                      tie_word_embeddings=False, eos_token_id=None, pad_token_id=None, bos_token_id=None)
    model = Qwen2ForCausalLM(cfg).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(20.0)  # sharpen the random head so distributions vary
    return model.to(device)


def _successor_model(vocab: int, device: str):
    """Next token = (last token + 1) mod vocab with probability ~1: blocks write nothing, one-hot embeddings."""
    import torch

    model = _tiny_qwen2(vocab, 0, "cpu")
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        emb = torch.zeros(vocab, 32)
        emb[torch.arange(vocab), torch.arange(vocab)] = 1.0
        model.model.embed_tokens.weight.copy_(emb)
        head = torch.zeros(vocab, 32)
        head[(torch.arange(vocab) + 1) % vocab, torch.arange(vocab)] = 30.0
        model.lm_head.weight.copy_(head)
    return model.to(device)


def _worst_gap(backend, prompts, results, **kw) -> float:
    import numpy as np

    worst = 0.0
    for p, samples in zip(prompts, results):
        for s in samples:
            sc = backend.score(p, list(s.token_ids), with_entropy=False, **kw)
            worst = max(worst, float(np.max(np.abs(sc.logprobs - np.asarray(s.sampling_logprobs)))))
    return worst


def contract_checks(device: str, testbed_path: Path) -> dict:
    """The backend contract on ``device`` (module docstring, item 1); returns name -> result dict."""
    import numpy as np
    import torch

    from llm_harness.backends import HFBackend, HFBackendConfig, SamplingParams
    from llm_harness.testbed import load_testbed

    out: dict[str, dict] = {}

    def record(name, fn):
        t0 = time.perf_counter()
        try:
            detail = fn()
            out[name] = {"ok": True, **(detail or {})}
        except Exception as exc:  # a failed check is reported, not raised
            out[name] = {"ok": False, "error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()[-2000:]}
        out[name]["seconds"] = round(time.perf_counter() - t0, 3)
        print(f"[{'ok' if out[name]['ok'] else 'FAIL'}] {name} ({out[name]['seconds']} s)", flush=True)

    prompts = [[7], [3, 14, 15, 9], [2, 6, 5, 3, 5, 8, 9, 7, 9]]

    def logprobs_random_model():
        backend = HFBackend(_tiny_qwen2(50, 1, device), config=HFBackendConfig(pad_token_id=0))
        gaps = {}
        for t, k, p in [(1.0, 0, 1.0), (0.7, 0, 1.0), (1.3, 5, 1.0), (1.0, 0, 0.8), (0.9, 8, 0.9)]:
            sp = SamplingParams(temperature=t, top_k=k, top_p=p, max_new_tokens=12, seed=3)
            res = backend.generate(prompts, 3, sp)
            gaps[f"T={t},top_k={k},top_p={p}"] = g = _worst_gap(backend, prompts, res, temperature=t, top_k=k, top_p=p)
            assert g <= LOGPROB_ATOL, f"max |behaviour - score| = {g:.3g} > {LOGPROB_ATOL}"
        return {"max_abs_gap": gaps}

    def logprobs_testbed_model():
        model, tok = load_testbed(testbed_path, device=device)
        backend = HFBackend(model, tok, config=HFBackendConfig(pad_token_id=tok.pad_token_id))
        ps = [tok.encode("Q:97-53-5-33=?\n"), tok.encode("Q:12+30=?\n12+"), tok.encode("Q:5+5+5+5+5+5=?\n")]
        res = backend.generate(ps, 4, SamplingParams(temperature=1.0, max_new_tokens=100, seed=1))
        g = _worst_gap(backend, ps, res)
        assert g <= LOGPROB_ATOL, f"max |behaviour - score| = {g:.3g} > {LOGPROB_ATOL}"
        stops = sum(s.finish_reason == "stop" for row in res for s in row)
        return {"max_abs_gap": g, "stopped_samples": stops, "samples": 12}

    def seeds():
        backend = HFBackend(_tiny_qwen2(50, 2, device), config=HFBackendConfig(pad_token_id=0))
        a = backend.generate(prompts, 4, SamplingParams(max_new_tokens=10, seed=11))
        b = backend.generate(prompts, 4, SamplingParams(max_new_tokens=10, seed=11))
        c = backend.generate(prompts, 4, SamplingParams(max_new_tokens=10, seed=12))
        toks = lambda r: [s.token_ids for row in r for s in row]  # noqa: E731
        assert toks(a) == toks(b), "same seed gave different samples"
        assert toks(a) != toks(c), "different seeds gave the same samples"

    def prefix():
        backend = HFBackend(_successor_model(16, device), config=HFBackendConfig(pad_token_id=0))
        out = backend.generate([[2, 3, 4, 5, 6]], 3, SamplingParams(max_new_tokens=4, seed=0))[0]
        got = [s.token_ids for s in out]
        assert all(t == (7, 8, 9, 10) for t in got), f"expected (7, 8, 9, 10) after the prefix, got {got}"

    def cpu_agreement():
        model_cpu = _tiny_qwen2(50, 4, "cpu")
        model_dev = _tiny_qwen2(50, 4, device)
        cfg = HFBackendConfig(pad_token_id=0)
        ctx, comp = [3, 1, 4, 1, 5], [9, 2, 6, 5, 3, 5]
        a = HFBackend(model_cpu, config=cfg).score(ctx, comp)
        b = HFBackend(model_dev, config=cfg).score(ctx, comp)
        gap = float(np.max(np.abs(a.logprobs - b.logprobs)))
        egap = float(np.max(np.abs(a.entropies - b.entropies)))
        assert gap <= LOGPROB_ATOL and egap <= LOGPROB_ATOL, f"cpu vs {device}: logprob gap {gap:.3g}, entropy gap {egap:.3g}"
        with torch.no_grad():
            logits = model_dev(input_ids=torch.tensor([ctx + comp], device=device)).logits[0, len(ctx) - 1 : -1].double()
            p = torch.softmax(logits, -1)
            ent = (-(p * torch.log_softmax(logits, -1)).sum(-1)).cpu().numpy()
        dgap = float(np.max(np.abs(ent - b.entropies)))
        assert dgap <= LOGPROB_ATOL, f"entropy vs direct softmax: {dgap:.3g}"
        return {"logprob_gap": gap, "entropy_gap": egap, "entropy_vs_direct": dgap}

    def packed_forward():
        # run.packed_forward on the device (attention "auto" is sdpa off the CPU): log-probs and gradients as HF's
        from llm_harness.trainer.modeling import sequence_logprobs

        model = _tiny_qwen2(50, 5, device).train()
        g = torch.Generator().manual_seed(5)
        lengths = torch.randint(3, 17, (9,), generator=g)
        mask = (torch.arange(16)[None] < lengths[:, None]).long()
        ids = (torch.randint(2, 50, (9, 16), generator=g) * mask).to(device)
        mask = mask.to(device)
        loss = mask[:, 1:].float()
        res = {}
        for packed in (False, True):
            model.zero_grad(set_to_none=True)
            lp, _ = sequence_logprobs(model, ids, mask, loss, packed=packed, with_entropy=False)
            lp.sum().backward()
            missing = [n for n, p in model.named_parameters() if p.grad is None]
            assert not missing, f"packed={packed}: no gradient for {missing}"
            res[packed] = (lp.detach(), [p.grad.detach().clone() for p in model.parameters()])
        gap = float((res[True][0] - res[False][0]).abs().max())
        ggap = max(float((a - b).abs().max() / b.abs().max().clamp_min(1e-12)) for a, b in zip(res[True][1], res[False][1]))
        assert gap <= LOGPROB_ATOL and ggap <= 1e-3, f"packed vs HF forward: logprob gap {gap:.3g}, gradient gap {ggap:.3g}"
        return {"logprob_gap": gap, "relative_gradient_gap": ggap}

    record("behaviour_logprobs_equal_score_random_qwen2", logprobs_random_model)
    record("packed_forward_matches_hf_forward", packed_forward)
    record("behaviour_logprobs_equal_score_testbed", logprobs_testbed_model)
    record("same_seed_same_samples", seeds)
    record("prefix_continuation_returns_new_tokens_only", prefix)
    record("gpu_score_matches_cpu_score", cpu_agreement)
    return out


def timing(device: str, testbed_path: Path, n_prompts: int, n_samples: int, max_new_tokens: int, batch: int,
           reps: int = 3) -> dict:
    """HFBackend.generate vs model.generate on the test-bed model (module docstring, item 2)."""
    import torch

    from llm_harness.backends import HFBackend, HFBackendConfig, SamplingParams
    from llm_harness.tasks import get_task
    from llm_harness.testbed import load_testbed

    model, tok = load_testbed(testbed_path, device=device)
    task = get_task("step_arith")
    probs = task.problems("test")
    probs = [probs[i % len(probs)] for i in range(n_prompts)]
    prompts = [tok.encode(task.render_prompt(p, tok)) for p in probs]
    backend = HFBackend(model, tok, config=HFBackendConfig(pad_token_id=tok.pad_token_id, max_batch_sequences=batch))
    sp = SamplingParams(temperature=1.0, max_new_tokens=max_new_tokens, seed=0)

    def sync():
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    per_call = max(1, batch // n_samples)
    tok.padding_side = "left"

    def run_backend():
        sync()
        t0 = time.perf_counter()
        res = backend.generate(prompts, n_samples, sp)
        sync()
        return time.perf_counter() - t0, res

    def run_generate():
        n_new = 0
        sync()
        t0 = time.perf_counter()
        for i in range(0, len(prompts), per_call):
            enc = tok.pad({"input_ids": prompts[i : i + per_call]}, return_tensors="pt").to(device)
            with torch.inference_mode():
                seq = model.generate(**enc, do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                                     max_new_tokens=max_new_tokens, num_return_sequences=n_samples,
                                     pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
            new = seq[:, enc["input_ids"].shape[1] :]
            # tokens up to and including the first EOS (the padding after it is not generated work)
            is_eos = new == tok.eos_token_id
            full = torch.full_like(is_eos[:, 0], new.shape[1], dtype=torch.long)
            n_new += int(torch.where(is_eos.any(1), is_eos.int().argmax(1) + 1, full).sum())
        sync()
        return time.perf_counter() - t0, n_new

    backend.generate(prompts[:per_call], n_samples, sp)  # warm-up (kernels, allocator)
    out: dict = {"prompts": n_prompts, "samples_per_prompt": n_samples, "max_new_tokens": max_new_tokens,
                 "max_batch_sequences": batch, "repeats": reps}
    b_secs, g_secs, g_tok, res = [], [], [], None
    gen_error = None
    for _ in range(reps):  # alternate the two so load changes hit both
        secs, res = run_backend()
        b_secs.append(secs)
        if gen_error is None:
            try:
                secs, n_new = run_generate()
                g_secs.append(secs)
                g_tok.append(n_new)
            except Exception as exc:  # the comparison is informative; its failure is reported, not fatal
                gen_error = f"{type(exc).__name__}: {exc}"
    n_tok = sum(len(s.token_ids) for row in res for s in row)
    correct = 0
    for p, row in zip(probs, res):
        for s in row:
            ids = list(s.token_ids[:-1] if s.finish_reason == "stop" else s.token_ids)
            correct += task.verify(p, tok.decode(ids)).correct
    b_med = sorted(b_secs)[len(b_secs) // 2]
    out.update({"backend_seconds": b_secs, "backend_new_tokens": n_tok, "backend_tokens_per_s": n_tok / b_med,
                "sampled_accuracy_T1": correct / (n_prompts * n_samples)})
    print(f"HFBackend.generate: {n_tok} tokens, median {b_med:.3f} s = {n_tok / b_med:,.0f} tok/s; "
          f"accuracy {out['sampled_accuracy_T1']:.3f}", flush=True)
    if gen_error is not None:
        out["model_generate_error"] = gen_error
        print(f"model.generate comparison failed: {gen_error}", flush=True)
    if g_secs:
        g_med = sorted(g_secs)[len(g_secs) // 2]
        g_rate = (sum(g_tok) / len(g_tok)) / g_med
        out.update({"model_generate_seconds": g_secs, "model_generate_new_tokens": g_tok,
                    "model_generate_tokens_per_s": g_rate,
                    "backend_speedup_vs_model_generate": (n_tok / b_med) / g_rate})
        print(f"model.generate:     median {g_med:.3f} s = {g_rate:,.0f} tok/s; "
              f"backend / generate = {out['backend_speedup_vs_model_generate']:.2f}x", flush=True)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT") or os.path.join(os.environ.get("TMPDIR", "/tmp"), "gpu_check"),
                    help="folder for gpu_check.json (default: $OUT, else $TMPDIR/gpu_check)")
    ap.add_argument("--device", default="cuda", help="torch device (default cuda)")
    ap.add_argument("--checkpoint", default="high", help="shipped test-bed checkpoint name or a folder")
    ap.add_argument("--prompts", type=int, default=512, help="prompts in the timing run")
    ap.add_argument("--samples", type=int, default=8, help="samples per prompt in the timing run")
    ap.add_argument("--max-new-tokens", type=int, default=160, help="completion budget in the timing run")
    ap.add_argument("--batch", type=int, default=4096, help="max_batch_sequences of the backend in the timing run")
    ap.add_argument("--repeats", type=int, default=3, help="timed repetitions (median reported)")
    ap.add_argument("--allow-cpu", action="store_true", help="run on a non-CUDA device (only to try the script)")
    args = ap.parse_args(argv)

    import torch
    import transformers

    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    report: dict = {
        "torch": torch.__version__, "transformers": transformers.__version__, "python": platform.python_version(),
        "cuda_available": torch.cuda.is_available(), "device": args.device,
    }
    if args.device.startswith("cuda"):
        if not torch.cuda.is_available():
            report["error"] = "CUDA is not available (torch.cuda.is_available() is False)"
            (out_dir / "gpu_check.json").write_text(json.dumps(report, indent=2) + "\n")
            print(f"gpu_check: FAILED: {report['error']}", file=sys.stderr)
            return 2
        report["gpu"] = torch.cuda.get_device_name(args.device)
        report["cuda"] = torch.version.cuda
    elif not args.allow_cpu:
        print(f"gpu_check: device {args.device!r} is not CUDA; pass --allow-cpu to try the script anyway", file=sys.stderr)
        return 2
    from llm_harness.testbed.paths import CHECKPOINT_DIR

    ckpt = Path(args.checkpoint) if Path(args.checkpoint).is_dir() else CHECKPOINT_DIR / args.checkpoint
    report["checkpoint"] = str(ckpt)
    t0 = time.perf_counter()
    report["contract"] = contract_checks(args.device, ckpt)
    try:
        report["timing"] = timing(args.device, ckpt, args.prompts, args.samples, args.max_new_tokens, args.batch, args.repeats)
    except Exception as exc:
        report["timing"] = {"ok": False, "error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()[-2000:]}
        print(f"[FAIL] timing: {report['timing']['error']}", flush=True)
    if args.device.startswith("cuda"):
        report["max_memory_allocated_bytes"] = torch.cuda.max_memory_allocated(args.device)
    report["seconds"] = time.perf_counter() - t0
    failed = [k for k, v in report["contract"].items() if not v["ok"]] + (
        ["timing"] if report["timing"].get("ok") is False else []
    )
    report["ok"] = not failed
    report["failed"] = failed
    tmp = out_dir / ".gpu_check.json.tmp"
    tmp.write_text(json.dumps(report, indent=2, default=str) + "\n")
    os.replace(tmp, out_dir / "gpu_check.json")
    print(f"gpu_check: {'ok' if not failed else 'FAILED: ' + ', '.join(failed)} -> {out_dir / 'gpu_check.json'}", flush=True)
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
