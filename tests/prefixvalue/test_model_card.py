"""``vsr model card`` end to end on a tiny random chat model, and its pure summaries."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from prefixvalue.model_card import CardConfig, level_stats, pass_rate_table, run_card
from llm_harness.tasks import get_task


def test_level_stats_counts_mixed_prompts_and_lengths():
    task = get_task("arith_ladder", levels=("add", "sub"), n_test=3)
    problems = [{"id": p.id, "level": p.metadata["level"], "difficulty": p.difficulty, "prompt": p.prompt, "answer": p.answer}
                for p in task.problems("test")[:4]]  # add, sub, add, sub
    correct = np.array([[1, 1], [0, 1], [0, 0], [1, 0]])
    lengths = np.array([[5, 7], [48, 10], [48, 48], [3, 9]])
    table = pass_rate_table(problems, correct, lengths, 48)
    assert table["pass_rate"].tolist() == [1.0, 0.5, 0.0, 0.5]
    assert table["n_at_budget"].tolist() == [0, 1, 2, 0]
    stats = {s["level"]: s for s in level_stats(table, correct, lengths, ["add", "sub"], 48)}
    assert stats["add"]["share_mixed"] == 0.0 and stats["add"]["share_zero"] == 0.5 and stats["add"]["share_one"] == 0.5
    assert stats["sub"]["share_mixed"] == 1.0 and stats["sub"]["mean_pass"] == 0.5
    assert stats["all"]["share_mixed"] == 0.5 and stats["all"]["prompts"] == 4
    assert stats["add"]["length_correct_mean"] == 6.0 and stats["add"]["length_wrong_mean"] == 48.0
    assert stats["all"]["share_at_budget"] == 3 / 8 and stats["all"]["share_correct_at_budget"] == 0.0
    lo, hi = stats["all"]["share_mixed_ci"]
    assert 0 < lo < 0.5 < hi < 1
    with pytest.raises(ValueError, match="expected shape"):
        pass_rate_table(problems, correct[:3], lengths[:3], 48)



def test_a_level_budget_is_the_at_budget_mark_of_its_prompts():
    from prefixvalue.model_card import prompt_budgets

    task = get_task("arith_ladder", levels=("add", "sub"), n_test=3)
    problems = [{"id": p.id, "level": p.metadata["level"], "difficulty": p.difficulty, "prompt": p.prompt, "answer": p.answer}
                for p in task.problems("test")[:4]]  # add, sub, add, sub
    budgets = prompt_budgets(problems, 48, {"level_budgets": {"add": 8}})
    assert budgets[:, 0].tolist() == [8, 48, 8, 48] and prompt_budgets(problems, 48, {})[:, 0].tolist() == [48] * 4
    assert prompt_budgets(problems, 6, {"level_budgets": {"add": 8}})[:, 0].tolist() == [6] * 4  # the card's cap wins
    correct = np.zeros((4, 2), dtype=int)
    lengths = np.array([[8, 7], [8, 48], [3, 8], [47, 9]])
    table = pass_rate_table(problems, correct, lengths, budgets)
    assert table["n_at_budget"].tolist() == [1, 1, 1, 0]
    stats = {s["level"]: s for s in level_stats(table, correct, lengths, ["add", "sub"], budgets)}
    assert stats["add"]["share_at_budget"] == 0.5 and stats["sub"]["share_at_budget"] == 0.25


@pytest.mark.slow
def test_card_end_to_end_on_a_tiny_model(tiny_chat_folder, tmp_path):
    out = tmp_path / "card"
    cfg = CardConfig(model=str(tiny_chat_folder), task_params=("levels=[add, sub]", "n_test=3"), samples=3, max_new_tokens=40,
                     hint_problems=2, alphas=(0.0, 1.0), n_continuations=2, out=str(out), progress=False, seed=5)
    summary = run_card(cfg)
    names = sorted(p.name for p in out.iterdir())
    for stem in ("pass_rates", "continuation_vs_alpha", "response_lengths"):
        assert f"{stem}.png" in names and f"{stem}.csv" in names and f"{stem}.pdf" not in names
    assert {"README.md", "summary.json", "config.yaml", "prompts.csv"} <= set(names)
    saved = json.loads((out / "summary.json").read_text())
    assert saved["levels"][-1]["prompts"] == 6 and [s["level"] for s in saved["levels"]] == ["add", "sub", "all"]
    assert sum(saved["pass_rate_histogram"]["add"]) == 3
    assert [c["alpha"] for c in saved["hint_ratio"]["curve"]] == [0.0, 1.0]
    assert saved["hint_ratio"]["counts"]["eligible"] == 2
    import pandas as pd

    prompts = pd.read_csv(out / "prompts.csv")
    assert saved["tokens"]["pass_rates"] == round((prompts["mean_length"] * prompts["samples"]).sum())
    readme = (out / "README.md").read_text()
    assert "Pass rates" in readme and "| all |" in readme
    samples = pd.read_json(out / "samples.jsonl", lines=True)
    assert len(samples) == 6 * 3 and set(samples["correct"]) <= {0, 1} and set(samples["stated"]) <= {True, False}
    assert all("share_correct_stated" in s for s in saved["levels"])
    # the saved samples alone give the same card
    re = run_card(dataclasses.replace(cfg, reanalyze=True))
    assert {k: re[k] for k in ("levels", "pass_rate_histogram", "hint_ratio", "tokens", "examples")} == {
        k: summary[k] for k in ("levels", "pass_rate_histogram", "hint_ratio", "tokens", "examples")}
    # the same seed reproduces the same samples
    again = run_card(cfg)
    assert again["pass_rate_histogram"] == summary["pass_rate_histogram"]
    assert again["hint_ratio"]["curve"] == summary["hint_ratio"]["curve"]
    assert pd.read_json(out / "samples.jsonl", lines=True)["response"].tolist() == samples["response"].tolist()


def test_card_refuses_a_folder_without_config(tmp_path):
    with pytest.raises(ValueError, match="is not a saved model folder"):
        run_card(CardConfig(model=str(tmp_path), out=str(tmp_path / "o"), progress=False))
    with pytest.raises(ValueError, match="reanalyze: .* has no samples.jsonl"):
        run_card(CardConfig(model=str(tmp_path), out=str(tmp_path / "o"), progress=False, reanalyze=True))


def test_the_card_reads_strictly_unless_its_parameters_choose_the_reader():
    from llm_harness.tasks.arith_ladder import DECLARE_INSTRUCTION
    from llm_harness.tasks.base import parse_task_params
    from prefixvalue.model_card import _answer_mode, _task_flag

    params = CardConfig().task_params
    task = get_task("arith_ladder", **parse_task_params(params))
    assert task.config.answer_mode == "strict" and task.config.instruction == DECLARE_INSTRUCTION
    assert task.config.n_test == 52
    assert _answer_mode({"task_params": list(params)}) == "strict" and _task_flag({"task_params": list(params)}) == ""
    # other parameters keep the strict reader; an instruction of one's own replaces the default one
    own = CardConfig(task_params=("n_test=5", "instruction=Be brief.")).task_params
    assert parse_task_params(own) == {"n_test": 5, "instruction": "Be brief.", "answer_mode": "strict"}
    lenient = CardConfig(task_params=("n_test=52", "answer_mode=lenient")).task_params  # figures/real_model/card
    assert lenient == ("n_test=52", "answer_mode=lenient")
    assert _task_flag({"task_params": list(lenient)}) == " --task-params n_test=52 answer_mode=lenient"
    with pytest.raises(ValueError, match="task_params\\[0\\]: expected 'key=value'"):
        CardConfig(task_params=("n_test",))
