"""Linear layers on weights packed once for the CPU's GEMM kernels (the static decoder's matmuls).

A decode step multiplies every weight matrix by a few rows (the live sequences). At that shape the GEMM
libraries spend much of each call re-laying-out the weight for their micro-kernels; packing it once, when the
decoder is built, and reusing the packed copy for every token removes that. Two packings, picked by the
dtype the matmul runs in:

* **float32 — MKL's packed SGEMM** (``torch.ops.mkl._mkl_reorder_linear_weight`` / ``_mkl_linear``, the ops
  PyTorch's own Inductor uses for frozen CPU linears): the same float32 products, bit-identical to
  ``F.linear`` at 5 rows or more in our tests (a single row can differ in the last bits: another kernel);
* **bfloat16 — oneDNN's packed inner product** (``torch.ops.mkldnn._reorder_linear_weight`` /
  ``_linear_pointwise``), used when the decoder runs under bf16 autocast and the CPU has native bf16
  (``torch.ops.mkldnn._is_mkldnn_bf16_supported``: AVX-512-BF16 or AMX); bit-identical to ``F.linear`` on the
  bf16-cast weight (what autocast computes).

Anything else (a GPU tensor, a CPU without MKL or without native bf16, another dtype) falls back to
``F.linear``. The packed weight is a copy: :class:`PackCache` keeps one per source weight *version*
(``Tensor._version`` moves on every in-place update, so an optimizer step invalidates it) for the life of one
``generate`` call. Measured speed: ``benchmarks/results/trainer_vs_trl_lean/README.md``.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.functional as F

__all__ = ["PackCache", "pack_kind", "packed_linear"]

#: rows the packing is tuned for (a hint: any number of rows gives the same result)
_ROWS_HINT = 16


def pack_kind(weight: torch.Tensor, dtype: torch.dtype) -> str | None:
    """``"mkl"`` (float32), ``"onednn_bf16"`` (bf16) or ``None`` (fall back to ``F.linear``) for a matmul of
    ``weight`` run in ``dtype`` on this machine."""
    if weight.device.type != "cpu" or weight.dim() != 2:
        return None
    if dtype == torch.float32 and weight.dtype == torch.float32:
        ok = bool(getattr(torch._C, "has_mkl", False)) and hasattr(torch.ops.mkl, "_mkl_linear")
        return "mkl" if ok else None
    if dtype == torch.bfloat16:
        try:
            ok = torch.backends.mkldnn.is_available() and bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
        except (AttributeError, RuntimeError):
            ok = False
        return "onednn_bf16" if ok else None
    return None


def packed_linear(weight: torch.Tensor, bias: torch.Tensor | None, dtype: torch.dtype) -> Callable[[torch.Tensor], torch.Tensor]:
    """``x -> x @ weight.T + bias`` computed in ``dtype`` on a packed copy of ``weight`` where this machine has
    a packed kernel for it (module doc), else with ``F.linear``. ``x`` is ``[rows, in]``."""
    kind = pack_kind(weight, dtype)
    if kind == "mkl":
        w = weight.detach().contiguous()
        b = None if bias is None else bias.detach()
        packed = torch.ops.mkl._mkl_reorder_linear_weight(w, _ROWS_HINT)
        return lambda x: torch.ops.mkl._mkl_linear(x.contiguous(), packed, w, b, x.shape[0])
    if kind == "onednn_bf16":
        w = weight.detach().to(torch.bfloat16).contiguous()
        b = None if bias is None else bias.detach().to(torch.bfloat16)
        packed = torch.ops.mkldnn._reorder_linear_weight(w, _ROWS_HINT)
        del w
        return lambda x: torch.ops.mkldnn._linear_pointwise(x.to(torch.bfloat16).contiguous(), packed, b, "none", [], "")
    if dtype != weight.dtype:
        w = weight.detach().to(dtype)
        b = None if bias is None else bias.detach().to(dtype)
        return lambda x: F.linear(x.to(dtype), w, b)
    return lambda x: F.linear(x, weight, bias)


class PackCache:
    """Packed linears keyed by their source tensors' identity and version (module doc): a second decoder built
    on unchanged weights reuses the packing; an updated weight is packed again."""

    def __init__(self) -> None:
        self._items: dict[tuple, tuple[tuple, Callable[[torch.Tensor], torch.Tensor]]] = {}

    @staticmethod
    def _version(sources: tuple[torch.Tensor | None, ...]) -> tuple:
        return tuple(None if t is None else (t.data_ptr(), t._version) for t in sources)

    def get(self, key: Any, sources: tuple[torch.Tensor | None, ...],
            build: Callable[[], Callable[[torch.Tensor], torch.Tensor]]) -> Callable[[torch.Tensor], torch.Tensor]:
        """The cached linear for ``key`` if ``sources`` (the parameters it was made from) have not changed since,
        else ``build()`` (cached)."""
        ver = self._version(sources)
        hit = self._items.get(key)
        if hit is not None and hit[0] == ver:
            return hit[1]
        fn = build()
        self._items[key] = (ver, fn)
        return fn

    def clear(self) -> None:
        self._items.clear()

    def __len__(self) -> int:
        return len(self._items)
