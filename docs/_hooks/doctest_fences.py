"""A Griffe extension for the API reference: the docstrings' doctest examples (``>>>`` lines and
their output, run by ``tests/test_doctests.py``) become fenced ``pycon`` blocks, so the site shows
them as code rather than reading ``['a', 'b']`` as Markdown links; Sphinx roles
(``:func:`train```) become inline code."""

from __future__ import annotations

import re

import griffe

ROLE = re.compile(r":(?:mod|func|class|meth|data|attr|exc|obj):`~?([^`]+)`")


def fence_doctests(text: str) -> str:
    """``text`` with every run of doctest lines (a ``>>>`` line, its ``...`` continuations and its
    output, up to a blank line) wrapped in a fenced block."""
    out: list[str] = []
    inside = False
    indent = ""
    for line in text.split("\n"):
        stripped = line.lstrip()
        if not inside and stripped.startswith(">>>"):
            indent = line[: len(line) - len(stripped)]
            out.append(f"{indent}```pycon")
            inside = True
        elif inside and not stripped:
            out.append(f"{indent}```")
            inside = False
        out.append(line)
    if inside:
        out.append(f"{indent}```")
    return "\n".join(out)


class DoctestFences(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs) -> None:  # noqa: ARG002 - Griffe's hook
        if obj.docstring is not None:
            obj.docstring.value = fence_doctests(ROLE.sub(r"``\1``", obj.docstring.value))
