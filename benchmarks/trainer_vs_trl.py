"""Benchmark: this trainer vs TRL's ``GRPOTrainer`` on the same GRPO run, interleaved.

Same model, task (step arithmetic), batch (``prompts`` x ``group_size``), sampling (T = 1, top-p 1,
top-k off, same response budget), loss (token-level DAPO aggregation, clip 0.2 / 0.28, no KL) and
optimizer (AdamW, same lr, grad clip 1); one optimizer step per batch; same torch thread count.

Design (the issue's "honest benchmark"):

* **Interleaved repeats.** Repeat ``r`` runs every contender once, in the order of ``contenders``
  (A B A B ... over the repeats), each from a fresh load of the same checkpoint with seed
  ``seed + r``; a run does ``warmup_steps`` untimed steps, then ``steps`` timed ones. The ratio of
  repeat ``r`` is ``s/step(TRL) / s/step(ours)`` from the two runs of that repeat (adjacent in time,
  so slow drifts of the machine's load hit both); reported: the median ratio over repeats and its
  min-max, never one run.
* **Machine load.** ``os.getloadavg()`` before and after every run and the whole benchmark. A 1-min
  load above the thread count means another process competed for the cores: the numbers are then
  indicative only (printed as a warning, and in the results).
* **Step split.** Ours, from the trainer's own timing metrics (``time_generate_s``: claims +
  generation + verification; ``time_score_s``: old/ref log-probs; ``time_train_s``: forward, backward,
  optimizer; the rest: advantages, filters, scheduler, hooks) and, inside generation, the time spent
  in ``backend.generate`` (decode). TRL, by wrapping its methods on the trainer instance:
  ``_generate_single_turn`` (decode: ``model.generate``), ``_generate`` (decode + tokenising),
  ``_calculate_rewards`` (reward), ``_generate_and_score_completions`` (all of the before plus
  old-log-prob scoring and advantages) and a callback around each optimizer step; train = step -
  ``_generate_and_score_completions``.
* **Fraction of a measured limit.** The useful FLOPs of our step (counted from the step's rollouts:
  prefill and decode forwards, forward + backward over the trained sequences; unpadded tokens;
  linear layers + LM head + attention scores) divided by the measured ``torch.mm`` rate on the same
  matmul shapes (prefill: the step's prompt tokens x hidden, all prompts in one pass; decode: live rows x
  hidden; training: trained tokens x hidden; forward and both
  backward shapes) at the same thread count, float32; ``fraction = limit_s / step_s``. This is a
  GEMM-only roofline: norms, softmax, sampling, Python and framework overhead count as time away
  from the limit, and attention is charged at the GEMM rate (optimistic), so the fraction is an
  upper bound on how close the step is to the matmul limit, not a hardware FLOP/s fraction. The limit is timed
  once after all repeats (``limit_fraction``) and, with ``limit_each_repeat``, again right after each repeat at
  that repeat's shapes (``limit_fraction_adjacent``: each run against the limit timed next to it), because the
  host's cache-resident matmul rate drifts within a day far more than a step's time does.
* **Held-out accuracy** (``eval_problems > 0``): avg@``eval_k`` on the validation split after each
  contender's repeat-0 run, with its binomial standard error (equal accuracy is part of the claim).

Departures (stated, not hidden): each trainer draws its own prompts in its own shuffled order
(TRL's sampler vs our seeded source) and its own samples, so accuracies are compared with their
standard errors, not pairwise; our trainer drops zero-variance groups before the update (TRL
back-propagates their zero advantages), which is part of the speed difference — the
``ours_no_filter`` contender keeps them; ``ours_static`` is ours with the HF backend's opt-in
static-KV-cache decode step (same samples; the ``ours/ours_static`` ratio is its measured speedup);
``ours_fast`` adds ``run.micro_batch_rows`` (the loss pass in chunks of rows of similar length, each padded
to its own longest row; the same loss up to float rounding, ``losses.chunk_share``); ``ours_packed`` is
``ours_static`` with ``run.packed_forward`` (the loss pass's projections and MLP on the real tokens only,
``llm_harness/trainer/packed_forward.py``; the same log-probs and gradients up to float rounding).
TRL runs on CPU without vLLM, in float32 like ours (``bf16=False``: TRL's default is bf16 autocast
even on CPU, which on a CPU without bf16 GEMMs made its training pass ~11x ours in the committed
2026-12-01 run; the script refuses to time TRL under any mixed precision). Needs ``pip install trl``
(the ``bench`` extra); without it only our contenders run (``contenders`` must then omit ``trl``).

Model: ``--model`` (a saved test-bed checkpoint, default ``llm_harness/testbed/checkpoints/mid``);
if that folder does not exist, a test-bed-shaped Qwen2 is SFT-trained for ``bootstrap_steps`` steps
and cached under ``cache_dir``.

Run: ``python benchmarks/trainer_vs_trl.py --steps 12 --repeats 5`` on a quiet machine.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# as the vsr CLI: idle OpenMP threads sleep instead of spinning (on a busy machine a spinning
# thread that lost its core stalls every parallel region; set before torch loads OpenMP)
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch

from vsr_util.atomic import write_text
from vsr_util.config_io import save_config

#: contender -> what it runs (ours: zero-variance filter on, as the trainer's default)
CONTENDERS = {
    "ours": "this trainer (defaults)",
    "ours_no_filter": "this trainer, zero-variance groups kept (as TRL)",
    "ours_static": "this trainer with run.static_decode (llm_harness/backends/static_decode.py)",
    "ours_fast": "this trainer with run.static_decode and run.micro_batch_rows (fast_micro_batch_rows)",
    "ours_packed": "this trainer with run.static_decode and run.packed_forward (llm_harness/trainer/packed_forward.py)",
    "ours_lean": "the lean step at equal work (groups kept): static decode, inverse-CDF sampler, each group's prompt "
                 "once in the loss pass, fused AdamW; float32",
    "ours_lean_packed": "ours_lean with run.packed_forward: each group's prompt once and every projection on real "
                        "tokens only (llm_harness/trainer/packed_group.py)",
    "ours_lean_bf16": "ours_lean with run.precision bf16 (bf16 autocast, float32 master weights, rollout correction)",
    "ours_lean_unpacked": "ours_lean with run.packed_weights false (the static decoder's plain matmuls)",
    "ours_lean_bf16_unpacked": "ours_lean_bf16 with run.packed_weights false",
    "ours_lean_bf16_inpass": "ours_lean_bf16 with run.anchor_in_pass (pi_old from the update's own forward pass)",
    "trl": "TRL GRPOTrainer (float32)",
    "trl_bf16": "TRL GRPOTrainer with bf16=True (its default precision)",
}
_LEAN = {"static_decode": True, "sampler": "inverse_cdf", "group_prompt_once": True, "fused_optimizer": True}
#: our contenders: (zero-variance filter, RunConfig overrides; "micro": run.micro_batch_rows = fast_micro_batch_rows)
OURS_OPTIONS: dict[str, tuple[bool, dict[str, Any]]] = {
    "ours": (True, {}),
    "ours_no_filter": (False, {}),
    "ours_static": (True, {"static_decode": True}),
    "ours_fast": (True, {"static_decode": True, "micro": True}),
    "ours_packed": (True, {"static_decode": True, "packed_forward": True}),
    "ours_lean": (False, dict(_LEAN)),
    "ours_lean_packed": (False, {**_LEAN, "packed_forward": True}),
    "ours_lean_bf16": (False, {**_LEAN, "precision": "bf16"}),
    "ours_lean_unpacked": (False, {**_LEAN, "packed_weights": False}),
    "ours_lean_bf16_unpacked": (False, {**_LEAN, "precision": "bf16", "packed_weights": False}),
    "ours_lean_bf16_inpass": (False, {**_LEAN, "precision": "bf16", "anchor_in_pass": True}),
}
#: TRL contenders -> bf16
TRL_CONTENDERS = {"trl": False, "trl_bf16": True}
#: contenders whose GEMM limit is the bf16 rate
BF16_CONTENDERS = ("ours_lean_bf16", "ours_lean_bf16_unpacked", "ours_lean_bf16_inpass", "trl_bf16")
#: ratios reported: (slower candidate, faster candidate) -> s/step(first) / s/step(second), per repeat
RATIOS = (("trl", "ours"), ("trl", "ours_no_filter"), ("trl", "ours_static"), ("trl", "ours_fast"), ("trl", "ours_packed"),
          ("ours", "ours_static"), ("ours", "ours_fast"), ("ours_static", "ours_packed"), ("trl", "ours_lean"),
          ("trl_bf16", "ours_lean_bf16"), ("ours_no_filter", "ours_lean"), ("ours_lean", "ours_lean_bf16"),
          ("trl", "trl_bf16"), ("ours_lean_unpacked", "ours_lean"), ("ours_lean_bf16_unpacked", "ours_lean_bf16"),
          ("trl", "ours_lean_bf16"), ("trl_bf16", "ours_lean"), ("trl_bf16", "ours_lean_bf16_inpass"),
          ("ours_lean_bf16", "ours_lean_bf16_inpass"), ("trl", "ours_lean_bf16_inpass"), ("trl", "ours_lean_packed"),
          ("ours_lean", "ours_lean_packed"))


@dataclass(frozen=True)
class TrlBenchConfig:
    """Options of the trainer-vs-TRL benchmark."""

    model: str = "llm_harness/testbed/checkpoints/mid"
    """Saved model folder, or a registered real model (``smollm2-135m-instruct``: imported by ``vsr model
    import``); a missing folder falls back to a bootstrapped SFT test-bed model (module doc)."""
    task: str = "step_arith"
    """Registered task of both trainers (``arith_ladder`` for the real model: its chat template is used)."""
    cache_dir: str = "runs/bench_cache"
    """Where the bootstrapped model is cached."""
    bootstrap_steps: int = 400
    """SFT steps (64 expert sequences each, lr 2e-3) of the bootstrapped model."""
    contenders: tuple[str, ...] = ("ours", "trl")
    """Run order within a repeat (keys of ``CONTENDERS``: ``ours``, ``ours_no_filter``, ``ours_static``,
    ``ours_fast``, ``ours_packed``, ``trl``); each pair of ``RATIOS`` present gets its interleaved ratio."""
    repeats: int = 5
    """Interleaved repeats (each runs every contender once)."""
    steps: int = 12
    """Timed GRPO steps per run."""
    warmup_steps: int = 1
    """Untimed steps at the start of every run (first-call allocations)."""
    prompts: int = 8
    """Prompts per step."""
    group_size: int = 8
    """Samples per prompt."""
    max_new_tokens: int = 96
    """Response budget."""
    lr: float = 2e-4
    """Learning rate of both trainers."""
    eval_problems: int = 200
    """Validation problems for held-out accuracy after each contender's repeat-0 run (0: skip)."""
    eval_k: int = 4
    """Samples per validation problem."""
    threads: int = 2
    """torch CPU threads (the GEMM limit is measured at the same count)."""
    fast_micro_batch_rows: int = 16
    """``run.micro_batch_rows`` of the ``ours_fast`` contender (rows of similar length per loss pass)."""
    seed: int = 0
    """Seed of repeat 0 (repeat r uses seed + r for every contender)."""
    gemm_repeats: int = 20
    """Timings per matmul shape of the limit (the fastest is used)."""
    limit_each_repeat: bool = True
    """Also time the GEMM limit right after every repeat, at that repeat's shapes, and report each run's fraction
    against the limit timed next to it (``limit_fraction_adjacent``): the host's matmul rate drifts within a day
    far more than a step's time does, so a limit timed once at the end can flatter or sink the fraction."""
    out: str = "runs/bench/trainer_vs_trl.json"
    """JSON of the results (every run, the summary; the config is saved beside it)."""

    def __post_init__(self) -> None:
        from vsr_util.checks import check_number

        for n in ("repeats", "steps", "prompts", "group_size", "max_new_tokens", "eval_k", "threads", "gemm_repeats",
                  "fast_micro_batch_rows"):
            check_number(n, getattr(self, n), 1, integer=True)
        check_number("warmup_steps", self.warmup_steps, 0, integer=True)
        check_number("eval_problems", self.eval_problems, 0, integer=True)
        if not self.contenders or any(c not in CONTENDERS for c in self.contenders):
            raise ValueError(f"contenders: each must be one of {sorted(CONTENDERS)}, got {list(self.contenders)}")
        if len(set(self.contenders)) != len(self.contenders):
            raise ValueError(f"contenders: duplicates in {list(self.contenders)}")
        if self.group_size < 2:
            raise ValueError("group_size: GRPO needs >= 2 samples per prompt")


