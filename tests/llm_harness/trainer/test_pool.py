"""The hard-prompt pool (llm_harness.trainer.pool): selection, the file, training on it."""

from __future__ import annotations

import json
import pytest

from llm_harness.trainer.config import TaskConfig
from llm_harness.pool_selection import PoolSelection, select_pool
from llm_harness.trainer.pool import load_pool, restrict_to_pool, write_pool
from llm_harness.trainer.entry import build_trainer
from trainer_support import ToyTask, make_trainer, tiny_config


def _select(tmp_path, **sel):
    tr = make_trainer(tmp_path / "sel")
    try:
        return tr, select_pool(tr, PoolSelection(**{"candidates": 24, "samples": 4, "max_successes": 1, "size": 6, **sel}))
    finally:
        tr.close()


def test_selection_keeps_hard_candidates_in_order_and_is_reproducible(tmp_path):
    tr, doc = _select(tmp_path)
    st = doc["stats"]
    assert sum(st["success_histogram"]) == st["candidates"] == 24
    assert st["qualifying"] == sum(st["success_histogram"][:2])
    assert st["kept"] == len(doc["ids"]) == min(6, st["qualifying"]) and all(s <= 1 for s in doc["successes"])
    train_ids = [p.id for p in tr.fresh.problems]
    pos = [train_ids.index(i) for i in doc["ids"]]
    assert len(set(pos)) == len(pos)
    _, again = _select(tmp_path)
    assert again["ids"] == doc["ids"] and again["successes"] == doc["successes"]
    _, other = _select(tmp_path, seed=1)
    assert other["ids"] != doc["ids"]  # another seed examines other candidates


def test_allowing_more_successes_keeps_a_superset_of_candidates(tmp_path):
    _, strict = _select(tmp_path, size=24)
    _, loose = _select(tmp_path, size=24, max_successes=3)
    assert set(strict["ids"]) <= set(loose["ids"]) and loose["stats"]["qualifying"] >= strict["stats"]["qualifying"]


def test_pool_file_is_checked_against_the_run(tmp_path):
    _, doc = _select(tmp_path)
    path = write_pool(tmp_path / "pool.json", doc)
    ids = load_pool(path, task=doc["task"], task_params=doc["task_params"], split="train")
    assert ids == doc["ids"]
    with pytest.raises(ValueError, match="task.params"):
        load_pool(path, task=doc["task"], task_params={"n_train": 5}, split="train")
    with pytest.raises(ValueError, match="split"):
        load_pool(path, task=doc["task"], task_params=doc["task_params"], split="validation")
    with pytest.raises(ValueError, match="does not exist"):
        load_pool(tmp_path / "nope.json", task="x", task_params={}, split="train")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ValueError, match="not a JSON pool file"):
        load_pool(tmp_path / "bad.json", task="x", task_params={}, split="train")
    dup = dict(doc, ids=doc["ids"][:1] * 2)
    (tmp_path / "dup.json").write_text(json.dumps(dup))
    with pytest.raises(ValueError, match="twice"):
        load_pool(tmp_path / "dup.json", task=doc["task"], task_params=doc["task_params"], split="train")
    with pytest.raises(ValueError, match="no candidate qualified"):
        write_pool(tmp_path / "empty.json", dict(doc, ids=[]))


def test_restrict_keeps_pool_order_and_names_missing_ids():
    probs = ToyTask().problems("train")[:5]
    ids = [probs[3].id, probs[0].id]
    assert restrict_to_pool(probs, ids) == [probs[3], probs[0]]
    with pytest.raises(ValueError, match="not in the training split"):
        restrict_to_pool(probs, ids + ["nope"])


def test_a_run_on_a_pool_draws_only_pool_prompts_and_they_recur(tmp_path):
    _, doc = _select(tmp_path)
    path = write_pool(tmp_path / "pool.json", doc)
    def build(run, params):
        cfg = tiny_config(str(tmp_path / run), task=TaskConfig(name="step_arith", params=params, pool=str(path)))
        return build_trainer(cfg, task=ToyTask())

    tr = build("run", {"n_train": 200})
    try:
        assert [p.id for p in tr.fresh.problems] == doc["ids"]
        drawn = [s.problem.id for s in tr.fresh.draw(3 * len(doc["ids"]))]
        assert set(drawn) == set(doc["ids"]) and len(drawn) == 3 * len(set(drawn))  # each recurs once per epoch
    finally:
        tr.close()
    with pytest.raises(ValueError, match="task.params"):
        build("run2", {"n_train": 300})


def test_pool_select_command_writes_a_loadable_pool(tmp_path):
    from llm_harness.pool_selection import PoolSelectConfig, select_command
    from vsr_util.config_io import save_config

    cfg = tiny_config(str(tmp_path / "run"))
    save_config(cfg, tmp_path / "train.yaml")
    out = tmp_path / "pool.json"
    assert select_command(PoolSelectConfig(train_config=str(tmp_path / "train.yaml"), out=str(out),
                                           selection=PoolSelection(candidates=12, samples=2, max_successes=1, size=4))) == 0
    ids = load_pool(out, task="step_arith", task_params=dict(cfg.task.params), split="train")
    assert 1 <= len(ids) <= 4
    # the selection's wall time is beside the pool, not in it (a pool's bytes are part of its runs' fingerprints)
    assert "wall_s" not in json.loads(out.read_text())
    assert json.loads((tmp_path / "pool.timings.json").read_text())["wall_s"] > 0
    assert not (tmp_path / "run").exists()  # selection writes no run directory


def test_a_pool_stays_valid_when_only_parameters_outside_its_split_differ(tmp_path):
    from llm_harness.tasks import get_task

    _, doc = _select(tmp_path)
    path = write_pool(tmp_path / "pool.json", doc)
    base = dict(doc["task_params"])
    task = get_task(doc["task"], **base)
    outside = task.params_outside("train")
    assert {"n_test", "n_validation", "n_hard"} <= outside and "n_train" not in outside and "seed" not in outside
    # what the exemption rests on: those parameters really leave the training split's problems as they are
    changed = {**base, "n_test": 1_500, "n_validation": 40, "n_hard": 7, "hard_min_terms": 8, "hard_max_terms": 8}
    assert get_task(doc["task"], **changed).problems("train") == task.problems("train")
    assert load_pool(path, task=doc["task"], task_params=changed, split="train", params_outside=outside) == doc["ids"]
    with pytest.raises(ValueError, match="task.params"):  # without the exemption the same change is refused
        load_pool(path, task=doc["task"], task_params=changed, split="train")
    with pytest.raises(ValueError, match="task.params"):  # a parameter of the split itself still counts
        load_pool(path, task=doc["task"], task_params={**base, "seed": 1}, split="train", params_outside=outside)
    # the test split's own sizes are not outside it, and a longer test split extends the shorter one
    assert "n_test" not in task.params_outside("test")
    longer = get_task(doc["task"], **{**base, "n_test": 2 * task.config.n_test}).problems("test")
    assert longer[: task.config.n_test] == task.problems("test")
