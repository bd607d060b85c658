"""The ``vsr`` command line.

Commands are a table from a space-separated path (``"theory check"``) to a function
``run(cfg: SomeConfig) -> int | None`` whose single argument is a frozen dataclass. The
arguments of every command are generated from that dataclass by ``tyro`` (field docstrings
become ``--help`` text); nothing is hand-parsed. Modules are imported lazily so that
``vsr theory check`` does not pay for importing torch.

Every command also accepts ``--config FILE`` (YAML, TOML or JSON): the file fills the
dataclass, and any flag given on the command line overrides the file. Boolean options take
``--flag``, ``--no-flag``, ``--flag true|false`` or ``--flag=true|false``. Bad input exits with
one line naming the problem (``--debug`` or ``VSR_DEBUG=1``: the traceback).
"""

from __future__ import annotations

import os

# Before anything imports torch: torch's OpenMP threads spinning in the background make every
# Numba parallel region ~8 ms slower on a shared machine (measured in gridworld's tests).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import dataclasses
import importlib
import sys
import typing
from dataclasses import dataclass
from typing import Callable, Sequence

from vsr_util.registry import Registry


@dataclass(frozen=True)
class CommandSpec:
    """Where a command lives: ``module:function``, a one-line help, and what to tell a user whose command stopped
    (Ctrl-C, SIGTERM, a full disk): how to resume. ``resume_hint``, when given, is a ``module:function`` taking the
    command's parsed config and returning that hint from what its folder holds now; ``on_interrupt`` is the fixed
    hint, used without it."""

    target: str
    help: str
    on_interrupt: str = ""
    resume_hint: str = ""
    study: str = ""
    """A prefix-value study's name: the command runs it (``target`` unused), its config type is the study's."""


_RESUME_CHUNKS = "rerun the same command to continue from the last finished chunk"

#: The command table. Later packages add their rows here (keep the names: they are a contract).
COMMANDS: Registry[CommandSpec] = Registry("command", {
    "theory check": CommandSpec(
        "theory.cli:check", "Check every registered identity and inequality (VSR App. B-C, ExTra, Replay, metrics) on random instances."
    ),
    "figures": CommandSpec("vsr.figures:run_figures", "Regenerate every figure of the project (the main job)."),
    "train": CommandSpec("llm_harness.trainer.entry:train", "Train a policy with GRPO/DAPO/SFT and the plug-ins (use --config configs/*.yaml).",
                         "rerun the same command with --run.resume true to continue from the last checkpoint",
                         "llm_harness.trainer.entry:resume_hint"),
    "eval": CommandSpec("llm_harness.trainer.entry:evaluate", "Evaluate a model: avg@k, pass@k, per-difficulty tables, lengths, diversity, AES."),
    "checkpoint convert": CommandSpec(
        "llm_harness.trainer.checkpoint_v1:convert",
        "Convert a TRUSTED format-1 (pickle) training checkpoint to the safe format; it UNPICKLES the old files, which "
        "runs any code in them, so it needs --trust (the only command that unpickles).",
    ),
    "testbed build": CommandSpec("llm_harness.testbed.build:build", "Rebuild the shipped CPU test-bed checkpoints (deterministic SFT)."),
    "testbed eval": CommandSpec("llm_harness.testbed.evaluate:evaluate", "Accuracy of a test-bed model by number of terms, with CIs."),
    "gridworld figure2": CommandSpec("gridworld.figures:figure2", "VSR Figure 2: d, sigma, mu_var heatmaps over training, learning curves, curriculum."),
    "gridworld figure2-sweep": CommandSpec(
        "gridworld.figure2_sweep:figure2_sweep", "When mu_var starts near G and walks back toward S: sweep of horizon, slip, init temperature, layout."
    ),
    "gridworld compare": CommandSpec("gridworld.figures:compare", "Policy-gradient learners with states from d, mu_var (IS / GRPO form), mu_eps, uniform."),
    "gridworld svmd": CommandSpec("gridworld.svmd_experiment:run", "SVMD (VSR App. C) with exact and sampled critics against the Thm C.5 bound."),
    "bench exact": CommandSpec("benchmarks.exact_sweep:run", "Exact occupancy/value sweeps: Numba parallel/serial vs NumPy vs scipy, vs bandwidth."),
    "bench generation": CommandSpec(
        "benchmarks.generation:run", "HF backend tokens/s vs model.generate, and the cost of exact entropies."
    ),
    "plugins": CommandSpec("llm_harness.trainer.plugin_list:plugins_command",
                           "Registered trainer plug-ins (VSR, replay, ExTra, DAPO...) and, with --name, one plug-in's parameters."),
    "env list": CommandSpec("llm_harness.envs.cli:list_envs", "Registered text environments (Sokoban, BabyAI levels) with one-line descriptions."),
    "env play": CommandSpec("llm_harness.envs.cli:play", "Play an environment episode in the terminal: type actions, or step through the expert (--expert)."),
    "pool select": CommandSpec(
        "llm_harness.pool_selection:select_command", "Select a fixed pool of hard training prompts (at most m successes in n samples)."
    ),
    "model import": CommandSpec(
        "llm_harness.models.gguf_import:import_command",
        "GGUF file or named model (smollm2-135m-instruct) -> verified safetensors model folder (prints its path).",
    ),
    "model list": CommandSpec(
        "llm_harness.models.cache:list_command",
        "The imported models of the cache: name and aliases (--name), folder, source, sha256, licence.",
    ),
    "model card": CommandSpec(
        "prefixvalue.model_card:card_command",
        "Card of a real model on the arithmetic ladder: pass-rate histogram at T=1, continuation vs alpha, lengths.",
    ),
    "lab": CommandSpec(
        "llm_harness.lab.run:lab_command",
        "Allocation lab: probe pass rates, predict (VSR App. B) and realise each allocation's gradient SNR per token.",
        "rerun the same command: finished steps (probe, references, allocations) are kept",
    ),
    "advise": CommandSpec(
        "llm_harness.lab.advise:advise_command",
        "A few-minute probe that predicts which allocation of rollouts pays (VSR, prompt Neyman, DAPO...) and recommends one.",
    ),
    "compare": CommandSpec(
        "llm_harness.compare.runner:run", "Seeded comparison of GRPO/DAPO/SFT/VSR/replay/ExTra and their composition (report + figures).",
        "rerun the same command: finished runs are kept, unfinished ones start again",
    ),
})