# ------------------------------------------------------------------------------ model


def _bootstrap(cfg: TrlBenchConfig) -> Path:
    from llm_harness.tasks import get_task
    from llm_harness.testbed.model import TestbedModelConfig, make_model
    from llm_harness.testbed.tokenizer import build_tokenizer, save_tokenizer
    from llm_harness.trainer.config import AlgoConfig, OptimConfig, RolloutConfig, RunConfig, TrainConfig
    from llm_harness.trainer.entry import build_backend
    from llm_harness.trainer.loop import Trainer

    out = Path(cfg.cache_dir) / f"sft_{cfg.bootstrap_steps}"
    if (out / "config.json").is_file():
        return out
    tok = build_tokenizer()
    model = make_model(TestbedModelConfig(), tok, seed=cfg.seed)
    tcfg = TrainConfig(
        seed=cfg.seed,
        steps=cfg.bootstrap_steps,
        rollout=RolloutConfig(prompts_per_step=64, group_size=1, max_new_tokens=cfg.max_new_tokens, verify_timeout_s=0),
        algo=AlgoConfig(collector="expert", objective="sft", advantage="constant", filter_zero_variance=False),
        optim=OptimConfig(lr=2e-3, weight_decay=0.01, warmup_steps=50),
        run=RunConfig(run_dir=str(Path(cfg.cache_dir) / "bootstrap_run"), checkpoint_every=0, progress=True),
    )
    tr = Trainer(tcfg, model=model, tokenizer=tok, backend=build_backend(model, tok, tcfg), task=get_task("step_arith"))
    for _ in range(cfg.bootstrap_steps):
        tr.train_step()
    tr.close()
    model.save_pretrained(out)
    save_tokenizer(tok, out)
    return out


