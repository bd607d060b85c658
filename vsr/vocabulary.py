"""One vocabulary for the commands that take a model: ``--model``, ``--task``, ``--task-params``, ``--out`` and
``--seed`` mean the same in ``vsr train``, ``eval``, ``study <name>``, ``lab``, ``advise`` and ``model card``, and
the defaults a model carries (:mod:`llm_harness.models.defaults`) fill what the user did not give.

* ``--model M``: the model (a test-bed name, a registered or imported model's name, a folder);
* ``--task NAME`` and ``--task-params k=v [k=v ...]``: the task and its parameters (values read as YAML scalars);
* ``--out DIR``: where the command writes (``train``: the run folder);
* ``--seed N``: the seed of every random choice of the command.

Each command's own flags stay (its config dataclass defines them: ``--model.path`` is the config tree's path of
the same field, ``vsr train --help`` lists them); the spellings that differed across commands before this
vocabulary (``--model.path``, ``--task.name``, ``--out-dir``, ``--run.run-dir``) still work and print one
deprecation line naming the new spelling.

When ``--model`` names a chat model and neither the flags nor the ``--config`` file set the task and budget,
the command runs the model's defaults (the arithmetic ladder and its budgets) and says so on its first line.
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

__all__ = ["VOCABULARY", "Vocabulary", "apply_vocabulary", "split_task_params", "task_params_mapping"]

#: what the vocabulary calls above ``vsr``, named as the command table names its targets (``module:function``,
#: imported when called), so that ``vsr`` itself imports nothing from the packages above it
_MODEL_DEFAULTS = "llm_harness.models.defaults:model_defaults"
_PARSE_TASK_PARAMS = "llm_harness.tasks.base:parse_task_params"


def _call(target: str, *args: Any) -> Any:
    module, fn = target.split(":")
    return getattr(importlib.import_module(module), fn)(*args)


def task_params_mapping(items: Sequence[str]) -> dict[str, Any]:
    """``("seed=1", "n=5")`` -> ``{"seed": 1, "n": 5}`` (``llm_harness.tasks.base.parse_task_params``: values read as
    YAML scalars, a bad item refused with its index)."""
    return _call(_PARSE_TASK_PARAMS, tuple(items))


@dataclass(frozen=True)
class Vocabulary:
    """How one command spells the shared flags, its deprecated spellings, and the model defaults it takes."""

    flags: Mapping[str, str] = field(default_factory=dict)
    """Vocabulary flag -> the command's own flag (absent: the command's flag has the vocabulary's name)."""
    deprecated: Mapping[str, str] = field(default_factory=dict)
    """Old spelling -> vocabulary flag (still accepted, with one deprecation line)."""
    task_params_field: bool = False
    """``--task-params`` is merged into the config's ``task.params`` mapping (train, eval) rather than being a
    flag of the command's own."""
    model_flag: str = "--model"
    """The command's own flag of the model (after the vocabulary is applied)."""
    defaults: Callable[[Any, bool], dict[str, str]] | None = None
    """``(ModelDefaults, quick) -> {command's flag: value}``: what a chat model fills when not given."""
    reader: bool = False
    """A chat model's reader (``ModelDefaults.reader``: the strict answer reader) completes the task parameters
    when the command runs the model's default task and nothing sets ``answer_mode``."""


def _study_defaults(d: Any, quick: bool) -> dict[str, str]:
    out = {"--task": d.task, "--split": d.study_split, "--min-difficulty": repr(d.study_min_difficulty),
           "--response-budget": str(d.study_budget)}
    if quick:
        out["--n-problems"] = str(d.quick_problems)
    return out


_TRAIN = Vocabulary(
    flags={"--model": "--model.path", "--task": "--task.name", "--out": "--run.run-dir"},
    deprecated={"--model.path": "--model", "--task.name": "--task", "--run.run-dir": "--out"},
    task_params_field=True, model_flag="--model.path", reader=True,
    defaults=lambda d, quick: {"--task.name": d.task, "--rollout.max-new-tokens": str(d.max_new_tokens)},
)
_EVAL = Vocabulary(
    flags={"--model": "--model.path", "--task": "--task.name", "--out": "--out-dir"},
    deprecated={"--model.path": "--model", "--task.name": "--task", "--out-dir": "--out"},
    task_params_field=True, model_flag="--model.path", reader=True,
    defaults=lambda d, quick: {"--task.name": d.task, "--max-new-tokens": str(d.max_new_tokens)},
)
_STUDY = Vocabulary(defaults=_study_defaults, reader=True)
_LAB = Vocabulary(defaults=lambda d, quick: {"--train-config": d.train_config})

