"""The one place that builds SparkSessions: bpe-spark's Spark defaults, a properties file and
overrides on top, the master, and the options of a driver JVM that bpe-spark starts itself (the
class archive of :mod:`jvm_cache`, C1-only compilation for a JVM that only coordinates)."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path

from pyspark.sql import SparkSession

from bpe_spark.errors import ConfigError
from bpe_spark.spark import jvm_cache

DEFAULTS = {
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.session.timeZone": "UTC",
    "spark.ui.showConsoleProgress": "false",
    # Python workers import the installed pyspark (compiled), not Spark's zip copy: see daemon.py.
    "spark.python.daemon.module": "bpe_spark.spark.daemon",
}


QUICK_JIT = "-XX:TieredStopAtLevel=1"
LOCAL_TASK_FAILURES = 4  # spark.task.maxFailures' default: a local task is tried 4 times, as on a cluster
_LOCAL_MASTER = re.compile(r"^local(?:\[\s*(\d+|\*)\s*\])?$")


def read_conf_file(path: str | os.PathLike) -> dict[str, str]:
    """Spark properties from a ``spark-defaults.conf``-style file (``key value`` or ``key=value``)."""
    props: dict[str, str] = {}
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"Spark properties file {path} does not exist")
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if "=" in line and (" " not in line or line.index("=") < line.index(" ")):
            key, _, value = line.partition("=")
        else:
            key, _, value = line.partition(" ")
        key, value = key.strip(), value.strip()
        if not key or not value:
            raise ConfigError(f"{path}:{number}: expected 'key value', got {raw!r}")
        props[key] = value
    return props


def build_session(
    app_name: str = "bpe-spark",
    *,
    master: str | None = None,
    conf_file: str | os.PathLike | None = None,
    overrides: Mapping[str, str] | None = None,
    light_jvm: bool = False,
) -> SparkSession:
    """Build (or get) the SparkSession: defaults < ``conf_file`` < ``overrides``.

    The master is ``master``, else ``spark.master`` from the properties, else ``$SPARK_MASTER``,
    else whatever spark-submit set, else ``local[*]``. A local master that names no task
    failures gets them (:func:`with_task_retries`): a failed task is retried, as on a cluster.

    ``light_jvm``: the caller's Python tasks do the heavy work and the JVM only coordinates (local
    text files, which the tasks read themselves: see ``textsplits``). A local JVM started here then
    compiles with C1 only (``-XX:TieredStopAtLevel=1``): on few cores the C2 compiler otherwise
    takes a core from the tasks for the first seconds. Not for JVM-heavy input (JSON, Parquet),
    which runs markedly slower without C2. Never applied when the properties already choose a
    JIT mode.
    """
    # subtle: executors start whatever python3 is on the PATH unless told; pin ours.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    props = dict(DEFAULTS)
    if conf_file is not None:
        props.update(read_conf_file(conf_file))
    props.update(overrides or {})
    builder = SparkSession.builder.appName(app_name)
    chosen = master or props.pop("spark.master", None) or os.environ.get("SPARK_MASTER")
    if chosen:
        chosen = with_task_retries(chosen, props.get("spark.task.maxFailures"))
        builder = builder.master(chosen)
    elif "spark.master" not in os.environ.get("PYSPARK_SUBMIT_ARGS", "") and not _launched_by_spark_submit():
        builder = builder.master(with_task_retries("local[*]", props.get("spark.task.maxFailures")))
    resolved = chosen or ("local[*]" if not _launched_by_spark_submit() else "")
    if resolved.startswith("local") and "spark.sql.shuffle.partitions" not in props:
        # subtle: Spark's default of 200 shuffle partitions costs seconds of task overhead per
        # shuffle on one machine; a few per core is enough there (results never depend on it).
        props["spark.sql.shuffle.partitions"] = str(2 * _local_cores(resolved))
    if _launches_jvm():
        # A JVM class archive (jvm_cache) saves seconds of start-up; only a JVM we start can use it.
        key = "spark.driver.extraJavaOptions"
        options = launch_java_options(props.get(key), light=light_jvm and resolved.startswith("local"))
        if options:
            props[key] = options
    for key, value in props.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def with_task_retries(master: str, max_failures: str | None = None) -> str:
    """A ``local`` / ``local[N]`` / ``local[*]`` master as ``local[N,F]``: Spark's local mode
    tries each task once (``spark.task.maxFailures`` applies to clusters only), so one lost task
    fails the job. ``F`` is ``max_failures`` (the user's ``spark.task.maxFailures``), else
    :data:`LOCAL_TASK_FAILURES`. Other masters, and ``local[N,F]``, are kept.

    >>> with_task_retries("local[2]"), with_task_retries("local"), with_task_retries("local[*]", "2")
    ('local[2,4]', 'local[1,4]', 'local[*,2]')
    >>> with_task_retries("local[2,1]"), with_task_retries("yarn")
    ('local[2,1]', 'yarn')
    """
    match = _LOCAL_MASTER.match(master.strip())
    if match is None:
        return master
    failures = str(max_failures).strip() if max_failures else str(LOCAL_TASK_FAILURES)
    return f"local[{match[1] or 1},{failures}]"


def launch_java_options(existing: str | None, *, light: bool) -> str | None:
    """The driver JVM's options for a JVM bpe-spark starts: the user's, the class archive's
    (:mod:`jvm_cache`), and C1-only compilation for a ``light`` (local, coordinating) JVM unless
    the user's options choose a JIT mode.

    >>> launch_java_options("-Xss4m -XX:-TieredCompilation", light=True)  # doctest: +SKIP
    '-Xss4m -XX:-TieredCompilation -XX:SharedArchiveFile=...'
    """
    options = os.environ.get(jvm_cache.ENV_DUMP) or jvm_cache.driver_java_options(existing)
    if light and "Tiered" not in (options or ""):
        options = f"{options} {QUICK_JIT}" if options else QUICK_JIT
    return options


def _launches_jvm() -> bool:
    """True when getOrCreate will start a JVM (no SparkContext yet, not under spark-submit)."""
    from pyspark import SparkContext

    return SparkContext._gateway is None and "PYSPARK_GATEWAY_PORT" not in os.environ


def _local_cores(master: str) -> int:
    """Cores of a ``local``, ``local[N]``, ``local[*]`` or ``local[N,F]`` master."""
    inside = master[master.find("[") + 1 : master.find("]")] if "[" in master else "1"
    first = inside.split(",")[0].strip()
    if first == "*" or not first.isdigit():
        return os.cpu_count() or 1
    return max(1, int(first))


def _launched_by_spark_submit() -> bool:
    return "SPARK_SUBMIT" in os.environ or "spark-submit" in " ".join(sys.argv[:1])
