"""Summarise scripts/real_model_grpo.sh's output folder: held-out accuracy before/after (paired by problem, 95 %
intervals), tokens per update, s/step split, peak memory; writes summary.json and README.md (atomically).

Usage: python scripts/real_model_grpo_report.py --out figures/real_model/grpo --backend vllm
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from pathlib import Path

import numpy as np
from scipy import stats

from vsr_util.atomic import write_text


def _peak_rss_mib(path: Path) -> float | None:
    if not path.is_file():
        return None
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", path.read_text())
    return int(m.group(1)) / 1024 if m else None


def _run_options(out: Path) -> dict:
    """The speed/precision options of the run's config (``run.*``) as the saved config states them."""
    import yaml

    cfg = out / "real_smollm2_vsr_grpo.yaml"
    if not cfg.is_file():
        return {}
    run = (yaml.safe_load(cfg.read_text()) or {}).get("run", {}) or {}
    keys = ("static_decode", "sampler", "group_prompt_once", "fused_optimizer", "micro_batch_rows", "precision")
    return {k: run[k] for k in keys if k in run}


def _task_params(out: Path) -> dict:
    """The run's task parameters as its saved config states them (``{}``: the task's defaults)."""
    import yaml

    cfg = out / "real_smollm2_vsr_grpo.yaml"
    if not cfg.is_file():
        return {}
    return ((yaml.safe_load(cfg.read_text()) or {}).get("task") or {}).get("params") or {}


def _verifier_words(params: dict) -> str:
    """How the run's verifier reads an answer, in words (arith_ladder's answer modes)."""
    if params.get("answer_mode") == "strict":
        return ("the verifier reads only a declared final answer (`answer_mode: strict`; the prompt asks for one: "
                f"\"{params.get('instruction', '')}\"), so a pass cannot be an incidental last number "
                "(figures/real_model/card-strict gives its chance level per level)")
    return ("the ladder's verifier reads a declared answer, else the last number of a response (`answer_mode: lenient`; "
            "figures/real_model/card gives its chance level and says how often a correct sample states its answer)")


def _length_reading(before: float, after: float) -> str:
    """The README's bullet on response lengths (shorter responses can explain part of a gain under a budget)."""
    if after < before:
        return (f"* Responses got shorter ({before:.1f} -> {after:.1f} tokens) under the 48-token budget, so part of "
                "a gain can be the policy learning to finish inside the budget rather than to compute better.")
    return f"* Responses did not get shorter ({before:.1f} -> {after:.1f} tokens)."


def _gap_line(gap: dict) -> str:
    """The bf16 run's train/sample log-prob gap and its importance-weight correction, as one README bullet."""
    if not gap:
        return ""
    return ("* bf16 train/sample gap (medians over the updates): |log pi_train - log pi_sample| mean "
            f"{gap.get('mismatch_logp_mean', float('nan')):.4f}, p99 {gap.get('mismatch_logp_p99', float('nan')):.4f}; "
            f"truncated-IS weight mean {gap.get('tis_weight_mean', float('nan')):.4f}, "
            f"fraction truncated {gap.get('tis_truncated_frac', float('nan')):.4f}\n")


def _memory_lines(mem: dict | None) -> str:
    """The trainer's memory.json as README bullets (fixed parts, peak by phase)."""
    if not mem:
        return ""
    fixed = ", ".join(f"{k} {v:.2f}" for k, v in mem["fixed_gb"].items())
    peaks = ", ".join(f"{k} {v:.2f}" for k, v in mem["peak_gb"].items())
    kind = "peak RSS" if mem["kind"] == "peak_rss" else "peak allocated"
    return (f"* memory by part (the trainer's memory.json, GiB): {fixed}; {kind} by phase, largest over the run: {peaks}"
            f"{'' if mem.get('exact', True) else ' (cumulative: the peak could not be reset)'}\n")


