"""An in-process weight-transfer engine for vLLM: trainer tensors handed to the model by reference.

vLLM's weight-update API (``LLM.init_weight_transfer_engine`` once, then ``start_weight_update`` /
``update_weights`` / ``finish_weight_update``; ``vllm/entrypoints/rl/offline.py``) delegates the
transport to a *weight-transfer engine* chosen by ``weight_transfer_config={"backend": name}``.
Every engine vLLM ships (NCCL, CUDA IPC, sharded RDT, ...) moves tensors between processes on
CUDA devices. When the engine core runs in the trainer's process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``,
one worker: vLLM's ``UniProcExecutor`` calls the worker's method directly), no transport is needed:
this engine registers under :data:`BACKEND_NAME` and receives, instead of tensors or handles, a
*ticket* — a key into a process-local table where :func:`stage` put the ``(name, tensor)`` pairs.
Nothing is serialised or pickled; the worker loads the very tensors the trainer staged through
the model's own ``load_weights`` (Hugging Face parameter names), inside vLLM's layer-wise reload
(as its IPC engine does), on CPU and on GPU alike.

A ticket that is not in the table means the worker runs in another process (a multiprocess or
tensor-parallel engine); that is refused with a message naming the cause, never guessed around.

This module imports vLLM; import it only where vLLM is installed (the backend does so lazily).
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass
from typing import Any, Iterable

import torch
from vllm.distributed.weight_transfer.base import (
    WeightTransferEngine,
    WeightTransferInitInfo,
    WeightTransferUpdateInfo,
)
from vllm.distributed.weight_transfer.factory import WeightTransferEngineFactory

#: name under which the engine is registered with vLLM's ``WeightTransferEngineFactory``
BACKEND_NAME = "vsr_inprocess"

_STAGED: dict[str, list[tuple[str, torch.Tensor]]] = {}
_LOCK = threading.Lock()
_COUNTER = itertools.count()


def stage(weights: Iterable[tuple[str, torch.Tensor]]) -> str:
    """Put ``(name, tensor)`` pairs in this process's table; return the ticket naming them."""
    ticket = f"{BACKEND_NAME}-{next(_COUNTER)}"
    with _LOCK:
        _STAGED[ticket] = list(weights)
    return ticket


def discard(ticket: str) -> None:
    """Drop a ticket's tensors (after the update, or when it failed before the worker took them)."""
    with _LOCK:
        _STAGED.pop(ticket, None)


def staged_tickets() -> tuple[str, ...]:
    """Tickets not yet taken (tests: an update leaves none behind)."""
    with _LOCK:
        return tuple(_STAGED)


def _take(ticket: str) -> list[tuple[str, torch.Tensor]]:
    with _LOCK:
        weights = _STAGED.pop(ticket, None)
    if weights is None:
        raise RuntimeError(
            f"weight ticket {ticket!r} is not in this process: the vLLM worker runs in another process, which the "
            f"{BACKEND_NAME!r} weight-transfer engine cannot reach (run the engine core in-process: "
            "VLLM_ENABLE_V1_MULTIPROCESSING=0, tensor_parallel_size 1)"
        )
    return weights


@dataclass
class InProcessInitInfo(WeightTransferInitInfo):
    """No rendezvous: the trainer and the worker share the process."""


@dataclass
class InProcessUpdateInfo(WeightTransferUpdateInfo):
    """One update: the ticket of the staged tensors."""

    ticket: str = ""


class InProcessWeightTransferEngine(WeightTransferEngine[InProcessInitInfo, InProcessUpdateInfo]):
    """Loads staged tensors into the worker's model (module doc)."""

    init_info_cls = InProcessInitInfo
    update_info_cls = InProcessUpdateInfo

    def init_transfer_engine(self, init_info: InProcessInitInfo) -> None:
        pass

    def start_weight_update(self) -> None:
        from vllm.model_executor.model_loader.reload import initialize_layerwise_reload

        initialize_layerwise_reload(self.model)

    def finish_weight_update(self) -> None:
        from vllm.model_executor.model_loader.reload import finalize_layerwise_reload

        finalize_layerwise_reload(self.model, self.model_config)

    def receive_weights(self, update_info: InProcessUpdateInfo) -> None:
        weights = _take(update_info.ticket)
        # self.device, not the model's parameters: inside the layer-wise reload they sit on "meta"
        moved = [(name, t.detach().to(self.device)) for name, t in weights]
        self.model.load_weights(moved)

    def shutdown(self) -> None:
        pass


def register() -> str:
    """Register the engine with vLLM (idempotent); return its backend name."""
    if BACKEND_NAME not in WeightTransferEngineFactory._registry:
        WeightTransferEngineFactory.register_engine(BACKEND_NAME, InProcessWeightTransferEngine)
    return BACKEND_NAME


def update_weights(llm: Any, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
    """One full weight update of ``llm`` (a ``vllm.LLM`` built with this engine) from ``weights``."""
    ticket = stage(weights)
    try:
        llm.start_weight_update()
        llm.update_weights({"update_info": {"ticket": ticket}})
        llm.finish_weight_update()
    finally:
        discard(ticket)
