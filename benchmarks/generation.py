"""Benchmark of the HF generation backend and of exact chunked entropies.

Two measurements, each against a baseline run in the same process on the same inputs:

1. **Generation throughput**: new tokens per second of ``HFBackend.generate`` vs plain
   ``model.generate(do_sample=True, num_return_sequences=n)`` with the same prompts, temperature,
   ``top_k=0``, ``top_p=1``, stop token and budget (target ratio >= 1.0). Two scenarios: ``fresh``
   (short prompts) and ``prefix`` (prompt + a long partial solution, the VSR/ExTra replay state,
   where sharing the prefill across the n samples matters most).
2. **Exact entropy cost**: ``score_batch`` with full-vocabulary entropies vs a plain forward
   (``model(ids).logits``) and vs scoring without entropies, at vocabulary sizes 26 / 32k / 152k
   (target: entropy scoring <= 1.3x the plain forward).

Both use random Qwen2 models shaped like the test-bed model (hidden 128, 4 layers, 4 heads) unless
``--model`` points at a saved causal LM (the test-bed checkpoint, once it exists). Tokens/s counts
new tokens up to and including the stop token. Each contender's time is the *minimum* over
``repeats`` timed runs after one warm-up (the least-disturbed run: on a shared machine the other
processes only ever add time), and the contenders alternate within every repetition.
Results: a table on stdout and a CSV (written atomically) plus the resolved config beside it.

Run: ``python benchmarks/generation.py --quick`` (about a minute on 2 CPU cores) or without
``--quick`` for the full sizes.
"""

from __future__ import annotations

import statistics
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from llm_harness.backends import HFBackend, HFBackendConfig, SamplingParams, rows_per_chunk
from vsr_util.atomic import write_csv as atomic_write_csv
from vsr_util.config_io import save_config

COLUMNS = ("benchmark", "scenario", "vocab_size", "ours_s", "baseline_s", "ours_tok_per_s", "baseline_tok_per_s",
           "ratio", "target", "meets_target", "detail")


@dataclass(frozen=True)
class GenerationBenchConfig:
    """Options of the generation / entropy benchmark."""

    model: str = ""
    """Saved causal LM (path or name) for the throughput part; empty = a random test-bed-shaped Qwen2."""
    quick: bool = False
    """Small sizes for a fast check (smoke tests, CI)."""
    device: str = "cpu"
    """``cpu``, ``cuda`` or ``auto``."""
    threads: int = 0
    """torch CPU threads (0 = leave torch's default)."""
    num_prompts: int = 16
    """Distinct states per generate call."""
    n: int = 8
    """Samples per state."""
    prompt_len: int = 16
    """Longest prompt; prompt lengths are drawn uniformly from [prompt_len // 2, prompt_len]."""
    prefix_len: int = 96
    """Extra partial-solution tokens appended to every prompt in the ``prefix`` scenario."""
    max_new_tokens: int = 64
    """New-token budget per sample."""
    temperature: float = 1.0
    """Sampling temperature of both contenders."""
    gen_vocab_size: int = 26
    """Vocabulary of the random generation model (the test bed's character vocabulary)."""
    stop_token_id: int = 1
    """Stop/EOS id for both contenders (a random model emits it with probability ~1/V per step)."""
    hidden_size: int = 128
    """Hidden size of the random models."""
    num_layers: int = 4
    """Decoder layers of the random models."""
    num_heads: int = 4
    """Attention heads of the random models (KV heads = heads / 2)."""
    vocab_sizes: tuple[int, ...] = (26, 32_000, 152_064)
    """Vocabulary sizes of the entropy-cost measurement."""
    entropy_hidden_sizes: tuple[int, ...] = (128, 896)
    """Hidden sizes of the entropy-cost models: the test bed's, and Qwen2.5-0.5B's (where a 152k head
    usually sits). The extra entropy work is O(N V), the head matmul O(N V H)."""
    entropy_batch: int = 2
    """Sequences per scoring call."""
    entropy_seq_len: int = 256
    """Tokens per scored sequence (1 context token, the rest scored)."""
    repeats: int = 5
    """Timed repetitions (minimum reported) after one warm-up."""
    seed: int = 0
    """Seed of models, prompts and sampling."""
    out: str = "out/bench/generation.csv"
    """CSV output path (the config is saved beside it as .config.json)."""

    def resolved(self) -> "GenerationBenchConfig":
        """Apply ``quick``: shrink every size."""
        if not self.quick:
            return self
        return replace(self, num_prompts=4, n=4, prompt_len=8, prefix_len=32, max_new_tokens=16,
                       vocab_sizes=(26, 32_000), entropy_hidden_sizes=(128,), entropy_batch=2,
                       entropy_seq_len=64, repeats=2)


