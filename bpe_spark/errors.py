"""Exceptions raised by bpe-spark, and how their messages name an option. Every message says
what was wrong, where, and what to do, in the words of the interface in use: a message names an
option through :func:`option_name` / :func:`option`, which spell it as the Python API does
(``overwrite=True``, ``text_col=``) unless the command line is running (``--overwrite``,
``--text-column``: :func:`bpe_spark.cli.main` runs under ``interface("cli")``). The interface is
read when the message is built, so a message built in a Spark task is built on the driver first.
"""

from __future__ import annotations

import contextlib
import functools
import shlex
from collections.abc import Callable, Iterator
from contextvars import ContextVar

INTERFACES = ("python", "cli")
_INTERFACE: ContextVar[str] = ContextVar("bpe_spark_interface", default=INTERFACES[0])
# the command-line spelling of the Python names that are not just the name with dashes
CLI_NAMES = {"text_col": "--text-column", "id_cols": "--id-column", "special_tokens": "--special-token",
             "fmt": "--format", "export_format": "--format", "base": "--extend"}
_NO_VALUE = object()


@contextlib.contextmanager
def interface(name: str) -> Iterator[None]:
    """Build messages in the words of ``name`` (``"python"`` or ``"cli"``) inside the block."""
    if name not in INTERFACES:
        raise ValueError(f"interface must be one of {INTERFACES}, got {name!r}")
    token = _INTERFACE.set(name)
    try:
        yield
    finally:
        _INTERFACE.reset(token)


def speaks_cli(func: Callable) -> Callable:
    """``func`` (a command line's ``main``) runs under ``interface("cli")``."""
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        with interface("cli"):
            return func(*args, **kwargs)
    return wrapper


def current_interface() -> str:
    """The interface whose words messages use now: ``"python"`` or ``"cli"`` (a Spark task's
    closure takes the driver's, and builds its messages under it, see :func:`interface`)."""
    return _INTERFACE.get()


def in_cli() -> bool:
    """Whether messages are built for the command line."""
    return _INTERFACE.get() == "cli"


def option_name(name: str) -> str:
    """An option (its Python name) as the interface in use names it.

    >>> option_name("text_col"), option_name("eos_token")
    ('text_col', 'eos_token')
    >>> with interface("cli"):
    ...     option_name("text_col"), option_name("eos_token")
    ('--text-column', '--eos-token')
    """
    return CLI_NAMES.get(name, "--" + name.replace("_", "-")) if in_cli() else name


def option(name: str, value: object = _NO_VALUE) -> str:
    """An option given a value, as a user of the interface in use would write it; without a
    value, the option to give (``text_col=``, ``--text-column``).

    >>> option("overwrite", True), option("on_bad_input", "skip"), option("text_col")
    ('overwrite=True', "on_bad_input='skip'", 'text_col=')
    >>> with interface("cli"):
    ...     option("overwrite", True), option("on_bad_input", "skip"), option("text_col")
    ('--overwrite', '--on-bad-input skip', '--text-column')
    """
    spelled = option_name(name)
    if not in_cli():
        return f"{name}=" if value is _NO_VALUE else f"{name}={value!r}"
    if value is _NO_VALUE or value is True:
        return spelled
    return f"{spelled} {shlex.quote(str(value))}"



def first_line(exc: BaseException) -> str:
    """The first line of an exception's message ("" for none), as one-line reports show it.

    >>> first_line(ValueError("bad value\\nmore detail"))
    'bad value'
    """
    text = str(exc).strip()
    return text.splitlines()[0].strip() if text else ""


class BpeSparkError(Exception):
    """Base class of every error bpe-spark raises on purpose."""


class ConfigError(BpeSparkError, ValueError):
    """A training or encoding setting is invalid."""


class EmptyCorpusError(BpeSparkError, ValueError):
    """The corpus holds no pretoken to train on."""


class ModelFormatError(BpeSparkError, ValueError):
    """A model file is malformed; the message names the file and the line or field."""


class UnknownCharacterError(BpeSparkError, ValueError):
    """A char-scheme tokenizer without ``unk_token`` met a character it was not trained on."""


class DisallowedSpecialTokenError(BpeSparkError, ValueError):
    """Text contains a special token that the ``encode`` call did not allow."""


class OutputExistsError(BpeSparkError, FileExistsError):
    """An output path already exists and ``overwrite=True`` (``--overwrite``) was not given."""


class InputError(BpeSparkError, ValueError):
    """An input cannot be read as asked."""


class ColumnError(InputError, KeyError):
    """A column the work needs is missing or of the wrong type, or an output column exists."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""

    @classmethod
    def missing(cls, name: str, source: str, columns, hint: str = "") -> ColumnError:
        """Column ``name`` is not among the ``columns`` of ``source`` (Spark's schema checks, and the
        command line's look at local files before Spark starts)."""
        return cls(f"column {name!r} not found in {source}; its columns are {list(columns)}" + (f"; {hint}" if hint else ""))

    @classmethod
    def wrong_type(cls, name: str, source: str, found: str, wanted: str) -> ColumnError:
        return cls(f"column {name!r} of {source} has type {found}, not {wanted}")


class BadInputError(InputError):
    """A corrupt input file or a malformed record; the message names the file and the line or row."""


class PatternTimeoutError(BpeSparkError, TimeoutError):
    """A custom pretokenization pattern took longer than its time limit on a text."""


class OutputRefusedError(BpeSparkError, ValueError):
    """An output path bpe-spark will not write: it is, holds or lies inside an input, the model
    or the checkpoint; it cannot be written; or ``overwrite`` would replace something that is not
    an earlier bpe-spark output of the same kind."""


class CheckpointError(ConfigError):
    """A checkpoint directory cannot be used as asked: ``resume`` names no checkpoint, or one
    made from another input or config; the message says what differs."""


class CheckpointLockedError(CheckpointError):
    """Another run holds the lock of the checkpoint directory; the message names it."""


class MasterUnreachableError(BpeSparkError, ConnectionError):
    """The Spark master does not answer (checked before Spark starts); the message names it."""
