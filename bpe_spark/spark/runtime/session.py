"""The one place that builds SparkSessions: bpe-spark's Spark defaults under whatever spark-submit,
``spark-defaults.conf`` or a running session already set, a properties file and overrides on
top, the master, and the options of a driver JVM that bpe-spark starts itself (the class archive
of :mod:`jvm_cache`, C1-only compilation for a JVM that only coordinates), appended to the
user's, and its :mod:`watchdog` (the JVM and its Python workers end with the driver); and a quiet start (``quiet=True``): the master checked before any JVM starts (a URL Spark
knows; a ``spark://`` master answering on its port), Spark's logging set to errors-only before
the JVM logs anything (:data:`QUIET_LOG_CONFIG`), and the JVM's own start-up warning dropped."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Mapping
from pathlib import Path

from pyspark.sql import SparkSession

from bpe_spark.errors import ConfigError, MasterUnreachableError
from bpe_spark.spark.runtime import failures, jvm_cache, watchdog

DEFAULTS = {
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.session.timeZone": "UTC",
    "spark.ui.showConsoleProgress": "false",
}
# Only for a local master, whose executors run this interpreter (and so can import bpe_spark):
LOCAL_DEFAULTS = {
    # Python workers import the installed pyspark (compiled), not Spark's zip copy: see daemon.py.
    "spark.python.daemon.module": "bpe_spark.spark.runtime.daemon",
}


QUICK_JIT = "-XX:TieredStopAtLevel=1"
# A local JVM collects with the serial collector: G1 (the JVM's default) places an array of half a
# region or more (1 MiB regions on a 1 GiB heap) in whole free regions of its own, and Spark's
# 64 MiB sort pages and pointer arrays then found none free and ran a 1 GiB local driver out of
# heap (sorting T8's 11.2 M counts for rounds), where the serial collector compacts and succeeds.
# It also keeps the footprint small (no region tables or concurrent threads). A local JVM that only
# coordinates also starts with a small initial heap that grows only as its live data needs.
LEAN_GC = "-XX:+UseSerialGC"
LEAN_INITIAL_HEAP = "-Xms32m"
LOCAL_TASK_FAILURES = 4  # spark.task.maxFailures' default: a local task is tried 4 times, as on a cluster
_LOCAL_MASTER = re.compile(r"^local(?:\[\s*(\d+|\*)\s*\])?$")
# the master URLs Spark's SparkContext accepts (createTaskScheduler; Spark Connect's sc:// too)
_MASTER_URL = re.compile(r"^(local(\[\s*(\d+|\*)\s*(,\s*\d+\s*)?\])?|local-cluster\[[\d\s,]+\]|yarn|(spark|k8s|sc)://.+)$")
QUIET_LOG_LEVEL = "FATAL"
SPARK_MASTER_PORT = 7077
PROBE_SECONDS = 3.0
# The driver JVM's logging when quiet: errors-only from its first line (log4j2 reads it at start-up).
QUIET_LOG_CONFIG = Path(__file__).with_name("log4j2-quiet.properties")
# subtle: Spark's launcher adds --add-modules=jdk.incubator.vector, and the JVM then prints this
# line on stderr, unconditionally (no JVM option silences it): a quiet start filters it out.
_JVM_NOISE = (b"WARNING: Using incubator modules",)


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
    shared_input: bool = False,
    quiet: bool = False,
) -> SparkSession:
    """Build (or get) the SparkSession. What the user chose always wins over what we would pick.

    Properties: ``overrides`` > ``conf_file`` > what is already set outside bpe-spark > our
    :data:`DEFAULTS`. "Already set" is spark-submit's conf (``--conf``, ``--properties-file``,
    ``spark-defaults.conf``: read from the JVM gateway spark-submit started), the running
    context's and session's conf when there is one, else the ``spark-defaults.conf`` that the JVM
    we start will load; our defaults (and, for a local master, :data:`LOCAL_DEFAULTS`) fill only
    keys none of those set. In a running session, what Spark cannot change any more is left as
    it is (a ConfigError if the caller asked for it).

    The master: ``master``, else ``spark.master`` from ``conf_file``/``overrides``, else the one
    already set (spark-submit's ``--master``, a running context's), else ``$SPARK_MASTER``, else
    ``local[*]``. A local master chosen here that names no task failures gets them
    (:func:`with_task_retries`); a master set outside is kept as given. Only a local master pins
    the executors' interpreter to this one (``PYSPARK_PYTHON``): a cluster's executors run what
    ``spark.pyspark.python`` or the cluster says.

    ``light_jvm``: the caller's Python tasks do the heavy work and the JVM only coordinates (local
    text files, which the tasks read themselves: see ``textsplits``). A local JVM started here then
    compiles with C1 only (``-XX:TieredStopAtLevel=1``): on few cores the C2 compiler otherwise
    takes a core from the tasks for the first seconds. Not for JVM-heavy input (JSON, Parquet),
    which runs markedly slower without C2. ``shared_input``: on a cluster, the tasks read that
    input on every executor themselves (``--shared-input``), so a session started here gives the
    executors' JVMs the same C1-only option (appended to ``spark.executor.extraJavaOptions``); a
    fresh executor otherwise spends its first task's seconds compiling. Never applied when the
    properties already choose a JIT mode. A JVM we start also maps the class archive (:mod:`jvm_cache`); its options are
    appended to the ``spark.driver.extraJavaOptions`` already set, never replace them.

    ``quiet``: no JVM or Spark warnings on stderr (the CLI without ``--verbose``). A JVM we start
    reads :data:`QUIET_LOG_CONFIG` (unless the user's driver options name a log4j2 configuration)
    and its stderr passes through a filter that drops the JVM's incubator-module warning; the
    context starts at ``spark.log.level`` :data:`QUIET_LOG_LEVEL` (unless set), which also quiets
    spark-submit's context (the lines its JVM logs before: ``conf/log4j2.properties``). A master given here (or resolved for a JVM we start) is checked first either way: a
    URL Spark does not know is a ConfigError, a ``spark://`` master that nothing answers on within
    :data:`PROBE_SECONDS` a :class:`MasterUnreachableError` (not Spark's minute of retries).
    """
    chosen = dict(read_conf_file(conf_file)) if conf_file is not None else {}
    chosen.update(overrides or {})
    given_master = master or chosen.pop("spark.master", None)
    running = running_session()
    outside = _outside_conf(running)
    resolved = given_master or outside.get("spark.master") or os.environ.get("SPARK_MASTER") or "local[*]"
    if given_master or (running is None and _launches_jvm()):
        check_master(resolved)
    props: dict[str, str] = {}
    if running is None and (given_master or "spark.master" not in outside):
        resolved = with_task_retries(resolved, chosen.get("spark.task.maxFailures", outside.get("spark.task.maxFailures")))
        props["spark.master"] = resolved
    local = resolved.strip().startswith("local")
    if local:
        # subtle: executors start whatever python3 is on the PATH unless told; pin ours, locally only.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    defaults = dict(DEFAULTS)
    if local:
        defaults.update(LOCAL_DEFAULTS)
        # subtle: Spark's default of 200 shuffle partitions costs seconds of task overhead per
        # shuffle on one machine; a few per core is enough there (results never depend on it).
        defaults["spark.sql.shuffle.partitions"] = str(2 * _local_cores(resolved))
    props.update({key: value for key, value in defaults.items() if key not in outside})
    props.update(chosen)
    if running is None and _launches_jvm():
        key = "spark.driver.extraJavaOptions"
        existing = " ".join(v for v in (outside.get(key), chosen.get(key)) if v) or None
        options = launch_java_options(existing, light=light_jvm and local, local=local)
        if quiet:
            options = quiet_java_options(options)
        if options:
            props[key] = options
    if quiet and running is None and "spark.log.level" not in outside and "spark.log.level" not in chosen:
        # subtle: the context reloads log4j's configuration as it starts (structured logging or
        # not), so a level set before is lost; spark.log.level is applied after that reload.
        props["spark.log.level"] = QUIET_LOG_LEVEL
    if running is None and light_jvm and shared_input and not local:
        key = "spark.executor.extraJavaOptions"
        options = light_executor_options(" ".join(v for v in (outside.get(key), chosen.get(key)) if v))
        if options is not None:
            props[key] = options
    if running is not None:
        return _configure_running(running, props, chosen)
    if _launches_jvm():
        _preload_driver_modules()
    builder = SparkSession.builder.appName(app_name)
    for key, value in props.items():
        builder = builder.master(value) if key == "spark.master" else builder.config(key, value)
    _start_jvm(app_name, props, quiet=quiet)
    session = builder.getOrCreate()
    if quiet:
        _quiet_accumulator_server(session)
    return session


def _quiet_accumulator_server(session: SparkSession) -> None:
    """pyspark's accumulator server prints a trace on stderr when the JVM it serves dies (an
    ``EOFError``): a quiet run says why in one line instead (``bpe_spark.cli.failures``)."""
    server = getattr(session.sparkContext, "_accumulatorServer", None)
    if server is not None and hasattr(server, "handle_error"):
        server.handle_error = lambda request, client_address: None


def check_master(master: str, timeout: float = PROBE_SECONDS) -> None:
    """Before Spark starts: ``master`` is a master URL Spark knows, and a ``spark://`` master
    (standalone, ``spark://HOST:PORT[,HOST2:PORT2]``) answers on one of its ports.

    >>> check_master("local[2]"); check_master("local[*, 4]"); check_master("yarn")
    >>> check_master("foo://x")
    Traceback (most recent call last):
    ...
    bpe_spark.errors.ConfigError: Spark master 'foo://x' is not a master URL Spark knows: use local[N], spark://HOST:PORT, yarn or k8s://URL
    """
    url = master.strip()
    if not _MASTER_URL.match(url):
        raise ConfigError(f"Spark master {master!r} is not a master URL Spark knows: use local[N], "
                          "spark://HOST:PORT, yarn or k8s://URL")
    if not url.startswith("spark://"):
        return
    reasons = []
    for address in url[len("spark://"):].split(","):
        host, _, port = address.strip().rpartition(":") if ":" in address else (address.strip(), "", "")
        try:
            with socket.create_connection((host, int(port or SPARK_MASTER_PORT)), timeout=timeout):
                return
        except ValueError:
            raise ConfigError(f"Spark master {master!r}: {address!r} is not HOST:PORT") from None
        except OSError as exc:
            reasons.append(f"{address.strip()}: {exc.strerror or exc or 'no answer'}")
    raise MasterUnreachableError(f"Spark master {master} does not answer ({'; '.join(reasons)}): check the URL "
                                 "and that the cluster is up")


# What pyspark imports on the driver at its first Py4J call with a list (py4j's numpy converter
# loads pyspark.testing.utils, and pandas with it) and at its first toArrow(): imported in a
# daemon thread while the JVM starts, when the driver only waits.
_DRIVER_MODULES = ("pyspark.testing.utils", "pyspark.sql.pandas.conversion")


def _preload_driver_modules() -> None:
    def load() -> None:
        import importlib

        for name in _DRIVER_MODULES:
            with contextlib.suppress(Exception):  # pyspark imports it itself later, and says why it fails
                importlib.import_module(name)

    threading.Thread(target=load, name="bpe-spark-driver-preload", daemon=True).start()


def quiet_java_options(options: str | None) -> str:
    """The driver options with :data:`QUIET_LOG_CONFIG` as log4j2's configuration, unless they
    name one already (the user's stands).

    >>> quiet_java_options("-Dlog4j2.configurationFile=mine.properties")
    '-Dlog4j2.configurationFile=mine.properties'
    """
    options = options or ""
    if "log4j2.configurationFile" in options or "log4j.configurationFile" in options or not QUIET_LOG_CONFIG.is_file():
        return options
    return f"{options} -Dlog4j2.configurationFile={QUIET_LOG_CONFIG.as_uri()}".strip()


def _start_jvm(app_name: str, props: Mapping[str, str], *, quiet: bool) -> None:
    """Start the driver JVM (pyspark's gateway) under its :mod:`watchdog` (it ends with this
    process, however this process ends); ``quiet``: its stderr filtered through a thread that
    drops :data:`_JVM_NOISE`. Nothing to start under spark-submit, whose JVM runs already."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None or "PYSPARK_GATEWAY_PORT" in os.environ:
        return  # spark-submit's JVM (or one a stopped context left): spark.log.level quiets its context
    conf = SparkConf(loadDefaults=False)
    conf.set("spark.app.name", app_name)
    conf.setAll(list(props.items()))
    with SparkContext._lock, _sigint_deferred():
        gateway = launch_gateway(conf, popen_kwargs={"stderr": subprocess.PIPE} if quiet else None)
        watchdog.watch(gateway.proc.pid)
        failures.remember_driver_memory(props)
        if quiet:
            threading.Thread(target=_copy_filtered, args=(gateway.proc.stderr,), name="bpe-spark JVM stderr",
                             daemon=True).start()
        SparkContext._gateway = gateway
        SparkContext._jvm = gateway.jvm


@contextlib.contextmanager
def _sigint_deferred():
    """Ctrl-C and SIGTERM wait until the JVM is up and watched: one interrupted while it starts would
    outlive us (its gateway thread keeps it alive once pyspark gave up on it, and holds our stdout);
    once up, it exits with us (its :mod:`watchdog` sees to it). The signals are noted by handlers
    of their own and raised again after, not blocked: a blocked signal still reaches Python through
    any other thread (the preloading ones), and a blocked mask would be inherited by the JVM."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []
    deferred = (signal.SIGINT, signal.SIGTERM)
    previous = {sig: signal.signal(sig, lambda signum, frame: received.append(signum)) for sig in deferred}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if received:
            signal.raise_signal(received[0])  # now to the handler it was meant for


def _copy_filtered(stream) -> None:
    """The JVM's stderr onto ours, line by line, without the lines of :data:`_JVM_NOISE`."""
    for line in iter(stream.readline, b""):
        if not line.startswith(_JVM_NOISE):
            try:
                os.write(2, line)
            except OSError:
                return



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


def launch_java_options(existing: str | None, *, light: bool, local: bool = False) -> str | None:
    """The driver JVM's options for a JVM bpe-spark starts: the user's, the class archive's
    (:mod:`jvm_cache`); for a ``local`` one the serial collector (:data:`LEAN_GC`); for a
    ``light`` (local, coordinating) one also C1-only compilation and a small initial heap
    (:data:`LEAN_INITIAL_HEAP`); each unless the user's options choose otherwise.

    >>> launch_java_options("-Xss4m -XX:-TieredCompilation", light=True)  # doctest: +SKIP
    '-Xss4m -XX:-TieredCompilation -XX:SharedArchiveFile=... -XX:+UseSerialGC -Xms32m'
    """
    options = os.environ.get(jvm_cache.ENV_DUMP) or jvm_cache.driver_java_options(existing)
    if light:
        options = light_executor_options(options or "") or options
    if light or local:
        options = lean_heap_options(options or "", initial=light)
    return options


def lean_heap_options(existing: str, *, initial: bool = True) -> str:
    """``existing`` with :data:`LEAN_GC` appended unless it chooses a collector, and (``initial``)
    :data:`LEAN_INITIAL_HEAP` unless it sets an initial heap. For a local driver JVM: G1's default
    start (a large initial heap, its region tables) costs about 80 MiB more resident memory, and
    its humongous regions failed Spark's large pages (:data:`LEAN_GC`).

    >>> lean_heap_options("-Xss4m")
    '-Xss4m -XX:+UseSerialGC -Xms32m'
    >>> lean_heap_options("-Xss4m", initial=False)
    '-Xss4m -XX:+UseSerialGC'
    >>> lean_heap_options("-XX:+UseG1GC -Xms1g")
    '-XX:+UseG1GC -Xms1g'
    """
    options = existing
    if not re.search(r"-XX:[+-]Use\w*GC\b", existing):
        options = f"{options} {LEAN_GC}"
    if initial and not re.search(r"-Xms\d|-XX:InitialHeapSize=", existing):
        options = f"{options} {LEAN_INITIAL_HEAP}"
    return options.strip()


def light_executor_options(existing: str) -> str | None:
    """A light JVM's options (an executor's, or a local driver's): ``existing`` (the user's) with
    C1-only compilation appended, or None when they already choose a JIT mode (theirs stands).

    >>> light_executor_options(""), light_executor_options("-Xss4m")
    ('-XX:TieredStopAtLevel=1', '-Xss4m -XX:TieredStopAtLevel=1')
    >>> light_executor_options("-XX:-TieredCompilation") is None
    True
    """
    if "Tiered" in existing:
        return None
    return f"{existing} {QUICK_JIT}".strip()


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


def running_session() -> SparkSession | None:
    """The session of a SparkContext already running in this process (the user's), if any."""
    from pyspark import SparkContext

    if SparkContext._active_spark_context is None:
        return None
    return SparkSession.getActiveSession() or SparkSession.builder.getOrCreate()


def _outside_conf(running: SparkSession | None) -> dict[str, str]:
    """The properties set outside bpe-spark: a running session's (its context's and the SQL
    properties set on it); else spark-submit's, read from the JVM gateway it started (its
    ``--master``, ``--conf``, properties file and ``spark-defaults.conf``); else what the JVM we
    are about to start will load (``spark-defaults.conf`` of ``$SPARK_CONF_DIR`` or the Spark
    home's ``conf/``)."""
    from pyspark import SparkConf, SparkContext

    if running is not None:
        conf = dict(running.sparkContext.getConf().getAll())
        conf.update(getattr(running.conf, "getAll", {}) or {})
        return conf
    if "PYSPARK_GATEWAY_PORT" in os.environ or SparkContext._gateway is not None:
        SparkContext._ensure_initialized()
        return dict(SparkConf().getAll())
    conf_dir = os.environ.get("SPARK_CONF_DIR")
    if not conf_dir:
        from pyspark.find_spark_home import _find_spark_home

        conf_dir = os.path.join(os.environ.get("SPARK_HOME") or _find_spark_home(), "conf")
    path = Path(conf_dir) / "spark-defaults.conf"
    return read_conf_file(path) if path.is_file() else {}


def _configure_running(running: SparkSession, props: Mapping[str, str], chosen: Mapping[str, str]) -> SparkSession:
    """Apply ``props`` to a running session where Spark lets them change at run time; a property
    the caller chose that cannot change any more (a static or context property) is a ConfigError,
    ours are left as the session has them."""
    for key, value in props.items():
        if key == "spark.master":
            continue
        if running.conf.isModifiable(key):
            running.conf.set(key, value)
        elif key in chosen and running.sparkContext.getConf().get(key) != value:
            raise ConfigError(f"{key} cannot change in the running Spark session (it is set when the session "
                              f"starts): set it where the session is created, e.g. spark-submit --conf {key}=...")
    return running