def _load(path: Path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True).float().eval()
    tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    return model, tok


def _accuracy(model, tok, task, cfg: TrlBenchConfig) -> tuple[float, float]:
    from llm_harness.backends import HFBackend, HFBackendConfig
    from llm_harness.trainer.evaluation import SamplingSession, evaluate_policy
    from llm_harness.trainer.modeling import Codec
    from llm_harness.trainer.rollout import SafeVerifier

    model.eval()
    be = HFBackend(model, tok, config=HFBackendConfig(pad_token_id=tok.pad_token_id))
    probs = list(task.problems("validation"))[: cfg.eval_problems]
    session = SamplingSession(be, Codec(tok), task, SafeVerifier(task, 0), temperature=1.0,
                              max_new_tokens=cfg.max_new_tokens)
    res = evaluate_policy(session, probs, k=cfg.eval_k, seed=cfg.seed + 99)
    acc = res["avg_at_k"]
    return acc, math.sqrt(max(acc * (1 - acc), 1e-12) / len(probs))


# ------------------------------------------------------------------------------ FLOPs and the GEMM limit


@dataclass(frozen=True)
class ModelShapes:
    """Matmul shapes of a decoder-only model: ``linears[(in, out)]`` = count per token, attention width."""

    linears: dict[tuple[int, int], int]
    """(in_features, out_features) -> number of such weight matrices a token passes through (all layers)."""
    head: tuple[int, int]
    """LM head (hidden, vocab)."""
    layers: int
    attn_width: int
    """n_heads x head_dim (width of Q K^T and A V per layer)."""

    @property
    def linear_flops_per_token(self) -> int:
        return sum(2 * i * o * c for (i, o), c in self.linears.items())

    @property
    def head_flops_per_token(self) -> int:
        return 2 * self.head[0] * self.head[1]

    def attn_flops(self, ctx: int) -> int:
        """Q K^T and A V of one query token over ``ctx`` keys, all layers."""
        return 4 * self.layers * self.attn_width * ctx


