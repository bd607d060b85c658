"""Evaluation of a policy: avg@k, unbiased pass@k, per-difficulty table, lengths, diversity (:mod:`theory.metrics`).

:func:`sample_and_verify` is the one evaluation sampler of the project: ``k`` completions per
problem from one seeded ``backend.generate`` call per chunk of problems, each decoded
(:func:`completion_text`) and verified, giving ``correct[problem, sample]``. Chunk ``c`` draws
with seed ``derive_seed(seed, 0xE7A1, *stream, c)`` (:mod:`vsr_util.seeding`); ``stream`` separates
evaluations that share a seed (the test bed passes its split name). Two summaries use it:

* :func:`evaluate_policy` — periodic validation during training and ``vsr eval``
  (:func:`llm_harness.trainer.entry.evaluate`): a JSON-ready dict of metrics from
  ``theory.metrics`` (``avg_at_k``, ``pass_at_k_table``, ``distinct_n``, ``self_bleu``,
  ``logdet_diversity``, ``aes``);
* ``llm_harness.testbed.evaluate`` — ``vsr testbed eval`` and the checkpoint cards: accuracy by
  number of terms with confidence intervals.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from llm_harness.tasks import Problem
from llm_harness.backends.completions import completion_text  # noqa: F401  (re-exported: its home before)
from llm_harness.trainer.data import StartState
from llm_harness.trainer.rollout import sample_groups
from theory.metrics import aes, avg_at_k, distinct_n, logdet_diversity, pass_at_k_table, self_bleu, t_interval
from vsr_util.seeding import derive_seed


__all__ = ["EvalSamples", "SamplingSession", "completion_text", "evaluate_policy", "format_eval_markdown", "sample_and_verify",
           "validation_aes"]

#: Role key of the evaluation streams in :func:`vsr_util.seeding.derive_seed`.
EVAL_STREAM = 0xE7A1


@dataclass(frozen=True)
class EvalSamples:
    """What :func:`sample_and_verify` drew and how it was graded."""

    correct: np.ndarray
    """``correct[problem, sample]`` (int64 0/1): the verifier's ``correct``."""
    lengths: np.ndarray
    """``lengths[problem, sample]``: new tokens of the sample (stop token included)."""
    token_ids: list[list[tuple[int, ...]]]
    """``token_ids[problem][sample]``: the sampled ids (stop token included)."""
    counts: dict[str, int]
    """``finish_<reason>`` and ``status_<parse status>`` counts over all samples."""


@dataclass(frozen=True)
class SamplingSession:
    """Who samples and grades, and how: the one value that the evaluators (:func:`sample_and_verify`,
    :func:`evaluate_policy`), the trainer's validation, ``vsr eval``, the test bed's evaluation, pool selection and the
    model card build and pass around, instead of repeating these keywords."""

    backend: Any
    """A generation backend (``generate(states, n, temperature, top_p, max_new_tokens, seed)``)."""
    codec: Any
    """Token ids <-> text (:class:`llm_harness.trainer.modeling.Codec`)."""
    task: Any
    """The task rendering the prompts."""
    verifier: Any
    """Grades completions (``verify_many``; a ``SafeVerifier`` turns deadlines and grader errors into reward 0)."""
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 64
    chunk_sequences: int = 256
    """Sequences per ``backend.generate`` call (problems per call: ``max(1, chunk_sequences // k)``)."""

    def prompt_ids(self, problem: Problem) -> list[int]:
        """The problem's prompt as token ids (the task's rendering through the codec's tokenizer)."""
        return list(self.codec.encode(self.task.render_prompt(problem, getattr(self.codec, "tokenizer", None))))


