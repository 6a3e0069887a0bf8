"""How ``bpe-spark`` parses its command line: the strict parser every command gets (no
abbreviated options; an unknown option or a misspelt choice or command is a one-line error, with
the nearest known one, under the usage of the command it was given to) and ``--version``
(bpe-spark's, with Python's, pyspark's and Java's, read without starting a JVM).
"""

from __future__ import annotations

import argparse
import difflib
import sys
from collections.abc import Iterable


def nearest(given: str, known: Iterable[str]) -> str | None:
    """The known name closest to a misspelt one (None: none is close).

    >>> nearest("--vocab-siz", ["--vocab-size", "--verbose", "--out"])
    '--vocab-size'
    >>> nearest("trian", ["train", "count", "encode"])
    'train'
    >>> nearest("--zzz", ["--out"]) is None
    True
    """
    found = difflib.get_close_matches(given, list(known), n=1, cutoff=0.6)
    return found[0] if found else None


def did_you_mean(given: str, known: Iterable[str]) -> str:
    """``"; did you mean --vocab-size?"`` for a misspelt name, or ``""``."""
    found = nearest(given, known)
    return f"; did you mean {found}?" if found else ""


class Parser(argparse.ArgumentParser):
    """An :class:`argparse.ArgumentParser` that takes options only as spelled in full and reports
    an unknown argument itself: a command's parser names the command's options and its own
    ``--help`` (argparse hands a subcommand's unknown arguments up to the top-level parser, which
    would name neither). Every error is one line, without argparse's usage block."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs["allow_abbrev"] = False  # --vocab-siz is an error, never --vocab-size
        super().__init__(*args, **kwargs)

    def parse_known_args(self, args=None, namespace=None):
        args = sys.argv[1:] if args is None else list(args)
        unknown = self._first_unknown_option(args)
        if unknown is not None:  # before argparse's own checks: a misspelt --model is no missing --model
            self.error(self.unknown_message([unknown]))
        namespace, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(self.unknown_message(extras))
        return namespace, extras

    def _first_unknown_option(self, args: list[str]) -> str | None:
        """The first argument that argparse would take for an option none of ours is (up to
        ``--``, and up to the command for the top-level parser, whose command parses the rest)."""
        for arg in args:
            if arg == "--" or (self._subparsers is not None and not arg.startswith("-")):
                return None
            if (arg.startswith("-") and arg != "-" and " " not in arg  # argparse takes "-1 2" for a value
                    and not self._negative_number_matcher.match(arg)
                    and arg.split("=", 1)[0] not in self._option_string_actions):
                return arg
        return None

    def error(self, message: str):  # one line, no usage block: the usage is one --help away
        """Print ``prog: error: message (see prog --help)`` on stderr and exit with status 2."""
        hint = f"{self.prog} --help"
        if hint not in message:
            message = f"{message} (see {hint})"
        self.exit(2, f"{self.prog}: error: {message}\n")

    def unknown_message(self, extras: list[str]) -> str:
        """What is wrong with the first unknown argument, and the nearest option to it."""
        first = extras[0]
        if first.startswith("-"):
            spelled = first.split("=", 1)[0]
            known = [s for action in self._actions for s in action.option_strings if s.startswith("--")]
            return f"unknown option {spelled}{did_you_mean(spelled, known)} (see {self.prog} --help)"
        return f"unexpected argument {first!r} (see {self.prog} --help)"

    def _check_value(self, action, value):  # a misspelt choice (or command) names the nearest one
        if action.choices is not None and value not in action.choices:
            choices = [str(choice) for choice in action.choices]
            what = "command" if isinstance(action, argparse._SubParsersAction) else "choice"
            raise argparse.ArgumentError(
                action, f"unknown {what} {value!r}{did_you_mean(str(value), choices)} (choose from {', '.join(choices)})"
            )
        super()._check_value(action, value)


class VersionAction(argparse.Action):
    """``--version``: print :func:`version_line` and exit."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        print(version_line())
        parser.exit()


def version_line() -> str:
    """``bpe-spark 0.1.0 (Python 3.11.9, pyspark 3.5.1, Java 17.0.12)``: from the packages'
    metadata and the JDK's ``release`` file, so no JVM starts (a part not found says so)."""
    import platform
    from importlib import metadata

    from bpe_spark._version import __version__

    try:
        pyspark = metadata.version("pyspark")
    except metadata.PackageNotFoundError:
        pyspark = "not installed"
    return f"bpe-spark {__version__} (Python {platform.python_version()}, pyspark {pyspark}, Java {java_version()})"


def java_version() -> str:
    """The version of the Java that Spark would start ($JAVA_HOME's, else the ``java`` on the
    PATH), from its JDK's ``release`` file."""
    import os
    import shutil
    from pathlib import Path

    home = os.environ.get("JAVA_HOME")
    if not home:
        found = shutil.which("java")
        if found is None:
            return "not found"
        home = str(Path(os.path.realpath(found)).parent.parent)
    try:
        for line in (Path(home) / "release").read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("JAVA_VERSION="):
                return line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    return f"unknown ({home})"