def model_shapes(model: Any) -> ModelShapes:
    """Shapes of ``model``'s decoder linears and head (a transformers ``*ForCausalLM``)."""
    lin: dict[tuple[int, int], int] = {}
    for mod in model.get_decoder().modules():
        if isinstance(mod, torch.nn.Linear):
            key = (int(mod.in_features), int(mod.out_features))
            lin[key] = lin.get(key, 0) + 1
    head = model.get_output_embeddings().weight
    c = model.config
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    return ModelShapes(lin, (int(head.shape[1]), int(head.shape[0])), int(c.num_hidden_layers),
                       int(c.num_attention_heads * head_dim))


def step_flops(shapes: ModelShapes, generated: list[tuple[int, list[int]]], trained: list[tuple[int, int]],
               shared_contexts: list[int] | None = None) -> dict:
    """Useful FLOPs of one step.

    ``generated``: per group ``(context length P, [response lengths R_i])``; the context is prefilled
    once per group (the backend shares it across the G samples), token ``t`` of a response is
    forwarded at context ``P + t`` except the last one drawn (its logits are never needed); the
    head runs on the last prefill position and on every decode forward.
    ``trained``: per trained sequence ``(context length, response length)``: forward over all
    positions, head on the response positions, backward = 2 x forward.
    ``shared_contexts`` (the trained groups' start-state context lengths): the loss pass's useful work runs each
    group's context once (``run.group_prompt_once`` does exactly that work, so the unshared pass's repeats of the
    context are not counted as useful); ``train_flops`` then subtracts the repeats' linear-layer FLOPs.
    """
    lin, head = shapes.linear_flops_per_token, shapes.head_flops_per_token
    dec = pre = 0
    for P, rs in generated:
        pre += P * lin + sum(shapes.attn_flops(p + 1) for p in range(P)) + head
        dec += P * lin + sum(shapes.attn_flops(p + 1) for p in range(P)) + head
        for R in rs:
            for t in range(1, R):  # forwards of tokens 0..R-2 at context P + t
                dec += lin + shapes.attn_flops(P + t) + head
    fwd = 0
    for P, R in trained:
        L = P + R
        fwd += L * lin + sum(shapes.attn_flops(p + 1) for p in range(L)) + R * head
    if shared_contexts is not None:
        n_rows = len(trained)
        rows_per_group = n_rows / max(1, len(shared_contexts))
        fwd -= sum((rows_per_group - 1) * P * lin for P in shared_contexts)
    # ``decode_flops`` includes the prefill; ``prefill_flops`` is that part (it runs at a prefill GEMM shape)
    return {"decode_flops": float(dec), "prefill_flops": float(pre), "train_flops": float(3 * fwd)}


def _time_mm(m: int, k: int, n: int, repeats: int, dtype: torch.dtype = torch.float32) -> float:
    """Best seconds of one ``[m, k] @ [k, n]`` (``dtype``, current torch threads): the fastest of ``repeats``
    timings, each over enough back-to-back calls to last >= 1 ms (a limit is a best case, so the
    fastest timing, not the median, is the one a busy machine distorts least)."""
    a, b = torch.randn(m, k).to(dtype), torch.randn(k, n).to(dtype)
    out = torch.empty(m, n, dtype=dtype)
    for _ in range(3):
        torch.mm(a, b, out=out)
    inner = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(inner):
            torch.mm(a, b, out=out)
        if time.perf_counter() - t0 >= 1e-3 or inner >= 1 << 16:
            break
        inner *= 2
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(inner):
            torch.mm(a, b, out=out)
        best = min(best, (time.perf_counter() - t0) / inner)
    return best


def gemm_rate(shapes: ModelShapes, rows: int, repeats: int, *, backward: bool, dtype: torch.dtype = torch.float32) -> float:
    """FLOP/s of the model's matmuls at ``rows`` rows: the forward shapes ``[rows, in] @ [in, out]`` and,
    with ``backward``, the two gradient shapes (``[rows, out] @ [out, in]``, ``[in, rows] @ [rows, out]``),
    each weighted by how often a token meets it; the head included."""
    flops = secs = 0.0
    items = list(shapes.linears.items()) + [(shapes.head, 1)]
    for (i, o), c in items:
        mats = [(rows, i, o)] + ([(rows, o, i), (i, rows, o)] if backward else [])
        for m, k, n in mats:
            flops += 2.0 * m * k * n * c
            secs += _time_mm(m, k, n, repeats, dtype) * c
    return flops / secs


# ------------------------------------------------------------------------------ contenders


def _load_avg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def ours_train_config(path: Path, cfg: Any, seed: int, *, filter_zero: bool, run_over: dict[str, Any], name: str,
                      micro_rows: int = 0) -> Any:
    """The ``TrainConfig`` of one of our contenders (``OURS_OPTIONS``) at ``cfg``'s batch, budget and learning rate:
    ``warmup_steps + steps`` steps, no checkpoints, a run folder beside ``cfg.out``; ``run_over["micro"]`` sets
    ``run.micro_batch_rows`` to ``micro_rows``."""
    from llm_harness.trainer.config import AlgoConfig, ModelConfig, OptimConfig, RolloutConfig, RunConfig, TrainConfig

    return TrainConfig(
        seed=seed,
        steps=cfg.warmup_steps + cfg.steps,
        model=ModelConfig(path=str(path)),
        rollout=RolloutConfig(prompts_per_step=cfg.prompts, group_size=cfg.group_size, max_new_tokens=cfg.max_new_tokens,
                              verify_timeout_s=0),
        algo=AlgoConfig(filter_zero_variance=filter_zero),
        optim=OptimConfig(lr=cfg.lr, grad_clip=1.0),
        run=RunConfig(run_dir=str(Path(cfg.out).parent / f"run_{name}"), checkpoint_every=0, progress=False,
                      micro_batch_rows=micro_rows if run_over.get("micro") else 0,
                      **{k: v for k, v in run_over.items() if k != "micro"}),
    )