def _random_model(vocab: int, cfg: GenerationBenchConfig, max_positions: int, hidden: int | None = None):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(cfg.seed)
    hidden = hidden or cfg.hidden_size
    mc = Qwen2Config(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=cfg.num_layers,
                     num_attention_heads=cfg.num_heads, num_key_value_heads=max(1, cfg.num_heads // 2),
                     intermediate_size=4 * hidden, max_position_embeddings=max_positions,
                     tie_word_embeddings=True, eos_token_id=None, pad_token_id=None, bos_token_id=None)
    return Qwen2ForCausalLM(mc).eval()


def _device(cfg: GenerationBenchConfig) -> torch.device:
    if cfg.device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(cfg.device)


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize()


def _timed(fn, dev):
    _sync(dev)
    t0 = time.perf_counter()
    out = fn()
    _sync(dev)
    return time.perf_counter() - t0, out


def _hf_generate_tokens(model, prompts, n, cfg, stop, pad, dev) -> int:
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for r, p in enumerate(prompts):
        ids[r, width - len(p):] = torch.tensor(p)
        mask[r, width - len(p):] = 1
    with torch.inference_mode():
        out = model.generate(input_ids=ids.to(dev), attention_mask=mask.to(dev), do_sample=True,
                             temperature=cfg.temperature, top_k=0, top_p=1.0, max_new_tokens=cfg.max_new_tokens,
                             num_return_sequences=n, eos_token_id=stop, pad_token_id=pad)
    new = out[:, width:].cpu()
    total = 0
    for row in new.tolist():
        total += row.index(stop) + 1 if stop in row else len(row)
    return total


def bench_generation(cfg: GenerationBenchConfig, progress: bool = True) -> list[dict]:
    """Tokens/s of ``HFBackend.generate`` vs ``model.generate`` for the fresh and prefix scenarios."""
    dev = _device(cfg)
    g = torch.Generator().manual_seed(cfg.seed)
    budget = cfg.prompt_len + cfg.prefix_len + cfg.max_new_tokens
    if cfg.model:
        backend = HFBackend.from_pretrained(cfg.model, config=HFBackendConfig(model=cfg.model, device=str(dev)))
        model = backend.model
    else:
        model = _random_model(cfg.gen_vocab_size, cfg, max_positions=budget + 8).to(dev)
        backend = HFBackend(model, config=HFBackendConfig(pad_token_id=0))
    vocab, stop, pad = backend.vocab_size, cfg.stop_token_id, backend.pad_token_id
    low = 2 if vocab > 2 else 0  # keep prompts free of the stop token
    rows = []
    for scenario, extra in (("fresh", 0), ("prefix", cfg.prefix_len)):
        prompts = []
        for _ in range(cfg.num_prompts):
            length = int(torch.randint(max(1, cfg.prompt_len // 2), cfg.prompt_len + 1, (1,), generator=g)) + extra
            prompts.append(torch.randint(low, vocab, (length,), generator=g).tolist())
        sp = SamplingParams(temperature=cfg.temperature, max_new_tokens=cfg.max_new_tokens,
                            stop_token_ids=(stop,), ignore_eos=True, seed=cfg.seed)
        ours_t, base_t, ours_n, base_n = [], [], [], []
        for rep in range(cfg.repeats + 1):
            t_o, res = _timed(lambda: backend.generate(prompts, cfg.n, replace(sp, seed=cfg.seed + rep)), dev)
            torch.manual_seed(cfg.seed + rep)
            t_b, n_b = _timed(lambda: _hf_generate_tokens(model, prompts, cfg.n, cfg, stop, pad, dev), dev)
            if rep == 0:
                continue  # warm-up
            ours_t.append(t_o)
            base_t.append(t_b)
            ours_n.append(sum(len(s.token_ids) for row in res for s in row))
            base_n.append(n_b)
            if progress:
                print(f"  generation/{scenario} rep {rep}: ours {ours_n[-1] / t_o:,.0f} tok/s, "
                      f"model.generate {n_b / t_b:,.0f} tok/s", file=sys.stderr)
        ours_rate = max(k / t for k, t in zip(ours_n, ours_t))
        base_rate = max(k / t for k, t in zip(base_n, base_t))
        ratio = ours_rate / base_rate
        rows.append(dict(
            benchmark="generation", scenario=scenario, vocab_size=vocab,
            ours_s=min(ours_t), baseline_s=min(base_t),
            ours_tok_per_s=ours_rate, baseline_tok_per_s=base_rate,
            ratio=ratio, target=">=1.0", meets_target=ratio >= 1.0,
            detail=f"{cfg.num_prompts} states x n={cfg.n}, state len {min(map(len, prompts))}-{max(map(len, prompts))}, "
                   f"max_new {cfg.max_new_tokens}, mean new {statistics.mean(ours_n) / (cfg.num_prompts * cfg.n):.1f}",
        ))
    return rows


def bench_entropy(cfg: GenerationBenchConfig, progress: bool = True) -> list[dict]:
    """Cost of exact full-vocabulary entropies vs a plain forward, per vocabulary size."""
    dev = _device(cfg)
    rows = []
    for hidden in cfg.entropy_hidden_sizes:
        for vocab in cfg.vocab_sizes:
            rows.append(_entropy_row(cfg, dev, vocab, hidden, progress))
    return rows


def _entropy_row(cfg: GenerationBenchConfig, dev: torch.device, vocab: int, hidden: int, progress: bool) -> dict:
    model = _random_model(vocab, cfg, max_positions=cfg.entropy_seq_len + 8, hidden=hidden).to(dev)
    n_tok = cfg.entropy_batch * cfg.entropy_seq_len
    backend = HFBackend(model, config=HFBackendConfig(pad_token_id=0, score_max_batch_tokens=n_tok))
    g = torch.Generator().manual_seed(cfg.seed)
    ids = torch.randint(0, vocab, (cfg.entropy_batch, cfg.entropy_seq_len), generator=g)
    ctx = [r[:1] for r in ids.tolist()]
    comp = [r[1:] for r in ids.tolist()]
    ids_dev = ids.to(dev)

    def plain():
        with torch.inference_mode():
            return model(input_ids=ids_dev).logits

    fns = {"plain": plain,
           "lp": lambda: backend.score_batch(ctx, comp, with_entropy=False),
           "ent": lambda: backend.score_batch(ctx, comp, with_entropy=True)}
    times: dict[str, list[float]] = {k: [] for k in fns}
    for rep in range(cfg.repeats + 1):
        for key, fn in fns.items():
            t, _ = _timed(fn, dev)
            if rep:
                times[key].append(t)
    best = {k: min(v) for k, v in times.items()}
    ratio = best["ent"] / best["plain"]
    if progress:
        print(f"  entropy V={vocab} H={hidden}: plain {best['plain']:.3f}s, log-probs {best['lp']:.3f}s, "
              f"+entropy {best['ent']:.3f}s", file=sys.stderr)
    chunk = rows_per_chunk(vocab, backend.config.score_chunk_bytes)
    return dict(
        benchmark="entropy", scenario=f"score_vs_forward_H{hidden}", vocab_size=vocab,
        ours_s=best["ent"], baseline_s=best["plain"],
        ours_tok_per_s=n_tok / best["ent"], baseline_tok_per_s=n_tok / best["plain"],
        ratio=ratio, target="<=1.3", meets_target=ratio <= 1.3,
        detail=f"{cfg.entropy_batch}x{cfg.entropy_seq_len} tokens, hidden {hidden}; log-probs only {best['lp']:.4f}s "
               f"(entropy adds x{best['ent'] / best['lp']:.2f}); {chunk} rows per chunk",
    )


def format_table(rows: list[dict]) -> str:
    """Fixed-width table of the result rows."""
    head = f"{'benchmark':<11}{'scenario':<22}{'V':>8}{'ours s':>9}{'base s':>9}{'ours tok/s':>12}{'base tok/s':>12}{'ratio':>7}  target"
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['benchmark']:<11}{r['scenario']:<22}{r['vocab_size']:>8}{r['ours_s']:>9.3f}{r['baseline_s']:>9.3f}"
                     f"{r['ours_tok_per_s']:>12,.0f}{r['baseline_tok_per_s']:>12,.0f}{r['ratio']:>7.2f}  {r['target']}"
                     f"{'' if r['meets_target'] else '  (missed)'}")
    return "\n".join(lines)


def write_csv(rows: list[dict], path: str | Path) -> Path:
    """Write ``rows`` with ``COLUMNS`` atomically."""
    return atomic_write_csv(path, COLUMNS, rows, float_format="%.6g", lineterminator="\r\n")


def run(cfg: GenerationBenchConfig) -> int:
    """Run both benchmarks, print the table, write the CSV and the config."""
    cfg = cfg.resolved()
    if cfg.threads > 0:
        torch.set_num_threads(cfg.threads)
    rows = bench_generation(cfg) + bench_entropy(cfg)
    print(format_table(rows))
    out = Path(cfg.out)
    write_csv(rows, out)
    save_config(cfg, out.with_suffix(".config.json"))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    import tyro

    sys.exit(run(tyro.cli(GenerationBenchConfig)))
