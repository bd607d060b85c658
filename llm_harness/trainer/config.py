"""Frozen, validated configuration of a training run (``vsr train --config FILE``).

Every field carries a docstring; every section validates itself on construction and raises a
ValueError that starts with the field name. Registry-valued fields (estimator, aggregation,
objective, collector, backend, plug-ins) are checked against their registries in
:func:`llm_harness.trainer.loop.check_registries` (the registries own the names; this module
does not repeat them).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Mapping

from vsr_util.checks import check_number

if TYPE_CHECKING:
    from llm_harness.trainer.eval_protocols import EvalProtocol

__all__ = [
    "AgentConfig",
    "AlgoConfig",
    "EvalConfig",
    "ModelConfig",
    "OptimConfig",
    "RolloutConfig",
    "RunConfig",
    "TaskConfig",
    "TrainConfig",
    "ValidationConfig",
    "LIMITS",
    "check_number",
]

#: Upper bounds of the size-like fields, checked at validation: far above any run one machine (or a verl
#: cluster's single trainer) makes, low enough that a slip (``1e9``) is refused with the field's name before
#: memory or time is spent. A run that needs more can raise them here.
LIMITS = {
    "steps": 10_000_000,
    "prompts_per_step": 65_536,
    "group_size": 4_096,
    "rollouts_per_step": 1_048_576,  # prompts_per_step x group_size
    "max_new_tokens": 1_048_576,
    "max_batch_sequences": 65_536,
    "ppo_epochs": 1_000,
    "mini_batches": 65_536,
    "max_gen_rounds": 10_000,
    "validation_problems": 1_000_000,
    "validation_k": 4_096,
    "turn_tokens": 1_048_576,
    "max_turns": 100_000,
    "hidden_size": 65_536,
    "num_layers": 1_024,
    "num_heads": 1_024,
    "max_context": 1_048_576,
    "random_model_parameters": 4_000_000_000,  # a random model's weights (16 GB in float32)
    # torch / OpenMP threads: a fixed bound, not a multiple of this machine's cores, so that a config (a resumed
    # run's, a comparison record's) validates the same on every machine; 100,000 threads crash the process
    "num_threads": 1_024,
}



def _choice(name: str, v: Any, allowed: tuple[str, ...]) -> None:
    if v not in allowed:
        raise ValueError(f"{name}: must be one of {allowed}, got {v!r}")


@dataclass(frozen=True)
class ModelConfig:
    """Which policy to train."""

    path: str = "llm_harness/testbed/checkpoints/mid"
    """Local checkpoint folder (``from_pretrained``); ignored when ``random_init`` is True."""
    random_init: bool = False
    """Build a tiny random Qwen2 with the trainer's character tokenizer instead (tests, smoke runs)."""
    alphabet: str = "arith"
    """Random model: its character tokenizer's alphabet (registry ``modeling.ALPHABETS``: ``arith`` =
    the step-arithmetic symbols, ``text`` = printable ASCII, newline and the environments' ``√``)."""
    hidden_size: int = 32
    """Random model: hidden width."""
    num_layers: int = 2
    """Random model: decoder layers."""
    num_heads: int = 4
    """Random model: attention heads (``hidden_size`` must be divisible by it)."""
    max_context: int = 256
    """Random model: maximum positions."""
    dtype: str = "float32"
    """Weights dtype (CPU training: float32)."""
    device: str = "cpu"
    """Torch device of the policy (``cpu``, ``cuda``, ``auto``)."""
    backend: str = "hf"
    """Generation backend (registry ``llm_harness.backends.BACKENDS``: ``hf`` shares the model;
    ``vllm`` is a separate engine synced after every optimizer step)."""

    def __post_init__(self) -> None:
        for n in ("hidden_size", "num_layers", "num_heads", "max_context"):
            check_number(n, getattr(self, n), 1, LIMITS[n], integer=True)
        if self.hidden_size % self.num_heads:
            raise ValueError(f"hidden_size: {self.hidden_size} not divisible by num_heads {self.num_heads}")
        if self.random_init:  # attention ~4 h^2 and MLP 6 h^2 per layer (intermediate 2 h)
            n_params = 10 * self.num_layers * self.hidden_size**2
            if n_params > LIMITS["random_model_parameters"]:
                raise ValueError(f"hidden_size x num_layers: a random model of hidden_size {self.hidden_size} and "
                                 f"{self.num_layers} layers has about {n_params:.2e} parameters, more than the limit "
                                 f"{LIMITS['random_model_parameters']:.0e}")
        _choice("dtype", self.dtype, ("float32", "bfloat16", "float16"))
        if not self.random_init and not self.path:
            raise ValueError("path: empty (give a checkpoint folder or set random_init)")


