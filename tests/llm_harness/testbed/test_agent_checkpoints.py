"""The shipped test-bed agents (``checkpoints/<family>/{low,mid,high}``): they load with
``from_pretrained``, are small, and re-playing the first chunk of evaluation seeds reproduces the
card's per-seed outcomes exactly (``agent_eval``: a chunk's samples depend only on its seeds; same
torch build and one thread, as the cards record)."""

from __future__ import annotations

import json

import pytest

from llm_harness.testbed.agents import AGENT_FAMILIES, EVAL_SEEDS
from llm_harness.testbed.paths import CHECKPOINT_DIR, SHIPPED_CHECKPOINTS

SHIPPED = [(f, n) for f in AGENT_FAMILIES for n in SHIPPED_CHECKPOINTS if (CHECKPOINT_DIR / f / n / "card.json").is_file()]
pytestmark = pytest.mark.skipif(not SHIPPED, reason="no shipped agent checkpoints")


def _card(family, name):
    return json.loads((CHECKPOINT_DIR / family / name / "card.json").read_text())


@pytest.fixture(scope="module", autouse=True)
def _one_thread(one_thread):
    """Every test of this module runs with one torch thread (conftest)."""


@pytest.mark.parametrize("family,name", SHIPPED)
def test_shipped_agent_is_small_and_loads_with_from_pretrained(family, name):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = CHECKPOINT_DIR / family / name
    assert (path / "model.safetensors").stat().st_size < 5_000_000
    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
    tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    card = _card(family, name)
    assert type(model).__name__ == "Qwen2ForCausalLM"
    assert sum(p.numel() for p in model.parameters()) == card["n_parameters"]
    assert model.config.max_position_embeddings == card["agent"]["context"] >= card["agent"]["longest_prompt_tokens"] + 8
    alphabet = AGENT_FAMILIES[family].alphabet
    assert tok.encode(alphabet) == list(range(4, 4 + len(alphabet))) and tok.decode(tok.encode(alphabet)) == alphabet
    ev = card["evaluation"]
    assert ev["temperature"] == 1.0 and ev["samples_per_seed"] == 8
    assert ev["continuation"][0]["alpha"] == 0.0 and ev["continuation"][0]["n_seeds"] == len(EVAL_SEEDS)


@pytest.mark.parametrize("family", sorted({f for f, _ in SHIPPED}))
def test_cards_are_ordered_and_mid_is_in_the_vsr_regime(family):
    init = [_card(family, n)["evaluation"]["continuation"][0] for n in SHIPPED_CHECKPOINTS]
    assert init[0]["success"] < init[1]["success"] < init[2]["success"]
    assert init[0]["ci_high"] < init[2]["ci_low"]
    mid = _card(family, "mid")["evaluation"]["continuation"]
    assert mid[0]["groups_all_fail"] > 0.5  # from the initial state most groups of 8 fail entirely
    # from intermediate expert states mixed groups are far more common than from the initial state
    # (Sokoban: 48 % -> up to 91 %; BabyAI OneRoomS8: 23 % -> up to 46 %)
    assert max(r["groups_mixed"] for r in mid[1:]) > max(0.4, 1.5 * mid[0]["groups_mixed"])


def _chunk_cases():
    """alpha = 0 (the card's success) on every checkpoint, and an intermediate alpha on mid."""
    cases = [(f, n, 0) for f, n in SHIPPED]
    cases += [(f, n, len(_card(f, n)["evaluation"]["continuation"]) // 2) for f, n in SHIPPED if n == "mid"]
    return cases


@pytest.mark.parametrize("family,name,index", _chunk_cases())
def test_first_chunk_reproduces_the_card_exactly(family, name, index):
    from llm_harness.testbed.agent_eval import AgentEvalPlan, continuation_starts, play_groups, summarise_groups
    from llm_harness.testbed.model import load_testbed

    card = _card(family, name)
    ev, ag = card["evaluation"], card["agent"]
    plan = AgentEvalPlan(**{k: ev[k] for k in AgentEvalPlan.__dataclass_fields__})
    seeds = EVAL_SEEDS[: plan.chunk_seeds]
    model, tok = load_testbed(CHECKPOINT_DIR / family / name)
    level = ag["env_params"].get("level")
    row = ev["continuation"][index]
    starts = continuation_starts(family, level, seeds, row["alpha"])
    groups = play_groups(model, tok, family, level, ag["window"], starts, plan, ("agent-eval", ag["level_label"], index))
    assert summarise_groups(groups)["success_per_seed"] == row["success_per_seed"][: len(seeds)]
