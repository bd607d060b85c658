"""The front door: the README's five-minute tour runs as typed on this checkout (every command of its code block, outputs under a
temporary folder instead of ``runs/tour``), and the README, docs/ and figures/README.md link only to existing paths."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def tour_commands() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## A five-minute tour", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block, "the README's tour has no bash block"
    return [line.split("  #")[0].strip() for line in block.group(1).splitlines() if line.strip()]


def test_the_tour_is_short_and_uses_the_installed_command():
    cmds = tour_commands()
    assert 5 <= len(cmds) <= 12 and all(c.startswith(".venv/bin/vsr ") for c in cmds)
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 150


@pytest.mark.slow
@pytest.mark.parametrize("cmd", tour_commands())
def test_tour_command_runs_as_typed(cmd, tmp_path):
    args = shlex.split(cmd.replace("runs/tour", str(tmp_path)))
    args[0] = str(Path(sys.executable).with_name("vsr"))  # the vsr of the interpreter running the tests
    env = {**os.environ, "VSR_NO_PROGRESS": "1"}
    p = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, f"{cmd}\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}"


def test_relative_links_of_the_front_door_resolve():
    """README.md, docs/*.md and figures/README.md: every relative link names an existing path."""
    files = [ROOT / "README.md", ROOT / "figures" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    bad = []
    for f in files:
        for m in re.finditer(r"\]\(([^)#\s]+)(#[^)]*)?\)", f.read_text(encoding="utf-8")):
            target = m.group(1)
            if not target.startswith(("http://", "https://", "mailto:")) and not (f.parent / target).exists():
                bad.append(f"{f.relative_to(ROOT)}: {target}")
    assert not bad, bad
    assert len(files) >= 7
