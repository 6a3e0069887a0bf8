"""How a command's failure reaches the user: one line on stderr and an exit status, for every
failure a user can cause; the full trace only when asked for (``--verbose``, or
``BPE_SPARK_TRACE=1`` for every command, those without Spark too).

======================================  ======  =============================================
failure                                 status  the line
======================================  ======  =============================================
a :class:`BpeSparkError` (bad input,    2       its message
a bad or unreachable ``--master``...)
an ``OSError``                          2       the path (when known) and the system's reason; a
                                                full disk: the free space there
                                                (:mod:`bpe_spark.storage.os_errors`)
a Spark error (``Py4JJavaError``,       2 / 1   the Java exception's class and first message
pyspark's captured exceptions)                  line; a failed task's root cause (2 for an
                                                AnalysisException or a bad argument, else 1)
the Spark JVM gone (py4j errors)        1 / 2   what happened; a JVM or Python worker out of
                                                memory: which, and the setting to raise
Ctrl-C (``KeyboardInterrupt``)          130     ``interrupted``; running Spark jobs cancelled
``SIGTERM`` (``timeout``, schedulers)   143     ``terminated``; the same path as Ctrl-C
a closed stdout (``... | head``)        141     nothing (as a program killed by SIGPIPE)
anything else                           1       the exception, "run with --verbose ..."
======================================  ======  =============================================

``SIGTERM`` (what ``timeout``, YARN, Kubernetes and Slurm send) takes Ctrl-C's path: while a command
runs, its handler cancels the running Spark jobs and raises :class:`Terminated` (a
``KeyboardInterrupt``) in the main thread, so every clean-up that Ctrl-C runs (staging directories
removed, the JVM stopped) runs too; only the line and the status differ.

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
import contextlib
import logging
import os
import signal
import sys
import traceback
from collections.abc import Callable

from bpe_spark.errors import BpeSparkError, first_line
from bpe_spark.storage import os_errors

TRACE_ENV = "BPE_SPARK_TRACE"
EXIT_USER = 2
EXIT_INTERNAL = 1
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143  # 128 + SIGTERM
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE
# the Python loggers that print around a failure: py4j's (a call Ctrl-C broke), pyspark's query context
NOISY_LOGGERS = ("py4j", "py4j.clientserver", "py4j.java_gateway",
                 "DataFrameQueryContextLogger", "SQLQueryContextLogger")


def wants_trace(args: argparse.Namespace | None) -> bool:
    """True when the user asked for the full trace: ``--verbose``, or ``BPE_SPARK_TRACE`` set."""
    return bool(getattr(args, "verbose", False)) or os.environ.get(TRACE_ENV, "").strip() not in ("", "0")


class Terminated(KeyboardInterrupt):
    """``SIGTERM`` received while a command ran: Ctrl-C's clean-up, its own line and status."""


def run_command(command: str, run: Callable[[], object], args: argparse.Namespace | None = None) -> int:
    """Run ``run()`` (a command) and return its exit status; a failure prints one line
    ``bpe-spark COMMAND: ...`` (and the trace first when :func:`wants_trace`)."""
    trace = wants_trace(args)
    if not trace:
        quiet_python_loggers()
    with _sigterm_interrupts():
        try:
            status = int(run() or 0)
            sys.stdout.flush()  # a closed pipe shows here when the output was small
            return status
        except BrokenPipeError:
            _stdout_to_devnull()
            return EXIT_BROKEN_PIPE
        except KeyboardInterrupt as exc:
            return _interrupted(command, trace, terminated=isinstance(exc, Terminated))
        except Exception as exc:  # noqa: BLE001 - every failure ends in one line, see the table above
            status, line = describe_failure(exc, args)
            if status == EXIT_INTERNAL and not trace:
                line += f" (run with {'--verbose' if hasattr(args, 'verbose') else TRACE_ENV + '=1'} for the trace)"
            _report(command, line, trace)
            return status


