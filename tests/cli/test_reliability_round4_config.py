"""Config files and run-folder locks that cannot be turned against the machine: a lock file that is a link is
refused instead of overwriting its target; a config with a key given twice, an alias bomb, a huge file, a folder,
``/dev/null`` or a FIFO is refused with the right reason, quickly, naming the file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from llm_harness.trainer.config import TrainConfig
from vsr.cli import main
from vsr_util.config_io import MAX_CONFIG_BYTES, MAX_CONFIG_NODES, load_config, read_mapping
from vsr_util.runlock import LOCK_NAME, FolderLock, holder_of, locked_folder

TINY_YAML = """steps: 1
model: {random_init: true, hidden_size: 16, num_layers: 1, num_heads: 2, max_context: 64}
task: {name: step_arith, params: {n_train: 50, n_validation: 8, n_test: 8}}
rollout: {prompts_per_step: 2, group_size: 2, max_new_tokens: 4, verify_timeout_s: 0}
run: {progress: false, checkpoint_every: 5}
"""
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
SECRET = b"precious bytes outside the run folder\n"


def _tiny(tmp_path: Path) -> str:
    p = tmp_path / "tiny.yaml"
    p.write_text(TINY_YAML)
    return str(p)


def _vsr(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vsr", *args], capture_output=True, text=True, env=ENV,
                          timeout=timeout)


def _outside(tmp_path: Path) -> Path:
    target = tmp_path / "outside" / "notes.txt"
    target.parent.mkdir()
    target.write_bytes(SECRET)
    return target


# --- the lock file of a run folder ------------------------------------------------------------------------------


def test_a_lock_file_linked_to_an_outside_file_is_refused_and_the_file_is_untouched(tmp_path, capsys):
    target = _outside(tmp_path)
    run = tmp_path / "run"
    run.mkdir()
    (run / LOCK_NAME).symlink_to(target)
    with pytest.raises(ValueError, match=rf"run.run_dir: the lock file {run / LOCK_NAME} is a symbolic link"):
        FolderLock(run, field="run.run_dir").acquire()
    assert holder_of(run) is None  # the record is never read through the link either
    rc = main(["train", "--config", _tiny(tmp_path), "--run.run-dir", str(run)])
    err = capsys.readouterr().err
    assert rc == 2 and f"{run / LOCK_NAME} is a symbolic link (to {str(target)!r})" in err and "remove" in err
    assert target.read_bytes() == SECRET
    assert sorted(p.name for p in run.iterdir()) == [LOCK_NAME]  # nothing was written into the folder


def test_a_dangling_lock_link_does_not_create_its_target(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    target = tmp_path / "elsewhere.txt"
    (run / LOCK_NAME).symlink_to(target)
    with pytest.raises(ValueError, match="is a symbolic link"):
        with locked_folder(run, field="out"):
            pass
    assert not target.exists() and not os.path.lexists(target)


def test_a_lock_file_hard_linked_to_an_outside_file_is_refused(tmp_path):
    target = _outside(tmp_path)
    run = tmp_path / "run"
    run.mkdir()
    os.link(target, run / LOCK_NAME)
    with pytest.raises(ValueError, match="a file with 2 hard links"):
        FolderLock(run).acquire()
    assert target.read_bytes() == SECRET


@pytest.mark.parametrize("kind", ["folder", "fifo"])
def test_a_lock_path_that_is_not_a_plain_file_is_refused_without_blocking(tmp_path, kind):
    run = tmp_path / "run"
    run.mkdir()
    lock = run / LOCK_NAME
    lock.mkdir() if kind == "folder" else os.mkfifo(lock)
    with pytest.raises(ValueError, match="a folder" if kind == "folder" else "a FIFO"):
        FolderLock(run).acquire()


def test_a_plain_lock_file_still_works(tmp_path):
    with FolderLock(tmp_path / "run", command="vsr x") as lock:
        assert lock.held and holder_of(tmp_path / "run")["command"] == "vsr x"


# --- a key given twice ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name, text, key, lines", [
    ("c.yaml", "steps: 3\nrollout:\n  group_size: 2\nseed: 1\nrollout:\n  group_size: 4\n", "'rollout'", (2, 5)),
    ("c.yaml", "steps: 3\nrollout:\n  steps: 2\n  group_size: 4\n  steps: 5\n", "'rollout.steps'", (3, 5)),
    ("c.yml", "steps: 3\nseed: 1\nsteps: 3\n", "'steps'", (1, 3)),
    ("c.json", '{\n  "steps": 3,\n  "rollout": {"group_size": 2},\n  "steps": 4\n}\n', "'steps'", (2, 4)),
    ("c.json", '{\n  "rollout": {\n    "group_size": 2,\n    "steps": 1,\n    "group_size": 4\n  }\n}\n',
     "'group_size'", (3, 5)),
])
def test_a_key_given_twice_is_refused_naming_both_lines(tmp_path, name, text, key, lines):
    p = tmp_path / name
    p.write_text(text)
    with pytest.raises(ValueError) as info:
        read_mapping(p)
    msg = str(info.value)
    assert str(p) in msg and f"key {key} is given twice (lines {lines[0]} and {lines[1]})" in msg


def test_a_key_given_twice_fails_the_command_in_one_line(tmp_path, capsys):
    p = tmp_path / "c.yaml"
    p.write_text(TINY_YAML + "steps: 7\n")
    assert main(["train", "--config", str(p), "--run.run-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert f"{p}: key 'steps' is given twice (lines 1 and 6)" in err and "Traceback" not in err
    assert not (tmp_path / "run").exists()


def test_a_toml_key_given_twice_is_refused(tmp_path):
    p = tmp_path / "c.toml"
    p.write_text("steps = 3\nsteps = 4\n")
    with pytest.raises(ValueError, match=r"c.toml: not valid TOML .*line 2"):
        read_mapping(p)


def test_the_same_key_in_other_sections_merges_and_small_aliases_still_work(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("base: &b {lr: 1, wd: 2}\noptim:\n  <<: *b\n  lr: 3\nother: {lr: 1}\nlist: [*b, *b]\n")
    assert read_mapping(p) == {"base": {"lr": 1, "wd": 2}, "optim": {"lr": 3, "wd": 2}, "other": {"lr": 1},
                               "list": [{"lr": 1, "wd": 2}] * 2}
    j = tmp_path / "c.json"
    j.write_text('{"a": {"steps": 1}, "b": {"steps": 2}, "c": [{"x": 1}, {"x": 2}], "d": {}}')
    assert read_mapping(j) == {"a": {"steps": 1}, "b": {"steps": 2}, "c": [{"x": 1}, {"x": 2}], "d": {}}


# --- alias bombs and huge files ---------------------------------------------------------------------------------

BOMB = ("task:\n  name: step_arith\n  params:\n    a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n"
        + "".join(f"    {c}: &{c} [{', '.join([f'*{p}'] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi")))


def test_an_alias_bomb_is_refused_at_once(tmp_path):
    p = tmp_path / "bomb.yaml"
    p.write_text(BOMB)
    t0 = time.monotonic()
    with pytest.raises(ValueError, match=rf"{p}:\d+: task.params.\w holds more than {MAX_CONFIG_NODES:,} values"):
        read_mapping(p)
    assert time.monotonic() - t0 < 5


def test_an_alias_bomb_does_not_hang_the_command(tmp_path):
    p = tmp_path / "bomb.yaml"
    p.write_text(BOMB)
    r = _vsr("train", "--config", str(p), "--run.run-dir", str(tmp_path / "run"))
    assert r.returncode == 2 and f"{p}:" in r.stderr and "alias" in r.stderr and "Traceback" not in r.stderr


def test_a_recursive_alias_is_refused(tmp_path):
    p = tmp_path / "loop.yaml"
    p.write_text("task:\n  params: &p\n    again: *p\n")
    with pytest.raises(ValueError, match=r"loop.yaml:2: task.params contains an alias of itself"):
        read_mapping(p)


def test_an_oversized_config_is_refused_before_parsing(tmp_path):
    p = tmp_path / "big.yaml"
    with p.open("w") as fh:
        fh.write("task:\n  params:\n    items: [")
        fh.write("1, " * (MAX_CONFIG_BYTES // 3))
        fh.write("1]\n")
    size = p.stat().st_size
    t0 = time.monotonic()
    with pytest.raises(ValueError) as info:
        load_config(TrainConfig, p)
    assert time.monotonic() - t0 < 2  # the size is checked first: nothing is parsed
    assert f"{p} is {size:,} bytes, over the {MAX_CONFIG_BYTES:,}-byte limit" in str(info.value)


# --- --config on something that is not a config file -------------------------------------------------------------


@pytest.mark.parametrize("kind, expect", [
    ("folder", "is a folder, not a config file"),
    ("devnull", "/dev/null is a character device, not a regular file"),
    ("empty", "is empty (0 bytes)"),
    ("missing", "file not found"),
])
def test_config_that_is_not_a_file_says_why(tmp_path, capsys, kind, expect):
    path = {"folder": tmp_path / "cfg.yaml", "devnull": Path("/dev/null"), "empty": tmp_path / "e.yaml",
            "missing": tmp_path / "gone.yaml"}[kind]
    if kind == "folder":
        path.mkdir()
    elif kind == "empty":
        path.write_text("")
    assert main(["train", "--config", str(path), "--run.run-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert expect in err and str(path) in err
    assert kind == "missing" or "file not found" not in err


def test_config_that_is_a_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "cfg.yaml"
    os.mkfifo(fifo)
    r = _vsr("train", "--config", str(fifo), "--run.run-dir", str(tmp_path / "run"), timeout=60)
    assert r.returncode == 2 and f"{fifo} is a FIFO (named pipe), not a regular file" in r.stderr


def test_json_files_are_read_with_their_size_bounded_and_a_fifo_refused(tmp_path):
    """The toolkit's JSON files (manifests, pools, records, summaries) go through one bounded reader."""
    from vsr_util.atomic import read_json

    good = tmp_path / "a.json"
    good.write_text('{"x": 1}')
    assert read_json(good) == {"x": 1}
    with pytest.raises(ValueError, match=rf"^{good}: 8 bytes, more than the 4"):
        read_json(good, max_bytes=4)
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match=rf"^{fifo}: not a regular file$"):
        read_json(fifo)  # no writer: must not block
    assert time.perf_counter() - t0 < 5
    with pytest.raises(ValueError, match="not a regular file"):
        read_json(tmp_path)
    bad = tmp_path / "bad.json"
    bad.write_text('{\n"x": }')
    with pytest.raises(json.JSONDecodeError) as e:
        read_json(bad)
    assert e.value.lineno == 2
    with pytest.raises(FileNotFoundError):
        read_json(tmp_path / "missing.json")


def test_a_model_manifest_that_is_a_fifo_is_refused_naming_it(tmp_path):
    from llm_harness.models.manifest import read_manifest

    (tmp_path / "m").mkdir()
    os.mkfifo(tmp_path / "m" / "manifest.json")
    with pytest.raises(ValueError, match=r"has no manifest.json|not a regular file"):
        read_manifest(tmp_path / "m")
