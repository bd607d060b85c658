"""Layers only import downward: no import cycle between modules, none between packages.

The graph is read from the source (``ast``), imports inside functions included, annotation-only imports
(``if TYPE_CHECKING:``) and a module's import of its own parent package left out (Python runs the parent
first anyway). Packages are the top-level ones and ``llm_harness``'s subpackages/modules; ``vsr_util`` (the
utilities) is below everything and ``vsr`` (the CLI) above everything. Folders are the top-level packages: no
two of them import each other, even through modules that form no cycle.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("vsr_util", "vsr", "theory", "gridworld", "prefixvalue", "llm_harness", "benchmarks")


def _modules() -> dict[str, Path]:
    mods = {}
    for pkg in PACKAGES:
        for p in (ROOT / pkg).rglob("*.py"):
            name = ".".join(p.relative_to(ROOT).with_suffix("").parts)
            mods[name[: -len(".__init__")] if name.endswith(".__init__") else name] = p
    return mods


def _graph() -> dict[str, set[str]]:
    mods = _modules()

    def resolve(name: str) -> str | None:
        while name and name not in mods:
            name = name.rsplit(".", 1)[0] if "." in name else ""
        return name or None

    edges: dict[str, set[str]] = {m: set() for m in mods}
    for m, p in mods.items():
        tree = ast.parse(p.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                node.body = []
        pkg = m if p.name == "__init__.py" else m.rsplit(".", 1)[0]
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = pkg.split(".")[: len(pkg.split(".")) - (node.level - 1)]
                    mod = ".".join(base + ([node.module] if node.module else []))
                else:
                    mod = node.module or ""
                subs = [f"{mod}.{a.name}" for a in node.names if f"{mod}.{a.name}" in mods]
                targets = subs + ([mod] if len(subs) < len(node.names) else [])
            for t in targets:
                r = resolve(t)
                if r and r != m and not m.startswith(r + "."):
                    edges[m].add(r)
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one node (iterative Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


def _unit(m: str) -> str:
    parts = m.split(".")
    if parts[0] == "llm_harness" and len(parts) > 1:
        return ".".join(parts[:2])
    return parts[0]


def test_no_import_cycle_between_modules():
    assert _cycles(_graph()) == []


def test_no_import_cycle_between_packages():
    units: dict[str, set[str]] = defaultdict(set)
    why: dict[tuple[str, str], str] = {}
    for m, ts in _graph().items():
        units[_unit(m)]
        for t in ts:
            if _unit(m) != _unit(t):
                units[_unit(m)].add(_unit(t))
                why.setdefault((_unit(m), _unit(t)), f"{m} -> {t}")
    cycles = _cycles(dict(units))
    detail = [f"{c}: " + "; ".join(why[(a, b)] for a in c for b in c if (a, b) in why) for c in cycles]
    assert cycles == [], "\n".join(detail)


def test_the_shared_utilities_and_theory_import_nothing_above_them():
    edges = _graph()
    for m, ts in edges.items():
        if _unit(m) == "vsr_util":
            assert {_unit(t) for t in ts} <= {"vsr_util"}, m
        if _unit(m) == "theory":
            assert {_unit(t) for t in ts} <= {"vsr_util", "theory"}, m
        if _unit(m) != "vsr":
            assert not any(_unit(x) == "vsr" for x in ts), f"{m} imports the CLI (vsr), which sits above everything"


def test_no_two_folders_import_each_other():
    """Folder level: the top-level packages. A two-way import between folders is refused even when no module-level
    cycle exists (``llm_harness.x -> prefixvalue.y`` and ``prefixvalue.z -> llm_harness.w``)."""
    pairs: dict[tuple[str, str], str] = {}
    for m, ts in _graph().items():
        for t in ts:
            a, b = m.split(".")[0], t.split(".")[0]
            if a != b:
                pairs.setdefault((a, b), f"{m} -> {t}")
    both = sorted((a, b) for (a, b) in pairs if (b, a) in pairs and a < b)
    assert both == [], "; ".join(f"{a} <-> {b} ({pairs[(a, b)]}; {pairs[(b, a)]})" for a, b in both)


def test_the_graph_sees_function_level_imports():
    # a guard on the reader itself: the trainer's loop imports the pool loader inside a method
    assert "llm_harness.trainer.pool" in _graph()["llm_harness.trainer.loop"]


#: ``llm_harness.compare``'s layers, lowest first (the package doc says what each does): a module imports only
#: modules of its own layer or of layers before it
COMPARE_LAYERS: tuple[tuple[str, ...], ...] = (
    ("suite",),
    ("suites_evidence", "suites_agents"),
    ("executors", "stats"),
    ("runs",),
    ("render",),
    ("jobs",),
    ("records",),
    ("sizing",),
    ("sections", "sections.common"),
    ("sections.vsr", "sections.replay", "sections.extra", "sections.agents", "sections.prefix",
     "sections.crossed"),
    ("report",),
    ("runner",),
    ("__main__",),
)


def test_compare_layers_import_only_downward():
    prefix = "llm_harness.compare."
    layer = {f"{prefix}{name}": i for i, names in enumerate(COMPARE_LAYERS) for name in names}
    edges = _graph()
    modules = [m for m in edges if m.startswith(prefix)]
    assert sorted(set(modules) - set(layer)) == [], "a compare module missing from COMPARE_LAYERS"
    upward = [f"{m} -> {t}" for m in modules for t in edges[m] if t in layer and layer[t] > layer[m]]
    assert upward == [], "\n".join(upward)


def test_production_code_imports_no_test_support():
    """The packages never import a module that lives under ``tests/`` (the test folders' helpers, imported there by
    their bare names: ``trainer_support``, ``concentration``, ``gw_oracle`` ...) nor the ``tests`` folder itself."""
    support = {p.stem for p in (ROOT / "tests").rglob("*.py") if not p.name.startswith("test_") and p.name != "conftest.py"}
    found = []
    for m, p in _modules().items():
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            else:
                continue
            found += [f"{m} -> {n}" for n in names if n.split(".")[0] in support | {"tests"}]
    assert found == [], "\n".join(found)
