"""The command-line reference page, generated from the parsers: ``docs/reference/cli.md`` holds the
marker ``<!-- cli-reference -->``, which this MkDocs hook replaces with ``bpe-spark --help`` and
every command's ``--help`` (argparse's own text, at a fixed width), so the page cannot drift from
the options the commands take."""

from __future__ import annotations

import contextlib
import io
import os

MARKER = "<!-- cli-reference -->"
WIDTH = "100"


def _help(parser) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        parser.print_help()
    return out.getvalue().rstrip()


def render() -> str:
    """The reference's Markdown: the top-level help, then one section per command."""
    os.environ["COLUMNS"] = WIDTH  # argparse wraps at $COLUMNS: the page is the same on any terminal
    from bpe_spark.cli import COMMANDS, build_parser

    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices  # noqa: SLF001 - argparse keeps them there
    parts = ["## bpe-spark", "", "```text", _help(parser), "```"]
    for command in COMMANDS:
        parts += ["", f"## bpe-spark {command.NAME}", "", command.SUMMARY, "",
                  "```text", _help(commands[command.NAME]), "```"]
    return "\n".join(parts) + "\n"


def on_page_markdown(markdown: str, page, config, files) -> str:  # noqa: ARG001 - MkDocs' hook signature
    if MARKER in markdown:
        return markdown.replace(MARKER, render())
    return markdown
