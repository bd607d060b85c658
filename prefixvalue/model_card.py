"""``vsr model card``: what a real pretrained model can do on the arithmetic ladder, as the test-bed
checkpoints' cards say it for the CPU test bed.

Three measurements, all at the sampling temperature of RL training (T = 1, no truncation) and with
the model's chat template (``Task.render_prompt``):

1. **Pass rates.** ``samples`` completions of every prompt of the ladder's split
   (:func:`llm_harness.trainer.evaluation.sample_and_verify`, the project's one evaluation sampler);
   per prompt ``p̂ = successes / samples``. The number that matters for GRPO and for VSR's
   prefix studies is the share of prompts with ``0 < p̂ < 1`` (a group of all-equal rewards has
   zero advantage; VSR §3.1), reported per level with a Clopper-Pearson interval. With ``k``
   samples a prompt of true rate ``p`` looks mixed with probability ``1 - p^k - (1 - p)^k``, so
   the share is a lower bound on the share of prompts with ``0 < p < 1``.
2. **Continuation success vs α.** The reference solution of ``hint_problems`` prompts (taken
   evenly from every level) is cut at a fraction α of its tokens and continued
   ``n_continuations`` times: the hint-ratio protocol of VSR Fig. 7
   (:mod:`prefixvalue.studies.hint_ratio`, whose collection and analysis this reuses). The
   verified text is ``prefix + continuation``.
3. **Response lengths** (new tokens, the stop token included) of the pass-rate samples, by level
   and by outcome, and how many hit ``max_new_tokens``.

Outputs in ``out`` (default ``runs/model_card/<model>``, a run folder; the committed card is rewritten only with
``--out figures/real_model/card``): the raw results (``samples.jsonl``: every pass-rate sample with its response text
and the answer the verifier read; ``continuation_rows.csv``; ``run.json``: model, timing, machine),
then what is computed from them alone (``--reanalyze`` redoes this part without sampling):
``README.md`` (the numbers), ``summary.json``, ``config.yaml``, ``prompts.csv`` (one row per
prompt) and three PNG figures each with the CSV of its numbers (``pass_rates``,
``continuation_vs_alpha``, ``response_lengths``). ``--model`` is a model folder or a registered
model name, imported into the cache first (``vsr model import``).

This module is the top of :mod:`prefixvalue` (it runs the ``hint-ratio`` study); nothing in the package imports it.
"""

from __future__ import annotations

import json
import os
import platform
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from vsr_util.checks import check_number
from vsr_util.atomic import read_json

__all__ = ["CardConfig", "card_command", "collect_card", "level_stats", "pass_rate_table", "render_readme", "run_card",
           "sample_matrices"]


@dataclass(frozen=True)
class CardConfig:
    """``vsr model card``: pass rates, continuation from reference prefixes and lengths of a model."""

    model: str = "smollm2-135m-instruct"
    """A model folder, a registered model name (imported into the cache first) or an imported model's name
    (``vsr model import --name``)."""
    task_params: tuple[str, ...] = ("n_test=52",)
    """Parameters of the ``arith_ladder`` task as ``key=value`` strings (e.g. ``levels=[add,sub]``); default: 52 test
    prompts per level, 260 over the five levels. Unless they set ``answer_mode``, the strict reader and its
    instruction are added (``arith_ladder.with_strict_reader``); ``answer_mode=lenient`` gives the committed lenient
    card (``figures/real_model/card``)."""
    split: str = "test"
    """Split of the ladder whose prompts are measured."""
    samples: int = 8
    """Completions per prompt for the pass rates."""
    temperature: float = 1.0
    """Sampling temperature (RL training samples at 1)."""
    max_new_tokens: int = 48
    """Token budget of a response (for the continuations: prefix + continuation)."""
    hint_problems: int = 30
    """Prompts (evenly over the levels) whose reference solutions are cut at each α."""
    alphas: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 1.0)
    """Fractions of the reference solution's tokens given as the prefix."""
    n_continuations: int = 4
    """Continuations sampled per (prompt, α)."""
    seed: int = 0
    """Seed of every sampling stream (``vsr_util.seeding.derive_seed`` per call)."""
    out: str = ""
    """Output folder; empty: ``runs/model_card/<model>`` (a run folder: the committed card in
    ``figures/real_model/card`` is rewritten only when named)."""
    max_batch_sequences: int = 256
    """Sequences decoded together by the HF backend."""
    num_threads: int = 0
    """``torch.set_num_threads``; 0 leaves torch's default."""
    progress: bool = True
    """Show progress bars."""
    reanalyze: bool = False
    """Sample nothing: rebuild the summary, figures and README from ``samples.jsonl``,
    ``continuation_rows.csv`` and ``run.json`` already in ``out``."""

    def __post_init__(self) -> None:
        from llm_harness.tasks.base import MAX_SPLIT_PROBLEMS
        from llm_harness.trainer.config import LIMITS

        for name, hi in (("samples", LIMITS["group_size"]), ("max_new_tokens", LIMITS["max_new_tokens"]),
                         ("n_continuations", LIMITS["group_size"]), ("max_batch_sequences", LIMITS["max_batch_sequences"])):
            check_number(name, getattr(self, name), 1, hi, integer=True)
        for name, hi in (("hint_problems", MAX_SPLIT_PROBLEMS), ("seed", None), ("num_threads", LIMITS["num_threads"])):
            check_number(name, getattr(self, name), 0, hi, integer=True)
        if not self.out:
            object.__setattr__(self, "out", str(Path("runs") / "model_card" / _folder_name(self.model)))
        check_number("temperature", self.temperature, 0, lo_open=True)
        from llm_harness.tasks.arith_ladder import with_strict_reader
        from llm_harness.tasks.base import check_task_params

        object.__setattr__(self, "task_params", with_strict_reader(check_task_params(self.task_params)))
        object.__setattr__(self, "alphas", tuple(float(a) for a in self.alphas))
        if not self.alphas:
            raise ValueError("alphas: must not be empty")
        for i, a in enumerate(self.alphas):
            check_number(f"alphas[{i}]", a, 0, 1)


