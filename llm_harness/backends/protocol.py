"""The generation + scoring contract every backend implements.

A *state* is a list of token ids: a prompt, optionally followed by a partial solution (a
replayed prefix in VSR, a guided prefix in ExTra). A backend

* ``generate(prompt_ids, n, sampling)`` samples ``n`` continuations of every state and returns,
  for each sampled token, its **behaviour log-probability** (see below);
* ``score(context_ids, completion_ids, ...)`` teacher-forces a completion after a context and
  returns per-token log-probabilities and exact full-vocabulary entropies.

Log-probability convention (one convention, used by every backend and by ``score``)
------------------------------------------------------------------------------------
The behaviour log-probability of token ``a_t`` is ``log q(a_t | s_t)`` where ``q`` is the
distribution the token was *actually drawn from*::

    z = logits / temperature                       # temperature scaling
    z = z masked to the top_k largest entries      # only when top_k > 0
    z = z masked to the top-p nucleus of softmax(z) # only when top_p < 1 (smallest prefix of the
                                                    # descending order whose mass reaches top_p)
    q = softmax(z)                                  # renormalised over the kept tokens

With ``top_k = 0`` and ``top_p = 1`` (the RL training setting) ``q = π_θ(· | s)`` at temperature
``T``, i.e. exactly the quantity the PPO ratio needs in its denominator. With truncation it is the
true behaviour distribution, which is what an importance ratio against the behaviour policy
needs. ``score(..., temperature=T, top_k=k, top_p=p)`` returns the same quantity for a given
completion, so generation and scoring can be compared token by token. Greedy decoding
(``temperature == 0``) samples from a point mass: its behaviour log-probs are exactly ``0.0``;
``score`` rejects ``temperature == 0``.

Entropies returned by ``score`` are always of the *untruncated* tempered distribution
``softmax(logits / T)`` over the full vocabulary (nats) — the quantity ExTra's mean token
entropy uses (ExTra §4.2).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Protocol, Sequence, runtime_checkable

import numpy as np

from vsr_util.checks import check_number

FinishReason = Literal["stop", "length"]
FINISH_REASONS: tuple[str, ...] = ("stop", "length")


@dataclass(frozen=True)
class SamplingParams:
    """How to sample continuations. Validated on construction."""

    temperature: float = 1.0
    """Softmax temperature T >= 0; 0 means greedy (argmax, behaviour log-prob 0)."""
    top_p: float = 1.0
    """Nucleus mass in (0, 1]; 1 disables nucleus truncation."""
    top_k: int = 0
    """Keep only the k most likely tokens; 0 disables top-k (explicitly, unlike HF's default 50)."""
    max_new_tokens: int = 256
    """Maximum number of new tokens per sample (the prompt/prefix is not counted)."""
    stop_token_ids: tuple[int, ...] = ()
    """Token ids that end a sample (the stop token is returned as the sample's last token)."""
    ignore_eos: bool = False
    """If False, the model's EOS token id is added to ``stop_token_ids``."""
    seed: int = 0
    """Seed of the sampling random stream; same seed and inputs give the same samples."""

    def __post_init__(self) -> None:
        check_number("temperature", self.temperature, 0)
        check_number("top_p", self.top_p, 0, 1, lo_open=True)
        check_number("top_k", self.top_k, 0, integer=True)
        check_number("max_new_tokens", self.max_new_tokens, 1, integer=True)
        check_number("seed", self.seed, 0, integer=True)
        if not isinstance(self.stop_token_ids, tuple):
            raise ValueError(f"stop_token_ids: must be a tuple of ints, got {type(self.stop_token_ids).__name__}")
        for i, tok in enumerate(self.stop_token_ids):
            check_number(f"stop_token_ids[{i}]", tok, 0, integer=True)
        if not isinstance(self.ignore_eos, bool):
            raise ValueError(f"ignore_eos: must be a bool, got {self.ignore_eos!r}")

    @property
    def greedy(self) -> bool:
        """True when ``temperature == 0`` (argmax decoding)."""
        return self.temperature == 0


@dataclass(frozen=True)
class Sample:
    """One sampled continuation of one state. ``len(token_ids) == len(sampling_logprobs)``."""

    token_ids: tuple[int, ...]
    """The *new* token ids only (never the prompt/prefix); ends with the stop token when
    ``finish_reason == "stop"``."""
    sampling_logprobs: tuple[float, ...]
    """``sampling_logprobs[t] = log q(token_ids[t] | state, token_ids[:t])`` under the sampling
    distribution actually used (tempered, top-k/top-p truncated, renormalised; see module doc);
    exactly 0.0 for greedy decoding."""
    finish_reason: FinishReason
    """``"stop"`` if a stop token ended the sample, ``"length"`` if ``max_new_tokens`` did."""

    def __post_init__(self) -> None:
        if len(self.token_ids) != len(self.sampling_logprobs):
            raise ValueError(
                f"sampling_logprobs: length {len(self.sampling_logprobs)} differs from token_ids length {len(self.token_ids)}"
            )
        if self.finish_reason not in FINISH_REASONS:
            raise ValueError(f"finish_reason: must be one of {FINISH_REASONS}, got {self.finish_reason!r}")


@dataclass(frozen=True, eq=False)
class ScoreResult:
    """Teacher-forced per-token quantities of a completion given its context."""

    logprobs: np.ndarray = field(repr=False)
    """``logprobs[t] = log q(y_t | context, y_<t)``, float64, same convention as
    ``Sample.sampling_logprobs`` for the (temperature, top_k, top_p) passed to ``score``."""
    entropies: np.ndarray | None = field(repr=False)
    """``entropies[t] = H(softmax(logits_t / T))`` over the full vocabulary (nats, float64), or
    None when the caller asked for log-probs only."""

    def __post_init__(self) -> None:
        if self.logprobs.ndim != 1:
            raise ValueError(f"logprobs: expected 1 dimension, got shape {self.logprobs.shape}")
        if self.entropies is not None and self.entropies.shape != self.logprobs.shape:
            raise ValueError(f"entropies: shape {self.entropies.shape} differs from logprobs shape {self.logprobs.shape}")

    def __len__(self) -> int:
        return int(self.logprobs.shape[0])


@runtime_checkable
class GenerationBackend(Protocol):
    """What the trainer and the studies need from a model (module doc)."""

    @property
    def vocab_size(self) -> int:
        """Number of rows of the output head (ids in ``[0, vocab_size)`` are valid)."""
        ...

    @property
    def max_context(self) -> int:
        """Maximum total sequence length (state + new tokens) the model accepts."""
        ...

    def generate(self, prompt_ids: Sequence[Sequence[int]], n: int, sampling: SamplingParams) -> list[list[Sample]]:
        """``n`` continuations per state; ``result[i][j]`` is sample ``j`` of ``prompt_ids[i]``."""
        ...

    def score(
        self,
        context_ids: Sequence[int],
        completion_ids: Sequence[int],
        *,
        temperature: float = 1.0,
        top_k: int = 0,
        top_p: float = 1.0,
        with_entropy: bool = True,
    ) -> ScoreResult:
        """Per-token log-probs (and full-vocabulary entropies) of ``completion_ids`` after ``context_ids``."""
        ...

    def score_batch(
        self,
        context_ids: Sequence[Sequence[int]],
        completion_ids: Sequence[Sequence[int]],
        *,
        temperature: float = 1.0,
        top_k: int = 0,
        top_p: float = 1.0,
        with_entropy: bool = True,
    ) -> list[ScoreResult]:
        """``score`` for many (context, completion) pairs at once."""
        ...


# ----------------------------------------------------------------------------------------------
# Input validation shared by the backends (messages start with the argument name).


def check_token_ids(ids: Sequence[int], name: str, vocab_size: int, *, allow_empty: bool = False) -> list[int]:
    """Return ``ids`` as a list of ints after checking it is a (non-empty) sequence of ids in ``[0, vocab_size)``."""
    if isinstance(ids, (str, bytes)) or not hasattr(ids, "__len__"):
        raise ValueError(f"{name}: must be a sequence of token ids, got {type(ids).__name__}")
    out = [int(t) if isinstance(t, (int, np.integer)) and not isinstance(t, bool) else t for t in ids]
    if not out and not allow_empty:
        raise ValueError(f"{name}: must not be empty (a state needs at least one token)")
    for j, t in enumerate(out):
        if not isinstance(t, int):
            raise ValueError(f"{name}[{j}]: must be an int token id, got {t!r}")
        if not 0 <= t < vocab_size:
            raise ValueError(f"{name}[{j}]: token id {t} outside [0, {vocab_size})")
    return out


def check_prompts(
    prompt_ids: Sequence[Sequence[int]], *, vocab_size: int, max_context: int, max_new_tokens: int
) -> list[list[int]]:
    """Validate a batch of states for ``generate``.

    Every state must be non-empty, hold valid ids, and leave room for ``max_new_tokens`` inside
    the model context: ``len(state) + max_new_tokens <= max_context``.
    """
    if isinstance(prompt_ids, (str, bytes)) or not hasattr(prompt_ids, "__len__"):
        raise ValueError(f"prompt_ids: must be a list of token-id lists, got {type(prompt_ids).__name__}")
    if len(prompt_ids) == 0:
        raise ValueError("prompt_ids: must contain at least one prompt")
    out = []
    for i, p in enumerate(prompt_ids):
        ids = check_token_ids(p, f"prompt_ids[{i}]", vocab_size)
        if len(ids) >= max_context:
            raise ValueError(
                f"prompt_ids[{i}]: length {len(ids)} leaves no room in the model context of {max_context} tokens"
            )
        if len(ids) + max_new_tokens > max_context:
            raise ValueError(
                f"prompt_ids[{i}]: length {len(ids)} + max_new_tokens {max_new_tokens} exceeds the model context "
                f"of {max_context} tokens (lower max_new_tokens to at most {max_context - len(ids)})"
            )
        out.append(ids)
    return out


def continuation_budget(prefix_len: int, response_budget: int) -> int:
    """New-token budget left to a continuation whose state already holds ``prefix_len`` response tokens.

    A replayed/guided prefix counts against the per-response budget (VSR §3.2, ExTra App. B.4 prefixes): the
    continuation may add ``response_budget - prefix_len`` tokens. A prefix that uses up the whole
    budget is an error, not a zero-length generation.
    """
    prefix_len = check_number("prefix_len", prefix_len, 0, integer=True)
    response_budget = check_number("response_budget", response_budget, 1, integer=True)
    if prefix_len >= response_budget:
        raise ValueError(
            f"prefix_len: prefix of {prefix_len} tokens is not shorter than the response budget of {response_budget}"
        )
    return response_budget - prefix_len


def check_n(n: int) -> int:
    """Number of samples per state: an int >= 1."""
    return check_number("n", n, 1, integer=True)


def check_score_params(temperature: float, top_k: int, top_p: float) -> None:
    """Scoring needs a proper distribution: ``temperature > 0``; top-k/top-p as in ``SamplingParams``."""
    try:
        check_number("temperature", temperature, 0, lo_open=True)
    except ValueError:  # greedy (0) samples but has no distribution to score
        raise ValueError(f"temperature: must be a finite number > 0 for scoring, got {temperature!r}") from None
    check_number("top_k", top_k, 0, integer=True)
    check_number("top_p", top_p, 0, 1, lo_open=True)


def check_score_pairs(
    context_ids: Sequence[Sequence[int]],
    completion_ids: Sequence[Sequence[int]],
    *,
    vocab_size: int,
    max_context: int,
) -> tuple[list[list[int]], list[list[int]]]:
    """Validate (context, completion) pairs: non-empty contexts, possibly empty completions, fits the context."""
    for name, seq in (("context_ids", context_ids), ("completion_ids", completion_ids)):
        if isinstance(seq, (str, bytes)) or not hasattr(seq, "__len__"):
            raise ValueError(f"{name}: must be a list of token-id lists, got {type(seq).__name__}")
    if len(context_ids) != len(completion_ids):
        raise ValueError(
            f"completion_ids: {len(completion_ids)} completions for {len(context_ids)} contexts (must be equal)"
        )
    ctxs, comps = [], []
    for i, (c, y) in enumerate(zip(context_ids, completion_ids)):
        c = check_token_ids(c, f"context_ids[{i}]", vocab_size)
        y = check_token_ids(y, f"completion_ids[{i}]", vocab_size, allow_empty=True)
        if len(c) + len(y) > max_context:
            raise ValueError(
                f"context_ids[{i}]: context {len(c)} + completion {len(y)} tokens exceed the model context of {max_context}"
            )
        ctxs.append(c)
        comps.append(y)
    return ctxs, comps
