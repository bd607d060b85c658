"""Checkpoint files load without running code: plain data, exact round trips, planted pickles refused."""

from __future__ import annotations

import io
import pickle
import random
import zipfile

import numpy as np
import pytest
import safetensors.torch
import torch

from llm_harness.tasks import Problem
from llm_harness.trainer.checkpoint import (
    FORMAT_VERSION,
    capture_rng,
    check_plain,
    latest_checkpoint,
    load_checkpoint,
    restore_rng,
    tensors_to_bytes,
    write_checkpoint,
)
from llm_harness.trainer.checkpoint_v1 import V1_FILES
from llm_harness.trainer.data import Origin
from trainer_support import FileOnUnpickle, assert_plain_equal, make_trainer, plant_checkpoint, torch_pickle


def _pickle_in_torch_file(data: bytes) -> bytes:
    """The pickle inside a ``torch.save`` file (what an unrestricted ``torch.load`` unpickles)."""
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        return z.read(next(n for n in z.namelist() if n.endswith("data.pkl")))


def _parts(plugins=()):
    return {"model": {"w": torch.arange(6.0).reshape(2, 3)}, "optim": {}, "sched": {}, "rng": capture_rng(),
            "plugins": list(plugins)}


# ------------------------------------------------------------------ plain data


@pytest.mark.parametrize("value", [
    None, True, 3, -2.5, float("nan"), "x", [1, [2.0, None]], {"a": {"b": [True]}, "__a": 1},
    np.zeros((2, 3), np.float32), np.array(["p1", "p2"]), np.arange(3, dtype=np.uint32), np.array(1 + 2j),
])
def test_plain_values_are_accepted_and_round_trip_exactly(tmp_path, value):
    check_plain(value)
    write_checkpoint(tmp_path / "ck", 0, _parts([{"v": value}]), fingerprint="-")
    assert_plain_equal(load_checkpoint(tmp_path / "ck")["plugins"][0], {"v": value})


@pytest.mark.parametrize("value, bad", [
    ((1, 2), "tuple"),
    (np.float64(1.0), "float64"),
    (np.int64(1), "int64"),
    (Origin.FRESH, "Origin"),
    ({1: "a"}, "key 1"),
    (np.array([object()]), "dtype object"),
    (Problem("p", "Q?", "1"), "Problem"),
    (torch.zeros(2), "Tensor"),
])
def test_non_plain_values_are_refused_with_their_path(tmp_path, value, bad):
    with pytest.raises(ValueError, match=rf"^plugins\[0\]\.buffer\[1\].*{bad}"):
        write_checkpoint(tmp_path / "ck", 0, _parts([{"buffer": [0, value]}]), fingerprint="-")
    assert not (tmp_path / "ck").exists()


def test_torch_states_round_trip_with_tuples_int_keys_and_tensors(tmp_path):
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, betas=(0.8, 0.9))
    model(torch.ones(4, 3)).sum().backward()
    opt.step()
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.5)
    odd = {3: (1, "a"), "__tensor__": 2.0, (1, 2): [torch.tensor(7)]}
    write_checkpoint(tmp_path / "ck", 1, {"model": model.state_dict(), "optim": opt.state_dict(), "sched": odd,
                                          "rng": sched.state_dict(), "plugins": []}, fingerprint="-")
    ck = load_checkpoint(tmp_path / "ck")
    a, b = opt.state_dict(), ck["optim"]
    assert a["param_groups"] == b["param_groups"] and type(b["param_groups"][0]["betas"]) is tuple
    assert a["state"].keys() == b["state"].keys()
    for k in a["state"]:
        for name, v in a["state"][k].items():
            assert torch.equal(v, b["state"][k][name]) and v.dtype == b["state"][k][name].dtype
    assert ck["sched"].keys() == odd.keys() and ck["sched"][3] == (1, "a") and torch.equal(ck["sched"][(1, 2)][0], torch.tensor(7))
    assert ck["rng"] == sched.state_dict()
    for k, v in model.state_dict().items():
        assert torch.equal(ck["model"][k], v)