def _ours(path: Path, task, cfg: TrlBenchConfig, seed: int, *, filter_zero: bool, run_over: dict[str, Any],
          evaluate: bool, name: str = "ours") -> dict:
    from llm_harness.trainer.entry import build_backend
    from llm_harness.trainer.loop import Trainer
    from llm_harness.trainer.plugins import StepRecorder

    model, tok = _load(path)
    n_steps = cfg.warmup_steps + cfg.steps
    tcfg = ours_train_config(path, cfg, seed, filter_zero=filter_zero, run_over=run_over, name=name,
                             micro_rows=cfg.fast_micro_batch_rows)
    rec = StepRecorder()
    backend = build_backend(model, tok, tcfg)
    decode = [0.0]
    real_generate = backend.generate

    def timed_generate(*a, **kw):
        t0 = time.perf_counter()
        try:
            return real_generate(*a, **kw)
        finally:
            decode[0] += time.perf_counter() - t0

    backend.generate = timed_generate
    tr = Trainer(tcfg, model=model, tokenizer=tok, backend=backend, task=task, extra_plugins=[rec])
    if tcfg.run.precision == "bf16" and not tr.bf16:
        raise RuntimeError(f"{name}: bf16 is not native on this machine ({tr.device}); drop the bf16 contenders")
    rows, decodes, walls = [], [], []
    threads_seen = set()
    for _ in range(n_steps):
        threads_seen.add(torch.get_num_threads())
        decode[0] = 0.0
        t0 = time.perf_counter()
        rows.append(tr.train_step())
        walls.append(time.perf_counter() - t0)
        decodes.append(decode[0])
    tr.close()
    w = cfg.warmup_steps
    timed, steps = rows[w:], rec.records[w:]
    shapes = model_shapes(model)
    flops = {"decode_flops": 0.0, "prefill_flops": 0.0, "train_flops": 0.0, "prefill_tokens": 0.0}
    for st in steps:
        flops["prefill_tokens"] += sum(len(g.start.context_ids) for g in st.groups) / len(steps)
        gen = [(len(g.start.context_ids), [len(r) for r in g.response_ids]) for g in st.groups]
        trn = [(len(g.context(i)), len(g.response_ids[i])) for g in st.trained for i in range(g.size)]
        f = step_flops(shapes, gen, trn, shared_contexts=[len(g.start.context_ids) for g in st.trained])
        for k in f:
            flops[k] += f[k] / len(steps)
    split = {k: sum(r[k] for r in timed) / cfg.steps for k in ("time_generate_s", "time_score_s", "time_train_s",
                                                                   "time_plugins_s")}
    s_per_step = sum(walls[w:]) / cfg.steps
    out = {
        "s_per_step": s_per_step,
        "decode_s": sum(decodes[w:]) / cfg.steps,
        **split,
        "other_s": s_per_step - split["time_generate_s"] - split["time_score_s"] - split["time_train_s"],
        "train_reward": sum(r["reward_mean"] for r in timed) / len(timed),
        "gen_new_tokens": sum(r["gen_new_tokens"] for r in timed) / len(timed),
        "trained_samples": sum(r["trained_samples"] for r in timed) / len(timed),
        "decode_rows": cfg.prompts * cfg.group_size,
        "static_decode": bool(tr.backend.config.static_decode),
        "packed_forward": bool(tcfg.run.packed_forward),
        "run_options": {k: v for k, v in run_over.items()},
        "bf16": bool(tr.bf16),
        "peak_rss_gb": max(tr.memory.peaks.values(), default=0) / 2**30,
        "mismatch_logp_mean": (sum(r.get("mismatch_logp_mean", 0.0) for r in timed) / len(timed)) if tr.bf16 else None,
        "micro_batch_rows": int(tcfg.run.micro_batch_rows),
        "torch_threads": sorted(threads_seen),
        "trained_tokens": sum(sum(len(g.context(i)) + len(g.response_ids[i]) for g in st.trained for i in range(g.size))
                              for st in steps) / len(steps),
        **flops,
    }
    if evaluate:
        out["acc"], out["acc_se"] = _accuracy(model, tok, task, cfg)
    return out


