"""Checkpoints that stream: tensor by tensor to disk, checksummed while written, no whole-file bytes in memory."""

from __future__ import annotations

import hashlib
import tracemalloc
from pathlib import Path

import pytest
import safetensors.torch
import torch

from llm_harness.trainer import checkpoint as ck
from llm_harness.trainer.checkpoint import (
    load_checkpoint,
    save_checkpoint,
    write_checkpoint,
    write_tensors_streaming,
)


def _tensors() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    w = torch.randn(7, 5, generator=g)
    return {
        "w": w, "tied": w,  # one storage under two names, as tied embeddings
        "row": w[2], "cols": w[:, 1:],  # views, one of them not contiguous
        "bf16": torch.randn(3, 4, generator=g).to(torch.bfloat16),
        "step": torch.tensor(3.0), "ids": torch.arange(6, dtype=torch.int64).reshape(2, 3),
        "flags": torch.tensor([True, False, True]), "empty": torch.zeros(0, 4),
    }


def test_streamed_file_is_safetensors_and_checksummed(tmp_path: Path) -> None:
    t = _tensors()
    f = tmp_path / "x.safetensors"
    digest = write_tensors_streaming(t, f, metadata={"what": "x"})
    assert digest == hashlib.sha256(f.read_bytes()).hexdigest()
    back = safetensors.torch.load_file(f)
    assert set(back) == set(t)
    for k, v in t.items():
        assert back[k].dtype == v.dtype and torch.equal(back[k], v), k
    # the library's own reader of bytes agrees, metadata included
    assert safetensors.torch.load(f.read_bytes())["cols"].shape == (7, 4)
    from safetensors import safe_open

    with safe_open(str(f), "pt") as fh:
        assert fh.metadata() == {"what": "x"}


def test_unsupported_dtype_is_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="'q'.*complex128"):
        write_tensors_streaming({"q": torch.zeros(2, dtype=torch.complex128)}, tmp_path / "q.safetensors")


def test_write_builds_no_whole_file_bytes(tmp_path: Path) -> None:
    """A 64 MB state is written without a Python bytes object of its size (``safetensors.torch.save`` builds one)."""
    model = {f"w{i}": torch.randn(1024, 2048) for i in range(8)}  # 8 x 8 MB
    state = {"model": model, "optim": {"state": {0: {"exp_avg": torch.randn(1024, 2048)}}, "param_groups": []},
             "sched": {}, "rng": {}, "plugins": []}
    tracemalloc.start()
    try:
        write_checkpoint(tmp_path / "ck", 0, state, fingerprint="-")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * 2**20, f"peak traced allocation {peak / 2**20:.1f} MiB while writing a 72 MB checkpoint"
    back = load_checkpoint(tmp_path / "ck")
    assert torch.equal(back["model"]["w3"], model["w3"])
    assert torch.equal(back["optim"]["state"][0]["exp_avg"], state["optim"]["state"][0]["exp_avg"])


def test_loaded_tensors_are_writable_copies(tmp_path: Path) -> None:
    model = torch.nn.Linear(4, 3)
    opt = torch.optim.AdamW(model.parameters())
    model(torch.ones(2, 4)).sum().backward()
    opt.step()
    write_checkpoint(tmp_path / "ck", 1, {"model": model.state_dict(), "optim": opt.state_dict(), "sched": {},
                                         "rng": {}, "plugins": []}, fingerprint="-")
    back = load_checkpoint(tmp_path / "ck")
    m = back["optim"]["state"][0]["exp_avg"]
    before = m.clone()
    m.add_(1.0)  # the optimizer updates its moments in place
    assert torch.equal(m, before + 1.0)


def test_interrupted_write_leaves_nothing_and_next_writer_cleans(tmp_path: Path, monkeypatch) -> None:
    model = torch.nn.Linear(4, 3)
    opt = torch.optim.AdamW(model.parameters())
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    root = tmp_path / "checkpoints"
    calls = {"n": 0}
    real = ck.write_tensors_streaming

    def failing(tensors, path, metadata=None):
        calls["n"] += 1
        if calls["n"] == 2:  # the optimizer's file, after the model's was written
            raise OSError(28, "No space left on device")
        return real(tensors, path, metadata)

    monkeypatch.setattr(ck, "write_tensors_streaming", failing)
    with pytest.raises(OSError):
        save_checkpoint(root, 1, model=model, optimizer=opt, scheduler=sched, plugins=[], fingerprint="-")
    assert [p.name for p in root.iterdir()] == []  # no half-written folder left behind
    monkeypatch.setattr(ck, "write_tensors_streaming", real)
    # a kill (not an exception) leaves a hidden temporary: the next writer of the folder removes it
    stale = root / ".step_000001.abc.tmp"
    stale.mkdir()
    (stale / "model.safetensors").write_bytes(b"partial")
    save_checkpoint(root, 1, model=model, optimizer=opt, scheduler=sched, plugins=[], fingerprint="-")
    assert sorted(p.name for p in root.iterdir()) == ["latest", "step_000001"]
