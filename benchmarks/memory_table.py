"""Benchmark: where a GRPO training step's memory goes, by part, for real model sizes and the trainer's step modes.

For each model and each step mode, ``vsr train`` runs ``steps`` GRPO steps (default 2) of the arithmetic ladder
(``task.name: arith_ladder``; ``prompts_per_step`` x ``group_size`` = 8 x 8 rollouts of at most 48 new tokens, as
``configs/real_smollm2_vsr_grpo.yaml``) with a checkpoint at the end (``run.checkpoint_every = steps``), and the
row records:

* the trainer's ``memory.json`` (``trainer.memory_watch``): the fixed parts (weights, gradients, AdamW state, GiB,
  counted from the tensors) and the peak of each phase (``generate``, ``score``, ``train``: the process's peak
  resident set per phase on CPU, with ``exact`` false where the per-phase reset is not allowed; peak allocated on
  CUDA);
* the process's peak resident set (``ru_maxrss`` of ``os.wait4`` on the child: its own, not the benchmark's);
* seconds per step (``time_step_s`` of ``metrics.jsonl``; the first step pays one-off allocations, so the mean of
  the later steps is reported when there are any);
* whether the checkpoint was written (``checkpoints/latest``) and its size;
* the trainer's own estimate from ``vsr train ... --run.dry-run true`` (its ``dry run:`` line, the total parsed out
  and whether it fits the memory the line says is available), in a process of its own with the trainer's memory
  check off (``VSR_NO_MEMORY_CHECK=1``), so the estimate is printed even for a step the check would refuse.

Design:

* **A fresh process per measurement** (``python -m vsr train --config <file>``), so each peak is that run's alone;
  the benchmark process itself imports neither torch nor the model. Each run has a timeout; a run that fails, times
  out or is killed (``returncode -9``: typically the kernel's out-of-memory killer) is a row with its status and the
  tail of its log, not a crash. The run folder of a measurement is deleted before it starts (a fresh run) and its
  checkpoints after it is measured (``keep_checkpoints``: a 0.5B checkpoint with AdamW state is ~5.5 GiB).
* **The trainer's memory check stays on** for the training runs: a step whose estimate exceeds the memory available
  is refused before it starts, and the row says ``refused by the memory check``. ``--skip-memory-check`` runs it
  anyway (it may then be killed for memory: ``killed by signal 9``).
* **Groups are kept** (``algo.filter_zero_variance: false``): a random-weight model earns no reward, and the
  zero-variance filter would then drop every group and the loss pass with it. Every row thus trains all
  ``prompts_per_step x group_size`` rollouts: the worst case of the step, the same work in every mode.
* **Step modes** (:data:`MODES`): ``plain`` is the trainer's defaults; ``lean`` is ``run.group_prompt_once``,
  ``run.fused_optimizer``, ``run.static_decode``, ``run.sampler inverse_cdf`` and ``run.micro_batch_rows``
  (``llm_harness/README.md``, "A lean step"); ``lean_bf16`` adds ``run.precision bf16`` (which falls back to float32,
  with a warning in the log, where this CPU has no native bf16 matmuls; the row's ``bf16_fallback`` says so).
* **Models** (:data:`MODELS`): ``smollm2`` is SmolLM2-135M-Instruct, the registered model (``vsr model import
  --source smollm2-135m-instruct``); ``qwen2_0_5b`` is a random-weight model of Qwen2-0.5B's shapes (hidden 896, 24
  layers, 14 heads / 2 KV heads of 64, MLP 4864, vocabulary 151,936, tied embeddings, rope theta 1e6, q/k/v biases;
  494M parameters) written as a GGUF file by :mod:`benchmarks.synthetic_gguf` and imported with ``vsr model import
  --source <file>``, the path a user's GGUF takes, so nothing is downloaded. Its tokenizer is byte-level BPE with
  ``merges`` merges learned from the task's prompts and solutions (so a prompt is about as many tokens as under a
  real vocabulary), padded to the full vocabulary. Both are built once into ``cache_dir`` and reused (the import
  verifies the cached folder). ``qwen2_tiny`` is a tiny model of the same construction, for smoke tests.

Outputs in ``out_dir``: ``memory_table.json`` (the config, the machine, every row), ``memory_table.md`` (the
table), ``configs/<model>_<mode>.json`` (each run's full ``vsr train`` config) and ``logs/`` (each process's
output).

Run:

    python benchmarks/memory_table.py --out-dir runs/memory_table

The first run writes the 0.5B GGUF (float32, 1.84 GiB) and imports it (the import holds several float32 copies of
the weights at once); both are reused afterwards. The trainer's estimate for the 0.5B model at 8 x 8 x 48 is about
29 GiB for ``plain`` (its loss pass holds the logits of all 64 rows over a 151,936-token vocabulary) and about
12 GiB for ``lean``: on a 24 GiB machine the ``plain`` row is a refusal unless ``--skip-memory-check``. Expect tens
of minutes on 2 CPU cores. Smoke test of the plumbing (seconds): ``--models qwen2_tiny --steps 1``. A GPU: add
``--device cuda`` (the phase peaks are then CUDA's peak allocated bytes; the memory check applies to CPU runs only).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import tyro

from benchmarks.synthetic_gguf import QWEN2_0_5B

__all__ = ["MODELS", "MODES", "MemoryTableConfig", "ModelSpec", "run"]

GB = 2**30
ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class ModelSpec:
    """A model of the table: a registered name, or the shapes of a synthetic Qwen2 GGUF."""

    label: str
    """What the table calls it."""
    registered: str = ""
    """A registered model name (``vsr model import --source NAME``); empty = synthetic."""
    shape: tuple[tuple[str, int], ...] = ()
    """Synthetic: the keyword arguments of :func:`benchmarks.synthetic_gguf.write_qwen2_gguf` (shapes)."""


MODELS = {
    "smollm2": ModelSpec("SmolLM2-135M-Instruct", registered="smollm2-135m-instruct"),
    "qwen2_0_5b": ModelSpec("Qwen2-0.5B shapes, random weights (synthetic GGUF)",
                            shape=tuple(QWEN2_0_5B.items())),
    "qwen2_tiny": ModelSpec("tiny Qwen2, random weights (synthetic GGUF)",
                            shape=(("hidden", 64), ("layers", 2), ("heads", 4), ("kv_heads", 2), ("intermediate", 128),
                                   ("vocab", 600))),
}

_LEAN = {"group_prompt_once": True, "fused_optimizer": True, "static_decode": True, "sampler": "inverse_cdf",
         "micro_batch_rows": "micro"}
#: step mode -> ``run.*`` options (``"micro"``: the config's ``micro_batch_rows``)
MODES: dict[str, dict[str, Any]] = {
    "plain": {},
    "lean": dict(_LEAN),
    "lean_bf16": {**_LEAN, "precision": "bf16"},
}


@dataclass(frozen=True)
class MemoryTableConfig:
    """``python benchmarks/memory_table.py``."""

    models: tuple[str, ...] = ("smollm2", "qwen2_0_5b")
    """Models of the table (keys of ``MODELS``: ``smollm2``, ``qwen2_0_5b``, ``qwen2_tiny``)."""
    modes: tuple[str, ...] = ("plain", "lean")
    """Step modes (keys of ``MODES``: ``plain``, ``lean``, ``lean_bf16``)."""
    steps: int = 2
    """GRPO steps per run (the checkpoint is written after the last)."""
    prompts_per_step: int = 8
    """Prompts per step."""
    group_size: int = 8
    """Samples per prompt."""
    max_new_tokens: int = 48
    """Response budget."""
    micro_batch_rows: int = 16
    """``run.micro_batch_rows`` of the lean modes."""
    device: str = "cpu"
    """``model.device`` of every run (``cpu``, ``cuda``)."""
    threads: int = 0
    """``run.num_threads`` of every run (0: torch's default)."""
    seed: int = 0
    """Seed of every run and of the synthetic weights."""
    timeout_s: float = 3600.0
    """Wall-clock limit of one process (a run, a dry run, an import); past it the process is killed."""
    dry_run: bool = True
    """Also record the trainer's dry-run estimate (one more process per row)."""
    gguf_dtype: str = "f32"
    """Storage of the synthetic GGUF's matrices: ``f32`` or ``f16`` (imported as float32 either way)."""
    merges: int = 1000
    """Byte-level BPE merges of the synthetic tokenizer, learned from the task's text."""
    cache_dir: str = "runs/memory_table_cache"
    """Synthetic GGUF files and the model import cache of the synthetic models (built once, reused)."""
    out_dir: str = "runs/memory_table"
    """Results, run configs, logs and the run folders."""
    keep_checkpoints: bool = False
    """Keep each run's checkpoints (default: deleted once measured)."""
    skip_memory_check: bool = False
    """Run a step the trainer's memory check would refuse anyway (``VSR_NO_MEMORY_CHECK=1``): it may then be
    killed for memory, which its row records. Default: the refusal is the row (``refused by the memory check``)."""

    def __post_init__(self) -> None:
        from vsr_util.checks import check_number

        for n in ("steps", "prompts_per_step", "group_size", "max_new_tokens", "micro_batch_rows", "merges"):
            check_number(n, getattr(self, n), 1, integer=True)
        check_number("threads", self.threads, 0, integer=True)
        check_number("timeout_s", self.timeout_s, 1.0)
        for name, keys, known in (("models", self.models, MODELS), ("modes", self.modes, MODES)):
            if not keys or any(k not in known for k in keys) or len(set(keys)) != len(keys):
                raise ValueError(f"{name}: distinct keys of {sorted(known)}, got {list(keys)}")
        if self.gguf_dtype not in ("f32", "f16"):
            raise ValueError(f"gguf_dtype: 'f32' or 'f16', got {self.gguf_dtype!r}")
        if self.group_size < 2:
            raise ValueError("group_size: GRPO needs >= 2 samples per prompt")


# ------------------------------------------------------------------------------ processes


def run_process(cmd: list[str], log: Path, timeout_s: float, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run ``cmd`` (output to ``log``) and return its ``returncode`` (negative: killed by that signal), ``status``,
    ``wall_s`` and peak resident set ``max_rss_gb`` (``ru_maxrss`` of ``os.wait4``: the child's own); ``env`` is
    added to this process's environment.

    The child leads a process group of its own; past ``timeout_s``, or when this process is interrupted, the whole
    group is killed (and on an interrupt, reaped before the interrupt goes on)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
    t0 = time.perf_counter()
    with open(log, "wb") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, cwd=ROOT, env=env, start_new_session=True)
    timed_out = threading.Event()

    def kill() -> None:
        timed_out.set()
        _kill_group(proc.pid)

    timer = threading.Timer(timeout_s, kill)
    timer.start()
    try:
        _, status, usage = os.wait4(proc.pid, 0)
    except BaseException:
        _kill_group(proc.pid)
        os.waitpid(proc.pid, 0)
        proc.returncode = -9
        raise
    finally:
        timer.cancel()
    code = os.waitstatus_to_exitcode(status)
    proc.returncode = code  # reaped here: keep Popen from waiting again
    return {"returncode": code, "status": _status(code, timed_out.is_set()), "wall_s": round(time.perf_counter() - t0, 2),
            "max_rss_gb": usage.ru_maxrss * 1024 / GB}


def _kill_group(pid: int) -> None:
    """SIGKILL the process group led by ``pid`` (a group already gone is fine)."""
    import signal

    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _status(code: int, timed_out: bool) -> str:
    """A process's outcome in words: ``ok``, ``timeout``, ``killed by signal N`` or ``exit N``."""
    if code == 0:
        return "ok"
    if timed_out:
        return "timeout"
    if code < 0:
        return f"killed by signal {-code}" + (" (out of memory?)" if code == -9 else "")
    return f"exit {code}"


def log_tail(log: Path, lines: int = 8) -> str:
    """The last ``lines`` lines of a log (progress-bar carriage returns resolved)."""
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(line.rsplit("\r", 1)[-1] for line in text.splitlines()[-lines:])


def vsr(*args: str) -> list[str]:
    """The command line of ``vsr ARGS`` in this interpreter."""
    return [sys.executable, "-m", "vsr", *args]


# ------------------------------------------------------------------------------ models


def task_texts(task_name: str = "arith_ladder") -> list[str]:
    """Text the synthetic tokenizer's merges are learned from: the task's training messages and solutions, and the
    chat template's fixed words."""
    from llm_harness.tasks import get_task

    task = get_task(task_name)
    problems = task.problems("train")
    texts = [m["content"] for p in problems for m in task.messages(p)]
    texts += [p.solution for p in problems if p.solution]
    return texts + ["system\nYou are a helpful assistant.\n", "user\n", "assistant\n"]


def synthetic_gguf(cfg: MemoryTableConfig, key: str) -> Path:
    """The synthetic GGUF of model ``key`` in ``cache_dir`` (written once: its name carries the seed, the storage
    type and a hash of the shapes and merges)."""
    from benchmarks.synthetic_gguf import learn_merges, write_qwen2_gguf

    shape = dict(MODELS[key].shape)
    merges = learn_merges(task_texts(), cfg.merges)
    digest = hashlib.sha256(json.dumps([shape, merges], sort_keys=True).encode()).hexdigest()[:8]
    path = Path(cfg.cache_dir) / f"{key}-seed{cfg.seed}-{cfg.gguf_dtype}-{digest}.gguf"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        write_qwen2_gguf(path, **shape, seed=cfg.seed, dtype=cfg.gguf_dtype, merges=merges, name=f"synthetic {key}")
        print(f"wrote {path} ({path.stat().st_size / GB:.2f} GiB) in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return path


def prepare_model(cfg: MemoryTableConfig, key: str) -> dict[str, Any]:
    """Import model ``key`` with ``vsr model import`` (in a process of its own; a verified cached folder is
    reused) and return ``{"folder", "import": <process record>}``; ``folder`` is empty when the import failed."""
    spec = MODELS[key]
    if spec.registered:
        args = ["model", "import", "--source", spec.registered]
    else:
        try:
            gguf_path = synthetic_gguf(cfg, key)
        except Exception as exc:  # e.g. the gguf package missing: the model's rows say so
            return {"folder": "", "import": {"returncode": None, "status": f"writing the GGUF failed: "
                                                                           f"{type(exc).__name__}: {exc}"}}
        args = ["model", "import", "--source", str(gguf_path), "--cache-dir", str(Path(cfg.cache_dir) / "models"),
                "--licence", "none (random weights)"]
    log = Path(cfg.out_dir) / "logs" / f"import_{key}.log"
    rec = run_process(vsr(*args), log, cfg.timeout_s)
    folder = ""
    if rec["returncode"] == 0:
        lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
        last = lines[-1].strip() if lines else ""
        folder = last if Path(last).is_dir() else ""
    if not folder:
        rec["log_tail"] = log_tail(log)
    return {"folder": folder, "import": rec}


# ------------------------------------------------------------------------------ one measurement


def train_config(cfg: MemoryTableConfig, folder: str, mode: str, run_dir: Path) -> dict[str, Any]:
    """The full ``vsr train`` config of one measurement (a mapping for ``--config``)."""
    run = {"run_dir": str(run_dir), "checkpoint_every": cfg.steps, "keep_checkpoints": 1, "progress": False,
           "num_threads": cfg.threads}
    for k, v in MODES[mode].items():
        run[k] = cfg.micro_batch_rows if v == "micro" else v
    return {
        "seed": cfg.seed,
        "steps": cfg.steps,
        "model": {"path": folder, "backend": "hf", "device": cfg.device, "dtype": "float32"},
        "task": {"name": "arith_ladder", "train_split": "train"},
        "rollout": {"prompts_per_step": cfg.prompts_per_step, "group_size": cfg.group_size, "temperature": 1.0,
                    "top_p": 1.0, "max_new_tokens": cfg.max_new_tokens, "verify_timeout_s": 0.0},
        "algo": {"advantage": "grpo", "loss_agg": "token_mean", "eps_low": 0.2, "eps_high": 0.28, "kl_coef": 0.0,
                 "filter_zero_variance": False, "ppo_epochs": 1},
        "optim": {"lr": 5.0e-6},
        "validation": {"every": 0},
        "run": run,
    }


_DRY_TOTAL = re.compile(r"= ([0-9.]+) GiB")


_DRY_AVAILABLE = re.compile(r"available ([0-9.]+) GiB")


def dry_run(config_path: Path, log: Path, timeout_s: float) -> dict[str, Any]:
    """The trainer's estimate for ``config_path`` (``--run.dry-run true``, its memory check off so the estimate is
    printed whatever it is): the ``dry run:`` line, its total and whether that fits the memory available."""
    rec = run_process(vsr("train", "--config", str(config_path), "--run.dry-run", "true"), log, timeout_s,
                      env={"VSR_NO_MEMORY_CHECK": "1"})
    lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.startswith("dry run:")]
    line = lines[-1] if lines else ""
    total, avail = _DRY_TOTAL.search(line), _DRY_AVAILABLE.search(line)
    out = {"dry_run_line": line, "dry_run_total_gb": float(total.group(1)) if total else None,
           "dry_run_fits": float(total.group(1)) <= float(avail.group(1)) if total and avail else None,
           "dry_run_status": rec["status"]}
    if not line:
        out["dry_run_log_tail"] = log_tail(log)
    return out


def read_run(run_dir: Path) -> dict[str, Any]:
    """What a finished run folder tells: ``memory.json``, seconds per step, the checkpoint."""
    out: dict[str, Any] = {}
    mem = run_dir / "memory.json"
    if mem.is_file():
        rep = json.loads(mem.read_text())
        out.update(memory_kind=rep.get("kind"), memory_exact=rep.get("exact"), fixed_gb=rep.get("fixed_gb", {}),
                   peak_gb=rep.get("peak_gb", {}))
    rows = []
    metrics = run_dir / "metrics.jsonl"
    if metrics.is_file():
        rows = [json.loads(ln) for ln in metrics.read_text().splitlines() if ln.strip()]
    times = [float(r["time_step_s"]) for r in rows if "time_step_s" in r]
    out["time_step_s"] = times
    later = times[1:] or times
    out["s_per_step"] = sum(later) / len(later) if later else None
    ckpt = _latest_checkpoint(run_dir / "checkpoints")
    out["checkpoint_written"] = ckpt is not None
    out["checkpoint_gb"] = _folder_bytes(ckpt) / GB if ckpt is not None else 0.0
    return out


def _latest_checkpoint(root: Path) -> Path | None:
    """The checkpoint folder named by ``root/latest`` (a text file; ``trainer.checkpoint``), if it exists."""
    try:
        folder = root / (root / "latest").read_text().strip()
    except OSError:
        return None
    return folder if folder.is_dir() else None


def _folder_bytes(path: Path) -> int:
    """Bytes of the files under ``path``."""
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def measure(cfg: MemoryTableConfig, key: str, folder: str, mode: str) -> dict[str, Any]:
    """One row: a dry run (``cfg.dry_run``) and a training run of model ``key`` in step mode ``mode``."""
    out = Path(cfg.out_dir)
    name = f"{key}_{mode}"
    run_dir = (out / "runs" / name).absolute()
    shutil.rmtree(run_dir, ignore_errors=True)  # this benchmark's own folder: a fresh run each time
    config_path = out / "configs" / f"{name}.json"
    config_path.parent.mkdir(parents=True, exist_ok=True)
    config_path.write_text(json.dumps(train_config(cfg, folder, mode, run_dir), indent=2) + "\n")
    row: dict[str, Any] = {"model": key, "label": MODELS[key].label, "mode": mode, "config": str(config_path)}
    if cfg.dry_run:
        row.update(dry_run(config_path, out / "logs" / f"{name}_dry.log", cfg.timeout_s))
    log = out / "logs" / f"{name}.log"
    env = {"VSR_NO_MEMORY_CHECK": "1"} if cfg.skip_memory_check else None
    row.update(run_process(vsr("train", "--config", str(config_path)), log, cfg.timeout_s, env=env))
    row.update(read_run(run_dir))
    text = log.read_text(errors="replace") if log.is_file() else ""
    if row["returncode"] > 0 and "error: memory:" in text:
        row["status"] = "refused by the memory check"
    row["bf16_fallback"] = MODES[mode].get("precision") == "bf16" and "bf16 falls back to float32" in text
    if row["returncode"] != 0:
        row["log_tail"] = log_tail(log)
    if not cfg.keep_checkpoints:
        shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)
    return row


# ------------------------------------------------------------------------------ the table


def _gb(value: Any) -> str:
    return f"{value:.2f}" if isinstance(value, (int, float)) else "—"


def markdown(rows: list[dict[str, Any]]) -> str:
    """The table of ``rows`` (GiB; seconds per step)."""
    head = ("| model | mode | status | weights | grads | optimizer | peak generate | peak score | peak train | "
            "max RSS | dry-run estimate | s/step | checkpoint |")
    lines = [head, "|" + " --- |" * (head.count("|") - 1)]
    for r in rows:
        fixed, peak = r.get("fixed_gb") or {}, r.get("peak_gb") or {}
        ckpt = f"yes ({r['checkpoint_gb']:.2f} GiB)" if r.get("checkpoint_written") else "no"
        sps = f"{r['s_per_step']:.1f}" if isinstance(r.get("s_per_step"), (int, float)) else "—"
        over = " (over available)" if r.get("dry_run_fits") is False else ""
        lines.append(f"| {r['model']} | {r['mode']} | {r.get('status', '—')} | {_gb(fixed.get('weights'))} | "
                     f"{_gb(fixed.get('grads'))} | {_gb(fixed.get('optimizer'))} | {_gb(peak.get('generate'))} | "
                     f"{_gb(peak.get('score'))} | {_gb(peak.get('train'))} | {_gb(r.get('max_rss_gb'))} | "
                     f"{_gb(r.get('dry_run_total_gb'))}{over} | {sps} | {ckpt} |")
    return "\n".join(lines) + "\n"


def machine() -> dict[str, Any]:
    """The machine the table was measured on: cores, memory, load, library versions."""
    from importlib.metadata import PackageNotFoundError, version

    def ver(dist: str) -> str:
        try:
            return version(dist)
        except PackageNotFoundError:
            return "not installed"

    mem_total = None
    try:
        with open("/proc/meminfo") as fh:
            mem_total = int(next(ln for ln in fh if ln.startswith("MemTotal:")).split()[1]) * 1024 / GB
    except (OSError, StopIteration):
        pass
    return {"cpus": os.cpu_count(), "mem_total_gb": mem_total, "loadavg": list(os.getloadavg()),
            "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "python": sys.version.split()[0],
            "torch": ver("torch"), "transformers": ver("transformers")}


def write_results(cfg: MemoryTableConfig, rows: list[dict[str, Any]], models: dict[str, Any]) -> Path:
    """``memory_table.json`` and ``memory_table.md`` in ``out_dir``; returns the JSON's path."""
    from vsr_util.atomic import write_text

    out = Path(cfg.out_dir)
    res = {"config": asdict(cfg), "machine": machine(), "models": models, "rows": rows}
    write_text(out / "memory_table.json", json.dumps(res, indent=2) + "\n")
    legend = ("\nGiB. weights / grads / optimizer: counted from the tensors (memory.json); peak generate / score / "
              "train: the phase's peak (CPU: resident set, CUDA: allocated); max RSS: the training process's peak "
              "resident set; s/step: mean time_step_s after the first step.\n")
    write_text(out / "memory_table.md", markdown(rows) + legend)
    return out / "memory_table.json"


def run(cfg: MemoryTableConfig) -> int:
    """Measure every model x mode (module doc) and write the results; 0 when every run succeeded, else 1."""
    # the processes run in the repository root: every path they are given is absolute
    cfg = replace(cfg, out_dir=str(Path(cfg.out_dir).absolute()), cache_dir=str(Path(cfg.cache_dir).absolute()))
    Path(cfg.out_dir).mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    models: dict[str, Any] = {}
    for key in cfg.models:
        models[key] = prepare_model(cfg, key)
        print(f"{key}: {models[key]['folder'] or 'import failed: ' + models[key]['import']['status']}", file=sys.stderr)
        for mode in cfg.modes:
            if not models[key]["folder"]:
                rows.append({"model": key, "label": MODELS[key].label, "mode": mode, "status": "model import failed",
                             "import_status": models[key]["import"]["status"]})
                continue
            rows.append(measure(cfg, key, models[key]["folder"], mode))
            r = rows[-1]
            print(f"  {mode}: {r['status']}, max RSS {_gb(r.get('max_rss_gb'))} GiB, "
                  f"s/step {r.get('s_per_step')}", file=sys.stderr)
            write_results(cfg, rows, models)  # partial results survive a later crash
    path = write_results(cfg, rows, models)
    print(f"wrote {path} and {path.with_suffix('.md')}", file=sys.stderr)
    return 0 if all(r.get("status") == "ok" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(run(tyro.cli(MemoryTableConfig)))