@dataclass(frozen=True)
class TaskConfig:
    """The task and its splits."""

    name: str = "step_arith"
    """Registered task name (``llm_harness.tasks.get_task``)."""
    params: Mapping[str, Any] = field(default_factory=dict)
    """Keyword parameters of the task (e.g. ``{n_train: 2000}``)."""
    train_split: str = "train"
    """Split the fresh prompts are drawn from."""
    pool: str = ""
    """A prompt-pool file (``llm_harness.trainer.pool``): train on exactly those problems of the split
    ("": the whole split)."""

    def __post_init__(self) -> None:
        if not isinstance(self.pool, str):
            raise ValueError(f"pool: must be a file path string, got {self.pool!r}")
        if not isinstance(self.params, Mapping):
            raise ValueError(f"params: must be a mapping, got {type(self.params).__name__}")
        object.__setattr__(self, "params", dict(self.params))


@dataclass(frozen=True)
class RolloutConfig:
    """Sampling of training rollouts."""

    prompts_per_step: int = 8
    """Start states per step B (before dynamic sampling / replay)."""
    group_size: int = 8
    """Samples per start state G (a state may ask for its own ``n``)."""
    temperature: float = 1.0
    """Sampling temperature T > 0 (log-probs in the loss use the same T)."""
    top_p: float = 1.0
    """Nucleus mass in (0, 1]."""
    max_new_tokens: int = 64
    """Response budget per sample (a fixed prefix counts against it)."""
    max_batch_sequences: int = 256
    """Sequences decoded together by the HF backend."""
    share_prefix: bool = False
    """Run the token prefix common to the prompts once: in sampling (the HF backend's
    ``HFBackendConfig.share_prefix``, per micro-batch) and in the trainer's log-prob passes
    (``modeling.sequence_logprobs``, per mini-batch). Agents' prompts all start with the task
    instruction (235 of 317 tokens on the test-bed Sokoban agent). Off: bit-identical to before the
    option; on: equal up to float rounding."""
    verify_timeout_s: float = 10.0
    """Deadline of one verification; a timeout or an exception gives reward 0 and a counted warning
    (0 disables the deadline: verification runs inline)."""

    def __post_init__(self) -> None:
        check_number("prompts_per_step", self.prompts_per_step, 1, LIMITS["prompts_per_step"], integer=True)
        check_number("group_size", self.group_size, 1, LIMITS["group_size"], integer=True)
        check_number("temperature", self.temperature, 0, lo_open=True)
        check_number("top_p", self.top_p, 0, 1, lo_open=True)
        check_number("max_new_tokens", self.max_new_tokens, 1, LIMITS["max_new_tokens"], integer=True)
        check_number("max_batch_sequences", self.max_batch_sequences, 1, LIMITS["max_batch_sequences"], integer=True)
        check_number("verify_timeout_s", self.verify_timeout_s, 0)
        if not isinstance(self.share_prefix, bool):
            raise ValueError(f"share_prefix: must be a bool, got {self.share_prefix!r}")


