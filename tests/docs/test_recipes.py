"""The recipes run as written: each page of ``docs/recipes/`` runs its code blocks in order in a fresh folder that
looks like a checkout (``recipe_blocks`` module doc), at tiny sizes on the CPU test bed; blocks marked as not run are
listed, each as a skipped test with its reason (``pytest -ra`` prints them)."""

from __future__ import annotations

import re

import pytest

from recipe_blocks import DOCS, KNOWN_LANGS, RUN_LANGS, page_blocks, run_page

RECIPES = DOCS / "recipes"
#: every recipe page: its name -> marks (``slow``: over ~20 s on two shared cores, measured)
PAGES = {
    "add-a-plugin": [],
    "add-a-suite": [pytest.mark.slow],
    "add-a-task": [],
    "import-a-model": [pytest.mark.slow],
    "run-on-verl": [],
    "read-a-lab-report": [pytest.mark.slow],
}
#: at most this many blocks of all recipes are never run (``<!-- skip: ... -->``): the recipes are meant to run
MAX_SKIPPED = 6
TIMEOUT_S = 480


def test_the_recipes_are_the_pages_of_docs_recipes():
    assert sorted(p.stem for p in RECIPES.glob("*.md")) == sorted(PAGES)


@pytest.mark.parametrize("name", [pytest.param(n, marks=m, id=n) for n, m in PAGES.items()])
def test_recipe_runs_as_written(name, tmp_path):
    p, blocks = run_page(RECIPES / f"{name}.md", tmp_path / "checkout", TIMEOUT_S)
    assert p.returncode == 0, f"recipes/{name}.md failed:\n{(p.stdout + p.stderr)[-6000:]}"
    done = re.findall(r"^=== block (\S+) done in ([0-9.]+) s$", p.stdout, re.M)
    assert [w for w, _ in done] == [b.where for b in blocks] and any(b.lang in RUN_LANGS for b in blocks)
    print(p.stdout)


def _blocks():
    return [b for page in sorted(RECIPES.glob("*.md")) for b in page_blocks(page)]


def _not_run_blocks():
    return [b for b in _blocks() if b.lang in RUN_LANGS and b.not_run_reason()]


@pytest.mark.parametrize("block", [pytest.param(b, id=b.where) for b in _not_run_blocks()])
def test_block_not_run(block):
    """One skipped test per block that does not run here, so the test summary lists them with their reasons."""
    pytest.skip(f"docs/{block.where} ({block.lang}) is not run: {block.not_run_reason()}")


def test_blocks_are_declared_and_few_are_never_run():
    blocks = _blocks()
    assert all(b.lang in KNOWN_LANGS for b in blocks), [(b.where, b.lang) for b in blocks if b.lang not in KNOWN_LANGS]
    skipped = [b for b in blocks if b.skip]
    assert all(len(b.skip) >= 10 for b in skipped), "every skip marker says why"
    assert all(b.lang in RUN_LANGS for b in blocks if b.skip or b.needs), "markers go on blocks that would run"
    assert len(skipped) <= MAX_SKIPPED, [b.where for b in skipped]
    for page in sorted(RECIPES.glob("*.md")):  # every recipe runs code, not only shows it
        assert any(b.lang in RUN_LANGS and not b.skip for b in page_blocks(page)), page.name
