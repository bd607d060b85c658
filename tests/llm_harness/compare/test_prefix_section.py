"""The prefix family's report section (``prefix_dynamics``) on hand-made runs: per-run means over updates, seeds
counted only where a run finished, the prefix share of generated groups, the CSV and the figure."""

from __future__ import annotations

import csv
import json
from types import SimpleNamespace

import numpy as np
import pytest

from llm_harness.compare.jobs import Job
from llm_harness.compare.sections import load_sections
from llm_harness.compare.suite import SUITES


def _run(folder, rows):
    folder.mkdir(parents=True)
    with open(folder / "metrics.jsonl", "w") as fh:
        for r in rows:
            fh.write(json.dumps(r) + "\n")
    return str(folder)


def test_prefix_dynamics_means_over_updates_then_seeds(tmp_path):
    section = load_sections().lookup("prefix_dynamics", "section")
    suite = SUITES.lookup("prefix_family", "suite")
    steps = 4
    mk = lambda mixed, prefix: [{"step": s, "mixed_frac": mixed[s], "accuracy_fresh": 0.25, "groups_generated": 8.0,
                                 "groups_replayed_prefix": float(prefix[s]), "gen_new_tokens": 100.0 * (s + 1),
                                 "time_step_s": 2.0} for s in range(steps)]
    jobs = [Job("sparse", "ps", 0, _run(tmp_path / "ps0", mk([0.5, 0.5, 0.25, 0.25], [0, 4, 4, 0])), {}),
            Job("sparse", "ps", 1, _run(tmp_path / "ps1", mk([0.25, 0.25, 0.25, 0.25], [2, 2, 2, 2])), {}),
            Job("sparse", "ps", 2, str(tmp_path / "not_run"), {}),  # no metrics: not a seed of the table
            Job("sparse", "grpo", 0, _run(tmp_path / "g0", mk([0.125] * 4, [0] * 4)), {})]
    out = tmp_path / "report"
    out.mkdir()
    lines = section(SimpleNamespace(sizes={"steps": steps}), jobs, {}, suite, out)
    ps = next(l for l in lines if l.startswith("| Prefix Sampling"))
    cells = [c.strip() for c in ps.strip("|").split("|")]
    assert cells[1] == "2"  # two finished seeds
    assert cells[2].startswith("31.2 [")  # mixed: seed means 0.375 and 0.25 -> 31.25 %
    assert cells[4].startswith("25.0 [")  # prefix share: seed means 8/32 = 0.25 and 8/32 = 0.25
    assert cells[5].startswith("250 [")  # tokens: the mean of 100..400
    g = next(l for l in lines if l.startswith("| GRPO"))
    assert [c.strip() for c in g.strip("|").split("|")][2] == "12.5"  # one seed: no interval
    rows = list(csv.DictReader(open(out / "prefix_dynamics_sparse.csv")))
    assert {r["arm"] for r in rows} == {"grpo", "ps"}
    assert float(next(r for r in rows if r["arm"] == "ps")["mixed"]) == pytest.approx(0.3125)
    assert (out / "prefix_mixed_sparse.png").stat().st_size > 0


def test_list_suites_names_every_suite_with_its_arms(capsys):
    from llm_harness.compare.jobs import CompareConfig
    from llm_harness.compare.runner import run

    assert run(CompareConfig(suite="prefix_family", list_suites=True)) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(SUITES)
    pf = next(l for l in lines if l.startswith("prefix_family:"))
    assert "(grpo, dapo, vsr, vsr_policy, ps, ps_hard, pros)" in pf and "11 seeds x 100 updates" in pf
    assert pf.endswith("records shared with vsr_regime")
