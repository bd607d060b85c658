"""The code blocks of the documentation's pages, and running one page's blocks in order (``test_recipes.py``).

A fenced block's language decides what happens to it: ``python`` blocks run in one namespace per page, ``bash`` blocks
run with ``bash -euo pipefail``, ``yaml`` blocks must parse, and any other language (``text``, ``console``) is output
shown to the reader and is not run. Two markers, an HTML comment on the line just before the fence (invisible in the
rendered page), change that:

* ``<!-- skip: REASON -->`` — the block is never run (a GPU, a download, an hour-long run); the tests list it with its
  reason;
* ``<!-- needs: MODULE[, MODULE ...] -->`` — the block runs where every module is importable and is listed as not run
  (naming the missing modules) elsewhere.

A page runs in a fresh temporary folder that looks like a checkout: every top-level entry of the repository is a
symbolic link (so ``configs/...``, ``scripts/...``, ``figures/...`` and ``.venv/bin/vsr`` work as in the README), and
whatever the page writes (``runs/``, ``data/``) lands in the folder itself. The blocks run in one child process (a
fresh interpreter: registrations a page makes never reach the test process) that imports this checkout's packages.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"

#: languages whose blocks are executed
RUN_LANGS = ("python", "bash")
#: languages whose blocks are checked: executed, or parsed (the rest are shown output)
CHECKED_LANGS = RUN_LANGS + ("yaml",)
#: languages a block may declare
KNOWN_LANGS = ("python", "bash", "yaml", "text", "console")
#: top-level entries of the repository that a page's folder does not link (what a page writes, or machine state)
NOT_LINKED = {"runs", "site", "build", "dist", "out", "data"}

_FENCE = re.compile(r"^```([A-Za-z0-9_+-]*)[^\n]*\n(.*?)^```[ \t]*$", re.M | re.S)
_MARKER = re.compile(r"^<!--\s*(skip|needs):\s*(.*?)\s*-->\s*$")


@dataclass(frozen=True)
class Block:
    """One fenced code block of a page."""

    page: str
    """The page, relative to ``docs/``."""
    line: int
    """1-based line of its opening fence."""
    lang: str
    """The fence's language."""
    code: str
    """The block's text."""
    skip: str = ""
    """Why it is never run (``<!-- skip: ... -->``), or empty."""
    needs: tuple[str, ...] = ()
    """Modules it needs (``<!-- needs: ... -->``)."""

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    def missing(self) -> tuple[str, ...]:
        """The modules of :attr:`needs` that are not importable here."""
        return tuple(m for m in self.needs if importlib.util.find_spec(m) is None)

    def not_run_reason(self) -> str:
        """Why this block does not run here (empty: it runs, or it is output)."""
        if self.skip:
            return self.skip
        missing = self.missing()
        return f"needs {', '.join(missing)} (not installed here)" if missing else ""


def page_blocks(page: Path) -> list[Block]:
    """The fenced blocks of ``page`` in order, with their markers."""
    text = page.read_text(encoding="utf-8")
    lines = text.splitlines()
    out = []
    for m in _FENCE.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        marker = _MARKER.match(lines[line - 2]) if line >= 2 else None
        skip, needs = "", ()
        if marker and marker.group(1) == "skip":
            skip = marker.group(2)
        elif marker:
            needs = tuple(x.strip() for x in marker.group(2).split(",") if x.strip())
        out.append(Block(str(page.relative_to(DOCS)), line, m.group(1), m.group(2), skip, needs))
    return out


def make_checkout_view(folder: Path) -> None:
    """Fill ``folder`` with links to the repository's top-level entries and ``.venv`` -> this interpreter's prefix."""
    folder.mkdir(parents=True, exist_ok=True)
    for entry in sorted(ROOT.iterdir()):
        if entry.name.startswith(".") or entry.name in NOT_LINKED or entry.name.endswith(".egg-info"):
            continue
        (folder / entry.name).symlink_to(entry)
    (folder / ".venv").symlink_to(Path(sys.prefix))


def page_env() -> dict[str, str]:
    """The environment of a page's child process: this checkout's packages first, this interpreter's scripts on
    ``PATH``, one torch thread, no network, no progress bars' colours."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])])
    env["PATH"] = os.pathsep.join([str(Path(sys.prefix) / "bin"), env.get("PATH", "")])
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", MPLBACKEND="Agg", HF_HUB_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1", PYTHONUNBUFFERED="1", NO_COLOR="1")
    env.pop("VSR_FIGURE_FORMATS", None)
    return env


#: the child process: runs the blocks (JSON on stdin) in order, one namespace for the python blocks; the first
#: failure ends it with exit status 1 after naming the block
DRIVER = r'''
import json, linecache, subprocess, sys, time, traceback
blocks = json.load(sys.stdin)
ns = {"__name__": "__main__"}
for b in blocks:
    where, t0 = f"{b['page']}:{b['line']}", time.perf_counter()
    print(f"=== block {where} ({b['lang']})", flush=True)
    try:
        if b["lang"] == "python":
            name = f"<{where}>"
            linecache.cache[name] = (len(b["code"]), None, b["code"].splitlines(True), name)
            exec(compile(b["code"], name, "exec"), ns)
        elif b["lang"] == "bash":
            p = subprocess.run(["bash", "-euo", "pipefail", "-c", b["code"]], stdout=sys.stdout, stderr=sys.stderr)
            if p.returncode != 0:
                raise RuntimeError(f"bash exited with status {p.returncode}")
        elif b["lang"] == "yaml":
            import yaml
            yaml.safe_load(b["code"])
    except BaseException:
        sys.stdout.flush()
        traceback.print_exc()
        print(f"=== FAILED: block {where}", file=sys.stderr, flush=True)
        sys.exit(1)
    sys.stdout.flush()
    sys.stderr.flush()
    print(f"=== block {where} done in {time.perf_counter() - t0:.1f} s", flush=True)
'''


def run_page(page: Path, folder: Path, timeout_s: float) -> tuple[subprocess.CompletedProcess, list[Block]]:
    """Run ``page``'s blocks that run here (module doc) in order in the fresh folder ``folder``; returns the child
    process and those blocks. The child's output interleaves block markers, the blocks' own output and timings."""
    blocks = [b for b in page_blocks(page) if b.lang in CHECKED_LANGS and not b.not_run_reason()]
    make_checkout_view(folder)
    p = subprocess.run([sys.executable, "-c", DRIVER], input=json.dumps([asdict(b) for b in blocks]), cwd=folder,
                       env=page_env(), capture_output=True, text=True, timeout=timeout_s)
    return p, blocks
