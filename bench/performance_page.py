"""The performance page, ``docs/performance.md``, and the stored results it is made from.

This module owns three things:

- the Markdown of a run's rows (the standard table, the machine line, the rows' notes), which
  ``bench.run.write_report`` writes to ``bench-results/`` and the page shows;
- ``bench/results/<CASE>.json``: the latest published (not ``--quick``) run of each case, its rows
  (or, for a record that predates the rows, its table as stored Markdown), command, start and
  machine; :func:`publish` replaces the stored results of the cases a run ran, and
  :func:`publish_markdown` stores a result made of Markdown (``python -m bench.cluster``);
- ``docs/performance.md`` itself: a generated page, never edited by hand. Each section (a group
  of cases, :data:`GROUPS`) gives the command that reproduces its figures, the date and machine,
  the table, then the hand-written note ``bench/notes/<GROUP>.md`` (method and where the time goes).

    python -m bench.performance_page          # re-render the page from the stored results (runs nothing)
    python -m bench.performance_page --check  # exit 1 if the page differs from a fresh render
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STORED = ROOT / "bench" / "results"
NOTES = ROOT / "bench" / "notes"
PAGE = ROOT / "docs" / "performance.md"

# (group, heading, cases): the page's sections in order; a "case" that is no case of bench.run
# (R1-jsonl, cluster) is a stored result of its own, never replaced by a run of bench.run
GROUPS = (
    ("headline", "Against tokenizers, tiktoken and SentencePiece (T1-T7)", ("T1", "T2", "T3", "T4", "T5", "T6", "T7")),
    ("extend", "Extending a production tokenizer (X1)", ("X1",)),
    ("superword", "Superword training (S1, S2)", ("S1", "S2")),
    ("peers", "The fastest peers side by side (P1, P2, W1)", ("P1", "P2", "W1")),
    ("spark-encode", "Spark encode per core (E4)", ("E4",)),
    ("rounds", "Exact rounds (E5)", ("E5",)),
    ("evaluate", "Evaluating tokenizers (V1)", ("V1",)),
    ("scale-speed", "Training speed at scale: 1 GB, 3.7 M distinct pretokens (C1)", ("C1",)),
    ("scale", "Scale: 4 GB, 11 M distinct pretokens (T8)", ("T8",)),
    ("long-documents", "Long documents (R1)", ("R1", "R1-jsonl")),
    ("cluster", "The standalone cluster", ("cluster",)),
)

HEADER = """\
# Performance

This page is written by `make bench` and must not be edited by hand:
`python -m bench.performance_page` renders it again from the stored results in `bench/results/`
without running anything; the method and analysis of each section are in `bench/notes/`.

`make bench` (`python -m bench.run`) runs every case but the long ones (T8, S2, V1 and C1, run only when named)
several times, alternating ours and the peer, and reports medians and the ratio ours / peer, with
wall time and the peak memory of every process involved (the driver's Python, the JVM, Spark's
Python workers). `make bench BENCH_ARGS="--cases T3,T4"` runs a selection; each run that is not
`--quick` (and not `--no-publish`) replaces the stored results of the cases it ran and renders this
page again. `--quick` (each case once, on 4-40 MB inputs) is a smoke test whose ratios mean little,
since fixed costs dominate there: it is never published.

