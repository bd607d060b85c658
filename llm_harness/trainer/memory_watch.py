"""Where a training step's memory goes: the peak of each phase, and the fixed parts by what holds them.

Peaks per phase (``generate``: sampling, its KV cache and any engine in this process; ``score``: the old and
reference log-prob passes; ``train``: the loss pass's activations and logits, backward and the optimizer step):

* CPU: the process's peak resident set (``VmHWM`` of ``/proc/self/status``), reset at the start of each phase by
  writing ``5`` to ``/proc/self/clear_refs`` (Linux's documented way to reset the peak). Where the reset is not
  allowed the peak is the process's peak so far (``exact`` is then false: a phase's number includes the phases
  before it).
* CUDA: ``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats``, i.e. the tensors torch allocated
  (not the allocator's reserve, nor another process's engine).

The fixed parts (:func:`fixed_parts`) are counted from the tensors themselves: weights, gradients and the
optimizer's state (AdamW: two moments per parameter and a step count).
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

import torch

__all__ = ["PhaseMemory", "fixed_parts", "peak_rss_bytes", "reset_peak_rss"]

GB = 2**30


def peak_rss_bytes() -> int | None:
    """``VmHWM`` (the process's peak resident set since start or the last reset) in bytes; None if unreadable."""
    from llm_harness.trainer.memory_check import proc_kib_field

    return proc_kib_field("/proc/self/status", "VmHWM")


def reset_peak_rss() -> bool:
    """Reset ``VmHWM`` to the current resident set (``echo 5 > /proc/self/clear_refs``); False where not allowed."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def _tensor_bytes(tensors: Any) -> int:
    seen: set[int] = set()
    total = 0
    for t in tensors:
        if not torch.is_tensor(t) or t.device.type == "meta":
            continue
        ptr = t.untyped_storage().data_ptr()
        if ptr in seen:  # tied weights: one storage
            continue
        seen.add(ptr)
        total += t.untyped_storage().nbytes()
    return total


def fixed_parts(model: Any, optimizer: Any = None) -> dict[str, int]:
    """Bytes held by the weights, the gradients (zero when set to None between steps) and the optimizer state."""
    params = list(model.parameters())
    out = {"weights": _tensor_bytes(list(params) + list(model.buffers())),
           "grads": _tensor_bytes(p.grad for p in params if p.grad is not None)}
    if optimizer is not None:
        out["optimizer"] = _tensor_bytes(v for st in optimizer.state.values() for v in st.values())
    return out


class PhaseMemory:
    """Peak memory of named phases (module doc); ``peaks[name]`` is the largest peak seen over all steps."""

    def __init__(self, device: torch.device | str = "cpu"):
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        self.exact = True
        self.peaks: dict[str, int] = {}
        self.last: dict[str, int] = {}

    @property
    def kind(self) -> str:
        """What the numbers are: ``peak_allocated`` (CUDA) or ``peak_rss`` (CPU)."""
        return "peak_allocated" if self.cuda else "peak_rss"

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Measure the peak of the enclosed code under ``name``."""
        if self.cuda:
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        elif not reset_peak_rss():
            self.exact = False
        try:
            yield
        finally:
            if self.cuda:
                torch.cuda.synchronize(self.device)
                peak = int(torch.cuda.max_memory_allocated(self.device))
            else:
                peak = peak_rss_bytes() or 0
            self.last[name] = peak
            self.peaks[name] = max(peak, self.peaks.get(name, 0))

    def metrics(self) -> dict[str, float]:
        """This step's peaks as ``mem_peak_<phase>_gb``."""
        return {f"mem_peak_{k}_gb": v / GB for k, v in self.last.items()}
