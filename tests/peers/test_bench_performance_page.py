"""The performance page (bench/performance_page.py): docs/performance.md is a fresh render of the
stored results and notes, a run publishes only its own cases, and ``--quick`` never publishes.
No benchmark runs here: the runs are fakes."""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict

import pytest

from bench import performance_page as page
from bench import run


def _row(case: str, ours: float, note: str = "") -> run.Row:
    return run.Row(case, f"metric of {case}", ours, 2.0, "peer", "s", ours / 2.0, "<= 1.0", ours <= 2.0, True,
                   note=note)


def _record(rows, *, quick: bool = False, command: str = "python -m bench.run --cases T3,T4") -> dict:
    return {"command": command, "started": "2026-12-07 03:00:00", "quick": quick, "repeat": 3,
            "machine": {"cpus": 2, "cpu": "AMD EPYC", "python": "3.11.7", "load_average": [1.0, 1.0, 1.0]},
            "rows": [asdict(row) for row in rows]}


@pytest.fixture()
def stored(tmp_path):
    """A copy of the repository's stored results, to publish into."""
    folder = tmp_path / "results"
    shutil.copytree(page.STORED, folder)
    return folder


def test_the_page_in_the_repository_is_a_fresh_render():
    # a hand edit of docs/performance.md fails here: run `python -m bench.performance_page`
    assert page.PAGE.read_text(encoding="utf-8") == page.render(), \
        "docs/performance.md is generated: edit bench/notes/ or bench/results/, then python -m bench.performance_page"
    assert page.main(["--check"]) == 0


def test_rendering_is_deterministic_and_follows_the_groups(stored):
    first = page.render(stored)
    assert first == page.render(stored) == page.render(page.STORED)
    headings = [line for line in first.splitlines() if line.startswith("## ")]
    assert headings == [f"## {heading}" for _, heading, _ in page.GROUPS]
    assert "must not be edited by hand" in first.splitlines()[2]
    # every stored case is on the page, and every stored result names its command (or how it was measured)
    for case, result in page.load_stored(stored).items():
        assert any(case in cases for _, _, cases in page.GROUPS), case
        assert f"Command: `{result['command']}`" in first if "command" in result else f"Measured {result['how']}" in first


def test_publish_replaces_only_the_cases_of_the_run(stored, tmp_path):
    before = page.load_stored(stored)
    target = tmp_path / "performance.md"
    done = page.publish(_record([_row("T3", 0.5, note="fake engine"), _row("T4", 0.1)]), ["T3", "T4", "T5"],
                        stored=stored, page=target)
    assert done == ["T3", "T4"]  # T5 ran no rows here: it keeps its stored result
    after = page.load_stored(stored)
    assert {case for case in after if after[case] != before[case]} == {"T3", "T4"}
    assert after["T3"]["rows"][0]["note"] == "fake engine" and after["T3"]["command"].endswith("T3,T4")
    text = target.read_text(encoding="utf-8")
    assert text == page.render(stored)
    assert "| T3 | metric of T3 | 0.500 s | peer | 2.000 s | 0.25 | <= 1.0 | ok |" in text
    assert "- T3: fake engine" in text
    with pytest.raises(ValueError):
        page.publish(_record([_row("T3", 0.5)], quick=True), ["T3"], stored=stored, page=target)


def test_stored_markdown_is_printed_as_is_and_a_run_replaces_it_with_rows(stored, tmp_path):
    target = tmp_path / "performance.md"
    markdown = page.load_stored(stored)["E5"]["markdown"]
    assert markdown.strip() in page.render(stored)
    page.publish(_record([_row("E5", 1.5)], command="python -m bench.run --cases E5"), ["E5"],
                 stored=stored, page=target)
    text = target.read_text(encoding="utf-8")
    assert markdown.strip() not in text and "| E5 | metric of E5 | 1.500 s |" in text
    page.publish_markdown("cluster", "python -m bench.cluster", "2026-12-07 03:00:00", {"cpus": 2},
                          "| setup | median |\n|---|---:|\n| `local[2]` | 1.0 s |\n", stored=stored, page=target)
    assert "| `local[2]` | 1.0 s |" in target.read_text(encoding="utf-8")


def _fake_run(monkeypatch, tmp_path, stored, argv):
    target = tmp_path / "performance.md"
    calls = []
    original = page.publish  # bench.run's performance_page is this module: keep the real one

    def fake_case(ctx):
        ctx.add(_row("T4", 0.1))

    def failing_case(ctx):
        raise run.BenchError("no peer here")

    def publish(data, cases, **kwargs):
        calls.append(list(cases))
        return original(data, cases, stored=stored, page=target)

    monkeypatch.setattr(run, "ROOT", tmp_path)
    monkeypatch.setattr(run, "RESULTS", tmp_path / "bench-results")
    monkeypatch.setattr(run, "describe_machine", lambda: {"cpus": 2, "cpu": "", "python": "3.11.7"})
    monkeypatch.setitem(run.CASE_FUNCTIONS, "T4", fake_case)
    monkeypatch.setitem(run.CASE_FUNCTIONS, "T3", failing_case)
    monkeypatch.setattr(run.performance_page, "publish", publish)
    status = run.main(argv)
    return status, calls


def test_quick_and_no_publish_never_publish(monkeypatch, tmp_path, stored):
    before = page.load_stored(stored)
    for argv in (["--cases", "T4", "--quick"], ["--cases", "T4", "--no-publish"]):
        status, calls = _fake_run(monkeypatch, tmp_path, stored, argv)
        assert status == 0 and calls == []
        assert page.load_stored(stored) == before
        assert json.loads((tmp_path / "bench-results" / "latest.json").read_text())["rows"][0]["case"] == "T4"


def test_a_run_publishes_its_cases_but_a_failed_one(monkeypatch, tmp_path, stored):
    before = page.load_stored(stored)
    status, calls = _fake_run(monkeypatch, tmp_path, stored, ["--cases", "T3,T4"])
    assert status == 1 and calls == [["T4"]]  # T3 could not run: it keeps its stored result
    after = page.load_stored(stored)
    assert after["T3"] == before["T3"]
    assert after["T4"]["command"] == "python -m bench.run --cases T3,T4" and after["T4"]["rows"][0]["ours"] == 0.1