@dataclass(frozen=True)
class AlgoConfig:
    """The update rule: estimator, loss, filtering, dynamic sampling, PPO epochs."""

    collector: str = "generate"
    """Where rollouts come from (registry ``COLLECTORS``: ``generate`` = policy samples, ``expert`` =
    task solutions for SFT)."""
    objective: str = "ppo"
    """Loss (registry ``OBJECTIVES``: ``ppo`` = clipped surrogate, ``sft`` = negative log-likelihood)."""
    advantage: str = "grpo"
    """Advantage estimator (registry: ``grpo``, ``rloo``, ``constant``)."""
    eps_sigma: float = 1e-6
    """ε_σ of the GRPO z-score (verl 1e-6; TRL 1e-4)."""
    advantage_params: Mapping[str, Any] = field(default_factory=dict)
    """Parameters of the estimator, if it takes any (``gigpo``: ``{gamma: 0.95, step_weight: 1.0, mode:
    mean_norm, episode_stats: steps}``)."""
    std_ddof: int = 1
    """Group std of the ``grpo`` estimator: 1 = Bessel-corrected (verl's and TRL's ``torch.std``, what
    the papers trained with), 0 = population std (the papers' closed forms)."""
    loss_agg: str = "token_mean"
    """Loss aggregation (registry: ``token_mean``, ``seq_mean_token_mean``, ``seq_mean_token_sum_norm``)."""
    eps_low: float = 0.2
    """Lower clip ε_low."""
    eps_high: float = 0.28
    """Upper clip ε_high (clip-higher)."""
    dual_clip: float = 10.0
    """Dual-clip bound c > 1 for negative advantages (0 disables)."""
    kl_coef: float = 0.0
    """β of the k3 KL to the initial policy (0: no reference model kept)."""
    kl_cap: float = 10.0
    """Upper clamp of the per-token k3 value (verl clamps k3 to [−10, 10]; k3 ≥ 0); 0 disables."""
    filter_zero_variance: bool = True
    """Drop groups whose (shaped) advantages are all zero before the update."""
    dynamic_sampling: bool = False
    """Removed: DAPO dynamic sampling is the plug-in ``dapo`` (``plugins: {dapo: {}}``); ``true`` is refused
    with that message."""
    max_gen_rounds: int = 4
    """Cap on generation rounds per step (plug-in refills: ``dapo``, ``reinforce_ada_est``); every
    round's tokens are counted."""
    ppo_epochs: int = 1
    """Passes over the batch per step."""
    mini_batches: int = 1
    """Optimizer steps per epoch (the batch is split into this many shuffled mini-batches)."""
    old_logprobs: str = "behaviour"
    """Denominator of the ratio: ``behaviour`` (cached at generation) or ``recompute`` (a no-grad
    forward of this step's policy before the update; replayed rollouts keep their behaviour log-probs)."""

    def __post_init__(self) -> None:
        check_number("eps_sigma", self.eps_sigma, 0)
        check_number("eps_low", self.eps_low, 0, 1)
        if self.eps_low >= 1:
            raise ValueError(f"eps_low: must be < 1, got {self.eps_low}")
        check_number("eps_high", self.eps_high, 0)
        check_number("dual_clip", self.dual_clip, 0)
        if 0 < self.dual_clip <= 1:
            raise ValueError(f"dual_clip: must be > 1 (or 0 to disable), got {self.dual_clip}")
        check_number("kl_coef", self.kl_coef, 0)
        check_number("kl_cap", self.kl_cap, 0)
        check_number("std_ddof", self.std_ddof, 0, 1, integer=True)
        check_number("max_gen_rounds", self.max_gen_rounds, 1, LIMITS["max_gen_rounds"], integer=True)
        check_number("ppo_epochs", self.ppo_epochs, 1, LIMITS["ppo_epochs"], integer=True)
        check_number("mini_batches", self.mini_batches, 1, LIMITS["mini_batches"], integer=True)
        _choice("old_logprobs", self.old_logprobs, ("behaviour", "recompute"))
        for name in ("filter_zero_variance", "dynamic_sampling"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name}: must be a bool")
        if self.dynamic_sampling:
            raise ValueError("dynamic_sampling: DAPO dynamic sampling is the plug-in 'dapo' now; "
                             "write `plugins: {dapo: {}}` instead of algo.dynamic_sampling")


@dataclass(frozen=True)
class AgentConfig:
    """Multi-turn episodes (``algo.collector: multiturn`` with an ``env`` task)."""

    turn_tokens: int = 8
    """Token budget of one turn's reply (the action)."""
    max_turns: int = 0
    """Cap on turns per episode (0: the environment's own step budget ends every episode)."""

    def __post_init__(self) -> None:
        check_number("turn_tokens", self.turn_tokens, 1, LIMITS["turn_tokens"], integer=True)
        check_number("max_turns", self.max_turns, 0, LIMITS["max_turns"], integer=True)