#: command -> its vocabulary (commands not listed take none of these flags).
VOCABULARY: dict[str, Vocabulary] = {
    "train": _TRAIN,
    "eval": _EVAL,
    **{f"study {s}": _STUDY for s in ("hint-ratio", "failed-prefix", "sigma-validation", "mte-correlation",
                                       "prefix-selection")},
    "lab": _LAB,
    "advise": _LAB,
    "model card": Vocabulary(),
}


def _key(arg: str) -> str:
    """``--max_new_tokens=5`` -> ``--max-new-tokens`` (tyro accepts either spelling)."""
    return arg.split("=", 1)[0].replace("_", "-") if arg.startswith("--") else arg


def split_task_params(args: Sequence[str]) -> tuple[list[str], tuple[str, ...] | None]:
    """``args`` without ``--task-params k=v ...`` and the ``k=v`` strings it held (``None`` when absent). The
    values run until the next ``--`` flag; ``--task-params=k=v`` holds one."""
    out, params, i = [], None, 0
    args = list(args)
    while i < len(args):
        a = args[i]
        if _key(a) == "--task-params":
            params = list(params or [])
            if "=" in a:
                params.append(a.split("=", 1)[1])
            i += 1
            while i < len(args) and not args[i].startswith("--"):
                params.append(args[i])
                i += 1
            continue
        out.append(a)
        i += 1
    return out, (tuple(params) if params is not None else None)


def _flag_value(args: Sequence[str], flag: str) -> str | None:
    for i, a in enumerate(args):
        k = _key(a)
        if k == flag:
            if "=" in a:
                return a.split("=", 1)[1]
            return args[i + 1] if i + 1 < len(args) else None
    return None


def _in_mapping(mapping: Mapping[str, Any] | None, flag: str) -> bool:
    """Whether the config file sets the field ``flag`` names (``--rollout.max-new-tokens`` -> rollout/max_new_tokens)."""
    node: Any = mapping or {}
    for part in flag[2:].replace("-", "_").split("."):
        if not isinstance(node, Mapping) or part not in node:
            return False
        node = node[part]
    return True


def _quick(args: Sequence[str], mapping: Mapping[str, Any] | None) -> bool:
    """Whether ``--quick`` is on (``--quick``, ``--quick true``, ``--quick=yes``; ``--no-quick`` / ``false`` off)."""
    on = bool((mapping or {}).get("quick") is True)
    for i, a in enumerate(args):
        k = _key(a)
        if k == "--no-quick":
            on = False
        elif k == "--quick":
            v = a.split("=", 1)[1] if "=" in a else (args[i + 1] if i + 1 < len(args) else "")
            on = v.lower() not in ("false", "no", "0", "off")
    return on


def _model_of_run(run_dir: str) -> str:
    """The model path stored in a training run's ``config.yaml`` ("" when unreadable: the command reports it)."""
    cfg = Path(run_dir) / "config.yaml"
    try:
        if cfg.is_file() and cfg.stat().st_size < 1 << 20:
            import yaml

            data = yaml.safe_load(cfg.read_text(encoding="utf-8")) or {}
            path = (data.get("model") or {}).get("path", "")
            return path if isinstance(path, str) else ""
    except (OSError, ValueError, AttributeError, yaml.YAMLError):
        pass
    return ""