def _trl(path: Path, task, cfg: TrlBenchConfig, seed: int, *, evaluate: bool, bf16: bool = False) -> dict:
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    model, tok = _load(path)
    n_steps = cfg.warmup_steps + cfg.steps
    probs = list(task.problems("train"))[: max(n_steps * cfg.prompts, 64)]
    by_prompt = {task.render_prompt(p, tok): p for p in probs}
    ds = Dataset.from_dict({"prompt": list(by_prompt)})
    rewards_seen: list[float] = []

    def reward(prompts, completions, **kw):
        out = []
        for p, c in zip(prompts, completions):
            text = c
            for special in {tok.eos_token, tok.pad_token} - {None}:
                text = text.replace(special, "")
            out.append(task.verify(by_prompt[p], text).reward)
        rewards_seen.extend(out)
        return out

    args = GRPOConfig(
        output_dir=str(Path(cfg.out).parent / "trl"),
        per_device_train_batch_size=cfg.prompts * cfg.group_size,
        num_generations=cfg.group_size,
        gradient_accumulation_steps=1,
        max_completion_length=cfg.max_new_tokens,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        beta=0.0,
        epsilon=0.2,
        epsilon_high=0.28,
        loss_type="dapo",
        learning_rate=cfg.lr,
        lr_scheduler_type="constant",
        warmup_steps=0,
        max_grad_norm=1.0,
        max_steps=n_steps,
        use_cpu=True,
        report_to="none",
        logging_steps=max(1, n_steps),
        save_strategy="no",
        seed=seed,
        disable_dropout=True,
        gradient_checkpointing=False,
        # TRL defaults to bf16 autocast (``bf16 = not fp16``), also on CPU: on a CPU without bf16 GEMMs
        # (``torch.ops.mkldnn._is_mkldnn_bf16_supported()`` False, as on an AVX2 machine) every matmul takes a
        # slow fallback; the float32 contender compares float32 with float32, ``trl_bf16`` bf16 with our bf16 mode
        bf16=bf16,
        fp16=False,
    )
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=args, train_dataset=ds, processing_class=tok)
    acc_t: dict[str, float] = {}

    def wrap(name: str) -> None:
        real = getattr(trainer, name)

        def timed(*a, **kw):
            t0 = time.perf_counter()
            try:
                return real(*a, **kw)
            finally:
                acc_t[name] = acc_t.get(name, 0.0) + time.perf_counter() - t0

        setattr(trainer, name, timed)

    for name in ("_generate_single_turn", "_generate", "_calculate_rewards", "_generate_and_score_completions"):
        wrap(name)
    per_step: list[dict[str, float]] = []

    threads_seen: set[int] = set()

    class StepClock(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            threads_seen.add(torch.get_num_threads())
            acc_t.clear()
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            per_step.append({"step": time.perf_counter() - self.t0, **acc_t})
            threads_seen.add(torch.get_num_threads())

    trainer.add_callback(StepClock())
    precision = str(trainer.accelerator.mixed_precision)
    if precision != ("bf16" if bf16 else "no"):
        raise RuntimeError(f"TRL runs under mixed precision {precision!r}; this contender needs "
                           f"{'bf16' if bf16 else 'float32 (no mixed precision)'}")
    trainer.train()
    if len(per_step) != n_steps:
        raise RuntimeError(f"TRL ran {len(per_step)} optimizer steps, expected {n_steps}")
    timed = per_step[cfg.warmup_steps:]

    def mean(k: str) -> float:
        return sum(s.get(k, 0.0) for s in timed) / len(timed)

    prep = mean("_generate_and_score_completions")
    out = {
        "s_per_step": mean("step"),
        "decode_s": mean("_generate_single_turn"),
        "generate_s": mean("_generate"),
        "reward_s": mean("_calculate_rewards"),
        "score_other_s": prep - mean("_generate") - mean("_calculate_rewards"),
        "train_s": mean("step") - prep,
        "train_reward": sum(rewards_seen) / max(1, len(rewards_seen)),
        "torch_threads": sorted(threads_seen),
        "mixed_precision": precision,
    }
    if evaluate:
        # evaluate a clean copy of the trained weights (TRL leaves its training wrappers on the model)
        state = {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}
        model, tok = _load(path)
        model.load_state_dict(state)
        out["acc"], out["acc_se"] = _accuracy(model, tok, task, cfg)
    return out


# ------------------------------------------------------------------------------ driver


def _summary(runs: list[dict], cfg: TrlBenchConfig, limit: dict) -> dict:
    """Per-contender s/step (median, min, max), the interleaved ratios of ``RATIOS``, and the limit
    fraction of every run of ours (its FLOPs at the measured GEMM rates over its s/step)."""
    by = {c: [r for r in runs if r["contender"] == c] for c in cfg.contenders}
    s: dict[str, Any] = {"contenders": {}, "ratios": {}}
    for c, rs in by.items():
        sps = [r["s_per_step"] for r in rs]
        s["contenders"][c] = {"s_per_step_median": statistics.median(sps), "s_per_step_min": min(sps),
                              "s_per_step_max": max(sps)}
    for a, b in RATIOS:
        if a in by and b in by:
            q = [x["s_per_step"] / y["s_per_step"] for x, y in zip(by[a], by[b])]  # same repeat
            s["ratios"][f"{a}/{b}"] = {"median": statistics.median(q), "min": min(q), "max": max(q), "per_repeat": q}
    for c, rs in by.items():
        if c in TRL_CONTENDERS or not limit:
            continue
        for r in rs:
            r["limit_s"] = limit_seconds(r, limit, bf16=c in BF16_CONTENDERS)
            r["limit_fraction"] = r["limit_s"] / r["s_per_step"]
            if r.get("repeat_limit"):  # the limit timed right after this run's repeat
                r["limit_s_adjacent"] = limit_seconds(r, r["repeat_limit"], bf16=c in BF16_CONTENDERS)
                r["limit_fraction_adjacent"] = r["limit_s_adjacent"] / r["s_per_step"]
        for key in ("limit_fraction", "limit_fraction_adjacent"):
            fr = [r[key] for r in rs if key in r]
            if fr:
                s.setdefault(key, {})[c] = {"median": statistics.median(fr), "min": min(fr), "max": max(fr)}
    return s


def limit_seconds(r: dict, limit: dict, *, bf16: bool) -> float:
    """Seconds run ``r``'s FLOPs take at the GEMM rates of ``limit`` (its ``bf16`` rates for a bf16 contender):
    the prefill at the prefill rate, the rest of decode at the decode rate, training at the training rate."""
    rates = limit.get("bf16", limit) if bf16 else limit
    pre = r.get("prefill_flops", 0.0)
    return (pre / rates.get("prefill_flops_per_s", rates["decode_flops_per_s"])
            + (r["decode_flops"] - pre) / rates["decode_flops_per_s"]
            + r["train_flops"] / rates["train_flops_per_s"])


def measure_limit(shapes: ModelShapes, cfg: TrlBenchConfig, ours: list[dict]) -> dict[str, Any]:
    """The GEMM limit at the shapes of the runs ``ours`` (decode rows; their median prefill and trained tokens,
    forward + backward): float32 rates, and bf16 rates when a bf16 contender is in ``cfg``."""
    tokens = max(1, int(round(statistics.median(x["trained_tokens"] for x in ours))))
    prefill = max(1, int(round(statistics.median(x["prefill_tokens"] for x in ours))))
    rows = cfg.prompts * cfg.group_size
    limit: dict[str, Any] = {"threads": cfg.threads, "dtype": "float32", "decode_rows": rows, "train_rows": tokens,
                             "prefill_rows": prefill}
    dts = [("float32", torch.float32)] + ([("bf16", torch.bfloat16)] if any(c in BF16_CONTENDERS for c in cfg.contenders)
                                          else [])
    for name, dt in dts:
        rates = {"prefill_flops_per_s": gemm_rate(shapes, prefill, cfg.gemm_repeats, backward=False, dtype=dt),
                 "decode_flops_per_s": gemm_rate(shapes, rows, cfg.gemm_repeats, backward=False, dtype=dt),
                 "train_flops_per_s": gemm_rate(shapes, tokens, cfg.gemm_repeats, backward=True, dtype=dt)}
        if name == "float32":
            limit.update(rates)
        else:
            limit["bf16"] = {"dtype": "bfloat16", **rates}
    return limit


def run(cfg: TrlBenchConfig) -> int:
    """Run the benchmark (module doc), print a table, write the JSON and config."""
    from llm_harness.tasks import get_task

    torch.set_num_threads(cfg.threads)
    if set(TRL_CONTENDERS) & set(cfg.contenders):
        try:
            import trl  # noqa: F401
        except ImportError:
            raise ValueError("contenders: 'trl' needs the trl package (pip install 'vsr-toolkit[bench]'), "
                             "or drop it: --contenders ours ours_no_filter") from None
    from llm_harness.models.named import MODELS

    task = get_task(cfg.task)
    path = Path(cfg.model)
    if cfg.model in MODELS:  # a registered real model: its verified folder in the cache
        from llm_harness.models.gguf_import import ImportConfig, import_model

        path = import_model(ImportConfig(source=cfg.model))
    if not (path / "config.json").is_file():
        print(f"{path} not found: bootstrapping an SFT model ({cfg.bootstrap_steps} steps)", file=sys.stderr)
        path = _bootstrap(cfg)
    load0 = _load_avg()
    model, _ = _load(path)
    shapes = model_shapes(model)
    del model
    runs: list[dict] = []
    initial = None
    if cfg.eval_problems:
        m, tok = _load(path)
        initial = dict(zip(("acc", "acc_se"), _accuracy(m, tok, task, cfg)))
        del m
    for r in range(cfg.repeats):
        for c in cfg.contenders:
            la = _load_avg()
            ev = bool(cfg.eval_problems) and r == 0
            if c in TRL_CONTENDERS:
                res = _trl(path, task, cfg, cfg.seed + r, evaluate=ev, bf16=TRL_CONTENDERS[c])
            else:
                filter_zero, run_over = OURS_OPTIONS[c]
                res = _ours(path, task, cfg, cfg.seed + r, filter_zero=filter_zero, run_over=run_over, evaluate=ev,
                            name=c)
            res.update({"contender": c, "repeat": r, "seed": cfg.seed + r, "load_before": la, "load_after": _load_avg()})
            if res["torch_threads"] != [cfg.threads]:
                raise RuntimeError(f"{c}: ran with torch threads {res['torch_threads']}, not {cfg.threads}")
            runs.append(res)
            print(f"repeat {r} {c:15s} s/step={res['s_per_step']:.4f}  load {la[0]:.2f} -> {res['load_after'][0]:.2f}",
                  file=sys.stderr)
        mine = [x for x in runs if x["repeat"] == r and x["contender"] not in TRL_CONTENDERS]
        if cfg.limit_each_repeat and mine:  # the limit next to this repeat's runs, at their shapes
            lim_r = measure_limit(shapes, cfg, mine)
            for x in mine:
                x["repeat_limit"] = lim_r
    # the GEMM limit at the shapes of our step over all repeats (decode rows; trained tokens, forward + backward)
    ours = [x for x in runs if x["contender"] not in TRL_CONTENDERS]
    limit: dict[str, Any] = measure_limit(shapes, cfg, ours) if ours else {}
    summary = _summary(runs, cfg, limit)
    load1 = _load_avg()
    busy = max(load0[0], load1[0], *(x["load_before"][0] for x in runs), *(x["load_after"][0] for x in runs))
    result = {
        "model": str(path), "threads": cfg.threads, "cpu_count": os.cpu_count(), "torch": torch.__version__,
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", ""),
        "load_before": load0, "load_after": load1, "max_load_1min": busy,
        "loaded_machine": busy > cfg.threads,
        "initial": initial, "limit": limit, "summary": summary, "runs": runs,
    }
    out = Path(cfg.out)
    write_text(out, json.dumps(result, indent=2) + "\n")
    save_config(cfg, out.with_suffix(".config.yaml"))
    print(format_report(result, cfg))
    return 0


def format_report(res: dict, cfg: TrlBenchConfig) -> str:
    """The printed table of :func:`run`'s result."""
    s = res["summary"]
    lines = [f"model: {res['model']}  batch: {cfg.prompts}x{cfg.group_size}  max_new_tokens: {cfg.max_new_tokens}  "
             f"threads: {cfg.threads}/{res['cpu_count']} cores  repeats: {cfg.repeats} x {cfg.steps} timed steps "
             f"(+{cfg.warmup_steps} warm-up)",
             f"load average (1/5/15 min): before {res['load_before']}  after {res['load_after']}  "
             f"max 1-min during runs {res['max_load_1min']}"]
    if res["loaded_machine"]:
        lines.append("WARNING: the 1-min load exceeded the thread count: another process competed for the cores; "
                     "the times below are indicative only")
    for c, v in s["contenders"].items():
        lines.append(f"{c:15s} s/step median {v['s_per_step_median']:.4f}  [min {v['s_per_step_min']:.4f}, "
                     f"max {v['s_per_step_max']:.4f}]")
    for key, q in s["ratios"].items():
        lines.append(f"speed ratio s/step {key}: median {q['median']:.2f}x  [min {q['min']:.2f}x, max {q['max']:.2f}x] "
                     f"over {len(q['per_repeat'])} interleaved repeats")
    split_ours = ("decode_s", "time_generate_s", "time_score_s", "time_train_s", "other_s")
    split_trl = ("decode_s", "generate_s", "reward_s", "score_other_s", "train_s")
    for c in cfg.contenders:
        rs = [r for r in res["runs"] if r["contender"] == c]
        keys = split_trl if c in TRL_CONTENDERS else split_ours
        med = {k: statistics.median(r[k] for r in rs) for k in keys}
        lines.append(f"{c:15s} split (median s/step): " + "  ".join(f"{k}={v:.4f}" for k, v in med.items()))
    lim = res["limit"]
    if lim:
        lines.append(f"GEMM limit ({lim['threads']} threads, {lim['dtype']}, fastest of {cfg.gemm_repeats} timings): "
                     f"prefill {lim.get('prefill_flops_per_s', float('nan')) / 1e9:.2f} GFLOP/s at "
                     f"{lim.get('prefill_rows')} rows, decode {lim['decode_flops_per_s'] / 1e9:.2f} GFLOP/s at {lim['decode_rows']} rows, train "
                     f"{lim['train_flops_per_s'] / 1e9:.2f} GFLOP/s at {lim['train_rows']} rows")
        if "bf16" in lim:
            b = lim["bf16"]
            lines.append(f"GEMM limit bf16 (same shapes): prefill {b['prefill_flops_per_s'] / 1e9:.2f}, decode "
                         f"{b['decode_flops_per_s'] / 1e9:.2f}, train {b['train_flops_per_s'] / 1e9:.2f} GFLOP/s")
    for c, q in s.get("limit_fraction", {}).items():
        rs = [r for r in res["runs"] if r["contender"] == c]
        lines.append(f"{c:15s} {statistics.median(r['decode_flops'] for r in rs) / 1e9:.3f} GFLOP decode + "
                     f"{statistics.median(r['train_flops'] for r in rs) / 1e9:.3f} GFLOP train per step -> limit "
                     f"{statistics.median(r['limit_s'] for r in rs):.4f} s/step; fraction of the limit: median "
                     f"{q['median']:.4f} [min {q['min']:.4f}, max {q['max']:.4f}]")
    adj = s.get("limit_fraction_adjacent", {})
    if adj:
        seen = {}
        for r in res["runs"]:
            if r.get("repeat_limit"):
                seen[r["repeat"]] = r["repeat_limit"]
        lines.append("GEMM limit timed after each repeat (float32 GFLOP/s, decode / train): " + "  ".join(
            f"r{k} {v['decode_flops_per_s'] / 1e9:.1f} / {v['train_flops_per_s'] / 1e9:.1f}" for k, v in sorted(seen.items())))
    for c, q in adj.items():
        lines.append(f"{c:15s} fraction of the limit timed next to each run: median {q['median']:.4f} "
                     f"[min {q['min']:.4f}, max {q['max']:.4f}]")
    for r in res["runs"]:
        if "acc" in r:
            lines.append(f"held-out avg@{cfg.eval_k} after {r['contender']} (repeat 0): {r['acc']:.3f} ± {r['acc_se']:.3f}")
    if res.get("initial"):
        lines.append(f"held-out avg@{cfg.eval_k} before training: {res['initial']['acc']:.3f} ± {res['initial']['acc_se']:.3f}")
    return "\n".join(lines)


if __name__ == "__main__":
    import tyro

    sys.exit(run(tyro.cli(TrlBenchConfig)))