def sample_and_verify(
    session: SamplingSession,
    problems: Sequence[Problem],
    *,
    k: int,
    seed: int = 0,
    stream: tuple[int | str, ...] = (),
    progress: bool = False,
    desc: str = "eval",
) -> EvalSamples:
    """``k`` verified completions of every problem with ``session``'s backend, settings and verifier (module doc).

    Prompts are :meth:`SamplingSession.prompt_ids`; groups of ``max(1, session.chunk_sequences // k)`` problems go to
    one ``backend.generate`` call; ``session.verifier.verify_many(problems, texts)`` grades each group.
    """
    from tqdm.auto import tqdm

    if not problems:
        raise ValueError("problems: must not be empty")
    prompts = [session.prompt_ids(p) for p in problems]
    per_call = max(1, session.chunk_sequences // k)
    correct = np.zeros((len(problems), k), dtype=np.int64)
    lengths = np.zeros((len(problems), k), dtype=np.int64)
    token_ids: list[list[tuple[int, ...]]] = []
    counts: dict[str, int] = {}
    starts = range(0, len(problems), per_call)
    for chunk, start in enumerate(tqdm(starts, desc=desc, disable=not progress, leave=False)):
        states = [StartState(prompts[i], problems[i]) for i in range(start, min(start + per_call, len(problems)))]
        groups, _ = sample_groups(states, backend=session.backend, codec=session.codec, verifier=session.verifier,
                                  n_default=k, temperature=session.temperature, top_p=session.top_p,
                                  max_new_tokens=session.max_new_tokens, seed=derive_seed(seed, EVAL_STREAM, *stream, chunk))
        for i, g in enumerate(groups):
            token_ids.append(list(g.response_ids))
            for j, (ids, r, fin) in enumerate(zip(g.response_ids, g.verify, g.finish_reasons)):
                correct[start + i, j] = int(r.correct)
                lengths[start + i, j] = len(ids)
                for key in (f"finish_{fin}", f"status_{r.status.value}"):
                    counts[key] = counts.get(key, 0) + 1
    return EvalSamples(correct, lengths, token_ids, counts)


def evaluate_policy(
    session: SamplingSession,
    problems: Sequence[Problem],
    *,
    k: int,
    seed: int = 0,
    reference: dict[str, Any] | None = None,
    embedder: Any = None,
    logdet_alpha: float = 1.0,
) -> dict[str, Any]:
    """Sample ``k`` completions of every problem (:func:`sample_and_verify`) and summarise.

    Keys: ``avg_at_k``, ``pass_at`` ({j: unbiased pass@j} for every j = 1..k), ``by_difficulty`` (rows
    of difficulty, n, avg@k, pass@k), ``length_mean`` / ``length_correct`` / ``length_incorrect`` (mean
    new tokens, stop token included, over all samples / the correct / the incorrect ones),
    ``distinct_4`` / ``self_bleu_4`` (means over problems, on token ids; Self-BLEU needs k >= 2),
    ``logdet`` (mean over problems of ``log det(I + logdet_alpha K)``, K the cosine kernel of the k
    responses' ``embedder`` vectors; k >= 2), ``logdet_embedder`` (its name), ``n_problems``, ``k``, and
    ``aes`` against ``reference`` when given (Replay §6.1). Problems a diversity metric is undefined on
    (no 4-gram; a response whose embedding is zero) are left out of that metric's mean, and the metric
    is None when none is left.

    ``embedder``: an :class:`llm_harness.embedders.Embedder` (``embed(prompts, solutions)``);
    None: hashed token-4-gram counts (``NGramEmbedder``, the ``ngram4`` entry) — offline, identical for
    every run, not the paper's sentence embeddings.
    """
    from llm_harness.embedders import NGramEmbedder

    ev = sample_and_verify(session, problems, k=k, seed=seed)
    correct, lengths = ev.correct, ev.lengths
    emb = embedder if embedder is not None else NGramEmbedder(4, 2048)
    prompts = [session.prompt_ids(p) for p in problems]
    distinct, sbleu, logdets = [], [], []
    for i, samples in enumerate(ev.token_ids):
        seqs = [list(t) for t in samples]
        try:
            distinct.append(distinct_n(seqs, 4))
        except ValueError:
            pass  # responses shorter than 4 tokens have no 4-grams
        if k >= 2:
            try:
                sbleu.append(self_bleu(seqs, 4))
            except ValueError:
                pass
            try:
                logdets.append(logdet_diversity(emb.embed([prompts[i]] * len(seqs), seqs), logdet_alpha))
            except ValueError:
                pass  # a zero embedding has no cosine
    table = pass_at_k_table(correct, range(1, k + 1))
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
        "logdet": float(np.mean(logdets)) if logdets else None,
        "logdet_embedder": getattr(emb, "name", "") or type(emb).__name__,
    }
    # per-problem counts (problems are the independent units: a paired before/after comparison needs them)
    # and a 95 % Student-t interval of avg@k with problems as clusters
    per = correct.mean(axis=1)
    _, lo, hi = t_interval(per)
    out["avg_at_k_ci"] = [lo, hi]
    out["problem_ids"] = [str(p.id) for p in problems]
    out["problem_correct"] = [int(x) for x in correct.sum(axis=1)]
    if reference is not None and reference.get("avg_at_k"):
        out["aes"] = float(aes(out["length_mean"], out["avg_at_k"], reference["length_mean"], reference["avg_at_k"]))
    return out


def validation_aes(metrics: dict[str, Any], reference: dict[str, Any], k: int) -> float:
    """AES (Replay §6.1, eq. 4) of one run's validation row against a reference run's (GRPO at the
    same step, for the comparison tables): ``aes(L, A, L_ref, A_ref)`` with ``L = val_length_mean`` and
    ``A = val_avg_at_{k}`` of :meth:`llm_harness.trainer.loop.Trainer.validate`. ValueError naming a
    missing or non-finite key, or a reference accuracy of 0 (AES divides by it)."""
    keys = ("val_length_mean", f"val_avg_at_{k}")
    vals = {}
    for who, row in (("metrics", metrics), ("reference", reference)):
        for key in keys:
            v = row.get(key)
            if v is None or not np.isfinite(float(v)):
                raise ValueError(f"{who}: {key} missing or not finite ({v!r}); was it validated with k = {k}?")
            vals[who, key] = float(v)
    if vals["reference", keys[1]] == 0 or vals["reference", keys[0]] == 0:
        raise ValueError(f"reference: AES is undefined for a reference with accuracy or length 0 ({keys})")
    return float(aes(vals["metrics", keys[0]], vals["metrics", keys[1]], vals["reference", keys[0]],
                     vals["reference", keys[1]]))


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
              f"distinct-4: {res['distinct_4']}, self-BLEU-4: {res['self_bleu_4']}, "
              f"LogDet ({res.get('logdet_embedder')}): {res.get('logdet')}"]
    if "aes" in res:
        lines.append(f"AES vs reference: {res['aes']:.4f}")
    return "\n".join(lines) + "\n"
