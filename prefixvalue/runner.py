"""Run a registered study end to end: resolve config -> collect (chunked, resumable) -> table
-> analysis -> summary files + figure (studies: :mod:`prefixvalue`). No tyro needed (plain Python entry point).

What a study reads back (``study.json``, ``config.yaml``, ``chunks/``, ``results.parquet``) goes to the records folder
of its output folder (:func:`prefixvalue.store.records_dir`: ``figures/prefixvalue/<study>`` ->
``records/prefixvalue/<study>``, any other ``--out DIR`` -> ``DIR/records``); the report (``summary.json``/``.md``, the
figure, ``timings.json``) to the output folder itself (:mod:`prefixvalue.store`)."""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path
from typing import Any

from prefixvalue.config import StudyConfig, config_json, identity_dict, resolve
from prefixvalue.registry import Study, get_study
from prefixvalue.store import check_no_old_layout, records_dir, strict_json
from vsr_util.atomic import read_json

__all__ = ["NoEligibleProblemsError", "as_study_config", "model_label", "reanalyze_study", "resolved_config", "run_study"]


class NoEligibleProblemsError(ValueError):
    """A study's filter left no problem to study."""


def as_study_config(study: Study, cfg: StudyConfig | None) -> StudyConfig:
    """``cfg`` as the study's own config class (a plain ``StudyConfig`` keeps its shared fields)."""
    if cfg is None:
        return study.config_cls()
    if isinstance(cfg, study.config_cls):
        return cfg
    if type(cfg) is StudyConfig:
        shared = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(StudyConfig)}
        return study.config_cls(**shared)
    raise ValueError(
        f"cfg: study {study.name!r} takes a {study.config_cls.__name__} (or a StudyConfig), got {type(cfg).__name__}"
    )


def resolved_config(name: str, cfg: StudyConfig | None = None) -> StudyConfig:
    """The config study ``name`` would run with (sizes, split and out filled in)."""
    study = get_study(name)
    return resolve(as_study_config(study, cfg), study.sizes, study.default_split, name)


def _chunks(n: int, size: int) -> list[tuple[int, int]]:
    return [(s, min(n, s + size)) for s in range(0, n, size)]


def run_study(name: str, cfg: StudyConfig | None = None, *, backend: Any = None, tokenizer: Any = None,
              stop_after_chunks: int | None = None) -> Path:
    """Run study ``name`` with ``cfg`` and return its output folder.

    Writes ``summary.json``/``.md`` and the figure (PNG; :func:`vsr_util.atomic.save_figure`) into ``cfg.out``, and
    ``study.json``, ``config.yaml``, the chunks and ``results.parquet`` into its records folder
    (:func:`prefixvalue.store.records_dir`); resumes from completed chunks already there (same config) and refuses a
    study holding another config's results (``overwrite=True`` discards them), and an output folder that still holds
    its records inside (the layout before the records store: :func:`prefixvalue.store.check_no_old_layout` names the
    command that moves them).
    ``backend``/``tokenizer`` reuse an already loaded model (tests, figure jobs); otherwise the
    model is loaded from ``cfg.model``. ``stop_after_chunks`` ends the run after that many new
    chunks without analysing (simulates an interruption; used by the resume tests). With
    ``cfg.reanalyze`` nothing is sampled: :func:`reanalyze_study` analyses the stored table again.
    The output and records folders are locked for the run (:mod:`vsr_util.runlock`): a second writer is refused.
    """
    from vsr_util.runlock import locked_folder

    study = get_study(name)
    cfg = resolve(as_study_config(study, cfg), study.sizes, study.default_split, name)
    with locked_folder(cfg.out, field="out"):  # one writer per study folder
        check_no_old_layout(cfg.out)  # before the records folder is created beside it
        with locked_folder(records_dir(cfg.out), field="records"):
            return _run_or_reanalyze(study, cfg, backend=backend, tokenizer=tokenizer,
                                     stop_after_chunks=stop_after_chunks)


def _run_or_reanalyze(study: Study, cfg: StudyConfig, *, backend: Any, tokenizer: Any,
                      stop_after_chunks: int | None) -> Path:
    """:func:`run_study`'s work, with the output and records folders locked."""
    if cfg.reanalyze:
        return reanalyze_study(study, cfg)
    return _run_locked(study, cfg, backend=backend, tokenizer=tokenizer, stop_after_chunks=stop_after_chunks)