def _memory_reading(backend: str, mem: dict | None) -> str:
    if mem:
        return ("* Where the memory goes is in the memory bullet above: the fixed parts (weights, gradients, AdamW's "
                "two moments) and each phase's peak (sampling with its KV cache, the old-log-prob pass, the loss pass "
                "with its activations and logits).")
    return ("* The peak memory is high for a 135M model: the policy with its Adam state (~1.6 GB)"
            + (", the vLLM engine with its 2 GiB KV cache and weights" if backend == "vllm" else "")
            + ", and the loss pass's log-probabilities over a 49,152-token vocabulary; not broken down here.")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--backend", default="hf")
    ap.add_argument("--load", default="", help="the machine's load while the run trained, in words (README)")
    ap.add_argument("--note", default="", help="a paragraph under the title (how this variant was run, README)")
    ap.add_argument("--config", default="configs/real_smollm2_vsr_grpo.yaml", help="the config the run started from")
    a = ap.parse_args(argv)
    out = Path(a.out)
    before = json.loads((out / "eval_before" / "eval.json").read_text())
    after = json.loads((out / "eval_after" / "eval.json").read_text())
    if before["problem_ids"] != after["problem_ids"] or before["k"] != after["k"]:
        raise ValueError(f"{out}: the two evaluations are not on the same problems and k")
    k = before["k"]
    b = np.asarray(before["problem_correct"], float) / k
    c = np.asarray(after["problem_correct"], float) / k
    paired = stats.ttest_rel(c, b)
    delta_ci = paired.confidence_interval(0.95)
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if x.strip()]
    step_s = [r["time_step_s"] for r in rows]
    split = {key: statistics.median(r[key] for r in rows if r.get(key) is not None)
             for key in sorted(rows[0]) if key.startswith("time_") and key.endswith("_s")}
    from llm_harness.tasks.arith_ladder import LEVELS

    names = LEVELS.names()  # difficulty = the level's position + 1
    levels_b = {names[int(r["difficulty"]) - 1]: r for r in before["by_difficulty"]}
    levels_a = {names[int(r["difficulty"]) - 1]: r for r in after["by_difficulty"]}
    summary = {
        "backend": a.backend, "steps": len(rows), "k": k, "n_problems": len(b),
        # the evaluation's own 95 % intervals (problems as units); the change paired by problem
        "avg_at_k_before": (before["avg_at_k"], *before["avg_at_k_ci"]),
        "avg_at_k_after": (after["avg_at_k"], *after["avg_at_k_ci"]),
        "delta": (float(np.mean(c - b)), float(delta_ci.low), float(delta_ci.high)),
        "paired_t_p": float(paired.pvalue),
        "pass_at_k_before": before["pass_at"][str(k)], "pass_at_k_after": after["pass_at"][str(k)],
        "by_level": {str(lv): {"before": levels_b[lv]["avg_at_k"], "after": levels_a.get(lv, {}).get("avg_at_k")}
                     for lv in levels_b},
        "length_before": before["length_mean"], "length_after": after["length_mean"],
        "reward_mean_first5": statistics.mean(r["reward_mean"] for r in rows[:5]),
        "reward_mean_last5": statistics.mean(r["reward_mean"] for r in rows[-5:]),
        "new_tokens_per_update_median": statistics.median(r["gen_new_tokens"] for r in rows),
        "trained_samples_per_update_median": statistics.median(r["trained_samples"] for r in rows),
        "vsr_replayed_per_update_mean": statistics.mean(r.get("vsr_replayed") or 0 for r in rows),
        "s_per_step_median": statistics.median(step_s), "s_per_step_min": min(step_s), "s_per_step_max": max(step_s),
        "time_split_median_s": split, "peak_rss_mib": _peak_rss_mib(out / "train_time.txt"),
        "memory": json.loads((out / "memory.json").read_text()) if (out / "memory.json").is_file() else None,
        "run_options": _run_options(out),
        "task_params": _task_params(out),
        # bf16 only: the train/sample log-prob gap and the truncated-IS correction (medians over the updates)
        "precision_gap": {key: statistics.median(r[key] for r in rows if r.get(key) is not None)
                          for key in ("mismatch_logp_mean", "mismatch_logp_p99", "tis_weight_mean",
                                      "tis_truncated_frac") if any(r.get(key) is not None for r in rows)},
    }
    write_text(out / "summary.json", json.dumps(summary, indent=2))
    f = lambda t: f"{t[0]:.3f} [{t[1]:.3f}, {t[2]:.3f}]"  # noqa: E731
    lv = "\n".join(f"| {name} | {v['before']:.3f} | {v['after']:.3f} |" if v["after"] is not None else
                   f"| {name} | {v['before']:.3f} | - |" for name, v in summary["by_level"].items())
    sp = ", ".join(f"{k_[5:-2]} {v:.1f}" for k_, v in split.items() if k_ != "time_step_s")
    readme = f"""# GRPO + VSR on a real pretrained model: SmolLM2-135M-Instruct on the arithmetic ladder

One seed, {len(rows)} updates of `{a.config}` (GRPO, 8 prompts x 8 samples, 48 new tokens,
lr 5e-6, VSR with rho 0.25 cold-started from the reference solutions), generation on the **{a.backend}** backend,
the model's own tokenizer and chat template; {_verifier_words(summary['task_params'])}. Reproduce:
`CONFIG={a.config} OUT={a.out} scripts/real_model_grpo.sh {a.backend}` (after `make real-model`; `make vllm-test` builds
the vLLM environment).

{(a.note + chr(10) + chr(10)) if a.note else ''}## Held-out accuracy (test split, {len(b)} prompts x {k} samples at T = 1)

| | avg@{k}, 95 % interval (problems as units) | pass@{k} |
| --- | --- | --- |
| before | {f(summary['avg_at_k_before'])} | {summary['pass_at_k_before']:.3f} |
| after {len(rows)} updates | {f(summary['avg_at_k_after'])} | {summary['pass_at_k_after']:.3f} |
| change (paired by problem) | {f(summary['delta'])}, paired t-test p = {summary['paired_t_p']:.2g} | |

| level | avg@{k} before | after |
| --- | --- | --- |
{lv}

Mean response length {summary['length_before']:.1f} -> {summary['length_after']:.1f} tokens. Training reward (mean of
the sampled groups, fresh and replayed states together): {summary['reward_mean_first5']:.3f} over the first five
updates, {summary['reward_mean_last5']:.3f} over the last five.

## Cost

* new tokens per update: median {summary['new_tokens_per_update_median']:.0f}; trained samples per update (after the
  zero-variance filter): median {summary['trained_samples_per_update_median']:.0f}; VSR-replayed states per update: mean
  {summary['vsr_replayed_per_update_mean']:.1f}
* s/step: median {summary['s_per_step_median']:.1f} [{summary['s_per_step_min']:.1f}, {summary['s_per_step_max']:.1f}];
  median split (s): {sp}
* peak resident memory of the training process: {summary['peak_rss_mib'] or float('nan'):.0f} MiB (GNU time)
{_memory_lines(summary['memory'])}* run options: {', '.join(f'{k_} {v}' for k_, v in summary['run_options'].items()) or 'the defaults'}
{_gap_line(summary['precision_gap'])}{('* machine: ' + a.load) if a.load else ''}

## Reading

* What this run shows: the trainer, a plug-in (VSR's cold-start buffer of reference-solution prefixes) and
  evaluation work end to end on a real tokenizer and chat template{', with weights synced into vLLM after every update' if a.backend == 'vllm' else ''}. One seed and 20 updates: the accuracy change is a paired interval over the 260 test prompts (the
  sampling noise of the evaluation), not over training seeds.
{_length_reading(summary['length_before'], summary['length_after'])}
{_memory_reading(a.backend, summary['memory'])}
"""
    write_text(out / "README.md", readme)
    print(readme)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