def test_rng_states_round_trip_bit_identically(tmp_path):
    random.seed(1), np.random.seed(2), torch.manual_seed(3)
    random.random(), np.random.normal(), torch.rand(3)  # NumPy keeps a cached Gaussian
    write_checkpoint(tmp_path / "ck", 0, _parts(), fingerprint="-")

    def draws():
        out = [random.random(), random.gauss(0, 1), np.random.normal(), np.random.rand(), torch.rand(4)]
        if torch.cuda.is_available():
            out.append(torch.rand(4, device="cuda").cpu())
        return out

    expected = draws()
    random.seed(9), np.random.seed(9), torch.manual_seed(9)
    restore_rng(load_checkpoint(tmp_path / "ck")["rng"])
    got = draws()
    assert got[:4] == expected[:4] and all(torch.equal(a, b) for a, b in zip(got[4:], expected[4:]))


def test_shared_and_viewed_tensors_are_written_as_copies():
    w = torch.arange(12.0).reshape(3, 4)
    data = tensors_to_bytes({"emb": w, "lm_head": w, "row": w[1], "cols": w[:, 1:]}, metadata={"what": "x"})
    back = safetensors.torch.load(data)
    assert torch.equal(back["emb"], w) and torch.equal(back["lm_head"], w)
    assert torch.equal(back["row"], w[1]) and torch.equal(back["cols"], w[:, 1:])


# ------------------------------------------------------------------ planted checkpoints never run code


V2_FILES = ("model.safetensors", "tensors.safetensors", "arrays.npz", "state.json")


def test_the_payload_runs_code_when_unpickled(tmp_path):
    """The planted files below are live: unpickling them (as the format-1 reader did) creates the file."""
    sentinel = tmp_path / "sentinel"
    pickle.loads(_pickle_in_torch_file(torch_pickle({"w": FileOnUnpickle(sentinel)})))
    assert sentinel.exists()


@pytest.mark.parametrize("layout", ["format1", "format2_names", "npz_object_array"])
def test_resume_refuses_a_planted_checkpoint_and_runs_none_of_its_code(tmp_path, layout):
    tr = make_trainer(str(tmp_path / "r"), steps=1)
    tr.fit()
    ck = latest_checkpoint(tmp_path / "r" / "checkpoints")
    marker = tmp_path / "marker"
    evil = torch_pickle({"w": FileOnUnpickle(marker)})
    if layout == "format1":  # the old layout, every file a live pickle
        files, version, match = {n: evil for n in V1_FILES}, 1, r"format 1 .*vsr checkpoint convert --path .* --trust"
    elif layout == "format2_names":  # live pickles under the new names
        files, version, match = {n: evil for n in V2_FILES}, FORMAT_VERSION, "model.safetensors cannot be read"
    else:  # the genuine checkpoint, but its arrays file holds a pickled object array
        buf = io.BytesIO()
        np.savez(buf, a0=np.array([FileOnUnpickle(marker)], dtype=object))
        files = {**{n: (ck / n).read_bytes() for n in V2_FILES}, "arrays.npz": buf.getvalue()}
        version, match = FORMAT_VERSION, "arrays.npz cannot be read"
    plant_checkpoint(ck, files, version)
    with pytest.raises(ValueError, match=match):
        tr.resume()
    with pytest.raises(ValueError, match=match):
        load_checkpoint(ck)
    tr.close()
    assert not marker.exists()


