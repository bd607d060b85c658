"""The allocation lab's options (``vsr lab``), the format numbers of its files, and the memory check made before any
gradient is held (:mod:`llm_harness.lab.run` runs a lab from them).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from llm_harness.lab.allocations import AllocationParams, allocation_names

__all__ = ["FORMAT", "LabConfig", "PROBE_FORMAT", "check_memory"]


FORMAT = 2
PROBE_FORMAT = 3


@dataclass(frozen=True)
class LabConfig:
    """Options of ``vsr lab``."""

    train_config: str = "configs/regime_grpo.yaml"
    """Training config naming the model, task, backend and rollout settings (nothing is trained, except by the
    replay step, with this config's recipe and its plug-ins left out)."""
    model: str = ""
    """Model path or registered name; empty: the training config's."""
    backend: str = ""
    """Generation backend (``hf``, ``vllm``); empty: the training config's."""
    task: str = ""
    """Registered task name; empty: the training config's (a different task drops the config's task
    parameters and pool)."""
    task_params: tuple[str, ...] = ()
    """Task parameters as ``key=value`` strings (values parsed as YAML), merged over the task's."""
    pool: str = ""
    """Pool file of training prompts (``vsr pool select``); empty: the training config's ``task.pool`` (then the
    first ``prompts`` problems of its training split)."""
    prompts: int = 128
    """Prompts of the pool (or of the training split) the lab uses (its ``d`` is uniform over them)."""
    alphas: tuple[float, ...] = (0.25, 0.5, 0.75, 0.9)
    """Hint ratios of the prefix states (fractions of each prompt's reference solution)."""
    allocations: tuple[str, ...] = ()
    """Allocations to realise (registered names; empty: all)."""
    probe_samples: int = 16
    """Monte-Carlo samples per state in the probe (half build the allocations, half predict them: >= 4)."""
    score_samples: int = 2
    """Samples per state whose score norm ‖∇ log π‖² the probe measures (0: assume it constant, B.4)."""
    groups: int = 8
    """Groups per mini-batch (K)."""
    group_size: int = 8
    """Samples per group (G)."""
    batches: int = 32
    """Independent mini-batches per allocation (N)."""
    blocks: int = 8
    """Jackknife blocks (block sums held in memory: blocks × parameters floats)."""
    reference_batches: int = 64
    """Mini-batches of the large-batch reference gradients (pool and held-out)."""
    heldout: int = 128
    """Held-out problems (validation split) of the held-out reference gradient."""
    allocation: AllocationParams = field(default_factory=AllocationParams)
    """Knobs of the allocations (VSR's ρ, the ε mixture, DAPO's round cap, ExTra's γ)."""
    out: str = "runs/lab"
    """Output folder (one writer at a time; reruns reuse finished steps; a folder holding another lab's results is
    refused, see ``overwrite``)."""
    replay_ages: tuple[int, ...] = ()
    """Rollout replay at these ages (updates since the stored rollouts were drawn; empty: skip): the lab's last step,
    which trains ``max(ages)`` GRPO updates from the starting parameters and compares fresh batches with batches
    whose share ``replay_share`` of groups is replayed, without and with importance weights
    (:mod:`llm_harness.lab.staleness`)."""
    replay_share: float = 0.5
    """Share of a replay batch's groups that are stored (the rest fresh): the Replay paper's ratio ``r/(1 + r)``."""
    seed: int = 0
    """Seed of every draw."""
    progress: bool = True
    """Progress bars."""
    overwrite: bool = False
    """Discard the results of another lab found in ``out`` (its probe, references, allocations, summary) instead of
    refusing the folder."""
    reanalyze: bool = False
    """Rebuild the finished lab in ``out`` from its stored records only (summary, report, figure; no model is loaded,
    nothing is resampled): for a lab written by an earlier version of the summary."""

    def __post_init__(self) -> None:
        from llm_harness.tasks.base import MAX_SPLIT_PROBLEMS
        from llm_harness.trainer.config import LIMITS
        from vsr_util.checks import check_number

        for name, lo, hi in (("prompts", 2, 100_000), ("probe_samples", 4, 4_096), ("score_samples", 0, 4_096),
                             ("groups", 1, LIMITS["prompts_per_step"]), ("group_size", 2, LIMITS["group_size"]),
                             ("batches", 2, 100_000), ("blocks", 2, None), ("reference_batches", 2, 100_000),
                             ("heldout", 1, MAX_SPLIT_PROBLEMS), ("seed", 0, None)):
            check_number(name, getattr(self, name), lo, hi, integer=True)
        if self.groups * self.group_size > LIMITS["rollouts_per_step"]:
            raise ValueError(f"groups x group_size: {self.groups} x {self.group_size} = {self.groups * self.group_size} "
                             f"samples per mini-batch exceeds the limit {LIMITS['rollouts_per_step']}")
        if self.batches < self.blocks or self.reference_batches < self.blocks:
            raise ValueError(f"batches / reference_batches: need >= blocks ({self.blocks}) so every jackknife block "
                             "holds a batch")
        if not self.alphas:
            raise ValueError("alphas: need at least one hint ratio")
        for a in self.alphas:
            check_number("alphas", a, 0, 1, lo_open=True, hi_open=True)
        allocation_names(self.allocations)
        if self.task:
            from llm_harness.tasks import TASK_REGISTRY

            TASK_REGISTRY.check(self.task, where="task")
        from llm_harness.tasks.base import check_task_params

        object.__setattr__(self, "task_params", check_task_params(self.task_params))
        if self.replay_ages:
            from llm_harness.lab.staleness import check_ages

            check_ages(self.replay_ages, self.replay_share, self.groups)
            if max(self.replay_ages) > 1000:
                raise ValueError(f"replay_ages: at most 1,000 updates, got {max(self.replay_ages)}")


def check_memory(n_params: int, vectors: int) -> None:
    """Refuse a run whose gradient statistics need more memory than is available (``vectors`` float32 vectors)."""
    import os

    from llm_harness.trainer.memory_check import available_bytes

    need = 4 * n_params * vectors
    avail = available_bytes()
    if os.environ.get("VSR_NO_MEMORY_CHECK", "") in ("", "0") and avail is not None and need > 0.8 * avail:
        raise ValueError(f"lab.blocks: {vectors} gradient vectors of {n_params:,} parameters need {need / 2**30:.1f} GiB, "
                         f"{avail / 2**30:.1f} GiB available; lower --blocks (>= 2)")