@dataclass(frozen=True)
class OptimConfig:
    """AdamW, gradient clipping and the learning-rate schedule."""

    lr: float = 2e-4
    """Peak learning rate."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    beta1: float = 0.9
    """AdamW β1."""
    beta2: float = 0.999
    """AdamW β2."""
    grad_clip: float = 1.0
    """Max global gradient norm (0 disables clipping; the norm is logged either way)."""
    schedule: str = "constant"
    """After warm-up (registry ``llm_harness.trainer.schedules.SCHEDULES``): ``constant``, ``linear``
    (decay to 0), ``cosine`` (to 0) or ``cosine_to_10pct``."""
    warmup_steps: int = 0
    """Linear warm-up steps."""

    def __post_init__(self) -> None:
        check_number("lr", self.lr, 0, lo_open=True)
        check_number("weight_decay", self.weight_decay, 0)
        check_number("beta1", self.beta1, 0, 1)
        check_number("beta2", self.beta2, 0, 1)
        check_number("grad_clip", self.grad_clip, 0)
        check_number("warmup_steps", self.warmup_steps, 0, integer=True)
        from llm_harness.trainer.schedules import SCHEDULES

        SCHEDULES.check(self.schedule, where="schedule")


@dataclass(frozen=True)
class ValidationConfig:
    """Periodic held-out evaluation during training (metrics: ``Trainer.validate``)."""

    every: int = 0
    """Evaluate every this many steps (0: never during training; the final step is evaluated
    when ``every > 0``)."""
    split: str = "validation"
    """Split evaluated."""
    n_problems: int = 64
    """First problems of the split used."""
    protocol: str = ""
    """A paper's evaluation protocol (registry ``llm_harness.trainer.eval_protocols.EVAL_PROTOCOLS``:
    ``replay``, ``replay_aime``, ``extra``, ``vsr``): fills ``k``, ``temperature`` and ``top_p`` where they
    are left unset (null); a ``temperature`` or ``top_p`` that disagrees with it is refused, ``k`` may
    differ (the sample budget). Empty: no protocol (k 4, T 1, top-p 1 where unset). After construction
    the three fields hold the values in force, so a config that already has them (a loaded file, a
    ``replace`` of a built config) takes a protocol only if they agree with it: name the protocol in
    the file, or set them to null with it."""
    k: int | None = None
    """Samples per problem (avg@k, pass@j for j = 1..k); unset: the protocol's, else 4."""
    temperature: float | None = None
    """Sampling temperature of the evaluation; unset: the protocol's, else 1."""
    top_p: float | None = None
    """Nucleus mass of the evaluation; unset: the protocol's, else 1."""
    diversity_embedder: str = "ngram4"
    """Embedder of the LogDet diversity (registry ``llm_harness.embedders.EMBEDDERS``). Default
    ``ngram4``: hashed token-4-gram counts, offline and the same for every run, so values compare across
    methods and steps (the paper uses MiniLM sentence embeddings: ``minilm``, needs the ``embed`` extra).
    ``policy_hidden`` embeds with the policy being trained, so its values drift with training."""
    logdet_alpha: float = 1.0
    """α of LogDet ``log det(I + α K)`` (ExTra does not state it)."""

    def __post_init__(self) -> None:
        check_number("every", self.every, 0, integer=True)
        check_number("n_problems", self.n_problems, 1, LIMITS["validation_problems"], integer=True)
        from llm_harness.trainer.eval_protocols import EvalProtocol, resolve_sampling

        resolve_sampling(self, EvalProtocol(1.0, 1.0, 4, "validation defaults"))
        check_number("k", self.k, 1, LIMITS["validation_k"], integer=True)
        check_number("logdet_alpha", self.logdet_alpha, 0, lo_open=True)
        from llm_harness.embedders import EMBEDDERS

        EMBEDDERS.check(self.diversity_embedder, "diversity_embedder")

    def sampling(self) -> EvalProtocol:
        """The evaluation sampling in force as an ``EvalProtocol`` (temperature, top_p, k, source)."""
        from llm_harness.trainer.eval_protocols import EvalProtocol

        return EvalProtocol(float(self.temperature), float(self.top_p), int(self.k),
                            f"validation.protocol {self.protocol!r}" if self.protocol else "validation fields")


