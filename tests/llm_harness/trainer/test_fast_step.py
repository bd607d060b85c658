"""The lean step's options (``run.group_prompt_once``, ``run.fused_optimizer``, ``run.sampler``) in the trainer:
the same training up to float rounding, resumable across the option, and refused in bad combinations."""

from __future__ import annotations

import mmap
from dataclasses import replace

import pytest
import torch

from llm_harness.trainer.config import RunConfig
from llm_harness.trainer.runlog import is_timing_key
from trainer_support import make_trainer, tiny_config


def _rows(tmp_path, name: str, steps: int = 3, **run_over):
    run = replace(tiny_config(str(tmp_path / name)).run, **run_over)
    tr = make_trainer(str(tmp_path / name), run=run)
    try:
        return [{k: v for k, v in tr.train_step().items() if not is_timing_key(k)} for _ in range(steps)], tr
    finally:
        tr.close()


def _assert_close(fast: list[dict], plain: list[dict], rel: float) -> None:
    for f, p in zip(fast, plain):
        assert sorted(f) == sorted(p)
        for k, v in p.items():
            if isinstance(v, float) and v != v:
                assert f[k] != f[k], k
            elif isinstance(v, float):
                assert f[k] == pytest.approx(v, rel=rel, abs=1e-6), k
            else:
                assert f[k] == v, k


def test_group_prompt_and_fused_adamw_train_as_the_plain_step(tmp_path, monkeypatch) -> None:
    from llm_harness.trainer import group_prompt

    torch.set_num_threads(1)
    plain, _ = _rows(tmp_path, "plain")
    calls = []
    real = group_prompt.group_shared_hidden
    monkeypatch.setattr(group_prompt, "group_shared_hidden", lambda *a, **k: calls.append(1) or real(*a, **k))
    fast, tr = _rows(tmp_path, "fast", group_prompt_once=True, fused_optimizer=True)
    assert len(calls) >= 3  # the loss passes ran grouped
    assert any(r["optimizer_steps"] > 0 for r in fast)
    assert all(g["fused"] for g in tr.optimizer.param_groups)
    _assert_close(fast, plain, rel=1e-4)


def test_inverse_cdf_sampler_trains_and_is_deterministic(tmp_path) -> None:
    torch.set_num_threads(1)
    a, _ = _rows(tmp_path, "a", steps=2, sampler="inverse_cdf")
    b, _ = _rows(tmp_path, "b", steps=2, sampler="inverse_cdf")
    assert repr(a) == repr(b)  # same seed, same numbers (NaN-aware)
    m, _ = _rows(tmp_path, "m", steps=2)
    assert repr(a) != repr(m)  # another random stream than the multinomial draw's


def test_a_plain_checkpoint_resumes_with_the_fused_optimizer(tmp_path) -> None:
    torch.set_num_threads(1)
    d = str(tmp_path / "run")
    tr = make_trainer(d)
    try:
        tr.train_step()
        tr.save()
    finally:
        tr.close()
    run = replace(tiny_config(d).run, resume=True, fused_optimizer=True)
    tr = make_trainer(d, run=run)
    try:
        assert tr.resume() == 1
        assert all(g["fused"] for g in tr.optimizer.param_groups)
        m = tr.train_step()
        assert m["optimizer_steps"] >= 0 and m.get("grad_norm") == m.get("grad_norm")
        steps = {float(s["step"]) for s in tr.optimizer.state.values()}
        assert steps <= {1.0, 2.0} and 2.0 in steps  # the moments continued from the plain run's
    finally:
        tr.close()


def test_bad_combinations_are_refused() -> None:
    assert RunConfig(group_prompt_once=True, packed_forward=True).packed_forward  # together: the packed group pass
    with pytest.raises(ValueError, match="bf16.*packed_forward"):
        RunConfig(group_prompt_once=True, packed_forward=True, precision="bf16")
    with pytest.raises(ValueError, match="sampler"):
        RunConfig(sampler="gumbel")
    with pytest.raises(ValueError, match="fused_optimizer"):
        RunConfig(fused_optimizer="yes")  # type: ignore[arg-type]