def apply_vocabulary(name: str, args: Sequence[str], mapping: Mapping[str, Any] | None = None, *,
                     err=None) -> tuple[list[str], tuple[str, ...] | None]:
    """``args`` of command ``name`` rewritten to the command's own flags: deprecated spellings noted (one line
    each on ``err``), vocabulary flags translated, and a chat model's defaults added where neither ``args`` nor
    the config file (``mapping``) set them (one line on ``err`` naming them). Returns the new arguments and the
    ``--task-params`` strings for commands that merge them into ``task.params`` (else they stay in the args)."""
    voc = VOCABULARY.get(name)
    if voc is None:
        return list(args), None
    err = sys.stderr if err is None else err
    out: list[str] = []
    noted: set[str] = set()
    for a in args:
        k = _key(a)
        if k in voc.deprecated:
            new = voc.deprecated[k]
            if k not in noted:
                print(f"vsr {name}: {k} is deprecated; use {new} (same meaning)", file=err)
                noted.add(k)
            k, a = new, new + (a[len(a.split("=", 1)[0]):] if "=" in a else "")
        if k in voc.flags:
            a = voc.flags[k] + (a[len(a.split("=", 1)[0]):] if "=" in a else "")
        out.append(a)
    params = None
    if voc.task_params_field:
        out, params = split_task_params(out)
    if voc.defaults is not None:
        model, d = _chat_defaults(name, voc, out, mapping)
        if d is not None:
            out = _with_model_defaults(name, voc, model, d, out, mapping, err)
            if voc.reader and d.reader:
                out, params = _with_reader(name, voc, model, d, out, params, mapping, err)
    return out, params


def _with_reader(name: str, voc: Vocabulary, model: str, d: Any, args: list[str], params: tuple[str, ...] | None,
                 mapping: Mapping[str, Any] | None, err) -> tuple[list[str], tuple[str, ...] | None]:
    """The task parameters completed by the chat model's reader (``d.reader``) when the command runs ``d.task``
    and neither the flags nor the config file set ``answer_mode`` (the keys either sets keep their values)."""
    node = (mapping or {}).get("task")
    if voc.task_params_field:  # train / eval: task.name and the task.params mapping
        task = _flag_value(args, voc.flags["--task"]) or (node.get("name") if isinstance(node, Mapping) else None)
        in_file = list((node.get("params") or {}) if isinstance(node, Mapping) else {})
        given = list(params or ())
    else:  # the studies: --task and --task-params of their own
        task = _flag_value(args, "--task") or node
        in_file = [str(p).split("=", 1)[0] for p in ((mapping or {}).get("task_params") or ())]
        args, flagged = split_task_params(args)
        given = list(flagged or ())
    keys = [f"{k}=" for k in in_file] + given  # only the keys matter for what the reader fills
    extra = list(_call(d.reader, tuple(keys))[len(keys):])
    if task == d.task and extra:
        import shlex

        print(f"vsr {name}: {model} is a {d.kind}: reading {d.task} with --task-params "
              + " ".join(shlex.quote(p) for p in extra) + " (answer_mode=lenient: the last-number reader)", file=err)
        given += extra
    if voc.task_params_field:
        return args, (tuple(given) if given or params is not None else None)
    return (args + ["--task-params", *given]) if given else args, params


def _chat_defaults(name: str, voc: Vocabulary, args: list[str], mapping: Mapping[str, Any] | None) -> tuple[str, Any]:
    """The command's model argument and its defaults (``ModelDefaults``; None: a test-bed model or no model)."""
    model = _flag_value(args, voc.model_flag)
    if model is None and name == "eval":
        run_dir = _flag_value(args, "--run-dir") or (mapping or {}).get("run_dir") or ""
        model = _model_of_run(run_dir) if isinstance(run_dir, str) and run_dir else None
    if model is None and mapping:
        node = mapping.get("model")
        model = node.get("path") if isinstance(node, Mapping) else node
    if not isinstance(model, str) or not model:
        return "", None
    return model, _call(_MODEL_DEFAULTS, model)


def _with_model_defaults(name: str, voc: Vocabulary, model: str, d: Any, args: list[str],
                         mapping: Mapping[str, Any] | None, err) -> list[str]:
    quick = _quick(args, mapping)
    given = {_key(a) for a in args}
    added = {f: v for f, v in voc.defaults(d, quick).items() if f not in given and not _in_mapping(mapping, f)}
    if added:
        spelled = {own: vocab for vocab, own in voc.flags.items()}  # shown in the vocabulary's spelling
        shown = " ".join(f"{spelled.get(f, f)} {v}" for f, v in added.items())
        print(f"vsr {name}: {model} is a {d.kind}: using its defaults {shown} (give a flag to change one)", file=err)
    return args + [x for f, v in added.items() for x in (f, v)]
