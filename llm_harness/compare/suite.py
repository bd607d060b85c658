"""Comparison suites: which methods, in which regimes.

A :class:`Suite` is a list of :class:`Method` (a label and a config file in ``configs/``) and of
:class:`Regime` (config overrides applied to every method, plus overrides applied only to
methods that use a given plug-in, e.g. VSR's expert cold start in the hard regime). The run
config of (regime, method, seed) is ``configs/<file>`` (with its ``extends`` chain) deep-merged
with the regime's overrides and the suite's run settings (:func:`run_mapping`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from vsr_util.config_io import deep_merge, read_mapping
from vsr_util.registry import Registry

__all__ = ["CONFIG_DIR", "WARMUP_KEYS", "Method", "PoolSpec", "Regime", "SUITES", "Suite", "method_mapping", "register_suite",
           "run_mapping"]

#: plug-in parameters counted in steps that :func:`run_mapping` scales from the config's ``steps`` to
#: the suite's (replay/ExTra warm-ups, VSR's freeze point without recency)
WARMUP_KEYS = ("warmup", "warmup_steps", "freeze_after")

#: the repository's configs/ folder
CONFIG_DIR = Path(__file__).resolve().parents[2] / "configs"


@dataclass(frozen=True)
class Method:
    """One compared configuration."""

    name: str
    """Short identifier (run folder name)."""
    config: str
    """Config file under ``configs/``."""
    label: str
    """Name in the report."""
    family: str = "baseline"
    """Grouping in the report (baseline, vsr, replay, extra, composition)."""
    roles: tuple[str, ...] = ()
    """What report sections look this arm up by, instead of by its name (``oracle_score``: its runs log the VSR
    oracle's Monte-Carlo scoring; ``calibrated_score``: its runs fit the calibrated σ̂ curve)."""
    token_claim: str = ""
    """A paper's number for this arm's new tokens per update relative to the reference's; the report prints it
    beside the measured ratio."""


@dataclass(frozen=True)
class Regime:
    """A training/evaluation setting shared by every method of the suite."""

    name: str
    """Identifier."""
    description: str
    """One line for the report."""
    overrides: Mapping[str, Any] = field(default_factory=dict)
    """Deep-merged into every method's config."""
    plugin_overrides: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """``{plugin: params}`` merged into a method's plug-in params when the method uses that plug-in."""
    sizes: Mapping[str, int] = field(default_factory=dict)
    """This regime's ``seeds``, ``steps`` and ``eval_every`` over the suite's (a ``vsr compare`` flag
    overrides both); the held-out protocol (``eval_problems``, ``eval_k``) stays the suite's, so every
    regime's table reports the same metric."""

    def __post_init__(self) -> None:
        bad = sorted(set(self.sizes) - set(REGIME_SIZE_KEYS))
        if bad:
            raise ValueError(f"regime {self.name!r}: sizes may set only {list(REGIME_SIZE_KEYS)}, got {bad}")
        for k, v in self.sizes.items():
            if isinstance(v, bool) or not isinstance(v, int) or v < (0 if k == "eval_every" else 1):
                raise ValueError(f"regime {self.name!r}: sizes.{k} must be an integer >= {0 if k == 'eval_every' else 1}, got {v!r}")


#: the sizes a :class:`Regime` may set over its suite's
REGIME_SIZE_KEYS = ("seeds", "steps", "eval_every")


@dataclass(frozen=True)
class PoolSpec:
    """A fixed training-prompt pool the suite selects before training (``llm_harness.trainer.pool``)."""

    name: str
    """File stem of the selected pool (``runs/pools/<name>.json``; suites with the same pool share it)."""
    config: str
    """Config under ``configs/`` whose model, task and rollout settings the selection uses."""
    selection: Mapping[str, Any] = field(default_factory=dict)
    """Fields of :class:`llm_harness.pool_selection.PoolSelection`."""


@dataclass(frozen=True)
class TableSpec:
    """One paper table: its arms, each contrasted with the suite's reference; the arms form one Holm family."""

    name: str
    """Identifier (CSV rows, ``extra_cols`` keys)."""
    caption: str
    """Heading in the report."""
    arms: tuple[str, ...]
    """Method names of the table's rows (the reference is every table's first row)."""


@dataclass(frozen=True)
class Suite:
    """Methods × regimes, compared at matched update counts."""

    name: str
    methods: tuple[Method, ...]
    regimes: tuple[Regime, ...]
    reference: str = "grpo"
    """Method the others are compared against (token ratios, overheads)."""
    sizes: Mapping[str, int] = field(default_factory=dict)
    """The suite's own defaults of ``seeds``, ``steps``, ``eval_problems``, ``eval_k``, ``eval_every``
    (a ``vsr compare`` flag overrides them)."""
    pool: PoolSpec | None = None
    """Select a hard-prompt pool first and train every run on it (``task.pool``)."""
    contrasts: tuple[str, ...] = ()
    """Methods whose contrasts with the reference form the Holm family (default: every other method)."""
    min_effect: float = 0.02
    """The difference (absolute, avg@1) the suite is sized to detect; the report gives its power."""
    sections: tuple[str, ...] = ()
    """Extra report sections (``llm_harness.compare.sections.SECTIONS``)."""
    ablations: tuple[tuple[str, str], ...] = ()
    """``(method, ablation)`` pairs contrasted with each other, paired by seed, with their own Holm family per
    regime (section ``ablations``): does the component the ablation removes matter?"""
    figure_arms: tuple[str, ...] = ()
    """Arms drawn in per-update figures of many arms (at most ~6 per panel). Unset: the ExTra dynamics and efficiency
    figures draw the first six arms, ``compare_curves.png`` the reference and the five with the largest final |Δ|."""
    shares_records_with: tuple[str, ...] = ()
    """Suites whose run records (beside this suite's records folder: ``records/compare_<name>``) may finish this
    suite's jobs: a job restores a sibling's record only when the fingerprints match (the same resolved config and
    pool bytes), so the same GRPO run is not trained once per table."""

    def __post_init__(self) -> None:
        names = {m.name for m in self.methods}
        bad = sorted({n for pair in self.ablations for n in pair} - names)
        if bad:
            raise ValueError(f"suite {self.name!r}: ablations name methods it does not have: {bad}")

    def family(self) -> tuple[str, ...]:
        """The Holm family: :attr:`contrasts`, or every method but the reference."""
        return self.contrasts or tuple(m.name for m in self.methods if m.name != self.reference)


#: name -> :class:`Suite`.
SUITES: Registry[Suite] = Registry("suite")


def register_suite(s: Suite) -> Suite:
    """Add a suite under its name (duplicate names rejected)."""
    return SUITES.add(s.name, s)


def method_mapping(method: Method, config_dir: Path = CONFIG_DIR) -> dict[str, Any]:
    """The mapping of ``method``'s config file (its ``extends`` chain resolved); ValueError for a missing file."""
    path = config_dir / method.config
    if not path.is_file():
        raise ValueError(f"suite: method {method.name!r} needs {path}, which does not exist")
    return read_mapping(path)


def run_mapping(method: Method, regime: Regime, *, seed: int, steps: int, run_dir: str, eval_problems: int, eval_k: int,
                eval_every: int, config_dir: Path = CONFIG_DIR, pool: str = "",
                base: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The config mapping of one run (module doc); raises ValueError for a missing config file. ``base``: the
    method's config mapping already read (:func:`method_mapping`; a plan of many jobs reads each file once).

    Plug-in warm-ups (:data:`WARMUP_KEYS`) are rescaled by ``steps / config steps`` (at least 1), so
    a 150-step config's 18-step warm-up becomes 5 steps in a 40-step comparison."""
    import copy

    base = method_mapping(method, config_dir) if base is None else copy.deepcopy(dict(base))
    data = deep_merge(base, dict(regime.overrides))
    native = int(data.get("steps", steps))
    plugins = {}
    for name, params in (data.get("plugins") or {}).items():
        params = dict(params or {})
        for key in WARMUP_KEYS:  # keep each warm-up's share of the run when the suite runs fewer steps
            if key in params and native > 0:
                params[key] = max(1, round(params[key] * steps / native))
        plugins[name] = params
    for name, params in regime.plugin_overrides.items():
        if name in plugins:
            plugins[name] = {**plugins[name], **dict(params)}
    data["plugins"] = plugins
    data = deep_merge(data, {
        "seed": int(seed),
        "steps": int(steps),
        "validation": {"every": int(eval_every), "n_problems": int(eval_problems), "k": int(eval_k)},
        "run": {"run_dir": run_dir, "progress": False, "checkpoint_every": 0, "keep_checkpoints": 1, "num_threads": 1},
    })
    if pool:
        data = deep_merge(data, {"task": {"pool": str(pool)}})
    return data


#: VSR's new tokens per update relative to GiGPO's in the VSR paper (39.27M / 81.30M, 1.5B agentic)
_VSR_TOKENS = "paper: 0.48x at 1.5B agentic"

# the committed report ran every method at lr 2e-4 (the recipe's value then); the recipe is now 1e-4
_HARD = {"task": {"params": {"min_terms": 7, "max_terms": 9}}, "optim": {"lr": 2.0e-4}}

register_suite(
    Suite(
        name="testbed",
        methods=(
            Method("grpo", "testbed_grpo.yaml", "GRPO"),
            Method("dapo", "testbed_dapo.yaml", "DAPO (dynamic sampling)"),
            Method("sft", "testbed_sft.yaml", "SFT on expert solutions"),
            Method("reinforce_ada", "testbed_reinforce_ada_est.yaml", "Reinforce-Ada-Est (prompt-level reallocation)"),
            Method("vsr", "testbed_vsr.yaml", "VSR", "vsr", token_claim=_VSR_TOKENS),
            Method("vsr_sqrt", "testbed_vsr_sqrt.yaml", "VSR, sqrt(p(1-p)) (Neyman) score", "vsr"),
            Method("vsr_steps", "testbed_vsr_steps.yaml", "VSR, prefixes at step boundaries", "vsr"),
            Method("vsr_rho25", "testbed_vsr_rho25.yaml", "VSR, rho = 0.25", "vsr"),
            Method("vsr_uniform", "testbed_vsr_uniform.yaml", "VSR w/o scoring", "vsr"),
            Method("vsr_norecency", "testbed_vsr_norecency.yaml", "VSR w/o recency", "vsr"),
            Method("vsr_static_expert", "testbed_vsr_static_expert.yaml", "static uniform expert-prefix resets", "vsr"),
            Method("vsr_oracle", "testbed_vsr_oracle.yaml", "VSR, oracle Monte-Carlo score", "vsr", roles=("oracle_score",)),
            Method("replay", "testbed_replay.yaml", "|A| replay (rollout level, fresh-anchored)", "replay"),
            Method("replay_uniform_pool", "testbed_replay_uniform_pool.yaml", "replay: uniform, query level, pool", "replay"),
            Method("replay_sigma_pool", "testbed_replay_sigma_pool.yaml", "replay: σ_g, query level, pool", "replay"),
            Method("extra_n", "testbed_extra_n.yaml", "ExTra-N (novelty)", "extra"),
            Method("extra_r", "testbed_extra_r.yaml", "ExTra-R (MTE regeneration)", "extra"),
            Method("extra_full", "testbed_extra_full.yaml", "ExTra (full)", "extra"),
            Method("compose", "testbed_compose.yaml", "VSR + ExTra novelty + |A| replay", "composition"),
        ),
        regimes=(
            Regime("normal", "the 'mid' checkpoint on the normal split (2-6 term chains), lr 2e-4",
                   overrides={"optim": {"lr": 2.0e-4}}),
            Regime(
                "normal_lr1e-4",
                "as 'normal' at half the learning rate (1e-4): is a method's loss an instability at lr 2e-4?",
                overrides={"optim": {"lr": 1.0e-4}},
            ),
            Regime(
                "hard",
                "the 'mid' checkpoint on 7-9 term chains, VSR buffers cold-started from expert solutions of 512 training problems, recency window 20 (VSR's regime)",
                overrides=_HARD,
                plugin_overrides={"vsr": {"cold_start": True, "cold_start_problems": 512, "window": 20}},
            ),
        ),
    )
)


#: the VSR-regime arms, in report order
_REGIME_METHODS = (
    Method("grpo", "regime_grpo.yaml", "GRPO (paper's recipe: zero-variance groups kept, 2 mini-batches)"),
    Method("vsr", "regime_vsr.yaml", "VSR", "vsr", token_claim=_VSR_TOKENS),
    Method("vsr_uniform", "regime_vsr_uniform.yaml", "VSR w/o scoring", "vsr"),
    Method("vsr_norecency", "regime_vsr_norecency.yaml", "VSR w/o recency", "vsr"),
    Method("static_expert", "regime_static_expert.yaml", "static uniform expert-prefix resets", "vsr"),
    Method("reinforce_ada", "regime_reinforce_ada_est.yaml", "Reinforce-Ada-Est (prompt-level reallocation)"),
    Method("vsr_oracle", "regime_vsr_oracle.yaml", "VSR, oracle Monte-Carlo score", "vsr", roles=("oracle_score",)),
    Method("vsr_calibrated", "regime_vsr_calibrated.yaml", "VSR, calibrated σ̂", "vsr", roles=("calibrated_score",)),
    Method("vsr_policy", "regime_vsr_policy.yaml", "VSR, policy-only buffer (no expert states)", "vsr"),
    Method("sft_pool", "regime_sft_pool.yaml", "SFT on the pool's expert solutions (64 per update)"),
)

#: the pool every vsr_regime run trains on: hard prompts of the `low` checkpoint on 6-term chains
_REGIME_POOL = PoolSpec("low6_hard128", "regime_grpo.yaml", {"candidates": 512, "samples": 16, "max_successes": 1, "size": 128,
                                             "temperature": 1.0, "seed": 0})
# 11 seeds: what the 6-seed report's power analysis asked for (figures/compare_vsr_regime/six_seeds/); the held-out
# evaluation scores all 500 validation problems (8 samples each) once, at the end: evaluation noise was ~60 % of
# the paired variance at 128 problems. Suites on this pool share it, so they share runs (Suite.shares_records_with)
_REGIME_SIZES = {"seeds": 11, "steps": 100, "eval_problems": 500, "eval_k": 8, "eval_every": 100}

register_suite(
    Suite(
        name="vsr_regime",
        methods=_REGIME_METHODS,
        regimes=(
            Regime("sparse", "the `low` checkpoint on 6-term chains, trained on a fixed pool of 128 hard prompts (at most one "
                   "success in 16 samples), VSR cold-started from the pool's expert solutions; held-out: 6-term validation "
                   "problems at T 0.7, top-p 0.9"),
        ),
        sizes=dict(_REGIME_SIZES),  # about 3 h on 2 quiet cores: run it in parts (records, resumable)
        pool=_REGIME_POOL,
        contrasts=("vsr", "vsr_uniform", "vsr_norecency", "static_expert", "vsr_oracle", "vsr_calibrated", "vsr_policy",
                   "sft_pool"),
        min_effect=0.02,
        # is VSR better than static expert resets, and how much of it remains without expert information?
        ablations=(("vsr", "static_expert"), ("vsr", "vsr_policy")),
        sections=("pool", "assumptions", "curriculum", "calibration", "ablations", "family_passk", "crossed_intervals"),
    )
)

#: the prefix-restart family on the vsr_regime pool: VSR (expert cold start, and policy-only), Prefix Sampling, PS
#: hard-only and PROS beside GRPO and DAPO's dynamic sampling, at vsr_regime's sizes; GRPO and both VSR arms are the
#: vsr_regime suite's own runs (the same resolved configs and pool: their records are restored, not trained again)
_PREFIX_FAMILY_METHODS = (
    _REGIME_METHODS[0],
    Method("dapo", "regime_dapo.yaml", "DAPO dynamic sampling (redraw until 8 mixed groups, at most 4 rounds)"),
    _REGIME_METHODS[1],
    _REGIME_METHODS[8],
    Method("ps", "regime_ps.yaml", "Prefix Sampling (fixed ratios 0.25 / 0.25)", "prefix"),
    Method("ps_hard", "regime_ps_hard.yaml", "PS hard-only", "prefix"),
    Method("pros", "regime_pros.yaml", "PROS (half the batch from the tree)", "prefix"),
)

register_suite(
    Suite(
        name="prefix_family",
        methods=_PREFIX_FAMILY_METHODS,
        regimes=(
            Regime("sparse", "the vsr_regime setting: the `low` checkpoint on 6-term chains, a fixed pool of 128 hard "
                   "prompts (at most one success in 16 samples); VSR alone gets the pool's expert solutions, every "
                   "other prefix arm restarts from the policy's own samples"),
        ),
        sizes=dict(_REGIME_SIZES),
        pool=_REGIME_POOL,
        contrasts=("dapo", "vsr", "vsr_policy", "ps", "ps_hard", "pros"),
        min_effect=0.02,
        # PS against its own hard half, and policy-only VSR against the policy-only prefix methods
        ablations=(("ps", "ps_hard"), ("vsr_policy", "ps"), ("vsr_policy", "pros")),
        sections=("pool", "prefix_dynamics", "ablations", "family_passk", "crossed_intervals"),
        shares_records_with=("vsr_regime",),
    )
)

#: the learning-rate sweep that chose the vsr_regime recipe's lr: GRPO and VSR, one seed, four rates
register_suite(
    Suite(
        name="vsr_regime_lr",
        methods=_REGIME_METHODS[:2],
        regimes=tuple(
            Regime(f"lr{lr:g}", f"the vsr_regime setting at lr {lr:g}", overrides={"optim": {"lr": lr}})
            for lr in (1.0e-5, 2.5e-5, 5.0e-5, 1.0e-4)  # 1e-4 already decays for both arms: 2e-4 and up are not run
        ),
        sizes={"seeds": 1, "steps": 160, "eval_problems": 128, "eval_k": 16, "eval_every": 80},
        pool=_REGIME_POOL,
        sections=("sweep", "pool"),
    )
)

#: the small vsr_regime run of `make figures` (the reverse-curriculum figure at a size that fits the main job)
register_suite(
    Suite(
        name="vsr_regime_small",
        methods=_REGIME_METHODS[:2],
        regimes=(
            Regime("sparse", "the vsr_regime setting on a 32-prompt pool (at most one success in 8 samples), one seed, "
                   "40 updates: the reverse-curriculum figure of `make figures`"),
        ),
        sizes={"seeds": 1, "steps": 40, "eval_problems": 32, "eval_k": 8, "eval_every": 20},
        pool=PoolSpec("low6_hard32", "regime_grpo.yaml", {"candidates": 128, "samples": 8, "max_successes": 1, "size": 32,
                                                          "temperature": 1.0, "seed": 0}),
        sections=("pool", "curriculum"),
    )
)

#: vsr_regime's arms that settle its VSR question, retrained and scored on fresh problems: the test split's first
#: 2,000 six-term chains (split membership is a salted hash of the expression, so they are disjoint from the 500
#: validation problems and from the training pool), 8 samples each, every problem's outcome kept in the records, so
#: the report's intervals can count the evaluation problems as a sample too (crossed_intervals) and not only the seeds
_FRESH_METHODS = tuple(m for m in _REGIME_METHODS if m.name in ("grpo", "vsr", "static_expert", "vsr_policy", "sft_pool"))

register_suite(
    Suite(
        name="vsr_regime_fresh",
        methods=_FRESH_METHODS,
        regimes=(
            Regime("sparse", "the vsr_regime setting (the `low` checkpoint, the same pool of 128 hard prompts, the same "
                   "recipes and seeds); held-out: 2,000 fresh six-term test-split problems, disjoint from the 500 "
                   "validation problems, at T 0.7, top-p 0.9",
                   overrides={"task": {"params": {"n_test": 2000}}, "validation": {"split": "test"}}),
        ),
        sizes={**_REGIME_SIZES, "eval_problems": 2000},  # about 1.5 h on 2 quiet cores (55 runs + 11 base evaluations)
        pool=_REGIME_POOL,
        contrasts=("vsr", "static_expert", "vsr_policy", "sft_pool"),
        min_effect=0.02,
        ablations=(("vsr", "static_expert"), ("vsr", "vsr_policy")),
        sections=("pool", "ablations", "family_passk", "crossed_intervals"),
    )
)

#: the prefix-restart family on a real model: SmolLM2-135M-Instruct on the arithmetic ladder (every level of the
#: train split, no pool), the lean step; GRPO, DAPO's dynamic sampling, VSR from the reference solutions, PS, PS
#: hard-only and PROS with the same budget. Sized from the lean step's 23 s per update (figures/real_model/grpo/lean):
#: about 6 h of 2 cores for 5 seeds (run it in parts: records are resumable) or minutes on a GPU
register_suite(
    Suite(
        name="prefix_family_real",
        methods=(
            Method("grpo", "real_prefix_grpo.yaml", "GRPO (zero-variance groups kept)"),
            Method("dapo", "real_prefix_dapo.yaml", "DAPO dynamic sampling (redraw until 8 mixed groups, at most 3 rounds)"),
            Method("vsr", "real_prefix_vsr.yaml", "VSR (reference-solution cold start)", "vsr"),
            Method("ps", "real_prefix_ps.yaml", "Prefix Sampling (fixed ratios 0.25 / 0.25)", "prefix"),
            Method("ps_hard", "real_prefix_ps_hard.yaml", "PS hard-only", "prefix"),
            Method("pros", "real_prefix_pros.yaml", "PROS (half the batch from the tree)", "prefix"),
        ),
        regimes=(
            Regime("smollm2", "SmolLM2-135M-Instruct on the arithmetic ladder's five levels with its chat template and "
                   "the strict verifier (a declared final answer only), 8 prompts x 8 samples of at most 48 tokens per update at T 1, the lean step; held-out: the test split's "
                   "311 problems x 4 samples at T 1"),
        ),
        sizes={"seeds": 5, "steps": 20, "eval_problems": 311, "eval_k": 4, "eval_every": 20},
        contrasts=("dapo", "vsr", "ps", "ps_hard", "pros"),
        min_effect=0.03,
        ablations=(("ps", "ps_hard"), ("vsr", "ps"), ("vsr", "pros")),
        sections=("prefix_dynamics", "ablations", "family_passk", "crossed_intervals"),
    )
)