def test_memory_by_phase_is_recorded(tmp_path, capsys) -> None:
    import json

    from llm_harness.trainer.memory_watch import PhaseMemory, fixed_parts

    torch.set_num_threads(1)
    tr = make_trainer(str(tmp_path / "run"), steps=2)
    try:
        rows = tr.fit()
    finally:
        tr.close()
    rep = json.loads((tmp_path / "run" / "memory.json").read_text())
    assert rep["steps"] == 2 and rep["kind"] == "peak_rss"
    assert set(rep["peak_gb"]) >= {"generate"} and all(v > 0 for v in rep["peak_gb"].values())
    n_params = sum(p.numel() for p in tr.model.parameters())
    assert rep["fixed_gb"]["optimizer"] * 2**30 >= 2 * 4 * n_params  # two float32 moments per parameter
    assert "mem_peak_generate_gb" in rows[0] and "mem_weights_gb" in rows[0]
    assert "memory (GiB): weights" in capsys.readouterr().err
    # a phase's peak sees a large allocation inside it: fresh anonymous pages from the kernel, touched (a torch tensor
    # could be served from memory the allocator kept resident after earlier tests in this process, and not move RSS)
    pm = PhaseMemory("cpu")
    with pm.phase("big"):
        n = 64 * 2**20
        m = mmap.mmap(-1, n)
        for i in range(0, n, mmap.PAGESIZE):
            m[i] = 1
        m.close()
    with pm.phase("small"):
        pass
    if pm.exact:
        assert pm.last["big"] - pm.last["small"] > 48 * 2**20
    assert fixed_parts(torch.nn.Linear(4, 4))["weights"] == (16 + 4) * 4


def test_dry_run_prints_the_estimate_and_writes_nothing(tmp_path, capsys) -> None:
    from llm_harness.trainer.entry import train

    cfg = tiny_config(str(tmp_path / "run"))
    cfg = replace(cfg, run=replace(cfg.run, dry_run=True))
    assert train(cfg) == 0
    err = capsys.readouterr().err
    assert "dry run: weights" in err and "loss pass" in err and "sampler" in err
    assert not (tmp_path / "run").exists()


def test_a_step_too_large_is_refused_naming_the_field(tmp_path, monkeypatch) -> None:
    import llm_harness.trainer.memory_check as mc
    from llm_harness.trainer.entry import build_trainer, train

    cfg = tiny_config(str(tmp_path / "run"))
    tr = build_trainer(cfg)
    try:
        est = mc.estimate_step(cfg, tr.model, prompt_tokens=12)
        grouped = mc.estimate_step(replace(cfg, run=replace(cfg.run, group_prompt_once=True)), tr.model, prompt_tokens=12)
        chunked = mc.estimate_step(replace(cfg, run=replace(cfg.run, micro_batch_rows=2)), tr.model, prompt_tokens=12)
    finally:
        tr.close()
    assert grouped.loss_pass < est.loss_pass and chunked.loss_pass < est.loss_pass
    n = sum(p.numel() for p in tr.model.parameters())
    assert est.optimizer == 2 * 4 * n and est.grads == 4 * n
    # room for the fixed parts and the logits check, not for the whole step's loss pass
    fixed = est.weights + est.grads + est.optimizer + est.runtime
    monkeypatch.setattr(mc, "available_bytes", lambda: fixed + max(est.sampler, est.loss_pass // 3))
    monkeypatch.setattr(mc, "check_memory", lambda *a, **k: None)
    import pytest as _pt

    with _pt.raises(ValueError, match=r"memory: one training step needs about .* set run.micro_batch_rows \d+ or less"):
        train(cfg)
    assert not (tmp_path / "run").exists()


def test_micro_batches_keep_a_context_together_and_train_the_same(tmp_path) -> None:
    torch.set_num_threads(1)
    whole, _ = _rows(tmp_path, "whole", steps=2, group_prompt_once=True)
    chunked, tr = _rows(tmp_path, "chunk", steps=2, group_prompt_once=True, micro_batch_rows=4)
    _assert_close(chunked, whole, rel=1e-4)
    # every chunk of 4 rows holds one context (groups of 4 rows, as tiny_config samples)
    from llm_harness.trainer.data import build_batch
    from llm_harness.trainer.group_prompt import group_rows

    from llm_harness.trainer.loop import _StepMetrics

    step = tr._advantages(tr.collect_step(), _StepMetrics())
    batch = build_batch(list(step.groups), tr.codec.pad_token_id)
    chunks = tr._micro_batches(batch, torch.arange(batch.size))
    for rows, _share in chunks:
        g = group_rows(batch.input_ids[rows], batch.attention_mask[rows], batch.loss_mask[rows])
        assert g.n_groups == 1


def test_a_step_without_an_update_has_no_loss(tmp_path) -> None:
    """With nothing to train (every group dropped by a filter), loss, gradient norm and entropy are absent, not NaN."""
    from llm_harness.trainer.plugins import GroupFilter
    from llm_harness.trainer.step import Kept

    class DropAll(GroupFilter):
        def keep(self, step, ctx):
            return Kept(indices=())

    torch.set_num_threads(1)
    tr = make_trainer(str(tmp_path / "r"), extra_plugins=[DropAll()])
    try:
        m = tr.train_step()
    finally:
        tr.close()
    assert m["optimizer_steps"] == 0.0
    assert not ({"loss", "grad_norm", "entropy"} & set(m))