def _add_study_commands() -> None:
    """``vsr study <name>`` for every study module of :mod:`prefixvalue.studies` (found on disk, not imported: the
    module's file name is the study's name and its docstring's first sentence the help)."""
    from prefixvalue.registry import study_modules, study_summary

    for name in study_modules():
        COMMANDS.add(f"study {name}", CommandSpec("", study_summary(name), _RESUME_CHUNKS, study=name))


_add_study_commands()


def _study_runner(name: str) -> Callable:
    """The function ``vsr study <name>`` calls: ``run_study(name, cfg)`` typed with the study's config class."""
    from prefixvalue.registry import get_study
    from prefixvalue.runner import run_study

    def run(cfg) -> int:
        run_study(name, cfg)
        return 0

    run.__annotations__ = {"cfg": get_study(name).config_cls, "return": int}
    run.__qualname__ = f"study {name}"
    return run


def _resolve(spec: CommandSpec | str) -> Callable:
    if isinstance(spec, CommandSpec) and spec.study:
        return _study_runner(spec.study)
    mod_name, fn_name = (spec.target if isinstance(spec, CommandSpec) else spec).split(":")
    return getattr(importlib.import_module(mod_name), fn_name)


def _config_type(fn: Callable) -> type:
    hints = typing.get_type_hints(fn)
    params = [p for p in hints if p != "return"]
    if len(params) != 1 or not dataclasses.is_dataclass(hints[params[0]]):
        raise TypeError(f"{fn.__qualname__}: a command takes exactly one dataclass config argument")
    return hints[params[0]]


def _print_overview(out=None) -> None:
    from vsr import __version__

    out = out or sys.stdout
    print(f"vsr {__version__} - where policy-gradient training should spend its rollouts\n", file=out)
    print("usage: vsr <command> [options]   (vsr <command> --help for its options)\n", file=out)
    print("commands:", file=out)
    width = max(len(k) for k in COMMANDS)
    for name in sorted(COMMANDS):
        print(f"  {name.ljust(width)}  {COMMANDS[name].help}", file=out)


