"""``vsr checkpoint convert``: a trusted format-1 checkpoint becomes format 2 and resumes bit-identically;
nothing is unpickled without ``--trust``."""

from __future__ import annotations

from pathlib import Path

import pytest

from llm_harness.methods.extra import ExtraPlugin
from llm_harness.methods.replay import ReplayPlugin
from llm_harness.methods.vsr import VSRPlugin
from llm_harness.trainer.checkpoint import capture_rng, latest_checkpoint, load_checkpoint
from llm_harness.trainer.checkpoint_v1 import V1_FILES, convert_checkpoint
from llm_harness.trainer.config import RunConfig
from trainer_support import (
    FileOnUnpickle,
    ToyTask,
    assert_plain_equal,
    check_resume_is_bit_identical,
    make_trainer,
    plant_checkpoint,
    torch_pickle,
)
from vsr.cli import main

PLUGINS = {  # ExTra injects one guided state a step, so its queue still holds some at the checkpoint
    "extra": {"warmup_steps": 1, "embedder": "ngram4", "max_guided_frac": 0.25},
    "vsr": {"cold_start": True, "cold_start_problems": 20, "window": 3},
    "replay": {"warmup": 1},
}


# ------------------------------------------------------------------ format 1, as it was written (commit 697d20a)


def _v1_plugin_state(p) -> dict:
    """A plug-in's format-1 ``state_dict`` (data-model objects and tuples inside)."""
    if isinstance(p, VSRPlugin):
        return {"buffer": [{"key": k, "problem": t.problem, "prompt_ids": t.prompt_ids, "response_ids": t.response_ids,
                            "positions": t.positions.copy(), "alphas": t.alphas.copy(), "scores": t.scores.copy(),
                            "birth": t.birth, "source": t.source} for k, t in p.buffer.items()]}
    if isinstance(p, ReplayPlugin):
        return {"buffer": list(p.buffer)}
    if isinstance(p, ExtraPlugin):
        return {"memory": {k: v.copy() for k, v in p.memory.items()},
                "prefix_cache": {k: [(e.prefix, e.mte, e.emb.copy()) for e in v] for k, v in p.prefix_cache.items()},
                "queue": [(s.prompt_ids, s.problem, s.prefix_ids, dict(s.meta)) for s in p.queue], "dropped": p.dropped}
    raise AssertionError(type(p))


def _write_v1(ck: Path, tr) -> None:
    """Rewrite checkpoint folder ``ck`` in format 1 (``torch.save`` of every part) from trainer ``tr``'s state."""
    objs = {"model.pt": tr.model.state_dict(), "optim.pt": tr.optimizer.state_dict(), "sched.pt": tr.scheduler.state_dict(),
            "rng.pt": capture_rng(), "plugins.pt": [tr.fresh.state_dict()] + [_v1_plugin_state(p) for p in tr.plugins]}
    plant_checkpoint(ck, {name: torch_pickle(obj) for name, obj in objs.items()}, 1, step=tr.step)


def _make(d, **run_kw):
    return make_trainer(str(d), task=ToyTask(good="0"), steps=6, plugins=PLUGINS,
                        run=RunConfig(run_dir=str(d), checkpoint_every=3, progress=False, **run_kw))


def test_a_converted_format1_checkpoint_resumes_bit_identically(tmp_path, capsys):
    converted = {}

    def make(d, **run_kw):
        if run_kw.get("resume"):  # before resuming: the step-3 checkpoint becomes format 1, refused, then converted
            ck = latest_checkpoint(d / "checkpoints")
            mid = _make(d, **run_kw)
            mid.resume()
            _write_v1(ck, mid)
            expected = [mid.fresh.state_dict()] + [p.state_dict() for p in mid.plugins]
            for e in expected[2]["buffer"]:  # VSR's p0 / R: fields format 1 never stored (only score: calibrated reads them)
                del e["p0"], e["reward"]
            mid.close()
            assert all(len(s) for s in (mid.plugins[0].queue, mid.plugins[1].buffer, mid.plugins[2].buffer))
            with pytest.raises(ValueError, match=r"format 1 .*vsr checkpoint convert --path .* --trust"):
                load_checkpoint(ck)
            assert main(["checkpoint", "convert", "--path", str(ck), "--trust"]) == 0
            assert "converted" in capsys.readouterr().out
            assert sorted(f.name for f in ck.iterdir()) == [
                "arrays.npz", "meta.json", "meta.json.sha256", "model.safetensors", "state.json", "tensors.safetensors"]
            converted["plugins"] = load_checkpoint(ck)["plugins"]
            assert_plain_equal(converted["plugins"], expected)  # format 1's states, made plain = format 2's
        return _make(d, **run_kw)

    check_resume_is_bit_identical(make, tmp_path, stop_after=4, checkpoint_step=3)
    assert converted


def test_nothing_is_unpickled_without_trust(tmp_path, capsys):
    tr = make_trainer(str(tmp_path / "r"), steps=1)
    tr.fit()
    tr.close()
    ck = latest_checkpoint(tmp_path / "r" / "checkpoints")
    marker = tmp_path / "marker"
    with pytest.raises(ValueError, match="only format 1"):
        convert_checkpoint(ck, trust=True)  # already format 2
    plant_checkpoint(ck, {n: torch_pickle({"w": FileOnUnpickle(marker)}) for n in V1_FILES}, 1)
    assert main(["checkpoint", "convert", "--path", str(ck)]) == 2
    assert "refusing without --trust" in capsys.readouterr().err
    with pytest.raises(ValueError, match="^trust:"):
        convert_checkpoint(ck, trust=False)
    with pytest.raises(SystemExit):
        main(["checkpoint", "convert", "--help"])
    help_text = " ".join(capsys.readouterr().out.replace("│", " ").split())
    assert "UNPICKLES" in help_text and "--trust" in help_text and "only place" in help_text
    assert not marker.exists()
