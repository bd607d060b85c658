"""Sizes bounded at the edge of every command, models named in the toolkit's own terms, figures kept out of the
committed folders, and tasks a chat model cannot be scored on refused with the reason.

* every size field is checked when its config is built, naming the field, the value and the limit, before memory or
  time is spent (``vsr compare --seeds``, ``--eval-k``; ``vsr lab --groups``; the default task's ``n_train`` and
  ``max_terms``; the model's ``hidden_size`` / ``num_layers``; ``--run.num-threads``; ``vsr eval --k``; the studies'
  ``--n-continuations``), and ``vsr compare`` reads each config file once per plan;
* ``--quick`` leaves explicit ``--seeds`` / ``--steps`` in force;
* a study or model card whose ``--model`` names nothing says what it could have been (test-bed names, registered
  models), a misspelt test-bed name is pointed at the right one, and an imported folder whose weights changed is
  refused by name wherever it is loaded;
* ``vsr model card`` writes to a run folder unless told otherwise;
* ``step_arith`` (its verifier reads ``A:<n>``, its chat message does not ask for it) is refused for a chat model
  and still runs on the test bed.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from llm_harness.trainer.config import LIMITS
from vsr.cli import main

ROOT = Path(__file__).resolve().parents[2]
MID = ROOT / "llm_harness" / "testbed" / "checkpoints" / "mid"
CHAT_TEMPLATE = ("{% for m in messages %}{{ m['content'] }}{% endfor %}"
                 "{% if add_generation_prompt %}{{ '\\n' }}{% endif %}")


def _refused(build, match: str) -> None:
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match=match):
        build()
    assert time.perf_counter() - t0 < 20  # refused, not attempted (a failure would take minutes or the memory)


# ---------------------------------------------------------------------------- sizes bounded at the edge
def _compare(**kw):
    from llm_harness.compare.jobs import CompareConfig

    return lambda: CompareConfig(**kw)


def _lab(**kw):
    from llm_harness.lab.config import LabConfig

    return lambda: LabConfig(**kw)


def _task(**kw):
    from llm_harness.tasks import get_task

    return lambda: get_task("step_arith", **kw)


def _model(**kw):
    from llm_harness.trainer.config import ModelConfig

    return lambda: ModelConfig(**kw)


def _study(name, **kw):
    import importlib

    mod = importlib.import_module(f"prefixvalue.studies.{name}")
    cls = next(v for k, v in vars(mod).items() if k.endswith("Config") and k != "StudyConfig")
    return lambda: cls(**kw)


@pytest.mark.parametrize("build, match", [
    pytest.param(_compare(seeds=10**8), r"^seeds: must be <= 1000, got 100000000$", id="compare-seeds"),
    pytest.param(_compare(eval_k=100_000), rf"^eval_k: must be <= {LIMITS['validation_k']}, got 100000$", id="compare-eval-k"),
    pytest.param(_compare(workers=10**6), r"^workers: must be <= 1024, got 1000000$", id="compare-workers"),
    pytest.param(_lab(groups=10**9), rf"^groups: must be <= {LIMITS['prompts_per_step']}, got 1000000000$", id="lab-groups"),
    pytest.param(_lab(groups=4096, group_size=4096), r"^groups x group_size: 4096 x 4096 = 16777216 samples", id="lab-product"),
    pytest.param(_task(n_train=10**9), r"^n_train: must be <= 1000000, got 1000000000$", id="task-n-train"),
    pytest.param(_task(max_terms=10**9), r"^max_terms: must be <= 1000, got 1000000000$", id="task-max-terms"),
    pytest.param(_model(num_layers=10**6), r"^num_layers: must be <= 1024, got 1000000$", id="num-layers"),
    pytest.param(_model(hidden_size=10**6), r"^hidden_size: must be <= 65536, got 1000000$", id="hidden-1e6"),
    pytest.param(_model(hidden_size=10**9), r"^hidden_size: must be <= 65536, got 1000000000$", id="hidden-1e9"),
    pytest.param(_model(random_init=True, hidden_size=32_768, num_heads=4, num_layers=8),
                 r"^hidden_size x num_layers: a random model of hidden_size 32768 and 8 layers has about 8.59e\+10 "
                 r"parameters, more than the limit 4e\+09$", id="random-model-parameters"),
    pytest.param(_study("hint_ratio", n_continuations=10**6), r"^n_continuations: must be <= 4096, got 1000000$", id="hint-ratio"),
    pytest.param(_study("failed_prefix", n_continuations=10**9), r"^n_continuations: must be <= 4096", id="failed-prefix"),
    pytest.param(_study("sigma_validation", n_continuations=10**6), r"^n_continuations: must be <= 4096", id="sigma-validation"),
    pytest.param(_study("mte_correlation", n_continuations=10**6), r"^n_continuations: must be <= 4096", id="mte-correlation"),
    pytest.param(_study("prefix_selection", eval_continuations=10**6), r"^eval_continuations: must be <= 4096",
                 id="prefix-selection"),
    pytest.param(_study("hint_ratio", n_problems=10**9), r"^n_problems: must be <= 1000000, got 1000000000$", id="study-problems"),
])
def test_a_huge_size_is_refused_when_the_config_is_built(build, match):
    _refused(build, match)


@pytest.mark.parametrize("k", [10**6, 10**9])
def test_eval_k_is_bounded(k):
    from llm_harness.trainer.config import EvalConfig

    _refused(lambda: EvalConfig(k=k), rf"^k: must be <= {LIMITS['validation_k']}, got {k}$")


def test_thread_counts_are_bounded_by_a_fixed_limit_in_every_command():
    """A fixed 1,024 (not a multiple of this machine's cores): a run's config must validate the same where it resumes.
    Only the configs are built here; 100,000 threads would take the machine down if the bound were missing."""
    from prefixvalue.model_card import CardConfig
    from llm_harness.trainer.config import RunConfig

    assert LIMITS["num_threads"] == 1024
    for build in (lambda: RunConfig(num_threads=100_000), lambda: CardConfig(num_threads=100_000),
                  _study("hint_ratio", num_threads=100_000)):
        _refused(build, r"^num_threads: must be <= 1024, got 100000$")
    assert RunConfig(num_threads=1024).num_threads == 1024


def test_the_cli_refuses_a_huge_size_in_one_message(capsys):
    for argv, msg in ((["compare", "--seeds", "100000000"], "seeds: must be <= 1000, got 100000000"),
                      (["lab", "--groups", "1000000000"], "groups: must be <= 65536, got 1000000000")):
        with pytest.raises(SystemExit) as info:
            main(argv)
        assert info.value.code == 2
        err = capsys.readouterr().err
        assert msg in err and "Traceback" not in err


def test_largest_allowed_task_sizes_still_build():
    from llm_harness.tasks import StepArithConfig, get_task

    assert StepArithConfig(n_train=1_000_000, max_terms=1_000).max_terms == 1_000
    task = get_task("step_arith", n_train=4, n_validation=1, n_test=1, n_hard=1, min_terms=999, max_terms=1_000)
    assert {p.metadata["n_terms"] for p in task.problems("train")} == {999, 1_000}


# ---------------------------------------------------------------------------- vsr compare: planning
def test_compare_plans_reading_each_config_file_once(monkeypatch):
    import llm_harness.compare.suite as suite_mod
    from llm_harness.compare.jobs import CompareConfig, plan_jobs

    calls: list[str] = []
    real = suite_mod.read_mapping
    monkeypatch.setattr(suite_mod, "read_mapping", lambda p, *a: calls.append(Path(p).name) or real(p, *a))
    cfg = CompareConfig(suite="testbed", seeds=25)
    jobs = plan_jobs(cfg)
    suite = suite_mod.SUITES["testbed"]
    assert len(jobs) == 25 * len(suite.regimes) * (len(suite.methods) + 1)
    assert sorted(calls) == sorted({m.config for m in suite.methods})  # once per file, not once per job
    assert len({id(j.mapping) for j in jobs}) == len(jobs)  # every job its own mapping (no shared nested dicts)
    a, b = (j for j in jobs if j.method == "grpo" and j.seed in (0, 1) and j.regime == jobs[0].regime)
    assert a.mapping["task"] is not b.mapping["task"] and a.mapping["seed"] == 0 and b.mapping["seed"] == 1


def test_compare_checks_a_run_config_once_at_planning(monkeypatch):
    """A size the trainer refuses fails the plan once, naming the job, instead of failing in every worker."""
    import llm_harness.compare.jobs as jobs_mod
    from llm_harness.compare.jobs import CompareConfig, plan_jobs

    real = jobs_mod.run_mapping
    monkeypatch.setattr(jobs_mod, "run_mapping",
                        lambda *a, **kw: {**real(*a, **kw), "rollout": {"group_size": 10**6}})
    with pytest.raises(ValueError, match=r"group_size: must be <= 4096, got 1000000"):
        plan_jobs(CompareConfig(suite="testbed", seeds=1))


def test_quick_keeps_explicit_seeds_and_steps():
    from llm_harness.compare.jobs import QUICK_SIZES, CompareConfig, plan_jobs

    cfg = CompareConfig(suite="testbed", quick=True, seeds=2, steps=5, eval_k=4)
    assert cfg.sizes == {**QUICK_SIZES, "seeds": 2, "steps": 5, "eval_k": 4}
    jobs = plan_jobs(cfg)
    assert {j.seed for j in jobs} == {0, 1} and {j.mapping["steps"] for j in jobs} == {5}
    assert {j.mapping["validation"]["k"] for j in jobs} == {4}
    assert CompareConfig(suite="testbed", quick=True).sizes == QUICK_SIZES  # without flags: the smoke sizes


# ---------------------------------------------------------------------------- --model in the toolkit's terms
@pytest.mark.parametrize("model, expect", [
    ("/nonexistent/model-folder", r"^model: no folder '/nonexistent/model-folder'; give a model folder, a test-bed "
                                  r"checkpoint \(low, mid, high\), a registered model \(smollm2-135m-instruct"),
    ("midd", r"^model: 'midd' is neither a model folder nor a known model name; .*\(low, mid, high\).*"
             r"did you mean 'mid'\?$"),
])
def test_a_study_with_a_model_that_names_nothing_says_what_it_could_be(tmp_path, capsys, model, expect):
    import re

    out = tmp_path / "study"
    assert main(["study", "hint-ratio", "--model", model, "--out", str(out), "--quick", "--no-progress"]) == 2
    err = capsys.readouterr().err
    line = err.splitlines()[0].removeprefix("vsr study hint-ratio: error: ")
    assert re.search(expect, line), line
    assert "Repo id" not in err and "connect" not in err and "Traceback" not in err
    assert not (out / "records" / "study.json").exists()  # refused before the folder records this config


def test_model_card_names_the_test_bed_and_registered_models(tmp_path):
    from prefixvalue.model_card import CardConfig, run_card

    with pytest.raises(ValueError, match=r"'hihg' is neither .*\(low, mid, high\).*smollm2-135m-instruct.*did you mean 'high'"):
        run_card(CardConfig(model="hihg", out=str(tmp_path / "card"), progress=False))


@pytest.fixture(scope="module")
def mid_copy(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("models") / "mid-copy"
    shutil.copytree(MID, folder)
    return folder


@pytest.fixture
def imported_mid(mid_copy, tmp_path) -> Path:
    """The test bed's ``mid`` with an import manifest (as ``vsr model import`` leaves a folder)."""
    from llm_harness.models import manifest as mf

    folder = tmp_path / "imported"
    shutil.copytree(mid_copy, folder)
    doc = {"format": mf.FORMAT, "name": "mid-imported",
           "files": {p.name: mf.file_entry(p) for p in sorted(folder.iterdir())},
           "source": {"path": "/nowhere/mid.gguf", "file": "mid.gguf", "sha256": "0" * 64, "bytes": 1, "named_model": None},
           "conversion": {"n_parameters": 1}}
    (folder / mf.MANIFEST).write_text(json.dumps(doc))
    mf._VERIFIED.clear()
    return folder


def _flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def test_a_damaged_imported_folder_is_refused_by_the_studies_the_backend_and_the_test_bed_loader(imported_mid, tmp_path):
    from llm_harness.backends import HFBackend
    from prefixvalue.model_card import resolve_model as card_model
    from llm_harness.testbed.model import load_testbed
    from prefixvalue.engine import resolve_model

    assert resolve_model(str(imported_mid)) == str(imported_mid)  # intact: accepted
    assert card_model(str(imported_mid))[1] == "mid-imported"
    _flip(imported_mid / "model.safetensors")
    damaged = r"does not match its manifest.*model\.safetensors: checksum fails"
    with pytest.raises(ValueError, match=r"^model: .*" + damaged):
        resolve_model(str(imported_mid))
    with pytest.raises(ValueError, match=r"^model: .*" + damaged):
        HFBackend.from_pretrained(str(imported_mid))
    with pytest.raises(ValueError, match=r"^path: .*" + damaged):
        load_testbed(imported_mid)
    with pytest.raises(ValueError, match=r"^model: .*" + damaged):
        card_model(str(imported_mid))


def test_a_model_path_that_is_a_file_or_lacks_config_json_is_named(tmp_path):
    from prefixvalue.engine import resolve_model

    (tmp_path / "weights.gguf").write_bytes(b"GGUF")
    with pytest.raises(ValueError, match=r"weights.gguf' is a file, not a model folder .*vsr model import"):
        resolve_model(str(tmp_path / "weights.gguf"))
    with pytest.raises(ValueError, match=r"is not a saved model folder \(no config.json\)"):
        resolve_model(str(tmp_path))


# ---------------------------------------------------------------------------- vsr model card: default output
def test_model_card_writes_to_a_run_folder_by_default():
    from prefixvalue.model_card import CardConfig

    assert CardConfig().out == str(Path("runs") / "model_card" / "smollm2-135m-instruct")
    assert CardConfig(model="/some/where/my-model/").out == str(Path("runs") / "model_card" / "my-model")
    assert CardConfig(model="mid").out == str(Path("runs") / "model_card" / "mid")
    assert CardConfig(out="figures/real_model/card").out == "figures/real_model/card"  # only when named
    for model in ("smollm2-135m-instruct", "../x", "/", "a b"):
        out = Path(CardConfig(model=model).out)
        assert out.parts[:2] == ("runs", "model_card") and len(out.parts) == 3 and ".." not in out.parts


# ---------------------------------------------------------------------------- a chat model on step_arith
@pytest.fixture(scope="module")
def chat_mid(tmp_path_factory) -> Path:
    """The test bed's ``mid`` whose tokenizer carries a chat template: a chat model, as far as the tasks can tell."""
    folder = tmp_path_factory.mktemp("chat") / "mid-chat"
    shutil.copytree(MID, folder)
    cfg_path = folder / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["chat_template"] = CHAT_TEMPLATE
    cfg_path.write_text(json.dumps(cfg))
    return folder


REASON = r"task: 'step_arith' cannot be scored on a chat model .*'A:<integer>'.*arith_ladder"


def test_step_arith_is_refused_for_a_chat_model_and_kept_for_the_test_bed(chat_mid):
    from transformers import AutoTokenizer

    from llm_harness.tasks import get_task
    from llm_harness.tasks.base import has_chat_template
    from llm_harness.tasks.coverage import check_answer_format
    from llm_harness.trainer.modeling import ALPHABETS, CharTokenizer

    task = get_task("step_arith", n_train=4, n_validation=1, n_test=1, n_hard=1)
    chat = AutoTokenizer.from_pretrained(chat_mid)
    assert has_chat_template(chat)
    with pytest.raises(ValueError, match=REASON + r".*instruction="):
        check_answer_format(task, chat)
    check_answer_format(task, AutoTokenizer.from_pretrained(MID))  # the test bed: no chat template
    check_answer_format(task, CharTokenizer(ALPHABETS["arith"]))
    check_answer_format(task, None)
    check_answer_format(get_task("arith_ladder", n_test=2), chat)  # a task whose prompt asks for the answer
    told = get_task("step_arith", n_train=4, n_validation=1, n_test=1, n_hard=1,
                    instruction="Solve step by step; end with a line A:<answer>.")
    check_answer_format(told, chat)  # the instruction states the format
    p = told.problems("test")[0]
    assert told.messages(p)[0]["content"].endswith("end with a line A:<answer>.")
    assert told.plain_prompt(p) == task.plain_prompt(p)  # the test bed's prompt unchanged


def test_eval_and_study_refuse_step_arith_on_a_chat_model(chat_mid, tmp_path, capsys):
    # asked for explicitly (without --task a chat model gets the ladder: vsr.vocabulary's model defaults)
    assert main(["eval", "--model", str(chat_mid), "--task", "step_arith", "--n-problems", "2", "--k", "1",
                 "--out", str(tmp_path / "eval")]) == 2
    err = capsys.readouterr().err
    assert "cannot be scored on a chat model" in err and "A:<integer>" in err
    assert not (tmp_path / "eval" / "eval.json").exists()
    out = tmp_path / "study"
    assert main(["study", "hint-ratio", "--model", str(chat_mid), "--task", "step_arith", "--out", str(out), "--quick",
                 "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "cannot be scored on a chat model" in err
    assert not (out / "records" / "chunks").exists()
    # nothing was computed, so the folder takes the corrected run (no --overwrite needed)
    from prefixvalue.store import ChunkStore

    ChunkStore(out, "hint-ratio", {"model": "mid"})