def _match(argv: Sequence[str]) -> tuple[str | None, list[str]]:
    """Longest command path that prefixes ``argv``."""
    best = None
    for name in COMMANDS:
        words = name.split()
        if list(argv[: len(words)]) == words and (best is None or len(words) > len(best.split())):
            best = name
    if best is None:
        return None, list(argv)
    return best, list(argv[len(best.split()) :])


def _pop_config_file(args: list[str]) -> tuple[str | None, list[str]]:
    out, path, i = [], None, 0
    while i < len(args):
        a = args[i]
        if a == "--config":
            if i + 1 >= len(args):
                raise SystemExit("vsr: --config needs a file path")
            path, i = args[i + 1], i + 2
            continue
        if a.startswith("--config="):
            path = a.split("=", 1)[1]
        else:
            out.append(a)
        i += 1
    return path, out


def _bool_flags(cfg_type: type, prefix: str = "") -> dict[str, tuple[str, str]]:
    """``{spelling: (flag, negated flag)}`` for every bool field of ``cfg_type`` (nested sections
    dotted; underscores and dashes both accepted), as tyro names them."""
    out: dict[str, tuple[str, str]] = {}
    hints = typing.get_type_hints(cfg_type)
    for f in dataclasses.fields(cfg_type):
        t = hints[f.name]
        dashed = f.name.replace("_", "-")
        if dataclasses.is_dataclass(t):
            out.update(_bool_flags(t, f"{prefix}{dashed}."))
        elif t is bool:
            pair = (f"--{prefix}{dashed}", f"--{prefix}no-{dashed}")
            out[f"--{prefix}{dashed}"] = out[f"--{prefix}{f.name}"] = pair
    return out


_TRUE, _FALSE = ("true", "yes", "1", "on"), ("false", "no", "0", "off")


def normalise_bool_flags(cfg_type: type, args: Sequence[str]) -> list[str]:
    """Accept ``--flag true|false`` and ``--flag=true|false`` besides tyro's ``--flag`` / ``--no-flag``
    (one spelling works everywhere: the docs write ``--run.resume true``)."""
    flags = _bool_flags(cfg_type)
    out, i, args = [], 0, list(args)
    while i < len(args):
        a = args[i]
        key, eq, val = a.partition("=")
        if key in flags:
            pos, neg = flags[key]
            if eq:
                v = val.lower()
            elif i + 1 < len(args) and args[i + 1].lower() in _TRUE + _FALSE:
                v, i = args[i + 1].lower(), i + 1
            else:
                v = "true"
            if v not in _TRUE + _FALSE:
                raise ValueError(f"{key[2:]}: expected true or false, got {val!r}")
            out.append(pos if v in _TRUE else neg)
        else:
            out.append(a)
        i += 1
    return out


def parse_command(name: str, args: Sequence[str]) -> tuple[Callable, object]:
    """The command's function and ``args`` parsed into its config dataclass."""
    import tyro

    from vsr_util.config_io import from_dict, read_mapping
    from vsr.vocabulary import apply_vocabulary, task_params_mapping

    spec = COMMANDS[name]
    fn = _resolve(spec)
    cfg_type = _config_type(fn)
    cfg_path, rest = _pop_config_file(list(args))
    mapping = read_mapping(cfg_path) if cfg_path else None
    rest, task_params = apply_vocabulary(name, rest, mapping)
    default = from_dict(cfg_type, mapping, where=cfg_path) if cfg_path else None
    if task_params is not None:  # ``--task-params k=v ...`` merged into the config's task.params (vsr.vocabulary)
        base = default if default is not None else cfg_type()
        task = dataclasses.replace(base.task, params={**base.task.params, **task_params_mapping(task_params)})
        default = dataclasses.replace(base, task=task)
    rest = normalise_bool_flags(cfg_type, rest)
    return fn, tyro.cli(cfg_type, args=rest, prog=f"vsr {name}", description=spec.help, default=default)


def run_command(name: str, args: Sequence[str]) -> int:
    """Parse ``args`` into the command's config dataclass and run it."""
    fn, cfg = parse_command(name, args)
    return int(fn(cfg) or 0)