@dataclass(frozen=True)
class RunConfig:
    """Run directory, checkpoints, logging."""

    run_dir: str = "runs/grpo"
    """Folder of the run (config, metrics, checkpoints)."""
    resume: bool = False
    """Continue from the run directory's latest checkpoint (bit-identical on CPU)."""
    checkpoint_every: int = 50
    """Checkpoint every this many steps (0: only at the end)."""
    keep_checkpoints: int = 2
    """Most recent checkpoints kept on disk (>= 1)."""
    progress: bool = True
    """Show a tqdm progress bar."""
    tensorboard: bool = False
    """Also write scalars with ``torch.utils.tensorboard`` (needs the tensorboard package)."""
    wandb_project: str = ""
    """Also log to Weights & Biases under this project (empty: off; needs the ``wandb`` package)."""
    wandb_mode: str = "online"
    """``online``, ``offline`` (write locally, sync later) or ``disabled``."""
    num_threads: int = 0
    """torch CPU threads (0: leave torch's default)."""
    static_decode: bool = False
    """HF backend: decode over a preallocated KV cache with a plain-tensor Qwen2 step
    (``HFBackendConfig.static_decode``; Qwen2-family models only). Same samples up to float rounding
    (rare near ties can differ); a speed option, so a resume may change it."""
    anchor_in_pass: bool = False
    """When π_old must be recomputed (``algo.old_logprobs: recompute``, or ``precision: bf16``'s rollout
    correction) and the update is one epoch of one mini-batch: take it from the update's own forward pass
    (detached) instead of a separate no-grad pass before it — the same values up to the kernels' rounding at another
    batch shape (no parameter moves before every row has been through the pass), one forward pass fewer. Other
    update shapes keep the separate pass."""
    packed_weights: bool = True
    """With ``static_decode``: its matmuls on weights packed once per sampling call for the CPU's GEMM kernels
    (``HFBackendConfig.packed_weights``; bit-identical in float32 from 5 live rows, a last-bit difference below).
    A speed option (false: the plain matmuls)."""
    micro_batch_rows: int = 0
    """Rows per forward/backward pass inside a mini-batch (gradient accumulation, rows grouped by length so
    each pass pads less; 0: the whole mini-batch in one pass). The same update up to float rounding
    (``losses.chunk_share``); peak memory falls with the pass size (a BabyAI test-bed update of ~500
    rows x 300 tokens held ~11 GB in one pass). A compute option, so a resume may change it."""
    packed_forward: bool = False
    """The trainer's log-prob passes run the projections and MLP on the real tokens only (padding dropped;
    ``trainer.packed_forward``; Qwen2-family models, right-padded rows). The same log-probs and gradients up
    to float rounding; a speed option, so a resume may change it. With ``rollout.share_prefix`` the sampling still
    shares the prompt prefix and the log-prob passes are packed instead."""
    group_prompt_once: bool = False
    """The trainer's log-prob passes run each distinct context (a group's prompt, or prompt and prefix) through
    the decoder once for all the rows that share it (``trainer.group_prompt``; any decoder that takes a cache).
    The same log-probs and gradients up to float rounding, with the prompt's share of the pass's compute and
    activations divided by the group size; a speed option, so a resume may change it. With ``packed_forward``
    (Qwen2-family models) both at once (``trainer.packed_group``: contexts once, projections on real tokens only);
    it replaces ``rollout.share_prefix``'s batch-wide prefix in the loss pass."""
    fused_optimizer: bool = False
    """AdamW's fused kernel (``torch.optim.AdamW(fused=True)``, CPU and GPU) instead of its per-parameter loop:
    the same update up to float rounding; checkpoints keep their format (an older checkpoint resumes fused).
    A speed option, so a resume may change it."""
    sampler: str = "multinomial"
    """HF backend: how a token is drawn (``HFBackendConfig.sampler``): ``multinomial`` or ``inverse_cdf`` (the same
    distribution, a different random stream, faster over a large vocabulary). A resume may change it."""
    precision: str = "float32"
    """``float32``, or ``bf16``: sampling and the loss pass under bfloat16 autocast on the float32 weights (master
    weights, gradients and AdamW in float32), the PPO anchor recomputed by the training pass and each token
    weighted by the truncated ratio of training to sampling probability (``trainer.precision``, verl's decoupled
    token-level rollout correction). Falls back to float32 with a warning where bf16 matmuls are not native (a CPU
    without AMX-BF16 / AVX512-BF16). A compute option, so a resume may change it."""
    rollout_is_threshold: float = 2.0
    """bf16 mode: the truncation C of the rollout-correction weight min(π_old / π_behaviour, C) (verl's default)."""
    dry_run: bool = False
    """Build the run, print its memory estimate by part (``trainer.memory_check.estimate_step``) and the check
    against this machine's available memory, and exit without training or writing anything."""
    stop_after: int = 0
    """Stop (as if killed) after this many steps of this invocation (0: run to ``steps``); for
    testing resume."""

    def __post_init__(self) -> None:
        if not self.run_dir:
            raise ValueError("run_dir: must not be empty")
        check_number("checkpoint_every", self.checkpoint_every, 0, integer=True)
        check_number("keep_checkpoints", self.keep_checkpoints, 1, integer=True)
        check_number("num_threads", self.num_threads, 0, LIMITS["num_threads"], integer=True)
        if not isinstance(self.static_decode, bool):
            raise ValueError(f"static_decode: must be a bool, got {self.static_decode!r}")
        if not isinstance(self.packed_forward, bool):
            raise ValueError(f"packed_forward: must be a bool, got {self.packed_forward!r}")
        for name in ("group_prompt_once", "fused_optimizer", "dry_run", "packed_weights", "anchor_in_pass"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name}: must be a bool, got {getattr(self, name)!r}")
        from llm_harness.backends.sampling import SAMPLERS

        SAMPLERS.check(self.sampler, "sampler")
        _choice("precision", self.precision, ("float32", "bf16"))
        check_number("rollout_is_threshold", self.rollout_is_threshold, 1.0)
        if self.precision == "bf16" and self.packed_forward:
            raise ValueError("precision: bf16 is not combined with packed_forward (its attention is float32 by design); "
                             "use run.group_prompt_once for the loss pass")
        _choice("wandb_mode", self.wandb_mode, ("online", "offline", "disabled"))
        check_number("stop_after", self.stop_after, 0, integer=True)
        check_number("micro_batch_rows", self.micro_batch_rows, 0, integer=True)


