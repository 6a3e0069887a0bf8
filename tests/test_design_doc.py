"""References to the design document stay true: ``docs/design.md`` keeps its numbered sections
(1 Semantics, 2 Architecture with 2.1 and 2.2, 3 Artifacts, 4 Interfaces, 5 Policies), and every
reference to it in the package, the tests, the README, the benchmarks and the jobs (written as
``docs/design.md 2.1``, ``docs/design.md 2.1 step 3``, ``docs/design.md section 3`` or
``docs/design.md 5, "Outputs"``) names a section heading that exists, a numbered step that
section has, and a policy it states. The old form, the bare word DESIGN followed by a section
number, is gone: it named a file that no longer counts."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DESIGN_DOC = ROOT / "docs" / "design.md"
SCANNED = ("bpe_spark", "tests", "bench", "jobs", "docs", "README.md")
SUFFIXES = {".py", ".md", ".txt", ".c", ".h", ".properties", ".conf", ".toml", ".cfg"}

HEADING = re.compile(r"^#{2,4}\s+(\d+(?:\.\d+)*)\.?\s+(?=\S)", re.MULTILINE)
STEP = re.compile(r"^(\d+)\.\s", re.MULTILINE)
POLICY = re.compile(r"^- \*\*([^*]+?)\.?\*\*", re.MULTILINE)

_NUMBER = r"\d+(?:\.\d+)*"
_STEPS = r"(?:\s*,?\s*steps?\s+\d+(?:\s*-\s*\d+)?)?"
_ITEM = rf"(?:sections?\s+)?{_NUMBER}{_STEPS}"
# "docs/design.md 1.4, 2.1 step 3", "``docs/design.md`` (section 2, ...)", "design.md 5, "Outputs""
REFERENCE = re.compile(
    rf"design\.md`*\s*\(?\s*(?P<items>{_ITEM}(?:\s*(?:,|/|\band\b)\s*{_ITEM})*)"
    r'(?:\s*,?\s*"(?P<policy>[A-Z][^"\n]*)")?'
)
ITEM = re.compile(rf"(?:sections?\s+)?(?P<section>{_NUMBER})(?:\s*,?\s*steps?\s+(?P<first>\d+)(?:\s*-\s*(?P<last>\d+))?)?")
BARE = re.compile(r"\bDESIGN(?:\.md)?[\s,]*(?:section\s+|§\s*)?\d")


def outline(text: str) -> dict[str, str]:
    """Each numbered section of the design text -> its body (up to the next heading of any level)."""
    headings = list(HEADING.finditer(text))
    ends = [match.start() for match in headings[1:]] + [len(text)]
    return {match.group(1): text[match.end():end] for match, end in zip(headings, ends)}


def broken_references(text: str, sections: dict[str, str]) -> list[str]:
    """What in ``text`` names a section, step or policy that ``sections`` lacks."""
    broken = []
    for ref in REFERENCE.finditer(text):
        for item in ITEM.finditer(ref.group("items")):
            number = item.group("section")
            if number not in sections:
                broken.append(f"{ref.group(0)!r}: no section {number}")
                continue
            wanted = int(item.group("last") or item.group("first") or 0)
            steps = [int(step) for step in STEP.findall(sections[number])]
            if wanted and wanted not in steps:
                broken.append(f"{ref.group(0)!r}: section {number} has no step {wanted}")
        policy = ref.group("policy")
        if policy is not None:
            last = ITEM.findall(ref.group("items"))[-1][0]
            named = POLICY.findall(sections.get(last, ""))
            if named and policy not in named:
                broken.append(f"{ref.group(0)!r}: section {last} states no policy {policy!r}")
    return broken


def scanned_files() -> list[Path]:
    files = []
    for name in SCANNED:
        path = ROOT / name
        if path.is_file():
            files.append(path)
        elif path.is_dir():
            files.extend(
                p for p in sorted(path.rglob("*"))
                if p.is_file() and p.suffix in SUFFIXES and "__pycache__" not in p.parts
            )
    return files


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")


@pytest.fixture(scope="module")
def sections() -> dict[str, str]:
    assert DESIGN_DOC.is_file(), "docs/design.md is missing"
    return outline(_read(DESIGN_DOC))


def test_the_design_doc_keeps_its_numbered_structure(sections):
    expected = {"1", "1.1", "1.2", "1.3", "1.4", "1.5", "2", "2.1", "2.2", "3", "4", "5"}
    assert expected <= set(sections), f"missing sections: {sorted(expected - set(sections))}"
    assert [int(s) for s in STEP.findall(sections["2.1"])] == list(range(1, 6))
    assert {"Outputs", "Text", "Bad records", "Untrusted files"} <= set(POLICY.findall(sections["5"]))


def test_every_reference_names_a_section_that_exists(sections):
    found = 0
    broken = []
    for path in scanned_files():
        text = _read(path)
        found += sum(1 for _ in REFERENCE.finditer(text))
        broken += [f"{path.relative_to(ROOT)}: {problem}" for problem in broken_references(text, sections)]
    assert found, "no reference to docs/design.md found: the scan is looking in the wrong place"
    assert not broken, "references to docs/design.md that name nothing there:\n" + "\n".join(broken)


def test_no_bare_design_reference_remains():
    stale = [
        f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, match.start()) + 1}: {match.group(0)!r}"
        for path in scanned_files()
        for text in [_read(path)]
        for match in BARE.finditer(text)
    ]
    assert not stale, "write these as docs/design.md N.N:\n" + "\n".join(stale)


def test_the_checks_see_a_broken_reference(sections):
    # spelled through ref(), so that this file's source holds no reference of its own
    def ref(tail: str) -> str:
        return "docs/design.md " + tail

    assert broken_references(f"see {ref('2.1 step 4')} and {ref('section 3')}", sections) == []
    assert broken_references(f'({ref("1.1, 1.2, 2.1 step 2")}) and ({ref(chr(53))}, "Outputs")', sections) == []
    assert broken_references("``docs/design.md`` " + "(section 2, Architecture)", sections) == []
    assert len(broken_references(ref("9.9"), sections)) == 1
    assert len(broken_references(ref("section 7"), sections)) == 1
    assert len(broken_references(ref("1.2, 6.1"), sections)) == 1
    assert len(broken_references(ref("2.1 step 99"), sections)) == 1
    assert len(broken_references(ref('5, "Nowhere"'), sections)) == 1
    assert BARE.search("DESIGN" + " 2.1 step 3") and BARE.search("(DESIGN" + " section 3)")
    assert not BARE.search("the design of 2.1") and not BARE.search(ref("2.1"))
