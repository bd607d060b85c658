"""Seed × problem intervals in a report: the runs' per-problem outcomes (``done.json['eval_outcomes']``) pair by seed
and problem; runs without them, or evaluated on other problems, are left out and said to be."""

from __future__ import annotations

import csv
import hashlib
import json
from types import SimpleNamespace

import numpy as np
import pytest

from llm_harness.compare.jobs import Job
from llm_harness.compare.runner import _eval_outcomes
from llm_harness.compare.sections import load_sections
from llm_harness.compare.suite import SUITES
from theory.metrics import crossed_contrast


def _job(tmp_path, method, seed, correct, ids=None, k=8, step=100):
    d = tmp_path / method / f"seed{seed}"
    d.mkdir(parents=True)
    ids = ids or [f"p{i}" for i in range(len(correct))]
    (d / "eval_outcomes.json").write_text(json.dumps({"format": 1, "step": step, "k": k, "problem_ids": ids, "correct": correct}))
    (d / "done.json").write_text(json.dumps({"method": method, "seed": seed, "eval_outcomes": _eval_outcomes(d / "eval_outcomes.json")}))
    return Job("sparse", method, seed, str(d), {})


def test_eval_outcomes_for_done_json_hash_the_problem_order(tmp_path):
    (tmp_path / "e.json").write_text(json.dumps({"format": 1, "step": 7, "k": 4, "problem_ids": ["a", "b"], "correct": [1, 4]}))
    o = _eval_outcomes(tmp_path / "e.json")
    assert o == {"step": 7, "k": 4, "problems": 2, "problem_ids_sha256": hashlib.sha256(b"a\nb").hexdigest(), "correct": [1, 4]}
    assert _eval_outcomes(tmp_path / "missing.json") is None


def test_crossed_section_pairs_seeds_and_problems(tmp_path):
    section = load_sections().lookup("crossed_intervals", "section")
    suite = SUITES.lookup("prefix_family", "suite")
    rng = np.random.default_rng(0)
    P, k = 30, 8
    ref = {s: rng.integers(0, k + 1, P).tolist() for s in range(4)}
    ps = {s: np.clip(np.asarray(ref[s]) + rng.integers(-1, 3, P), 0, k).tolist() for s in range(4)}
    jobs = [_job(tmp_path, "grpo", s, ref[s]) for s in range(4)] + [_job(tmp_path, "ps", s, ps[s]) for s in range(3)]
    jobs.append(_job(tmp_path, "ps", 3, ps[3], ids=[f"q{i}" for i in range(P)]))  # other problems: not paired
    jobs.append(_job(tmp_path, "pros", 0, ref[0]))  # one seed only: no row
    out = tmp_path / "report"
    out.mkdir()
    lines = section(SimpleNamespace(sizes={"steps": 100}), jobs, {}, suite, out)
    row = next(l for l in lines if l.startswith("| Prefix Sampling"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1:3] == ["3", str(P)]
    d = (np.asarray([ps[s] for s in range(3)], float) - np.asarray([ref[s] for s in range(3)], float)) / k
    c = crossed_contrast(d)
    assert cells[4] == f"{100 * c.mean:+.1f} [{100 * c.ci_low:+.1f}, {100 * c.ci_high:+.1f}]"
    assert not any(l.startswith("| PROS") for l in lines)
    rows = list(csv.DictReader(open(out / "crossed_sparse.csv")))
    assert [r["arm"] for r in rows] == ["ps"] and float(rows[0]["crossed_delta"]) == pytest.approx(c.mean)


def test_runs_without_outcomes_are_named(tmp_path):
    section = load_sections().lookup("crossed_intervals", "section")
    suite = SUITES.lookup("prefix_family", "suite")
    d = tmp_path / "grpo"
    d.mkdir()
    (d / "done.json").write_text(json.dumps({"method": "grpo", "seed": 0}))
    lines = section(SimpleNamespace(sizes={"steps": 100}), [Job("sparse", "grpo", 0, str(d), {})], {}, suite, tmp_path)
    assert any("no run here kept its final evaluation's per-problem outcomes" in l for l in lines)
    # one seed with outcomes is named as such, not as runs without outcomes
    outcomes = {"step": 100, "k": 2, "problems": 2, "problem_ids_sha256": "x", "correct": [1, 2]}
    jobs = []
    for m in ("grpo", "ps"):
        (tmp_path / m).mkdir(exist_ok=True)
        (tmp_path / m / "done.json").write_text(json.dumps({"method": m, "seed": 0, "eval_outcomes": outcomes}))
        jobs.append(Job("sparse", m, 0, str(tmp_path / m), {}))
    lines = section(SimpleNamespace(sizes={"steps": 100}), jobs, {}, suite, tmp_path)
    assert any("fewer than 2 seeds of an arm and the reference kept outcomes" in l for l in lines)
