"""Integration tests on the shipped test-bed checkpoints (loaded with ``from_pretrained``).

The accuracy check is calibrated: the card records, for each of the 1000 test problems, how many
of its 4 samples (T=1) were correct; this test draws one fresh sample (another seed) on each of
the first ``N_NEW`` of them and applies the exact exchangeability test
``stats.paired_consistent`` (given a problem's 5 outcomes, the fresh one is a uniformly chosen
one of them when the model is unchanged). Its false-failure rate is <= ``ALPHA`` per checkpoint;
Bonferroni over the shipped checkpoints keeps the total <= 1e-6.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from llm_harness.tasks import get_task
from llm_harness.testbed import SHIPPED_CHECKPOINTS, shipped_checkpoint
from llm_harness.testbed.evaluate import TestbedEvalConfig, evaluate, sample_correct, split_problems
from theory.metrics.binomial import paired_consistent

N_NEW = 300  # the first 300 test problems (stratified: 60 of each length 2..6)
ALPHA = 1e-6 / len(SHIPPED_CHECKPOINTS)
SEED = 20240601


def _card(name):
    return json.loads((shipped_checkpoint(name) / "card.json").read_text())


@pytest.fixture(scope="module", autouse=True)
def _one_thread(one_thread):
    """Every test of this module runs with one torch thread (conftest)."""


@pytest.mark.parametrize("name", SHIPPED_CHECKPOINTS)
def test_shipped_checkpoint_is_small_and_loads_with_from_pretrained(name):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = shipped_checkpoint(name)
    weights = path / "model.safetensors"
    assert weights.is_file() and weights.stat().st_size < 5_000_000
    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
    tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    card = _card(name)
    assert type(model).__name__ == "Qwen2ForCausalLM"
    assert sum(p.numel() for p in model.parameters()) == card["n_parameters"]
    assert 0.9e6 < card["n_parameters"] < 1.1e6
    assert tok.decode(tok.encode("Q:12+3=?\n")) == "Q:12+3=?\n"
    assert (tok.pad_token_id, tok.eos_token_id) == (model.config.pad_token_id, model.config.eos_token_id)
    assert card["name"] == name and card["step"] > 0


def test_cards_are_ordered_low_mid_high():
    acc = [_card(n)["evaluation"]["results"]["validation"]["overall"] for n in SHIPPED_CHECKPOINTS]
    for lo, hi in zip(acc[:-1], acc[1:]):
        assert lo["ci_high"] < hi["ci_low"]  # clearly separated accuracies
    hard = _card(SHIPPED_CHECKPOINTS[-1])["evaluation"]["results"]["hard"]["overall"]
    assert hard["accuracy"] < acc[-1]["accuracy"]  # the hard split is hard


@pytest.mark.parametrize("name", SHIPPED_CHECKPOINTS)
def test_accuracy_matches_the_card(name):
    from llm_harness.testbed import load_testbed

    card = _card(name)
    ref = card["evaluation"]["results"]["test"]
    model, tok = load_testbed(shipped_checkpoint(name))
    task = get_task("step_arith", seed=card["evaluation"]["task_seed"])
    probs = split_problems(task, "test", N_NEW)
    correct, _ = sample_correct(model, tok, task, probs, samples_per_problem=1, temperature=1.0,
                                max_new_tokens=card["evaluation"]["max_new_tokens"], seed=SEED, split="test")
    ref_counts = np.array([int(ch) for ch in ref["correct_per_problem"][:N_NEW]])
    ok, pval, (s, expected) = paired_consistent(correct[:, 0], ref_counts, ref["samples_per_problem"], ALPHA)
    assert ok, f"{name}: {s}/{N_NEW} correct, {expected:.1f} expected from the card's outcomes (p = {pval:.2g})"


def test_eval_command_prints_accuracy_by_terms(tmp_path, capsys):
    out = tmp_path / "eval.json"
    cfg = TestbedEvalConfig(model=str(shipped_checkpoint("high")), splits=("validation", "hard"), n_problems=10,
                            samples_per_problem=2, seed=1, out=str(out), progress=False)
    assert evaluate(cfg) == 0
    text = capsys.readouterr().out
    assert "validation" in text and "hard" in text and "95% CI" in text
    res = json.loads(out.read_text())["results"]
    assert [r["n_terms"] for r in res["validation"]["by_terms"]] == [2, 3, 4, 5, 6]
    assert [r["n_terms"] for r in res["hard"]["by_terms"]] == [7, 8, 9]
    assert res["validation"]["overall"]["n_samples"] == 20
