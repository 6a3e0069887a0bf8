"""The docs' runnable code blocks: a fenced ``bash`` or ``python`` block directly under the line
``<!-- runnable -->`` in the README or any page of ``docs/`` is an example that
``tests/docs/test_runnable_snippets.py`` runs on the bundled sample, so it cannot rot."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
MARK = "<!-- runnable -->"
FENCE = re.compile(r"^```(\w+)\s*$")


@dataclass(frozen=True)
class Snippet:
    page: str  # relative to the repository: README.md, docs/guides/training-on-spark.md
    line: int  # the fence's line, 1-based
    language: str  # bash or python
    code: str

    @property
    def name(self) -> str:
        return f"{self.page}:{self.line}"


def pages() -> list[Path]:
    """The README and every Markdown page of the site."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def snippets(path: Path) -> list[Snippet]:
    """The runnable blocks of one page, in page order. A mark not followed by a fence is an error
    (a mark that silently runs nothing would let an example rot)."""
    lines = path.read_text(encoding="utf-8").split("\n")
    found = []
    for index, line in enumerate(lines):
        if line.strip() != MARK:
            continue
        fence = FENCE.match(lines[index + 1]) if index + 1 < len(lines) else None
        if fence is None or fence.group(1) not in ("bash", "python"):
            raise ValueError(f"{path.relative_to(ROOT)}:{index + 1}: {MARK} must sit directly above "
                             "a ```bash or ```python block")
        end = lines.index("```", index + 2)
        found.append(Snippet(str(path.relative_to(ROOT)), index + 2, fence.group(1),
                             "\n".join(lines[index + 2 : end]) + "\n"))
    return found


def all_snippets() -> dict[str, list[Snippet]]:
    """Each page with runnable blocks -> its blocks (a page's blocks run in order, in one folder:
    a later block may use what an earlier one wrote)."""
    return {str(p.relative_to(ROOT)): s for p in pages() if (s := snippets(p))}