def _folder_name(model: str) -> str:
    """A folder name for ``model``: its last path component (a folder), else the name with unsafe characters replaced."""
    import re

    name = Path(model.rstrip("/\\")).name or "model"
    return re.sub(r"[^A-Za-z0-9._-]", "_", name).lstrip(".") or "model"


# ---------------------------------------------------------------------------- pure summaries
def pass_rate_table(problems: Sequence[dict[str, Any]], correct: np.ndarray, lengths: np.ndarray,
                    max_new_tokens: int | np.ndarray):
    """One row per prompt: ``id, level, difficulty, prompt, answer, n_correct, samples, pass_rate,
    mean_length, n_at_budget`` from the prompts' ``{"id", "level", "difficulty", "prompt", "answer"}``,
    ``correct[prompt, sample]`` and ``lengths[prompt, sample]``; ``max_new_tokens``: the budget, one for every
    prompt or one per prompt (``[prompts, 1]``: :func:`prompt_budgets`)."""
    import pandas as pd

    correct, lengths = np.asarray(correct), np.asarray(lengths)
    if correct.shape != lengths.shape or correct.ndim != 2 or correct.shape[0] != len(problems):
        raise ValueError(f"correct: expected shape ({len(problems)}, k) equal to lengths', got {correct.shape} and {lengths.shape}")
    return pd.DataFrame({
        "id": [p["id"] for p in problems],
        "level": [p["level"] for p in problems],
        "difficulty": [p["difficulty"] for p in problems],
        "prompt": [p["prompt"] for p in problems],
        "answer": [p["answer"] for p in problems],
        "n_correct": correct.sum(1).astype(int),
        "samples": np.full(len(problems), correct.shape[1]),
        "pass_rate": correct.mean(1),
        "mean_length": lengths.mean(1),
        "n_at_budget": (lengths >= max_new_tokens).sum(1).astype(int),
    })


def prompt_budgets(prompts: Sequence[dict[str, Any]], max_new_tokens: int, task_params: Mapping[str, Any]) -> np.ndarray:
    """``[prompts, 1]``: each prompt's response budget, the card's ``max_new_tokens`` or its level's smaller one
    (``arith_ladder``'s ``level_budgets``, as the sampler applied it: :func:`llm_harness.tasks.base.problem_budget`)."""
    own = dict(task_params.get("level_budgets") or {})
    return np.array([[min(max_new_tokens, int(own.get(p["level"], max_new_tokens)))] for p in prompts], dtype=np.int64)


def level_stats(table, correct: np.ndarray, lengths: np.ndarray, levels: Sequence[str],
                max_new_tokens: int | np.ndarray) -> list[dict[str, Any]]:
    """Per level (then ``all``): prompts, mean pass rate with a clustered 95 % interval, the shares
    of prompts with ``p̂ = 0``, ``0 < p̂ < 1`` (Clopper-Pearson interval) and ``p̂ = 1``, and the
    response lengths (mean, median, mean of correct / wrong samples, share at the budget)."""
    from prefixvalue.analysis import mean_success, rate_interval

    correct, lengths = np.asarray(correct), np.asarray(lengths)
    lv = table["level"].to_numpy()
    budget_hit = lengths >= max_new_tokens
    out = []
    for name in [*levels, "all"]:
        rows = np.ones(len(lv), bool) if name == "all" else lv == name
        if not rows.any():
            continue
        c, n = correct[rows], lengths[rows]
        p = c.mean(1)
        mixed, n_rows = int(((p > 0) & (p < 1)).sum()), int(rows.sum())
        ms = mean_success(c)
        ci = rate_interval(mixed, n_rows)
        out.append({
            "level": name,
            "prompts": n_rows,
            "mean_pass": ms["mean"], "mean_pass_lo": ms["lo"], "mean_pass_hi": ms["hi"],
            "share_zero": float(np.mean(p == 0)),
            "share_mixed": mixed / n_rows,
            "share_mixed_ci": [ci["lo"], ci["hi"]],
            "share_one": float(np.mean(p == 1)),
            "length_mean": float(n.mean()),
            "length_median": float(np.median(n)),
            "length_correct_mean": float(n[c == 1].mean()) if (c == 1).any() else None,
            "length_wrong_mean": float(n[c == 0].mean()) if (c == 0).any() else None,
            "share_at_budget": float(budget_hit[rows].mean()),
            "share_correct_at_budget": float(budget_hit[rows][c == 1].mean()) if (c == 1).any() else None,
        })
    return out


