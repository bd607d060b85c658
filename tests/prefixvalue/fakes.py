"""A scripted generation backend over the trainer's character tokenizer (no model, no torch work)."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from llm_harness.backends.protocol import Sample, SamplingParams, ScoreResult
from llm_harness.trainer.modeling import CharTokenizer


class ScriptedBackend:
    """``generate`` returns ``script(state_text, j)`` (+ EOS) for sample ``j``; records every call.

    ``score_batch`` returns entropies ``H[t] = 0.1 * (t + 1)`` and log-probs ``-0.5``.
    """

    eos_token_ids = (CharTokenizer.eos_token_id,)

    def __init__(self, script, tokenizer: CharTokenizer | None = None, max_context: int = 256):
        self.tok = tokenizer or CharTokenizer()
        self.script = script
        self.calls: list[tuple[int, int, SamplingParams]] = []
        self.score_calls = 0
        self._max_context = max_context

    @property
    def vocab_size(self) -> int:
        return self.tok.vocab_size

    @property
    def max_context(self) -> int:
        return self._max_context

    def generate(self, prompt_ids: Sequence[Sequence[int]], n: int, sampling: SamplingParams) -> list[list[Sample]]:
        self.calls.append((len(prompt_ids), n, sampling))
        out = []
        for ids in prompt_ids:
            text = self.tok.decode_ids(list(ids))
            group = []
            for j in range(n):
                toks = self.tok.encode_text(self.script(text, j)) + [self.tok.eos_token_id]
                reason = "stop"
                if len(toks) > sampling.max_new_tokens:
                    toks, reason = toks[: sampling.max_new_tokens], "length"
                group.append(Sample(tuple(toks), tuple([-0.1] * len(toks)), reason))
            out.append(group)
        return out

    def score_batch(self, context_ids, completion_ids, *, temperature=1.0, top_k=0, top_p=1.0, with_entropy=True):
        self.score_calls += 1
        res = []
        for y in completion_ids:
            n = len(y)
            ent = 0.1 * (np.arange(n, dtype=np.float64) + 1) if with_entropy else None
            res.append(ScoreResult(np.full(n, -0.5), ent))
        return res

    def score(self, context_ids, completion_ids, **kw):
        return self.score_batch([context_ids], [completion_ids], **kw)[0]