The figures come from a shared 2-core machine whose speed moves with the load of other work:
compare the ratios, taken in the same run, rather than absolute times across sections.
"""


# --- the Markdown of a run's rows (shared with bench.run.write_report) ----------------------------


def _get(row, name: str):
    return row[name] if isinstance(row, dict) else getattr(row, name)


def fmt(value: float | None, unit: str = "") -> str:
    if value is None:
        return "-"
    if unit == "MB/s" or unit == "MB":
        return f"{value:,.1f}"
    return f"{value:.3f}" if value < 10 else f"{value:.1f}"


def status(row) -> str:
    if _get(row, "same_output") is False:
        return "FAIL (different output)"
    if _get(row, "passed") is None:
        return "reference"
    return "ok" if _get(row, "passed") else "MISS"


def console_line(row) -> str:
    """One row as ``make bench`` prints it while it runs."""
    ratio = "-" if _get(row, "ratio") is None else f"{_get(row, 'ratio'):.2f}"
    unit = _get(row, "unit")
    return (
        f"{_get(row, 'case'):3} {_get(row, 'metric'):44} ours {fmt(_get(row, 'ours'), unit):>9} {unit:5} "
        f"{_get(row, 'peer_name'):>22} {fmt(_get(row, 'peer'), unit):>9}  ratio {ratio:>5}  "
        f"{_get(row, 'target'):9} {status(row)}"
    )


def table_lines(rows) -> list[str]:
    """The standard table of rows, then the rows' notes as a list."""
    lines = [
        "| case | metric | ours | peer | peer value | ratio ours/peer | target | status |",
        "|---|---|---:|---|---:|---:|---|---|",
    ]
    for row in rows:
        ratio = "-" if _get(row, "ratio") is None else f"{_get(row, 'ratio'):.2f}"
        unit = f" {_get(row, 'unit')}" if _get(row, "unit") else ""
        lines.append(
            f"| {_get(row, 'case')} | {_get(row, 'metric')} | {fmt(_get(row, 'ours'), _get(row, 'unit'))}{unit} | "
            f"{_get(row, 'peer_name')} | {fmt(_get(row, 'peer'), _get(row, 'unit'))}{unit} | {ratio} | "
            f"{_get(row, 'target') or '-'} | {status(row)} |"
        )
    notes = [f"- {_get(row, 'case')}: {_get(row, 'note')}" for row in rows if _get(row, "note")]
    return lines + (["", *notes] if notes else [])


def machine_line(machine: dict) -> str:
    """``Machine: 2 CPUs (AMD EPYC), Python 3.11.7, tokenizers ...; load average at start 0.9``,
    from the fields the record holds."""
    parts = []
    if machine.get("cpus"):
        parts.append(f"{machine['cpus']} CPUs" + (f" ({machine['cpu']})" if machine.get("cpu") else ""))
    if machine.get("python"):
        parts.append(f"Python {machine['python']}")
    parts += [f"{name} {machine[name]}" for name in ("tokenizers", "tiktoken", "pyspark", "sentencepiece")
              if name in machine]
    text = ", ".join(parts)
    if "compiled_engine" in machine:
        text += f"; compiled engine: {'yes' if machine['compiled_engine'] else 'no'}"
    if machine.get("load_average"):
        text += f"; load average at start {machine['load_average'][0]:.1f}"
        if machine.get("load_average_end"):
            text += f", at the end {machine['load_average_end'][0]:.1f}"
    if machine.get("conditions"):
        text += f"; {machine['conditions']}"
    return "Machine: " + text.lstrip("; ")


def describe_machine() -> dict:
    """The machine a run measures on: its record's ``machine`` (:func:`machine_line` prints it)."""
    versions = {}
    for module in ("tokenizers", "tiktoken", "pyspark", "sentencepiece"):
        try:
            versions[module] = __import__(module).__version__
        except Exception:  # noqa: BLE001 - a missing peer is reported, not fatal here
            versions[module] = None
    from bpe_spark.training.engine import compiled_core_available

    cpu = ""
    try:
        cpu = next(
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        )
    except (OSError, StopIteration):
        pass
    return {
        "cpu": cpu,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "load_average": os.getloadavg() if hasattr(os, "getloadavg") else None,
        "compiled_engine": compiled_core_available(),
        **versions,
    }


def run_markdown(command: str, quick: bool, repeat: int, machine: dict, rows) -> str:
    """The Markdown report of one run (``bench-results/bench-<time>.md``)."""
    how = "quick: each case once, smaller inputs" if quick else f"{repeat} runs per side, medians"
    lines = [f"Command: `{command}` ({how})", "", machine_line(machine), "", *table_lines(rows)]
    return "\n".join(lines) + "\n"


# --- the stored results ------------------------------------------------------------------------


def stored_path(case: str, stored: Path | None = None) -> Path:
    return (stored or STORED) / f"{case}.json"


def load_stored(stored: Path | None = None) -> dict[str, dict]:
    folder = stored or STORED
    return {path.stem: json.loads(path.read_text(encoding="utf-8")) for path in sorted(folder.glob("*.json"))}