@dataclass(frozen=True)
class TrainConfig:
    """A whole training run (``vsr train``)."""

    seed: int = 0
    """Run seed: data order, sampling seeds, mini-batch shuffles all derive from it."""
    steps: int = 150
    """Training steps (optimizer updates when ``ppo_epochs = mini_batches = 1``)."""
    model: ModelConfig = field(default_factory=ModelConfig)
    """Policy model."""
    task: TaskConfig = field(default_factory=TaskConfig)
    """Task and training split."""
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    """Rollout sampling."""
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    """Update rule."""
    optim: OptimConfig = field(default_factory=OptimConfig)
    """Optimizer."""
    agent: AgentConfig = field(default_factory=AgentConfig)
    """Multi-turn episodes (used by the ``multiturn`` collector only)."""
    validation: ValidationConfig = field(default_factory=ValidationConfig)
    """Periodic evaluation."""
    run: RunConfig = field(default_factory=RunConfig)
    """Run directory and checkpoints."""
    plugins: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Plug-ins in application order, ``{name: {param: value}}`` (registry ``PLUGINS``; e.g. ``vsr``,
    ``replay``, ``extra``, ``reinforce_ada_est``)."""

    def __post_init__(self) -> None:
        check_number("seed", self.seed, 0, integer=True)
        check_number("steps", self.steps, 1, LIMITS["steps"], integer=True)
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name in ("model", "task", "rollout", "algo", "optim", "agent", "validation", "run"):
                if isinstance(v, Mapping):
                    raise ValueError(f"{f.name}: pass a {f.type} object (use vsr_util.config_io.from_dict for mappings)")
        if not isinstance(self.plugins, Mapping):
            raise ValueError(f"plugins: must be a mapping name -> params, got {type(self.plugins).__name__}")
        for k, v in self.plugins.items():
            if not isinstance(v, Mapping) and v is not None:
                raise ValueError(f"plugins.{k}: params must be a mapping, got {type(v).__name__}")
        object.__setattr__(self, "plugins", {k: dict(v or {}) for k, v in self.plugins.items()})
        rollouts = self.rollout.prompts_per_step * self.rollout.group_size
        if rollouts > LIMITS["rollouts_per_step"]:
            raise ValueError(f"rollout.prompts_per_step x rollout.group_size: {self.rollout.prompts_per_step} x "
                             f"{self.rollout.group_size} = {rollouts} rollouts per step exceeds the limit "
                             f"{LIMITS['rollouts_per_step']}")


@dataclass(frozen=True)
class EvalConfig:
    """Evaluate a checkpoint (``vsr eval``): avg@k, pass@k, per-difficulty table, lengths, diversity."""

    model: ModelConfig = field(default_factory=ModelConfig)
    """Model to evaluate (a checkpoint folder, or a run directory's latest checkpoint via ``run_dir``)."""
    run_dir: str = ""
    """If set, evaluate this training run's latest checkpoint (overrides ``model.path``)."""
    task: TaskConfig = field(default_factory=TaskConfig)
    """Task."""
    split: str = "test"
    """Split to evaluate."""
    n_problems: int = 200
    """First problems of the split."""
    protocol: str = ""
    """A paper's evaluation protocol (``llm_harness.trainer.eval_protocols.EVAL_PROTOCOLS``; as
    ``validation.protocol``): fills ``k``, ``temperature``, ``top_p`` where unset; "" = k 8, T 1, top-p 1."""
    k: int | None = None
    """Samples per problem (unset: the protocol's, else 8)."""
    temperature: float | None = None
    """Sampling temperature (unset: the protocol's, else 1)."""
    top_p: float | None = None
    """Nucleus mass (unset: the protocol's, else 1)."""
    max_new_tokens: int = 64
    """Response budget."""
    seed: int = 0
    """Sampling seed."""
    reference: str = ""
    """Optional eval.json of a reference run: adds AES (Replay §6.1)."""
    env: str = ""
    """Evaluate an agent on this environment instead of ``task`` (``llm_harness.envs.ENVS``): success over
    the first ``n_problems`` of the 128 fixed evaluation seeds, ``k`` episodes each."""
    env_params: Mapping[str, Any] = field(default_factory=dict)
    """Parameters of the environment (e.g. ``{level: OneRoomS8}``)."""
    level: str = ""
    """Agents: the environment's level (babyai: SynthLoc, OneRoomS8, MiniBoss; merged into ``env_params``);
    empty = the environment's default."""
    max_steps: int | None = None
    """Agents: action budget in turns (merged into ``env_params``); None = the environment's own. The
    BabyAI test-bed agent's cards are at 16 (``llm_harness.testbed.agents``)."""
    window: int = 2
    """Agents: previous turns shown in each prompt."""
    turn_tokens: int = 8
    """Agents: token budget of one reply."""
    reply_format: str = "word"
    """Agents: how the instruction asks for the action (``llm_harness.envs.prompt.REPLY_FORMATS``)."""
    out_dir: str = "runs/eval"
    """Where eval.json and eval.md are written."""

    def __post_init__(self) -> None:
        check_number("n_problems", self.n_problems, 1, LIMITS["validation_problems"], integer=True)
        from llm_harness.trainer.eval_protocols import EvalProtocol, resolve_sampling

        resolve_sampling(self, EvalProtocol(1.0, 1.0, 8, "eval defaults"))
        check_number("k", self.k, 1, LIMITS["validation_k"], integer=True)
        check_number("max_new_tokens", self.max_new_tokens, 1, LIMITS["max_new_tokens"], integer=True)
        check_number("seed", self.seed, 0, integer=True)
        check_number("window", self.window, 0, LIMITS["max_turns"], integer=True)
        check_number("turn_tokens", self.turn_tokens, 1, LIMITS["turn_tokens"], integer=True)
        if not isinstance(self.env_params, Mapping):
            raise ValueError(f"env_params: must be a mapping, got {type(self.env_params).__name__}")
        params = dict(self.env_params)
        for key, value in (("level", self.level or None), ("max_steps", self.max_steps)):
            if value is None:
                continue
            if key in params and params[key] != value:
                raise ValueError(f"{key}: {value!r} contradicts env_params[{key!r}] = {params[key]!r}")
            if not self.env:
                raise ValueError(f"{key}: only for agents (set env)")
            params[key] = value
        object.__setattr__(self, "env_params", params)
        if not self.out_dir:
            raise ValueError("out_dir: must not be empty")
