"""Repository layout rules that the test runner relies on."""

from __future__ import annotations

import re
import subprocess
from collections import Counter
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent


def test_test_module_basenames_are_unique():
    # the test folders have no __init__.py (rootdir-relative imports): two test modules with one
    # basename make pytest's collection fail with "import file mismatch"
    names = Counter(p.name for p in TESTS.rglob("test_*.py"))
    assert [n for n, c in names.items() if c > 1] == []


# ------------------------------------------------------------------ no tracker numbers in code or docs

ROOT = TESTS.parent
#: the files a reader reads: code, configs, scripts and notes (run data — JSON, CSV, records — is not scanned)
TEXT_SUFFIXES = (".py", ".md", ".yaml", ".yml", ".toml", ".sh")
#: folders that hold data written by code (a comparison record keeps its run's files as they were written)
DATA_PARTS = {"records"}
#: a reference to this project's issue tracker — the word issue or issues (any case), then a number, with a space, a
#: "#" or a "-" between (examples in the test below) — which a reader of the code cannot follow; not "/issues/123" in
#: a URL, nor "#123" alone
TRACKER = re.compile(r"(?<![\w/#.-])[Ii]ssues?[ -]?#?\d")
#: the words before it that make it a citation of another project's tracker ("vllm issue 1234",
#: "ms-swift's issue 10106", "huggingface/trl issue 321", "GitHub issue 99", "upstream issue 7")
EXTERNAL = re.compile(
    r"(?:\b(?:github|gitlab|upstream|vllm|verl|verl-agent|trl|transformers|torch|pytorch|numba|numpy|scipy|ray|hydra"
    r"|ms-swift|swift|minigrid|gymnasium|reasoning-gym|datasets|accelerate|deepspeed|peft|llvm|cpython|python|pytest"
    r"|hypothesis|mkdocs|mkdocstrings|sphinx|triton|flash-attn|safetensors|tokenizers|matplotlib)"
    r"|[\w.-]+/[\w.-]+)(?:'s)?\s+$",
    re.IGNORECASE,
)


def tracker_references(line: str) -> list[str]:
    """The references to this project's issue tracker in ``line`` (other projects' issues are citations)."""
    return [m.group(0) for m in TRACKER.finditer(line) if not EXTERNAL.search(line[: m.start()])]


def _text_files() -> list[str]:
    """Tracked files and those git would track (untracked, not ignored) with a :data:`TEXT_SUFFIXES` suffix or
    named ``Makefile``, outside :data:`DATA_PARTS`, as paths relative to the repository root."""
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                             capture_output=True, check=True).stdout.decode("utf-8")
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    paths = sorted({p for p in out.split("\0") if p})
    return [p for p in paths
            if (p.endswith(TEXT_SUFFIXES) or Path(p).name == "Makefile") and not DATA_PARTS & set(Path(p).parts)
            and (ROOT / p).is_file()]


def test_tracker_pattern_spares_citations_of_other_projects():
    issue = "issue"  # spelled apart so that this file holds no reference itself
    for text in (f"({issue} 4 item 3)", f"{issue}s 6 and 20", f"{issue.title()} 14 asks", f"{issue} #7", f"{issue}-41 trial",
                 f"{issue}s 49/50", f"the audit behind {issue} 37"):
        assert tracker_references(text), text
    for text in (f"vllm {issue} 1234", f"ms-swift's {issue} 10106", "ms-swift #10106", f"huggingface/trl {issue} 321",
                 f"GitHub {issue} 99", "https://github.com/vllm-project/vllm/issues/1234", f"the {issue}'s target",
                 f"{issue} slots", "tissue 3"):
        assert not tracker_references(text), text


def test_no_issue_tracker_numbers_in_code_or_docs():
    """Code, configs, scripts and notes say what they mean without a tracker number: cite the papers, a README
    section or the module that holds the reasoning instead (the issue tracker is not part of the repository)."""
    hits = []
    for rel in _text_files():
        text = (ROOT / rel).read_text(encoding="utf-8", errors="replace")
        hits += [f"{rel}:{no}: {line.strip()[:120]}" for no, line in enumerate(text.splitlines(), 1)
                 if tracker_references(line)]
    assert hits == [], "issue-tracker numbers in code or docs:\n" + "\n".join(hits)
