"""Spark's failures as the command line reports them (:mod:`bpe_spark.cli.failures` asks, for an
exception of py4j or pyspark): whether it is the user's error, and the one line of a ``Py4JJavaError`` or one of
pyspark's captured exceptions (the Java root cause's class and first message line, a failed
Python task's last traceback line), of py4j's own errors (the JVM gone), and the cancelling of
running jobs on Ctrl-C; and a task's own bpe-spark error raised on the driver as itself
(:func:`executor_errors`).
"""

from __future__ import annotations

import contextlib
import re
import sys

from bpe_spark.errors import (
    BadInputError,
    BpeSparkError,
    ConfigError,
    DisallowedSpecialTokenError,
    PatternTimeoutError,
    UnknownCharacterError,
    first_line,
    option,
)

# Java exceptions whose cause is the user's input or settings (exit 2), by simple class name
USER_JAVA_ERRORS = ("AnalysisException", "IllegalArgumentException", "NumberFormatException",
                    "FileNotFoundException", "AccessDeniedException", "FileAlreadyExistsException",
                    "NoSuchFileException", "UnknownHostException", "ParseException")
_SQLSTATE = re.compile(r"\s*SQLSTATE: \w+.*$")  # Spark's error-class suffix: "...  SQLSTATE: 42703; line 1 pos 7;"


def describe_spark_failure(exc: BaseException) -> tuple[bool, str]:
    """Whether an exception of py4j or pyspark is the user's error (their input or settings), and
    its one line."""
    java = _java_throwable(exc)
    if java is not None:
        return _describe_java(java, None if isinstance(exc, _py4j_error()) else type(exc).__name__)
    if type(exc).__module__.partition(".")[0] == "py4j":  # Py4JError, Py4JNetworkError: the JVM is gone or broke the call
        return False, f"error: the Spark JVM stopped answering ({first_line(exc) or type(exc).__name__})"
    condition = getattr(exc, "getCondition", lambda: None)()
    if condition == "JAVA_GATEWAY_EXITED":
        return False, ("error: the Spark JVM exited as it started (see its message above; "
                               "check JAVA_HOME and the Spark properties)")
    return True, f"error: {type(exc).__name__}: {first_line(exc)}"


def cancel_spark_jobs() -> None:
    """Cancel the jobs of a running SparkContext, if any (pyspark's own Ctrl-C handler does too;
    this covers an interrupt that its handler did not see)."""
    if "pyspark" not in sys.modules:
        return
    from pyspark import SparkContext

    context = SparkContext._active_spark_context
    if context is None:
        return
    try:
        context.cancelAllJobs()
    except Exception:  # noqa: BLE001, S110 - the JVM may be gone already; the exit stands
        pass


def _describe_java(java, name: str | None = None) -> tuple[bool, str]:
    """A Java throwable as its root cause's class (``name``: pyspark's for it, when the root is
    ``java`` itself) and first message line, without its SQLSTATE; a Python task's error: the last
    line of its traceback."""
    chain = [java]
    while len(chain) < 32:
        cause = _safely(chain[-1].getCause)
        if cause is None or any(_safely(lambda c=c, cause=cause: c.equals(cause)) for c in chain):
            break
        chain.append(cause)
    root = chain[-1]
    java_name = _safely(lambda: root.getClass().getSimpleName()) or "Exception"
    if len(chain) > 1 or not name:
        name = java_name
    message = (_safely(lambda: root.getMessage()) or "").strip()
    if java_name == "PythonException":  # a task's Python traceback: its last line names the error
        lines = [line for line in message.splitlines() if line.strip() and not line.strip().startswith("SQLSTATE")]
        message = lines[-1].strip() if lines else message
        return False, f"error: a Spark task failed: {message}"
    user = name in USER_JAVA_ERRORS or java_name.endswith(USER_JAVA_ERRORS)
    first = _SQLSTATE.sub("", message.splitlines()[0]).strip() if message else ""
    return user, f"error: {name}: {first}" if first else f"error: {name}"


def _py4j_error() -> type | tuple:
    if "py4j" not in sys.modules:
        return ()
    from py4j.protocol import Py4JJavaError

    return Py4JJavaError


def _java_throwable(exc: BaseException):
    """The Java throwable behind a py4j or pyspark exception (None: not one)."""
    java = getattr(exc, "java_exception", None)  # Py4JJavaError
    if java is None:
        java = getattr(exc, "_origin", None)  # pyspark's CapturedException (AnalysisException...)
    return java if java is not None and hasattr(java, "getClass") else None


def _safely(call):
    try:
        return call()
    except Exception:  # noqa: BLE001 - a JVM that is gone answers nothing
        return None


def executor_error(exc: Exception) -> Exception:
    """A bpe-spark error raised in a task, as itself rather than a Java trace (else ``exc``)."""
    if isinstance(exc, BpeSparkError):
        return exc
    bad_file = bad_file_error(exc)
    if bad_file is not None:
        return bad_file
    text = str(exc)
    for error in _TASK_ERRORS:
        marker = f"bpe_spark.errors.{error.__name__}: "
        if marker in text:
            return error(text.split(marker, 1)[1].splitlines()[0])
    return exc


_FAILED_READ = re.compile(r"\[FAILED_READ_FILE[.\w]*\][^\n]*? reading file (\S+?)\.?(?:\s|$)")
_CAUSE = re.compile(r"Caused by: ([\w.$]+(?:Exception|Error)[^\n]*)")


def bad_file_error(exc: Exception) -> BadInputError | None:
    """Spark's failure to read a file (``FAILED_READ_FILE``: corrupt or truncated data) as a
    one-line :class:`BadInputError` naming the file; None for any other error."""
    text = str(exc)
    found = _FAILED_READ.search(text)
    if found is None:
        return None
    causes = _CAUSE.findall(text)  # the innermost cause says what was wrong with the data
    detail = f" ({causes[-1].strip()})" if causes else ""
    return BadInputError(
        f"input file {found.group(1)} could not be read: corrupt or truncated{detail}; repair or remove "
        f"it, or pass {option('on_bad_input', 'skip')} to skip it"
    )


@contextlib.contextmanager
def executor_errors():
    """Raise a task's bpe-spark error (:func:`executor_error`) instead of Spark's wrapper."""
    try:
        yield
    except Exception as exc:
        translated = executor_error(exc)
        if translated is exc:
            raise
        raise translated from exc


# what tasks raise on purpose
_TASK_ERRORS = (UnknownCharacterError, ConfigError, DisallowedSpecialTokenError, PatternTimeoutError, BadInputError)