class Interrupted(KeyboardInterrupt):
    """SIGTERM (or SIGINT) turned into an exception in the main thread, so ``finally`` blocks run (locks
    released, engines closed, worker pools terminated) before the process exits."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _raise_interrupted(signum: int, frame: object) -> None:
    raise Interrupted(signum)


def _install_signal_handlers() -> None:
    """SIGTERM raises :class:`Interrupted` like Ctrl-C raises ``KeyboardInterrupt`` (main thread only)."""
    import signal
    import threading

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _raise_interrupted)


def resume_hint(name: str, cfg: object = None) -> str:
    """How to continue command ``name`` after it stopped: its ``resume_hint`` function applied to ``cfg`` (what its
    folder holds now), else its fixed ``on_interrupt`` hint (also when the folder cannot be read); "" for none."""
    spec = COMMANDS[name] if name in COMMANDS else None
    if spec is None:
        return ""
    if spec.resume_hint and cfg is not None:
        try:
            return _resolve(spec.resume_hint)(cfg)
        except (OSError, ValueError):  # an unreadable folder: the fixed hint rather than no line at all
            pass
    return spec.on_interrupt


def interrupted_message(name: str, exc: KeyboardInterrupt, cfg: object = None) -> tuple[str, int]:
    """The one line printed for an interrupted command and its exit code (128 + the signal's number); ``cfg``
    (the parsed config, when parsing finished) lets the hint say what the folder holds (:func:`resume_hint`)."""
    import signal

    signum = getattr(exc, "signum", signal.SIGINT)
    hint = resume_hint(name, cfg)
    line = f"vsr {name}: interrupted by {signal.Signals(signum).name}" + (f"; {hint}" if hint else "")
    return line, 128 + int(signum)


def error_message(name: str, exc: BaseException, cfg: object = None) -> str:
    """The text after ``vsr <command>: error:`` for an expected error: the message, or an ``OSError``'s reason and
    file; a full disk also says how to continue once space is freed (:func:`resume_hint`)."""
    from vsr_util.atomic import is_disk_full

    if not isinstance(exc, OSError) or not exc.strerror:
        return str(exc)
    msg = exc.strerror + (f": {exc.filename}" if exc.filename else "")
    if is_disk_full(exc):
        hint = resume_hint(name, cfg)
        msg += f"; free some space, then {hint}" if hint else "; free some space and rerun the command"
    return msg


#: expected failures: bad input, bad files, a full disk. Anything else is a bug and keeps its traceback.
EXPECTED_ERRORS: tuple[type[BaseException], ...] = (ValueError, OSError)


def _debug_requested(args: list[str]) -> tuple[bool, list[str]]:
    debug = os.environ.get("VSR_DEBUG", "") not in ("", "0")
    if "--debug" in args:
        debug, args = True, [a for a in args if a != "--debug"]
    return debug, args


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point. Expected errors (:data:`EXPECTED_ERRORS`) print one line ``vsr <command>: error:
    ...`` and exit 2 (1 for an ``OSError`` such as a full disk, whose line names the file and says how to
    continue once space is freed); ``--debug`` or ``VSR_DEBUG=1`` shows the traceback instead. Ctrl-C and
    SIGTERM print one line saying how to resume (:func:`resume_hint`) and exit with 128 + the signal's number
    (130, 143)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug, argv = _debug_requested(argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        _print_overview()
        return 0
    if argv[0] in ("-V", "--version"):
        from vsr import __version__

        print(__version__)
        return 0
    name, rest = _match(argv)
    if name is None:
        groups = sorted({k.split()[0] for k in COMMANDS})
        if argv[0] in groups:
            subs = sorted(k for k in COMMANDS if k.split()[0] == argv[0])
            print(f"vsr {argv[0]}: choose one of: " + ", ".join(subs), file=sys.stderr)
        else:
            print(f"vsr: unknown command {' '.join(argv[:2])!r}", file=sys.stderr)
            _print_overview(sys.stderr)
        return 2
    _install_signal_handlers()
    cfg = None
    try:
        fn, cfg = parse_command(name, rest)
        return int(fn(cfg) or 0)
    except KeyboardInterrupt as exc:
        if debug:
            raise
        line, code = interrupted_message(name, exc, cfg)
        print(line, file=sys.stderr, flush=True)
        return code
    except EXPECTED_ERRORS as exc:
        if debug:
            raise
        code = 1 if isinstance(exc, OSError) else 2
        print(f"vsr {name}: error: {error_message(name, exc, cfg)}", file=sys.stderr)
        print("(run with --debug or VSR_DEBUG=1 for the traceback)", file=sys.stderr)
        return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
