"""Spark's failures as the command line reports them (:mod:`bpe_spark.cli.failures` asks, for an
exception of py4j or pyspark): whether it is the user's error, and the one line of a ``Py4JJavaError`` or one of
pyspark's captured exceptions (the Java root cause's class and first message line, a failed
Python task's last traceback line), of py4j's own errors (the JVM gone: :func:`jvm_exit_line` says
why, an OutOfMemoryError among others), of a JVM or Python worker out of memory (which process,
and the setting to raise), and the cancelling of
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
        if message.startswith("MemoryError"):
            return True, python_worker_memory_line(message)
        return False, f"error: a Spark task failed: {message}"
    if java_name == "OutOfMemoryError" or "java.lang.OutOfMemoryError" in message:
        return True, jvm_memory_line(message.splitlines()[0].replace("java.lang.OutOfMemoryError: ", "") if message else "")
    user = name in USER_JAVA_ERRORS or java_name.endswith(USER_JAVA_ERRORS)
    first = _SQLSTATE.sub("", message.splitlines()[0]).strip() if message else ""
    return user, f"error: {name}: {first}" if first else f"error: {name}"


# --- running out of memory: which process, and the setting to raise --------------------------------
SPARK_OOM_EXIT = 52  # Spark's exit status for an OutOfMemoryError that reached its uncaught-exception handler
_SPARK_DEFAULT_MEMORY = "1g, Spark's default"
_DRIVER_MEMORY: dict[str, str] = {}  # what the driver JVM that this process started was given


def remember_driver_memory(props) -> None:
    """At the start of the driver JVM (session.py): its ``spark.driver.memory``, named when it runs out."""
    _DRIVER_MEMORY["spark.driver.memory"] = props.get("spark.driver.memory") or _SPARK_DEFAULT_MEMORY


def _setting(key: str, default: str) -> str:
    from pyspark import SparkContext

    context = SparkContext._active_spark_context
    value = _safely(lambda: context.getConf().get(key)) if context is not None else None
    return value or _DRIVER_MEMORY.get(key) or default


def _is_local() -> bool:
    from pyspark import SparkContext

    context = SparkContext._active_spark_context
    master = str(getattr(context, "master", "") or "") if context is not None else ""
    return master.startswith("local") or not master


def jvm_memory_line(detail: str = "", *, exited: bool = False) -> str:
    """A JVM's OutOfMemoryError: the driver's (a local master runs the tasks in it) or an
    executor's; ``exited``: the driver JVM died of it."""
    what = f" ({detail.strip()})" if detail.strip() else ""
    if exited or _is_local():
        now = _setting("spark.driver.memory", _SPARK_DEFAULT_MEMORY)
        ran_out = "ran out of memory and exited" if exited else "ran out of memory"
        return (f"error: the Spark driver JVM {ran_out}{what} (a local master runs the tasks in it): raise "
                f"its memory with --set spark.driver.memory=... (now {now})")
    now = _setting("spark.executor.memory", _SPARK_DEFAULT_MEMORY)
    return (f"error: an executor JVM ran out of memory{what}: raise --set spark.executor.memory=... (now {now}), "
            "or give each executor fewer cores (spark.executor.cores)")


def python_worker_memory_line(message: str) -> str:
    now = _setting("spark.executor.pyspark.memory", "unset: no limit but the machine's")
    return (f"error: a Python worker ran out of memory ({message.strip()}): raise --set "
            f"spark.executor.pyspark.memory=... (now {now}), or give the machine or executor more memory")


def jvm_exit_line(wait: float = 3.0) -> str | None:
    """The one line of a driver JVM that this process started and that has exited (the cause of
    the py4j or connection error that followed; ``wait``: seconds for it to finish exiting), or
    None when it runs or was not ours."""
    from pyspark import SparkContext

    process = getattr(SparkContext._gateway, "proc", None)
    if process is None:
        return None
    try:
        status = process.wait(timeout=wait) if wait > 0 else process.poll()
    except Exception:  # noqa: BLE001 - still running: not the cause
        return None
    if status is None:
        return None
    if status == SPARK_OOM_EXIT:
        return jvm_memory_line("Java heap space", exited=True)
    if status < 0:
        return (f"error: the Spark driver JVM was killed (signal {-status}; SIGKILL is often the system's "
                f"out-of-memory killer: check the machine's memory and spark.driver.memory, now "
                f"{_setting('spark.driver.memory', '1g')})")
    if status != 0:
        return f"error: the Spark driver JVM exited with status {status} (run with --verbose for its messages)"
    return None


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