def _run_locked(study: Study, cfg: StudyConfig, *, backend: Any, tokenizer: Any, stop_after_chunks: int | None) -> Path:
    """A run that samples (:func:`run_study`), with the output and records folders locked."""
    import pandas as pd
    from tqdm.auto import tqdm

    from vsr_util.config_io import save_config

    from prefixvalue.engine import build_context, select_problems
    from prefixvalue.store import ChunkStore, write_table

    name = study.name
    if cfg.num_threads:
        import torch

        torch.set_num_threads(cfg.num_threads)
    out = Path(cfg.out)
    if backend is None:  # a bad --model is refused before the folder records this config
        from prefixvalue.engine import resolve_model

        resolve_model(cfg.model)
    store = ChunkStore(out, name, identity_dict(cfg), overwrite=cfg.overwrite)
    save_config(cfg, store.records_dir / "config.yaml")
    t0 = time.perf_counter()
    ctx = build_context(cfg, backend=backend, tokenizer=tokenizer)
    try:
        problems = select_problems(ctx.task, cfg.split, cfg.n_problems, cfg.min_difficulty, cfg.max_difficulty)
        spans = _chunks(len(problems), cfg.chunk_problems)
        todo = [i for i in range(len(spans)) if not store.done(i)]
        if len(todo) < len(spans) and todo:
            print(f"{name}: resuming, {len(spans) - len(todo)} of {len(spans)} chunks already in {store.records_dir}",
                  file=sys.stderr)
        new = 0
        for i in tqdm(todo, desc=name, disable=not cfg.progress, unit="chunk"):
            if stop_after_chunks is not None and new >= stop_after_chunks:
                return out
            a, b = spans[i]
            rows, counts = study.collect(ctx, problems[a:b], i)
            for r in rows:
                r.setdefault("chunk", i)
            store.save(i, rows, counts)
            new += 1
    finally:
        ctx.close()
    rows, counts = store.collect(len(spans))
    if counts.get("eligible", 0) == 0 or not rows:
        detail = ", ".join(f"{k}={v}" for k, v in sorted(counts.items()))
        raise NoEligibleProblemsError(
            f"{name}: no eligible problems: the filter '{study.eligibility}' kept {counts.get('eligible', 0)} of "
            f"{counts.get('problems', len(problems))} problems of split {cfg.split!r} ({detail}); use more or "
            "different problems (n_problems, split, min_difficulty/max_difficulty) or another model"
        )
    table = pd.DataFrame(rows)
    write_table(table, store.records_dir)
    _analyze_and_write(study, cfg, table, counts, round(time.perf_counter() - t0, 2), out, reanalyzed=False)
    return out


def _analyze_and_write(study: Study, cfg: StudyConfig, table, counts: dict, collect_seconds: float | None, out: Path, *,
                       reanalyzed: bool) -> None:
    """The analysis of ``table``: ``summary.json``/``.md`` and the figure in ``out``; the collection's wall time goes to
    ``timings.json`` beside them (not committed: the summary then reproduces byte for byte)."""
    from vsr_util.atomic import TIMINGS_FILE, write_json, write_text

    summary = study.analyze(table, cfg)
    summary = {
        "study": study.name,
        "title": study.title,
        "model": model_label(cfg.model),
        "backend": cfg.backend,
        "task": cfg.task,
        "split": cfg.split,
        "quick": cfg.quick,
        "counts": counts,
        "reanalyzed": reanalyzed,
        **summary,
        "config": config_json(cfg),
    }
    write_json(out / "summary.json", strict_json(summary))
    write_json(out / TIMINGS_FILE, strict_json({"collect_seconds": collect_seconds}))
    text = study.render(summary)
    write_text(out / "summary.md", text)
    study.plot(table, summary, out)
    print(text, flush=True)


def model_label(model: str) -> str:
    """How a model is named in titles and tables: a registered, test-bed or hub name as given, a local folder by its
    last component (an imported model's cache folder is long; the full path stays in the summary's ``config``)."""
    return Path(model).name if ("/" in model or "\\" in model) and Path(model).is_dir() else model


def reanalyze_study(study: Study, cfg: StudyConfig) -> Path:
    """Analyse the stored table of the study reported in ``cfg.out`` again without sampling (``reanalyze``).

    ``cfg`` must describe the run that wrote the folder (its ``study.json`` identity); the table
    (``results.parquet``), ``study.json`` and ``config.yaml`` are read from its records folder
    (:func:`prefixvalue.store.records_dir`), the rest from ``cfg.out``: the analysis runs with the stored
    ``config.yaml``, the filter counts come from the stored ``summary.json`` (the table does not hold them) and the
    collection time from ``timings.json`` (or, in a folder written before it, the summary)."""
    import pandas as pd

    from vsr_util.config_io import load_config

    from prefixvalue.config import config_diff

    out = Path(cfg.out)
    check_no_old_layout(out)
    rec = records_dir(out)
    need = [rec / "study.json", rec / "config.yaml", rec / "results.parquet", out / "summary.json"]
    missing = [str(p) for p in need if not p.is_file()]
    if missing:
        raise ValueError(f"reanalyze: {out} (records: {rec}) lacks {', '.join(missing)}; run the study there first "
                         "(without --reanalyze)")
    manifest = read_json(need[0])
    if manifest.get("study") != study.name:
        raise ValueError(f"reanalyze: {out} holds results of study {manifest.get('study')!r}, not {study.name!r}")
    diff = config_diff(manifest.get("identity", {}), identity_dict(cfg))
    if diff:
        raise ValueError(f"reanalyze: {out} holds results of a different {study.name} config (changed: {'; '.join(diff)}); "
                         "pass the options it ran with")
    stored = load_config(study.config_cls, need[1])
    old = read_json(need[3])
    table = pd.read_parquet(need[2])
    _analyze_and_write(study, stored, table, old.get("counts", {}), _collect_seconds(out, old), out, reanalyzed=True)
    return out


def _collect_seconds(out: Path, summary: dict) -> float | None:
    """The collection time of the study in ``out``: its ``timings.json``, else the ``collect_seconds`` that summaries
    carried before timings moved out of them, else None."""
    from vsr_util.atomic import TIMINGS_FILE

    try:
        return read_json(out / TIMINGS_FILE).get("collect_seconds")
    except FileNotFoundError:
        return summary.get("collect_seconds")
