"""The step profile: operator classes, phase attribution and the in-step matmul rate from profiler events (by hand),
then one tiny profiled run end to end (no timing asserted)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

from benchmarks.step_profile import ProfileConfig, attribute, op_class, run


@pytest.mark.parametrize("name, cls", [
    ("aten::mm", "matmul"), ("aten::addmm", "matmul"), ("aten::baddbmm", "matmul"), ("mkl::_mkl_linear", "matmul"),
    ("aten::_softmax", "attention"), ("aten::_log_softmax", "vocab"), ("aten::searchsorted", "vocab"),
    ("aten::copy_", "memory"), ("aten::cat", "memory"), ("aten::mul", "elementwise"),
    ("aten::silu_backward", "elementwise"), ("aten::_fused_adamw_", "optimizer"), ("aten::frobnicate", "other"),
])
def test_operator_classes(name, cls):
    assert op_class(name) == cls


def _ev(name, start, end, self_us, flops=0):
    return SimpleNamespace(name=name, time_range=SimpleNamespace(start=start, end=end), self_cpu_time_total=self_us,
                           flops=flops)


def test_attribution_by_phase_and_the_in_step_matmul_rate():
    events = [
        _ev("phase::generate", 0, 100, 1), _ev("aten::mm", 10, 20, 10, flops=2e4), _ev("aten::cat", 30, 35, 5),
        _ev("aten::mm", 200, 240, 40, flops=2e6), _ev("aten::mul", 250, 260, 10), _ev("mkl::_mkl_linear", 50, 60, 10),
        _ev("phase::optimizer", 300, 400, 1), _ev("aten::_fused_adamw_", 310, 390, 80),
    ]
    r = attribute(events, wall_s=500e-6)
    bp = r["by_phase"]
    assert bp["generate"]["matmul"] == pytest.approx(20e-6) and bp["generate"]["memory"] == pytest.approx(5e-6)
    assert bp["train"] == {"total_s": pytest.approx(50e-6), "matmul": pytest.approx(40e-6), "elementwise": pytest.approx(10e-6)}
    assert bp["optimizer"]["optimizer"] == pytest.approx(80e-6)
    assert r["inside_ops_s"] == pytest.approx(155e-6) and r["outside_s"] == pytest.approx(345e-6)
    # 2e6 FLOP in 40 µs = 50 GFLOP/s in train; the packed op (no FLOP count) is reported apart
    assert r["matmul_gflops_in_step"]["train"] == pytest.approx(50.0) and r["matmul_gflops_in_step"]["optimizer"] is None
    assert r["matmul_gflops_in_step"]["generate"] == pytest.approx(2.0) and r["packed_matmul_s"] == pytest.approx(10e-6)
    assert list(r["by_class"])[0] == "optimizer" and r["top_ops"][0]["name"] == "aten::_fused_adamw_"


def test_config_refuses_unknown_contenders():
    with pytest.raises(ValueError, match="contenders"):
        ProfileConfig(contenders=("ours_lean", "trl"))


def test_a_tiny_profile_end_to_end(tmp_path):
    torch.set_num_threads(1)
    out = tmp_path / "p.json"
    cfg = ProfileConfig(contenders=("ours_lean",), steps=1, warmup_steps=1, prompts=2, group_size=2, max_new_tokens=4,
                        threads=1, gemm_repeats=1, top=5, out=str(out))
    assert run(cfg) == 0
    res = json.loads(out.read_text())
    r = res["contenders"][0]
    assert r["contender"] == "ours_lean" and len(r["top_ops"]) == 5
    assert r["by_phase"]["generate"]["total_s"] > 0 and r["by_phase"]["optimizer"].get("optimizer", 0) > 0
    assert r["matmul_gflop"]["train"] > 0 and 0 < r["inside_ops_s"] <= r["wall_s"]
    assert "## ours_lean (float32)" in out.with_suffix(".md").read_text()
    assert len(res["copy_bandwidth_gbs"]) == 2 and all(b > 0 for b in res["copy_bandwidth_gbs"])
    assert res["starved"] == (min(res["copy_bandwidth_gbs"]) < 8.0)