def _interrupted(command: str, trace: bool, *, terminated: bool) -> int:
    """Ctrl-C or SIGTERM: running Spark jobs cancelled, one line; a second signal must not break
    the clean-up."""
    ignored = {sig: signal.signal(sig, signal.SIG_IGN) for sig in _INTERRUPTS if _in_main_thread()}
    try:
        if "pyspark" in sys.modules:  # a Spark command ran: cancel its jobs
            from bpe_spark.spark.runtime.failures import cancel_spark_jobs

            cancel_spark_jobs()
        _report(command, "terminated (SIGTERM)" if terminated else "interrupted", trace)
    finally:
        for sig, previous in ignored.items():
            signal.signal(sig, previous)
    return EXIT_TERMINATED if terminated else EXIT_INTERRUPTED


_INTERRUPTS = (signal.SIGINT, signal.SIGTERM)


def _in_main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def _on_sigterm(signum, frame) -> None:
    """SIGTERM as pyspark's Ctrl-C handler does it: the running jobs cancelled, then the main
    thread interrupted (:class:`Terminated`)."""
    if "pyspark" in sys.modules:
        from bpe_spark.spark.runtime.failures import cancel_spark_jobs

        cancel_spark_jobs()
    raise Terminated


@contextlib.contextmanager
def _sigterm_interrupts():
    """While a command runs (in the main thread): SIGTERM raises :class:`Terminated`."""
    if not _in_main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def describe_failure(exc: BaseException, args: argparse.Namespace | None = None) -> tuple[int, str]:
    """The exit status and the one line of a failure (see the module's table); ``args``: the
    command's, whose ``--out`` a full disk that names no path is reported against.

    >>> describe_failure(FileNotFoundError(2, "No such file or directory", "models/x"))
    (2, 'error: models/x: No such file or directory')
    >>> describe_failure(RuntimeError("boom"))
    (1, 'internal error: RuntimeError: boom')
    """
    out = getattr(args, "out", None)
    if isinstance(exc, BpeSparkError):
        return EXIT_USER, f"error: {exc}"
    if "pyspark" in sys.modules and (isinstance(exc, (ConnectionError, EOFError))
                                     or type(exc).__module__.partition(".")[0] == "py4j"):
        from bpe_spark.spark.runtime.failures import jvm_exit_line

        lost = isinstance(exc, (ConnectionError, EOFError)) or not hasattr(exc, "java_exception")
        gone = jvm_exit_line(wait=3.0 if lost else 0.0)  # the JVM died (of an OutOfMemoryError...): that is the cause, not py4j's error
        if gone is not None:
            return EXIT_USER, gone
    if type(exc).__module__.partition(".")[0] in ("py4j", "pyspark"):
        from bpe_spark.spark.runtime.failures import describe_spark_failure

        user, line = describe_spark_failure(exc)
        if os_errors.is_disk_full(line):
            return EXIT_USER, line + _full_disk_places(out)
        return (EXIT_USER if user else EXIT_INTERNAL), line
    if isinstance(exc, OSError):  # never "internal": a path, a device, a connection the user can fix
        fallback = out if os_errors.is_disk_full(exc) else None
        return EXIT_USER, f"error: {os_errors.os_error_line(exc, fallback, fallback_role='writing --out')}"
    return EXIT_INTERNAL, f"internal error: {type(exc).__name__}: {first_line(exc)}"


def _full_disk_places(out: str | None) -> str:
    """A Spark job's full disk: the free space where it writes, the output (``--out``) and Spark's
    scratch space (``SPARK_LOCAL_DIRS``, else the temporary directory)."""
    import tempfile

    places = [f"--out {out}"] if out else []
    scratch = os.environ.get("SPARK_LOCAL_DIRS", "").split(",")[0] or tempfile.gettempdir()
    places.append(f"Spark's scratch space {scratch}")
    shown = []
    for place in places:
        space = os_errors.free_space(place.rpartition(" ")[2])
        shown.append(f"{place}: {space}" if space else place)
    return f" ({'; '.join(shown)}): free space there or write elsewhere"


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
