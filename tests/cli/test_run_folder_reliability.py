"""One writer per run folder, and signals that stop a command promptly.

The commands run as a user runs them: subprocesses in their own session, signalled as a terminal or a
process manager signals them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from vsr_util.runlock import LOCK_NAME, FolderBusyError, FolderLock, holder_of, locked_folder

TINY_YAML = """steps: {steps}
model: {{random_init: true, hidden_size: 16, num_layers: 1, num_heads: 2, max_context: 64}}
task: {{name: step_arith, params: {{n_train: 50, n_validation: 8, n_test: 8}}}}
rollout: {{prompts_per_step: 2, group_size: 2, max_new_tokens: 4, verify_timeout_s: 0}}
run: {{progress: false, checkpoint_every: 5}}
"""
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def _cfg(tmp_path: Path, steps: int) -> str:
    p = tmp_path / f"tiny{steps}.yaml"
    p.write_text(TINY_YAML.format(steps=steps))
    return str(p)


def _sigint_default() -> None:
    # a shell that starts `make test` in the background (`cmd &` without job control) hands every child SIGINT
    # ignored, and Python then never installs its KeyboardInterrupt handler: give the command under test the
    # disposition an interactive terminal gives it
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "vsr", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=ENV, start_new_session=True, preexec_fn=_sigint_default)


def _wait_for(pred, timeout: float, what: str) -> None:
    t0 = time.monotonic()
    while not pred():
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def _children(pid: int) -> set[int]:
    """Live processes whose parent is ``pid`` (from /proc)."""
    out = set()
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            if int(fields[1]) == pid and fields[0] != "Z":
                out.add(int(d.name))
    return out


def _pool_workers(pid: int) -> set[int]:
    """The live process-pool workers (``spawn_main``) of ``pid``."""
    out = set()
    for c in _children(pid):
        try:
            if "spawn_main" in Path(f"/proc/{c}/cmdline").read_text(errors="replace"):
                out.add(c)
        except OSError:  # exited meanwhile
            pass
    return out


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2:].split()[0] != "Z"


def _checkpoints(run: Path) -> list[str]:
    d = run / "checkpoints"
    return sorted(p.name for p in d.glob("step_*")) if d.is_dir() else []


# --- the lock itself --------------------------------------------------------------------------------------------


def test_a_second_lock_is_refused_naming_the_holder_and_released_on_exit(tmp_path):
    d = tmp_path / "run"
    with FolderLock(d, field="run.run_dir", command="vsr train --x") as lock:
        assert lock.held and lock.created and (d / LOCK_NAME).is_file()
        with pytest.raises(FolderBusyError, match=rf"run.run_dir: {d} is being written by pid {os.getpid()} .*`vsr train --x`"):
            FolderLock(d, field="run.run_dir").acquire()
    with FolderLock(d) as again:  # released: the next writer gets it
        assert again.held and not again.created
    assert holder_of(d)["pid"] == os.getpid()


def test_a_stale_lock_of_a_dead_process_is_taken_over(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (d / LOCK_NAME).write_text(json.dumps({"pid": int(dead.stdout), "host": "h", "command": "vsr train", "started": "x"}))
    with FolderLock(d) as lock:
        assert lock.held and holder_of(d)["pid"] == os.getpid()


def test_a_lock_held_by_a_killed_process_is_free(tmp_path):
    d = tmp_path / "run"
    code = f"from vsr_util.runlock import FolderLock; lock = FolderLock({str(d)!r}).acquire(); print('held', flush=True); import time; time.sleep(60)"
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=ENV)
    try:
        assert p.stdout.readline().strip() == "held"
        with pytest.raises(FolderBusyError, match=f"pid {p.pid}"):
            FolderLock(d).acquire()
        p.kill()
        p.wait()
        with FolderLock(d) as lock:
            assert lock.held
    finally:
        p.kill()


def test_a_refused_block_leaves_no_folder_it_created(tmp_path):
    d = tmp_path / "new"
    with pytest.raises(ValueError, match="boom"):
        with locked_folder(d):
            raise ValueError("boom")
    assert not d.exists()
    existing = tmp_path / "old"
    existing.mkdir()
    with pytest.raises(ValueError):
        with locked_folder(existing):
            raise ValueError("boom")
    assert existing.is_dir()  # never removes a folder it did not create


def test_a_dangling_symlink_run_folder_is_named(tmp_path, capsys):
    from vsr.cli import main

    link = tmp_path / "run"
    link.symlink_to(tmp_path / "gone")
    rc = main(["train", "--config", _cfg(tmp_path, 1), "--run.run-dir", str(link)])
    err = capsys.readouterr().err
    assert rc == 2 and f"run.run_dir: {link} is a symbolic link to" in err and "does not exist" in err
    assert "File exists" not in err


# --- two writers, Ctrl-C and SIGTERM on vsr train ---------------------------------------------------------------


def test_two_trains_into_one_folder_and_a_ctrl_c_that_stops_cleanly(tmp_path):
    run, cfg = tmp_path / "run", _cfg(tmp_path, 100000)
    first = _start("train", "--config", cfg, "--run.run-dir", str(run))
    try:
        _wait_for(lambda: len(_checkpoints(run)) >= 1, 120, "the first run's first checkpoint")
        config_before = (run / "config.yaml").read_text()
        second = subprocess.run([sys.executable, "-m", "vsr", "train", "--config", cfg, "--optim.lr", "1e-5",
                                 "--run.run-dir", str(run), "--run.resume", "true"],
                                capture_output=True, text=True, env=ENV, timeout=300)
        assert second.returncode == 2, second.stderr
        assert f"is being written by pid {first.pid}" in second.stderr and "Traceback" not in second.stderr
        assert (run / "config.yaml").read_text() == config_before  # the refused writer wrote nothing
        os.killpg(first.pid, signal.SIGINT)  # as a terminal sends Ctrl-C: to the whole process group
        _, err = first.communicate(timeout=60)
    finally:
        first.kill()
    assert first.returncode == 130, err
    last = int(_checkpoints(run)[-1].split("_")[1])
    assert err.strip().splitlines()[-1] == ("vsr train: interrupted by SIGINT; rerun the same command with "
                                            f"--run.resume true to continue from the last checkpoint (step {last})")
    assert "Traceback" not in err
    resumed = subprocess.run([sys.executable, "-m", "vsr", "train", "--config", _cfg(tmp_path, last + 2),
                              "--run.run-dir", str(run), "--run.resume", "true"], capture_output=True, text=True,
                             env=ENV, timeout=300)
    assert resumed.returncode == 0 and f"resumed from step {last}" in resumed.stderr, resumed.stderr
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == sorted(set(steps)), "metrics rows repeated or interleaved"


def test_sigterm_stops_train_with_143_and_one_line(tmp_path):
    run = tmp_path / "run"
    p = _start("train", "--config", _cfg(tmp_path, 100000), "--run.run-dir", str(run))
    try:
        _wait_for(lambda: len(_checkpoints(run)) >= 1, 120, "the first checkpoint")
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=60)
    finally:
        p.kill()
    assert p.returncode == 143 and "vsr train: interrupted by SIGTERM; rerun" in err and "Traceback" not in err
    with FolderLock(run) as lock:  # released on the way out
        assert lock.held


# --- vsr compare: Ctrl-C cancels the queue and stops the workers --------------------------------------------------


def test_ctrl_c_on_compare_cancels_the_queue_and_leaves_no_worker(tmp_path):
    out = tmp_path / "suite"
    p = _start("compare", "--quick", "--workers", "2", "--regimes", "normal", "--out", str(out))
    workers: set[int] = set()
    try:
        def started() -> bool:
            workers.update(_pool_workers(p.pid))
            return len(workers) >= 2 and any((out / "runs").rglob("done.json"))

        _wait_for(started, 180, "two workers and a first finished job")
        os.killpg(p.pid, signal.SIGINT)
        t0 = time.monotonic()
        stdout, err = p.communicate(timeout=60)
        took = time.monotonic() - t0
    finally:
        p.kill()
    assert p.returncode == 130, err
    assert err.strip().splitlines()[-1].startswith("vsr compare: interrupted by SIGINT; rerun the same command")
    assert "Traceback" not in err
    assert took < 30, f"stopping took {took:.0f} s"
    _wait_for(lambda: not any(_alive(w) for w in workers), 20, "the workers to exit")
    done = list((out / "runs").rglob("done.json"))
    planned = stdout.split(" jobs,")[0].rsplit(" ", 1)[-1]
    assert len(done) < int(planned), "the whole queue ran"
    assert not (out / "report.md").exists()


def test_workers_die_with_a_killed_parent(tmp_path):
    out = tmp_path / "suite"
    p = _start("compare", "--quick", "--workers", "2", "--regimes", "normal", "--out", str(out))
    workers: set[int] = set()
    try:
        def started() -> bool:
            workers.update(_pool_workers(p.pid))
            return len(workers) >= 2

        _wait_for(started, 180, "two workers")
        p.kill()  # SIGKILL to the parent only: nothing of it runs again
        p.wait()
    finally:
        p.kill()
    _wait_for(lambda: not any(_alive(w) for w in workers), 20, "the orphaned workers to exit")


def test_ctrl_c_on_a_study_stops_after_its_last_chunk_and_frees_the_folder(tmp_path):
    out = tmp_path / "study"
    p = _start("study", "hint-ratio", "--model", "low", "--n-problems", "400", "--chunk-problems", "2",
               "--n-continuations", "2", "--no-progress", "--out", str(out))
    try:
        chunks = out / "records" / "chunks"  # the study's records folder (prefixvalue.store.records_dir)
        _wait_for(lambda: len(list(chunks.glob("*.json"))) >= 1 if chunks.is_dir() else False,
                  240, "the study's first chunk")
        os.killpg(p.pid, signal.SIGINT)
        _, err = p.communicate(timeout=60)
    finally:
        p.kill()
    assert p.returncode == 130, err
    assert err.strip().splitlines()[-1] == ("vsr study hint-ratio: interrupted by SIGINT; rerun the same command to "
                                            "continue from the last finished chunk")
    assert "Traceback" not in err and not (out / "summary.json").exists()
    with FolderLock(out) as lock:
        assert lock.held
