"""A griffe extension for the API reference: the docstrings' reST cross-reference roles as code.

The toolkit's docstrings name other objects with Sphinx roles (``:class:`~llm_harness.trainer.step.Step```), which
Markdown would show literally, colons and all. Every role becomes a code span of its target (``~`` keeps the last
component, as Sphinx shows it): ``Step``. Nothing else of a docstring changes.
"""

from __future__ import annotations

import re

import griffe

_ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|data|attr|obj|exc|const|ref|doc):`(~?)([^`]+)`")


def plain_roles(text: str) -> str:
    """``text`` with every reST role replaced by a code span of its target."""
    return _ROLE.sub(lambda m: f"`{m.group(2).rsplit('.', 1)[-1] if m.group(1) else m.group(2)}`", text)


class RstRoles(griffe.Extension):
    def on_object(self, *, obj, **kwargs) -> None:
        if obj.docstring is not None:
            obj.docstring.value = plain_roles(obj.docstring.value)