def _peak_rss_gb() -> float | None:
    """The process's peak resident memory so far in GiB (``VmHWM``), None where unreadable."""
    from llm_harness.trainer.memory_watch import GB, peak_rss_bytes

    b = peak_rss_bytes()
    return None if b is None else b / GB


def chance_levels(samples, levels: Sequence[str], *, seed: int = 0, draws: int = 20) -> list[dict[str, Any]]:
    """Per level (then ``all``): the real pass rate and its **chance level** — every sample's answer (as the verifier
    reads it) scored against the answer of a random *other* problem of the same level, averaged over ``draws`` seeded
    pairings — under the ``lenient`` reader (the committed verifier: the last number counts) and the ``strict`` one (a
    declared final answer only: ``arith_ladder.read_strict_answer``), and the share of samples that declare one. A
    pass rate near its chance level is mostly incidental matches, not computation."""
    from llm_harness.tasks.arith_ladder import _to_number, read_natural_answer, read_strict_answer

    lv = samples["level"].to_numpy()
    pid = samples["problem_id"].to_numpy()
    gold = samples["answer"].astype(float).to_numpy()

    def values(reader) -> np.ndarray:
        out = np.full(len(samples), np.nan)
        for i, text in enumerate(samples["response"].astype(str)):
            status, extracted, _ = reader(text)
            v = _to_number(extracted or "") if extracted is not None else None
            out[i] = np.nan if v is None else float(v)
        return out

    read = {"lenient": values(read_natural_answer), "strict": values(read_strict_answer)}
    # per level, once: its rows, its problems' answers and each row's own problem (to pair it with another one)
    per_level = {}
    for level in levels:
        rows_l = np.flatnonzero(lv == level)
        probs, first = np.unique(pid[rows_l], return_index=True)
        per_level[level] = (rows_l, gold[rows_l][first], np.searchsorted(probs, pid[rows_l]))
    rng = np.random.default_rng(seed)
    pairings = []  # draws x samples: the answer of a random other problem of the sample's level (NaN: none)
    for _ in range(draws):
        other = np.full(len(lv), np.nan)
        for rows_l, ans, own in per_level.values():
            if len(ans) >= 2:
                pick = rng.integers(0, len(ans) - 1, len(rows_l))
                other[rows_l] = ans[pick + (pick >= own)]  # skip the sample's own problem
        pairings.append(other)
    out = []
    for name in [*levels, "all"]:
        sel = np.ones(len(lv), bool) if name == "all" else lv == name
        if not sel.any():
            continue
        row: dict[str, Any] = {"level": name, "samples": int(sel.sum()),
                               "share_declared": float(np.isfinite(read["strict"][sel]).mean())}
        for mode, v in read.items():
            row[f"pass_{mode}"] = float(np.mean(v[sel] == gold[sel]))
            hits = []
            for other in pairings:
                valid = np.isfinite(other[sel])  # a level with one problem has no other to pair with
                hits.append(float(np.mean((v[sel] == other[sel])[valid])) if valid.any() else float("nan"))
            row[f"chance_{mode}"] = float(np.mean(hits))
        out.append(row)
    return out


def hint_curve_by_level(hint_table, levels: Sequence[str]) -> list[dict[str, Any]]:
    """Mean continuation success per (level, α) from the hint-ratio rows (``difficulty`` -> level)."""
    from llm_harness.tasks.arith_ladder import LEVELS

    names = LEVELS.names()
    out = []
    for (d, a), grp in hint_table.groupby(["difficulty", "alpha"], sort=True):
        level = names[int(d) - 1]
        if level in levels:
            out.append({"level": level, "alpha": float(a), "mean": float(grp["success_rate"].mean()), "prompts": int(len(grp))})
    return out


# ---------------------------------------------------------------------------- figures
def _pyplot():
    from prefixvalue.analysis import pyplot

    return pyplot()


def _save_png(fig, out: Path, stem: str) -> None:
    from vsr_util.atomic import save_figure

    save_figure(fig, out, stem, dpi=130, formats=("png",))


def _write_csv(df, path: Path) -> None:
    from vsr_util.atomic import write_frame_csv

    write_frame_csv(path, df)


