"""Evaluation of a policy: avg@k, unbiased pass@k, per-difficulty table, lengths, diversity (SPEC §1.5, §3.6).

:func:`evaluate_policy` samples ``k`` completions per problem with a seeded backend call per chunk
and returns a JSON-ready dict; it is used for periodic validation during training and by
``vsr eval`` (:func:`llm_harness.trainer.entry.evaluate`). Metrics come from ``theory.metrics``
(``avg_at_k``, ``pass_at_k_table``, ``distinct_n``, ``aes``).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Sequence

import numpy as np

from llm_harness.backends import SamplingParams
from llm_harness.tasks import Problem
from llm_harness.trainer.rollout import derive_seed
from theory.metrics import aes, avg_at_k, distinct_n, pass_at_k_table, self_bleu

__all__ = ["evaluate_policy", "format_eval_markdown"]


def evaluate_policy(
    backend: Any,
    codec: Any,
    task: Any,
    verifier: Any,
    problems: Sequence[Problem],
    *,
    k: int,
    temperature: float,
    top_p: float = 1.0,
    max_new_tokens: int = 64,
    seed: int = 0,
    chunk_sequences: int = 256,
    reference: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Sample ``k`` completions of every problem and summarise (module doc).

    Keys: ``avg_at_k``, ``pass_at`` ({j: pass@j} for j = 1, 2, 4, ..., k), ``by_difficulty`` (rows of
    difficulty, n, avg@k, pass@k), ``length_correct`` / ``length_incorrect`` (mean new tokens),
    ``distinct_4`` / ``self_bleu_4`` (means over problems, on token ids), ``n_problems``, ``k``,
    and ``aes`` against ``reference`` when given (SPEC §1.5).
    """
    if not problems:
        raise ValueError("problems: must not be empty")
    prompts = [list(codec.encode(task.render_prompt(p, getattr(codec, "tokenizer", None)))) for p in problems]
    per_call = max(1, chunk_sequences // k)
    correct = np.zeros((len(problems), k), dtype=np.int64)
    lengths = np.zeros((len(problems), k), dtype=np.int64)
    distinct, sbleu = [], []
    for chunk, start in enumerate(range(0, len(problems), per_call)):
        sp = SamplingParams(temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens,
                            seed=derive_seed(seed, 0xE7A1, chunk))
        res = backend.generate(prompts[start : start + per_call], k, sp)
        probs, texts = [], []
        for i, samples in enumerate(res):
            for s in samples:
                ids = s.token_ids[:-1] if s.finish_reason == "stop" and s.token_ids else s.token_ids
                probs.append(problems[start + i])
                texts.append(codec.decode(ids))
            seqs = [list(s.token_ids) for s in samples]
            try:
                distinct.append(distinct_n(seqs, 4))
            except ValueError:
                pass  # responses shorter than 4 tokens have no 4-grams
            if k >= 2:
                try:
                    sbleu.append(self_bleu(seqs, 4))
                except ValueError:
                    pass
        vr = verifier.verify_many(probs, texts)
        for i, samples in enumerate(res):
            for j, s in enumerate(samples):
                correct[start + i, j] = int(vr[i * k + j].correct)
                lengths[start + i, j] = len(s.token_ids)
    ks = sorted({1, k} | {2**e for e in range(1, 8) if 2**e < k})
    table = pass_at_k_table(correct, ks)
    by = defaultdict(list)
    for i, p in enumerate(problems):
        by[p.difficulty].append(i)
    rows = []
    for d in sorted(by, key=lambda x: (x is None, x)):
        idx = by[d]
        rows.append({
            "difficulty": d,
            "n": len(idx),
            "avg_at_k": avg_at_k(correct[idx]),
            "pass_at_k": pass_at_k_table(correct[idx], [k])[k],
        })
    c = correct.astype(bool)
    out = {
        "n_problems": len(problems),
        "k": k,
        "avg_at_k": avg_at_k(correct),
        "pass_at": {int(j): float(v) for j, v in table.items()},
        "by_difficulty": rows,
        "length_mean": float(lengths.mean()),
        "length_correct": float(lengths[c].mean()) if c.any() else None,
        "length_incorrect": float(lengths[~c].mean()) if (~c).any() else None,
        "distinct_4": float(np.mean(distinct)) if distinct else None,
        "self_bleu_4": float(np.mean(sbleu)) if sbleu else None,
    }
    if reference is not None and reference.get("avg_at_k"):
        out["aes"] = float(aes(out["length_mean"], out["avg_at_k"], reference["length_mean"], reference["avg_at_k"]))
    return out


def format_eval_markdown(res: dict[str, Any]) -> str:
    """A small markdown report of :func:`evaluate_policy` output."""
    lines = [
        f"# Evaluation ({res['n_problems']} problems x {res['k']} samples)",
        "",
        f"avg@{res['k']}: {res['avg_at_k']:.4f}",
        "",
        "| k | pass@k |",
        "| --- | --- |",
    ]
    lines += [f"| {j} | {v:.4f} |" for j, v in sorted(res["pass_at"].items(), key=lambda kv: int(kv[0]))]
    lines += ["", "| difficulty | n | avg@k | pass@k |", "| --- | --- | --- | --- |"]
    lines += [f"| {r['difficulty']} | {r['n']} | {r['avg_at_k']:.4f} | {r['pass_at_k']:.4f} |" for r in res["by_difficulty"]]
    lines += ["", f"mean length: {res['length_mean']:.1f} (correct {res['length_correct']}, incorrect {res['length_incorrect']})",
              f"distinct-4: {res['distinct_4']}, self-BLEU-4: {res['self_bleu_4']}"]
    if "aes" in res:
        lines.append(f"AES vs reference: {res['aes']:.4f}")
    return "\n".join(lines) + "\n"