def test_identical_runs_write_identical_checkpoints(tmp_path):
    """The global generators are seeded at run start, so two runs with one seed write
    byte-identical checkpoint files, RNG states included."""
    import hashlib

    from llm_harness.trainer.checkpoint import latest_checkpoint

    digests = []
    for run in ("a", "b"):
        tr = make_trainer(str(tmp_path / run), steps=2, plugins={"vsr": {"cold_start": True, "cold_start_problems": 8}})
        tr.fit()
        tr.close()
        ck = latest_checkpoint(tmp_path / run / "checkpoints")
        digests.append({p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(ck.iterdir())})
    assert digests[0] == digests[1] and len(digests[0]) >= 4


# ------------------------------------------------------------------ damaged checkpoints


def _two_checkpoints(tmp_path):
    from llm_harness.trainer.config import RunConfig

    d = tmp_path / "r"
    tr = make_trainer(str(d), steps=2, run=RunConfig(run_dir=str(d), checkpoint_every=1, keep_checkpoints=2, progress=False))
    tr.fit()
    tr.close()
    return d / "checkpoints"


def _resume(tmp_path):
    from llm_harness.trainer.config import RunConfig

    d = tmp_path / "r"
    tr = make_trainer(str(d), steps=2, run=RunConfig(run_dir=str(d), resume=True, checkpoint_every=1, progress=False))
    try:
        return tr.resume()
    finally:
        tr.close()


def test_an_edited_meta_step_is_caught_and_resume_falls_back(tmp_path):
    import json

    root = _two_checkpoints(tmp_path)
    meta = root / "step_000002" / "meta.json"
    m = json.loads(meta.read_text())
    m["step"] = 1  # the hand edit of the fault trial: 2 -> 1
    meta.write_text(json.dumps(m))
    with pytest.raises(ValueError, match=r"meta.json is corrupt \(checksum mismatch\)"):
        load_checkpoint(root / "step_000002")
    with pytest.warns(UserWarning, match=r"skipped a damaged checkpoint .*step_000002.*resuming from step_000001"):
        assert _resume(tmp_path) == 1


def test_a_meta_step_that_contradicts_its_folder_is_refused(tmp_path):
    import json

    from llm_harness.trainer.checkpoint import write_meta

    root = _two_checkpoints(tmp_path)
    ck = root / "step_000002"
    m = json.loads((ck / "meta.json").read_text())
    m["step"] = 1
    write_meta(ck, m)  # a consistent checksum, but the wrong step for the folder
    with pytest.raises(ValueError, match="says step 1, the folder is step 2"):
        load_checkpoint(ck)


def test_a_corrupt_newest_checkpoint_falls_back_to_the_newest_intact_one(tmp_path):
    root = _two_checkpoints(tmp_path)
    f = root / "step_000002" / "model.safetensors"
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0xFF
    f.write_bytes(bytes(data))
    with pytest.warns(UserWarning, match="model.safetensors is corrupt"):
        assert _resume(tmp_path) == 1
    (root / "step_000001" / "state.json").write_text("{}")
    with pytest.raises(ValueError, match="no intact checkpoint left"):
        _resume(tmp_path)


def test_stale_temporaries_are_removed_on_resume_and_a_binary_latest_is_corrupt(tmp_path):
    root = _two_checkpoints(tmp_path)
    stale = root / ".step_000003.abcd.tmp"
    stale.mkdir()
    (stale / "model.safetensors").write_bytes(b"half")
    (root / "latest").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ValueError, match=r"latest is corrupt \(not UTF-8 text\)"):
        latest_checkpoint(root)
    with pytest.warns(UserWarning, match="latest is corrupt"):
        assert _resume(tmp_path) == 2
    assert not stale.exists()


def test_an_incompatible_configuration_never_falls_back(tmp_path):
    from llm_harness.trainer.config import OptimConfig, RunConfig

    _two_checkpoints(tmp_path)
    d = tmp_path / "r"
    tr = make_trainer(str(d), steps=2, optim=OptimConfig(lr=1e-2),
                      run=RunConfig(run_dir=str(d), resume=True, progress=False))
    with pytest.raises(ValueError, match="incompatible"):
        tr.resume()
    tr.close()