def plot_pass_rates(table, stats: list[dict[str, Any]], samples: int, out: Path) -> None:
    """Histogram of per-prompt pass rates (stacked by level) with its CSV."""
    import pandas as pd

    plt = _pyplot()
    levels = [s["level"] for s in stats if s["level"] != "all"]
    values = np.arange(samples + 1)
    counts = {lv: np.bincount(table.loc[table["level"] == lv, "n_correct"].to_numpy(), minlength=samples + 1) for lv in levels}
    df = pd.DataFrame({"n_correct": values, "pass_rate": values / samples, **{lv: counts[lv] for lv in levels}})
    _write_csv(df, out / "pass_rates.csv")
    fig, ax = plt.subplots(figsize=(6.4, 3.9))
    bottom = np.zeros(samples + 1)
    for lv in levels:
        share = next(s["share_mixed"] for s in stats if s["level"] == lv)
        ax.bar(values / samples, counts[lv], bottom=bottom, width=0.8 / samples, label=f"{lv} (mixed {share:.0%})")
        bottom += counts[lv]
    allstat = next(s for s in stats if s["level"] == "all")
    ax.set_xlabel(f"per-prompt pass rate (successes / {samples} samples, T = 1)")
    ax.set_ylabel("prompts")
    ax.set_title(f"{allstat['prompts']} prompts: {allstat['share_mixed']:.0%} with 0 < p < 1, mean pass {allstat['mean_pass']:.2f}",
                 fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    _save_png(fig, out, "pass_rates")


def plot_hint_curve(summary: dict[str, Any], by_level: list[dict[str, Any]], out: Path) -> None:
    """Continuation success vs α (all prompts with CI, and per level) with its CSV."""
    import pandas as pd

    plt = _pyplot()
    curve = summary["curve"]
    rows = [{"level": "all", "alpha": c["alpha"], "mean": c["mean"], "ci_lo": c["ci_lo"], "ci_hi": c["ci_hi"],
             "prompts": c["n_problems"]} for c in curve]
    rows += [{"level": r["level"], "alpha": r["alpha"], "mean": r["mean"], "ci_lo": None, "ci_hi": None,
              "prompts": r["prompts"]} for r in by_level]
    _write_csv(pd.DataFrame(rows), out / "continuation_vs_alpha.csv")
    fig, ax = plt.subplots(figsize=(5.6, 3.9))
    for lv in dict.fromkeys(r["level"] for r in by_level):
        pts = [r for r in by_level if r["level"] == lv]
        ax.plot([r["alpha"] for r in pts], [r["mean"] for r in pts], marker=".", lw=1, alpha=0.7, label=lv)
    a = np.array([c["alpha"] for c in curve])
    m = np.array([c["mean"] for c in curve])
    ax.errorbar(a, m, yerr=[m - np.array([c["ci_lo"] for c in curve]), np.array([c["ci_hi"] for c in curve]) - m],
                color="k", marker="o", capsize=3, lw=2, label="all (95% CI)")
    ax.set_xlabel("α (fraction of the reference solution's tokens given as prefix)")
    ax.set_ylabel("continuation success")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(f"Continuation from reference prefixes ({summary['n_problems']} prompts x "
                 f"{summary['n_continuations']} continuations)", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    _save_png(fig, out, "continuation_vs_alpha")


def plot_lengths(table_lengths, correct: np.ndarray, levels_of_rows: np.ndarray, levels: Sequence[str],
                 max_new_tokens: int, out: Path) -> None:
    """Response-length histograms by level, correct vs wrong samples, with its CSV."""
    import pandas as pd

    plt = _pyplot()
    lengths = np.asarray(table_lengths)
    edges = np.arange(0, max_new_tokens + 5, 4)
    rows = []
    fig, axes = plt.subplots(1, len(levels), figsize=(2.1 * len(levels) + 0.6, 2.8), sharey=True, squeeze=False)
    for ax, lv in zip(axes[0], levels):
        sel = levels_of_rows == lv
        n, c = lengths[sel].ravel(), correct[sel].ravel()
        h_ok, _ = np.histogram(n[c == 1], bins=edges)
        h_bad, _ = np.histogram(n[c == 0], bins=edges)
        rows += [{"level": lv, "bin_lo": int(lo), "bin_hi": int(hi), "correct": int(x), "wrong": int(y)}
                 for lo, hi, x, y in zip(edges[:-1], edges[1:], h_ok, h_bad)]
        ax.hist([n[c == 1], n[c == 0]], bins=edges, stacked=True, label=["correct", "wrong"])
        ax.set_title(lv, fontsize=8)
        ax.set_xlabel("new tokens", fontsize=7)
    axes[0][0].set_ylabel("samples")
    axes[0][-1].legend(fontsize=6)
    fig.tight_layout()
    _write_csv(pd.DataFrame(rows), out / "response_lengths.csv")
    _save_png(fig, out, "response_lengths")


# ---------------------------------------------------------------------------- report
def _fmt(x: float | None, digits: int = 2) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def _chance_lines(summary: dict[str, Any]) -> list[str]:
    """The README's table of real against chance pass rates (:func:`chance_levels`), lenient and strict reader."""
    from prefixvalue.analysis import markdown_table

    rows = summary.get("chance")
    if not rows:
        return []
    table = [(r["level"], r["samples"], f"{r['pass_lenient']:.3f}", f"{r['chance_lenient']:.3f}",
              f"{r['pass_strict']:.3f}", f"{r['chance_strict']:.3f}", f"{r['share_declared']:.2f}") for r in rows]
    return ["### Real against chance",
            "",
            "The chance level scores every sample's answer against the answer of a random other problem of the same level "
            "(20 seeded pairings; `model_card.chance_levels`): what the verifier would pass if the model computed nothing "
            "about *this* problem. *Lenient* is the verifier of the committed results (a declared answer, else the last "
            "number); *strict* reads only a declared final answer (`\\boxed{}`, `#### N`, \"the answer is N\": "
            "`arith_ladder` with `answer_mode: strict`).",
            "",
            markdown_table(("level", "samples", "pass (lenient)", "chance (lenient)", "pass (strict)", "chance (strict)",
                            "declared an answer"), table),
            ""]


def _answer_mode(cfg: dict[str, Any]) -> str:
    from llm_harness.tasks.base import parse_task_params

    return str(parse_task_params(tuple(cfg.get("task_params") or ())).get("answer_mode", "lenient"))


def _task_flag(cfg: dict[str, Any]) -> str:
    """`` --task-params ...`` (shell-quoted) when the card's task parameters are not the default's, else empty."""
    import shlex

    params = tuple(cfg.get("task_params") or ())
    if params == CardConfig().task_params:
        return ""
    return " --task-params " + " ".join(shlex.quote(p) for p in params)


def render_readme(summary: dict[str, Any]) -> str:
    """The card's README from ``summary.json``'s content (every number comes from it)."""
    from prefixvalue.analysis import markdown_table

    cfg, stats, hint = summary["config"], summary["levels"], summary["hint_ratio"]
    rows = [(s["level"], s["prompts"], f"{s['mean_pass']:.3f} [{s['mean_pass_lo']:.3f}, {s['mean_pass_hi']:.3f}]",
             f"**{s['share_mixed']:.2f}** [{s['share_mixed_ci'][0]:.2f}, {s['share_mixed_ci'][1]:.2f}]",
             _fmt(s["share_zero"]), _fmt(s["share_one"]), _fmt(s["length_mean"], 1), _fmt(s["length_correct_mean"], 1),
             _fmt(s["length_wrong_mean"], 1), _fmt(s["share_at_budget"]), _fmt(s["share_correct_stated"])) for s in stats]
    curve_rows = [(f"{c['alpha']:.2f}", f"{c['mean']:.3f}", f"[{c['ci_lo']:.3f}, {c['ci_hi']:.3f}]",
                   *[_fmt(next((r["mean"] for r in hint["by_level"] if r["level"] == s["level"] and r["alpha"] == c["alpha"]), None))
                     for s in stats if s["level"] != "all"]) for c in hint["curve"]]
    levels = [s["level"] for s in stats if s["level"] != "all"]
    lin = hint.get("linearity", {})
    t = summary["timing"]
    examples = [(e["level"], e["prompt"].replace("|", "/"), e["answer"], e["response"].replace("|", "/").replace("\n", " "),
                 "yes" if e["correct"] else "no") for e in summary["examples"]]
    lines = [
        f"# Model card: {summary['model_name']} on the arithmetic ladder",
        "",
        f"`{summary['model_name']}` ({summary['model_info']}) sampled at T = {cfg['temperature']:g} with its chat template on the "
        f"`arith_ladder` task (`llm_harness/tasks/arith_ladder.py`), split `{cfg['split']}`: {stats[-1]['prompts']} prompts x "
        f"{cfg['samples']} samples, responses of at most {cfg['max_new_tokens']} tokens, seed {cfg['seed']}. "
        f"Regenerate with `vsr model card{_task_flag(cfg)} --out {cfg['out']}` (after `make real-model`); the configuration is in `config.yaml`, every number "
        "below in `summary.json`, per-prompt results in `prompts.csv`, every sample with its response and the answer "
        "read from it in `samples.jsonl`.",
        "",
        "## Pass rates (T = 1)",
        "",
        "Mixed = share of prompts with 0 < p̂ < 1 (a GRPO group of such a prompt has non-zero advantages); with "
        f"{cfg['samples']} samples a prompt of true rate p shows as mixed with probability 1 - p^{cfg['samples']} - (1 - p)^{cfg['samples']}, "
        "so this is a lower bound. Intervals: 95 %, mean pass clustered by prompt, shares Clopper-Pearson.",
        "",
        markdown_table(("level", "prompts", "mean pass", "mixed", "p̂ = 0", "p̂ = 1", "mean length", "length (correct)",
                        "length (wrong)", "at budget", "correct, stated"), rows),
        "",
        f"A response that reaches the {cfg['max_new_tokens']}-token budget (column *at budget*) is graded on the text so far; "
        f"{_fmt(stats[-1]['share_correct_at_budget'])} of the correct samples are such cut-off responses. How the verifier "
        "found the answer, over all samples: " + ", ".join(f"{k or 'no number'} {v}" for k, v in summary["answer_rules"].items()) + ". "
        + ("The verifier reads only a declared final answer (`answer_mode: strict`: `\\boxed{}`, `#### N`, \"the answer is "
         "N\"), so a number the response merely mentions never passes; *correct, stated* is the share of correct samples "
         "that also state it as a result (`= 5`, `is 5`, ...: `arith_ladder.states_result`)."
         if _answer_mode(cfg) == "strict" else
         "The verifier reads the last number, so a rambling response can pass by mentioning the answer last without "
         "stating it; *correct, stated* is the share of correct samples that state it as a result (`= 5`, `is 5`, "
         "`equals 5`, ...: `arith_ladder.states_result`), the rest are such incidental passes."),
        "",
        *_chance_lines(summary),
        "![pass rates](pass_rates.png)",
        "",
        "## Continuation success vs α from reference-solution prefixes",
        "",
        f"{hint['n_problems']} prompts (evenly over the levels) x {hint['n_continuations']} continuations per α; the prefix is the "
        "first round(α |τ|) tokens of the reference solution (VSR Fig. 7's protocol, `prefixvalue/studies/hint_ratio.py`); "
        f"{hint['counts'].get('solution_over_budget', 0)} of {hint['counts'].get('problems', 0)} prompts skipped because their "
        "reference solution does not fit the response budget.",
        "",
        markdown_table(("α", "mean success (all)", "95% CI", *levels), curve_rows),
        "",
    ]
    if lin:
        lines += [f"* linear fit of the mean curve: slope {lin['slope']:.3f}, intercept {lin['intercept']:.3f}, R² {lin['r2']:.3f}; "
                  f"monotone: {lin.get('monotone_non_decreasing')}", ""]
    lines += [
        "![continuation vs alpha](continuation_vs_alpha.png)",
        "",
        "## Response lengths",
        "",
        "New tokens per sample (the stop token included), correct vs wrong samples, by level (numbers in the table above "
        "and in `response_lengths.csv`).",
        "",
        "![response lengths](response_lengths.png)",
        "",
        "## One sample per level",
        "",
        markdown_table(("level", "prompt", "answer", "first sample (truncated)", "correct"), examples),
        "",
        "## Run",
        "",
        f"* pass rates: {t['pass_rates_s']:.0f} s ({summary['tokens']['pass_rates']} new tokens, "
        f"{summary['tokens']['pass_rates'] / t['pass_rates_s']:.0f} tokens/s); continuations: {t['hint_ratio_s']:.0f} s "
        f"({summary['tokens']['hint_ratio']} new tokens); model load {t['load_s']:.1f} s; total {t['total_s'] / 60:.1f} min; "
        + (f"peak resident memory {t['peak_rss_gb']:.2f} GiB" if t.get("peak_rss_gb") is not None else
           "peak resident memory not recorded (the samples predate the card's memory record)"),
        f"* machine: {summary['environment']['cpu_count']} CPU cores, {summary['environment']['num_threads']} torch threads, "
        f"load average {summary['environment']['load_start']:.2f} at the start and {summary['environment']['load_end']:.2f} at the end "
        f"(other jobs shared the cores); torch {summary['environment']['torch']}, transformers {summary['environment']['transformers']}",
        "",
    ]
    return "\n".join(lines)


# ---------------------------------------------------------------------------- orchestration
def resolve_model(model: str) -> tuple[Path, str, str]:
    """``(folder, name, one-line description)`` of ``--model``, resolved and verified as the studies do
    (:func:`prefixvalue.engine.resolve_model`: test-bed names, registered models imported first, imported models'
    names, folders checked against their import manifest)."""
    from llm_harness.models.manifest import check_model_folder
    from prefixvalue.engine import resolve_model as resolve_study_model

    folder = Path(resolve_study_model(model, "model"))
    m = check_model_folder(folder, "model") if folder.is_dir() else None
    if m is not None:
        named = m["source"].get("named_model") or {}
        info = (f"{m['conversion']['n_parameters'] / 1e6:.0f}M parameters, imported from {m['source']['file']} "
                f"(sha256 {m['source']['sha256'][:12]}…{', ' + named['licence'] if named else ''}) by `vsr model import`")
        return folder, m["name"], info
    return folder, folder.name, f"model folder {folder}"


def collect_card(cfg: CardConfig, out: Path):
    """Sample everything the card needs (module doc, items 1-2) and save the raw results in ``out``:
    ``samples.jsonl`` (one row per pass-rate sample, its response text and the answer read from it),
    ``continuation_rows.csv`` (the hint-ratio study's rows) and ``run.json`` (model, timing, machine).
    Returns ``(samples, continuation rows, run info)``."""
    import pandas as pd
    import torch
    import transformers
    from tqdm.auto import tqdm

    from llm_harness.backends import HFBackend, HFBackendConfig
    from llm_harness.tasks import get_task
    from llm_harness.tasks.arith_ladder import states_result
    from llm_harness.trainer.evaluation import SamplingSession, completion_text, sample_and_verify
    from llm_harness.tasks.base import parse_task_params
    from prefixvalue.engine import build_context
    from prefixvalue.studies import hint_ratio
    from vsr_util.atomic import write_json, write_text

    t_start = time.perf_counter()
    load_start = os.getloadavg()[0]
    if cfg.num_threads:
        torch.set_num_threads(cfg.num_threads)
    folder, name, info = resolve_model(cfg.model)
    task = get_task("arith_ladder", **parse_task_params(cfg.task_params))
    problems = task.problems(task.check_split(cfg.split))
    if not problems:
        raise ValueError(f"split: the ladder's {cfg.split!r} split holds no problems with task_params {cfg.task_params}")
    t0 = time.perf_counter()
    backend = HFBackend.from_pretrained(str(folder), config=HFBackendConfig(
        model=str(folder), device="cpu", max_batch_sequences=cfg.max_batch_sequences))
    load_s = time.perf_counter() - t0
    hcfg = _hint_config(cfg, str(folder))
    ctx = build_context(hcfg, backend=backend, tokenizer=backend.tokenizer)  # also checks the tokenizer covers the task
    try:
        # 1. pass rates
        t0 = time.perf_counter()
        session = SamplingSession(backend, ctx.codec, task, ctx.verifier, temperature=cfg.temperature,
                                  max_new_tokens=cfg.max_new_tokens, chunk_sequences=cfg.max_batch_sequences)
        ev = sample_and_verify(session, problems, k=cfg.samples, seed=cfg.seed, stream=("model card",),
                               progress=cfg.progress, desc="pass rates")
        pass_s = time.perf_counter() - t0
        # 2. continuation vs alpha (the hint-ratio study's own collection, in chunks)
        t0 = time.perf_counter()
        hint_set = list(problems[: cfg.hint_problems])  # the ladder interleaves levels: even over levels
        rows: list[dict[str, Any]] = []
        hint_counts: dict[str, int] = {}
        chunk = max(1, cfg.max_batch_sequences // (cfg.n_continuations * len(cfg.alphas)))
        for c, start in enumerate(tqdm(range(0, len(hint_set), chunk), desc="continuations", disable=not cfg.progress)):
            got, counts = hint_ratio.collect(ctx, hint_set[start : start + chunk], c)
            rows += got
            hint_counts = {k: hint_counts.get(k, 0) + v for k, v in counts.items()}
        hint_s = time.perf_counter() - t0
    finally:
        ctx.close()
    records = []
    for i, p in enumerate(problems):
        for j, ids in enumerate(ev.token_ids[i]):
            stopped = bool(ids) and ids[-1] in backend.eos_token_ids
            text = completion_text(ctx.codec, ids, stopped)
            v = task.verify(p, text)
            stated = states_result(text, int(p.answer))
            if int(v.correct) != int(ev.correct[i, j]):  # the sampler graded the same text
                raise RuntimeError(f"problem {p.id!r} sample {j}: re-verification disagrees with the sampler")
            records.append({"problem_id": p.id, "level": p.metadata["level"], "difficulty": p.difficulty, "prompt": p.prompt,
                            "answer": p.answer, "sample": j, "correct": int(ev.correct[i, j]), "length": int(ev.lengths[i, j]),
                            "stopped": stopped, "extracted": v.extracted, "rule": v.detail, "stated": stated, "response": text})
    samples = pd.DataFrame(records)
    hint_rows = pd.DataFrame(rows)
    run = {
        "model_name": name, "model_info": info, "model_folder": str(folder),
        "counts": ev.counts, "hint_counts": hint_counts,
        "timing": {"load_s": load_s, "pass_rates_s": pass_s, "hint_ratio_s": hint_s, "total_s": time.perf_counter() - t_start,
                   "peak_rss_gb": _peak_rss_gb()},
        "environment": {"torch": torch.__version__, "transformers": transformers.__version__, "python": platform.python_version(),
                        "cpu_count": os.cpu_count(), "num_threads": torch.get_num_threads(), "load_start": load_start,
                        "load_end": os.getloadavg()[0]},
    }
    write_text(out / "samples.jsonl", "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
    _write_csv(hint_rows, out / "continuation_rows.csv")
    write_json(out / "run.json", run)
    return samples, hint_rows, run


def _hint_config(cfg: CardConfig, model: str):
    from prefixvalue.studies import hint_ratio

    return hint_ratio.HintRatioConfig(
        model=model, task="arith_ladder", task_params=cfg.task_params, split=cfg.split, response_budget=cfg.max_new_tokens,
        seed=cfg.seed, alphas=cfg.alphas, n_continuations=cfg.n_continuations, temperature=cfg.temperature,
        max_batch_sequences=cfg.max_batch_sequences, out=cfg.out, progress=cfg.progress)


def sample_matrices(samples) -> tuple[list[dict[str, Any]], np.ndarray, np.ndarray]:
    """``(prompts, correct[prompt, sample], lengths[prompt, sample])`` from ``samples.jsonl``'s rows,
    prompts in their first-appearance order."""
    order = list(dict.fromkeys(samples["problem_id"]))
    first = samples.drop_duplicates("problem_id").set_index("problem_id")
    k = int(samples["sample"].max()) + 1
    if len(samples) != len(order) * k:
        raise ValueError(f"samples: expected {k} samples for each of {len(order)} prompts, got {len(samples)} rows")
    idx = {pid: i for i, pid in enumerate(order)}
    correct = np.zeros((len(order), k), dtype=np.int64)
    lengths = np.zeros((len(order), k), dtype=np.int64)
    r, c = samples["problem_id"].map(idx).to_numpy(), samples["sample"].to_numpy()
    correct[r, c], lengths[r, c] = samples["correct"].to_numpy(), samples["length"].to_numpy()
    prompts = [{"id": pid, **first.loc[pid, ["level", "difficulty", "prompt", "answer"]].to_dict()} for pid in order]
    return prompts, correct, lengths


def run_card(cfg: CardConfig) -> dict[str, Any]:
    """Sample (or, with ``reanalyze``, read the saved samples), analyse, and write every output into
    ``cfg.out``; returns the summary (module doc)."""
    import pandas as pd

    from prefixvalue.studies import hint_ratio
    from vsr_util.atomic import write_json, write_text
    from vsr_util.config_io import save_config

    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    if cfg.reanalyze:
        missing = [f for f in ("samples.jsonl", "continuation_rows.csv", "run.json") if not (out / f).is_file()]
        if missing:
            raise ValueError(f"reanalyze: {str(out)!r} has no {', '.join(missing)} (run the card without --reanalyze first)")
        samples = pd.DataFrame([json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines() if line])
        try:
            hint_rows = pd.read_csv(out / "continuation_rows.csv", dtype={"correct_bits": str})  # keep leading zeros
        except pd.errors.EmptyDataError:
            hint_rows = pd.DataFrame()
        run = read_json(out / "run.json")
    else:
        samples, hint_rows, run = collect_card(cfg, out)
    prompts, correct, lengths = sample_matrices(samples)
    levels = list(dict.fromkeys(p["level"] for p in prompts))
    from llm_harness.tasks.base import parse_task_params

    budgets = prompt_budgets(prompts, cfg.max_new_tokens, parse_task_params(cfg.task_params))
    table = pass_rate_table(prompts, correct, lengths, budgets)
    stats = level_stats(table, correct, lengths, levels, budgets)
    for st in stats:  # how many correct samples state the answer as a result (arith_ladder.states_result)
        ok = samples[(samples["correct"] == 1) & ((samples["level"] == st["level"]) | (st["level"] == "all"))]
        st["share_correct_stated"] = float(ok["stated"].astype(bool).mean()) if len(ok) else None
    hint_summary: dict[str, Any] = {"n_problems": 0, "n_continuations": cfg.n_continuations, "curve": [], "by_level": []}
    if len(hint_rows):
        hint_summary = hint_ratio.analyze(hint_rows, _hint_config(cfg, run["model_folder"]))
        hint_summary["by_level"] = hint_curve_by_level(hint_rows, levels)
    hint_summary["counts"] = run["hint_counts"]
    first = samples[samples["sample"] == 0].drop_duplicates("level")
    examples = [{"level": r.level, "prompt": r.prompt, "answer": str(r.answer), "correct": bool(r.correct),
                 "response": r.response if len(r.response) <= 160 else r.response[:157] + "..."} for r in first.itertuples()]
    summary = {
        "model_name": run["model_name"], "model_info": run["model_info"], "model_folder": run["model_folder"],
        "config": asdict(replace(cfg, reanalyze=False)),
        "levels": stats,
        "pass_rate_histogram": {lv: np.bincount(table.loc[table["level"] == lv, "n_correct"], minlength=correct.shape[1]).tolist()
                                for lv in levels},
        "answer_rules": {str(k): int(v) for k, v in samples["rule"].value_counts().items()},
        "chance": chance_levels(samples, levels, seed=cfg.seed),
        "hint_ratio": hint_summary,
        "counts": run["counts"],
        "tokens": {"pass_rates": int(lengths.sum()),
                   "hint_ratio": int((hint_rows["mean_new_tokens"] * hint_rows["n"]).sum()) if len(hint_rows) else 0},
        "examples": examples,
        "timing": run["timing"],
        "environment": run["environment"],
    }
    _write_csv(table, out / "prompts.csv")
    plot_pass_rates(table, stats, correct.shape[1], out)
    if len(hint_rows):
        plot_hint_curve(hint_summary, hint_summary["by_level"], out)
    plot_lengths(lengths, correct, table["level"].to_numpy(), levels, cfg.max_new_tokens, out)
    save_config(replace(cfg, reanalyze=False), out / "config.yaml")  # the config that produced the samples
    write_json(out / "summary.json", summary)
    write_text(out / "README.md", render_readme(summary))
    return summary


def card_command(cfg: CardConfig) -> int:
    """``vsr model card``: run :func:`run_card` and print where the card went."""
    summary = run_card(cfg)
    allstat = summary["levels"][-1]
    print(f"{cfg.out}: {allstat['prompts']} prompts, mean pass {allstat['mean_pass']:.3f}, "
          f"mixed {allstat['share_mixed']:.2f} ({summary['timing']['total_s'] / 60:.1f} min)")
    return 0
