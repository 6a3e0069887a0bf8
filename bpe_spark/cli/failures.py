"""How a command's failure reaches the user: one line on stderr and an exit status, for every
failure a user can cause; the full trace only when asked for (``--verbose``, or
``BPE_SPARK_TRACE=1`` for every command, those without Spark too).

======================================  ======  =============================================
failure                                 status  the line
======================================  ======  =============================================
a :class:`BpeSparkError` (bad input,    2       its message
a bad or unreachable ``--master``...)
an ``OSError`` on a path                2       the path and the system's reason
a Spark error (``Py4JJavaError``,       2 / 1   the Java exception's class and first message
pyspark's captured exceptions)                  line; a failed task's root cause (2 for an
                                                AnalysisException or a bad argument, else 1)
the Spark JVM gone (py4j errors)        1       what happened
Ctrl-C (``KeyboardInterrupt``)          130     ``interrupted``; running Spark jobs cancelled
a closed stdout (``... | head``)        141     nothing (as a program killed by SIGPIPE)
anything else                           1       the exception, "run with --verbose ..."
======================================  ======  =============================================

A closed pipe exits 141, the status of a coreutils program that SIGPIPE ends (``yes | head``),
so ``set -o pipefail`` scripts see what they see for them; stdout then points at ``os.devnull``
(Python's documented recipe) so that the interpreter's last flush prints nothing.

Spark's own failures (py4j's and pyspark's exceptions) are read by :mod:`bpe_spark.spark.runtime.failures`,
loaded only when one is met; Ctrl-C cancels running jobs there too, when a Spark command ran.

Quiet runs (no ``--verbose``) also silence py4j's and pyspark's Python loggers, whose messages
about a call that Ctrl-C broke are noise around the one line.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import traceback
from collections.abc import Callable

from bpe_spark.errors import BpeSparkError, first_line

TRACE_ENV = "BPE_SPARK_TRACE"
EXIT_USER = 2
EXIT_INTERNAL = 1
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE
# the Python loggers that print around a failure: py4j's (a call Ctrl-C broke), pyspark's query context
NOISY_LOGGERS = ("py4j", "py4j.clientserver", "py4j.java_gateway",
                 "DataFrameQueryContextLogger", "SQLQueryContextLogger")


def wants_trace(args: argparse.Namespace | None) -> bool:
    """True when the user asked for the full trace: ``--verbose``, or ``BPE_SPARK_TRACE`` set."""
    return bool(getattr(args, "verbose", False)) or os.environ.get(TRACE_ENV, "").strip() not in ("", "0")


def run_command(command: str, run: Callable[[], object], args: argparse.Namespace | None = None) -> int:
    """Run ``run()`` (a command) and return its exit status; a failure prints one line
    ``bpe-spark COMMAND: ...`` (and the trace first when :func:`wants_trace`)."""
    trace = wants_trace(args)
    if not trace:
        quiet_python_loggers()
    try:
        status = int(run() or 0)
        sys.stdout.flush()  # a closed pipe shows here when the output was small
        return status
    except BrokenPipeError:
        _stdout_to_devnull()
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not break the clean-up
        try:
            if "pyspark" in sys.modules:  # a Spark command ran: cancel its jobs
                from bpe_spark.spark.runtime.failures import cancel_spark_jobs

                cancel_spark_jobs()
            _report(command, "interrupted", trace)
        finally:
            signal.signal(signal.SIGINT, signal.default_int_handler)
        return EXIT_INTERRUPTED
    except Exception as exc:  # noqa: BLE001 - every failure ends in one line, see the table above
        status, line = describe_failure(exc)
        if status == EXIT_INTERNAL and not trace:
            line += f" (run with {'--verbose' if hasattr(args, 'verbose') else TRACE_ENV + '=1'} for the trace)"
        _report(command, line, trace)
        return status


def describe_failure(exc: BaseException) -> tuple[int, str]:
    """The exit status and the one line of a failure (see the module's table).

    >>> describe_failure(FileNotFoundError(2, "No such file or directory", "models/x"))
    (2, 'error: models/x: No such file or directory')
    >>> describe_failure(RuntimeError("boom"))
    (1, 'internal error: RuntimeError: boom')
    """
    if isinstance(exc, BpeSparkError):
        return EXIT_USER, f"error: {exc}"
    if type(exc).__module__.partition(".")[0] in ("py4j", "pyspark"):
        from bpe_spark.spark.runtime.failures import describe_spark_failure

        user, line = describe_spark_failure(exc)
        return (EXIT_USER if user else EXIT_INTERNAL), line
    if isinstance(exc, OSError) and exc.filename is not None:
        return EXIT_USER, f"error: {exc.filename}: {exc.strerror or exc}"
    return EXIT_INTERNAL, f"internal error: {type(exc).__name__}: {first_line(exc)}"


def quiet_python_loggers() -> None:
    """Silence the Python loggers that print around a failure (py4j logs through the root logger)."""
    for name in NOISY_LOGGERS:
        logging.getLogger(name).disabled = True
    root = logging.getLogger()
    if not any(isinstance(f, _Py4jRecords) for f in root.filters):
        root.addFilter(_Py4jRecords())


class _Py4jRecords(logging.Filter):
    """Drops the records py4j logs on the root logger (``logging.exception(...)``: a call that
    Ctrl-C or a JVM gone broke, with its trace)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return f"{os.sep}py4j{os.sep}" not in record.pathname


def _report(command: str, line: str, trace: bool) -> None:
    if trace:
        traceback.print_exc(file=sys.stderr)
    print(f"bpe-spark {command}: {line}", file=sys.stderr)
    sys.stderr.flush()


def _stdout_to_devnull() -> None:
    """Python's recipe for a closed pipe: stdout to devnull, so the exit's flush cannot fail."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (AttributeError, OSError, ValueError):  # a stdout without a file descriptor (a test's capture)
        pass