def about(case: str) -> str:
    """The opening field of a stored result: what the file holds and who writes it."""
    return (f"the latest published run of {case}, written by bench/performance_page.py (make bench) and rendered "
            "into docs/performance.md; never edited by hand")


def _write_json(path: Path, record: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {"about": about(record["case"]), **record}
    path.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def publish(data: dict, cases, *, stored: Path | None = None, page: Path | None = None) -> list[str]:
    """Store the rows of ``cases`` from one run's record (``write_report``'s JSON) as each case's
    latest result, replacing what was stored, and render the page again. A case with no rows in
    the record keeps its stored result. Returns the cases stored."""
    if data.get("quick"):
        raise ValueError("a --quick run is never published")
    done = []
    for case in cases:
        rows = [row for row in data["rows"] if row["case"] == case]
        if not rows:
            continue
        record = {key: data[key] for key in ("command", "started", "quick", "repeat", "machine") if key in data}
        _write_json(stored_path(case, stored), {"case": case, **record, "rows": rows})
        done.append(case)
    write_page(stored=stored, page=page)
    return done


def publish_markdown(case: str, command: str, started: str, machine: dict, markdown: str, *,
                     stored: Path | None = None, page: Path | None = None) -> None:
    """Store a result whose table is Markdown of its own (``python -m bench.cluster``) and render
    the page again."""
    _write_json(stored_path(case, stored), {"case": case, "command": command, "started": started,
                                            "machine": machine, "markdown": markdown})
    write_page(stored=stored, page=page)


# --- the page ----------------------------------------------------------------------------------


def _blocks(results: list[dict]) -> list[list[dict]]:
    """The stored results of a section grouped by the run they come from (command and start),
    in the section's order of cases."""
    blocks: dict[tuple, list[dict]] = {}
    for result in results:
        blocks.setdefault((result.get("command") or result.get("how"), result.get("started")), []).append(result)
    return list(blocks.values())


def _block_lines(block: list[dict]) -> list[str]:
    first = block[0]
    if first.get("command"):
        how = f"Command: `{first['command']}`" + (f" ({first['repeat']} runs per side, medians)"
                                                  if first.get("rows") and first.get("repeat") else "")
    else:  # a record no command reproduces yet says how it was measured
        how = f"Measured {first.get('how') or '(unknown)'}"
    lines = [how, "",
             f"Run {first.get('started') or '?'}. {machine_line(first.get('machine') or {})}", ""]
    rows = [row for result in block for row in result.get("rows", [])]
    if rows:
        lines += [*table_lines(rows), ""]
    for result in block:
        if result.get("markdown"):
            lines += [result["markdown"].strip("\n"), ""]
    return lines


def _note_text(path: Path) -> str:
    """A note without its opening ``<!-- what this file owns -->`` comment."""
    text = path.read_text(encoding="utf-8").strip("\n")
    if text.startswith("<!--"):
        text = text[text.index("-->") + 3:].strip("\n")
    return text


def render(stored: Path | None = None, notes: Path | None = None) -> str:
    """The whole page from the stored results and the notes: the same inputs, the same text."""
    results = load_stored(stored)
    lines = [HEADER.rstrip("\n"), ""]
    for group, heading, cases in GROUPS:
        lines += [f"## {heading}", ""]
        found = [results[case] for case in cases if case in results]
        if not found:
            lines += [f"No stored result yet: `python -m bench.run --cases {','.join(cases)}`.", ""]
        for block in _blocks(found):
            lines += _block_lines(block)
        note = (notes or NOTES) / f"{group}.md"
        if note.is_file():
            lines += [_note_text(note), ""]
    return "\n".join(lines).rstrip("\n") + "\n"


def write_page(stored: Path | None = None, page: Path | None = None) -> Path:
    target = page or PAGE
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(render(stored), encoding="utf-8")
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.performance_page", description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/performance.md differs from a fresh render")
    args = parser.parse_args(argv)
    if args.check:
        fresh = render()
        if not PAGE.is_file() or PAGE.read_text(encoding="utf-8") != fresh:
            print(f"{PAGE.relative_to(ROOT)} differs from a fresh render: python -m bench.performance_page",
                  file=sys.stderr)
            return 1
        return 0
    print(f"wrote {write_page().relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
