"""spark-submit as a cluster user runs it, against the standalone cluster of :mod:`standalone` (or
local mode, for the reference), and what a run's event log says about where its tasks ran.

Executors get their Python one of three ways (:data:`ENVIRONMENTS`): ``archive`` ships
``dist/env.tar.gz`` (``make dist``: no pyspark in it) with ``--archives`` and runs
``./env/bin/python``; ``node`` runs bpe-spark "installed on the nodes" (``.cluster/node-envs/
bpe-spark``, pyspark included, as pip installs it); ``py-files`` runs a node environment with the
dependencies only and ships the package as ``dist/bpe_spark.zip`` on ``--py-files``. The driver
always runs the checkout's interpreter.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

import standalone

ROOT = standalone.ROOT
DIST = ROOT / "dist"
ENV_ARCHIVE = DIST / "env.tar.gz"
PACKAGE_ZIP = DIST / "bpe_spark.zip"
ENVIRONMENTS = ("archive", "node", "py-files")
NODE_ENV = standalone.NODE_ENVS / "bpe-spark"
DEPS_ENV = standalone.NODE_ENVS / "deps-only"
SUBMIT_LOGS = standalone.STATE / "submits"
DRIVER_PYTHON = Path(sys.executable)


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def require_dist() -> None:
    missing = [str(path) for path in (ENV_ARCHIVE, PACKAGE_ZIP) if not path.is_file()]
    if missing:
        raise FileNotFoundError(f"{', '.join(missing)} missing: run `make dist` first")


def install_on_nodes() -> None:
    """The nodes' own Python environments, from the packed one (once per archive): ``bpe-spark``
    as ``pip install dist/bpe_spark-*.whl`` leaves a node (pyspark and py4j too: they are its
    dependencies; hard-linked from the driver's, the same files), ``deps-only`` with the
    dependencies but neither bpe-spark nor pyspark (for ``--py-files``)."""
    import py4j
    import pyspark

    require_dist()
    stamp = str(ENV_ARCHIVE.stat().st_mtime_ns)
    for target, installed in ((NODE_ENV, True), (DEPS_ENV, False)):
        if (target / ".from-archive").is_file() and (target / ".from-archive").read_text() == stamp:
            continue
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        with tarfile.open(ENV_ARCHIVE) as archive:
            archive.extractall(target, filter="tar")
        site = next(target.glob("lib/python*/site-packages"))
        if installed:
            for package in (pyspark, py4j):
                source = Path(package.__file__).parent
                subprocess.run(["cp", "-al", str(source), str(site / source.name)], check=True)
        else:
            for entry in site.glob("bpe_spark*"):
                shutil.rmtree(entry)
        (target / ".from-archive").write_text(stamp)


@dataclass(frozen=True)
class Run:
    """One finished spark-submit: its output, its log file and its event log directory."""

    name: str
    returncode: int
    stdout: str
    log: Path
    events: Path

    def check(self) -> Run:
        if self.returncode != 0:
            tail = self.log.read_text(encoding="utf-8", errors="replace")[-3000:]
            raise AssertionError(f"{self.name}: spark-submit exited {self.returncode}; stdout:\n"
                                 f"{self.stdout[-2000:]}\n{self.log}:\n{tail}")
        return self


def submit_command(job: Path, args: list[str], *, name: str, master: str = standalone.MASTER_URL,
                   environment: str = "archive", conf: dict[str, str] | None = None,
                   spark_args: list[str] = (), wait_for_executors: bool = True,
                   ) -> tuple[list[str], dict[str, str], Path]:
    """The spark-submit command line, its environment and the run's event log directory.

    ``wait_for_executors``: the first job waits until both executors are registered, so that even
    a small job runs tasks on both workers (the tests check it); the driver's own start-up then
    no longer overlaps the executors' (about 20 s on this machine), so the benchmark does not wait.
    """
    events = standalone.EVENTS / name
    shutil.rmtree(events, ignore_errors=True)
    events.mkdir(parents=True)
    props = {
        "spark.eventLog.enabled": "true",
        "spark.eventLog.dir": events.as_uri(),
        "spark.eventLog.compress": "false",
        "spark.ui.enabled": "false",
        "spark.pyspark.driver.python": str(DRIVER_PYTHON),
    }
    command = [str(spark_home() / "bin" / "spark-submit"), "--master", master, *spark_args]
    if not master.startswith("local"):
        props["spark.cores.max"] = str(standalone.WORKER_CORES * len(standalone.WORKERS))
        if wait_for_executors:  # standalone counts the registered cores against spark.cores.max
            props["spark.scheduler.minRegisteredResourcesRatio"] = "1.0"
        if environment == "archive":
            require_dist()
            command += ["--archives", f"{ENV_ARCHIVE}#env"]
            props["spark.pyspark.python"] = "./env/bin/python"
        elif environment == "node":
            install_on_nodes()
            props["spark.pyspark.python"] = str(NODE_ENV / "bin" / "python")
        elif environment == "py-files":
            install_on_nodes()
            command += ["--py-files", str(PACKAGE_ZIP)]
            props["spark.pyspark.python"] = str(DEPS_ENV / "bin" / "python")
        else:
            raise ValueError(f"environment {environment!r}: one of {ENVIRONMENTS}")
    props.update(conf or {})
    for key, value in props.items():
        command += ["--conf", f"{key}={value}"]
    command += [str(job), *args]
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PYSPARK_", "SPARK_"))}
    env.update(SPARK_HOME=str(spark_home()), PYSPARK_DRIVER_PYTHON=str(DRIVER_PYTHON))
    return command, env, events


def start(job: Path, args: list[str], *, name: str, cwd: Path, **options) -> tuple[subprocess.Popen, Path, Path]:
    """Start a spark-submit (stdout piped, stderr into its log); the process, log and events."""
    command, env, events = submit_command(job, args, name=name, **options)
    SUBMIT_LOGS.mkdir(parents=True, exist_ok=True)
    log = SUBMIT_LOGS / f"{name}.log"
    with open(log, "w", encoding="utf-8") as handle:
        handle.write(" ".join(command) + "\n")
    process = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, bufsize=1)
    return process, log, events


def finish(name: str, process: subprocess.Popen, log: Path, events: Path, timeout: float = 900) -> Run:
    stdout, stderr = process.communicate(timeout=timeout)
    with open(log, "a", encoding="utf-8") as handle:
        handle.write(f"{stderr}\n--- stdout ---\n{stdout}")
    return Run(name, process.returncode, stdout, log, events)


def submit(job: Path, args: list[str], *, name: str, cwd: Path, timeout: float = 900, **options) -> Run:
    """Run a spark-submit to its end."""
    process, log, events = start(job, args, name=name, cwd=cwd, **options)
    try:
        return finish(name, process, log, events, timeout)
    finally:
        if process.poll() is None:
            process.kill()


# --- event logs ----------------------------------------------------------------------------------

def _events(directory: Path):
    # Spark 4 writes rolling event logs: eventlog_v2_<app>/events_<n>_<app> (and appstatus_<app>)
    for path in sorted(p for p in directory.rglob("*") if p.is_file() and not p.name.startswith(("appstatus", "."))):
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                if line.strip():
                    yield json.loads(line)


@dataclass(frozen=True)
class EventSummary:
    """What a run's event log says: its master, its successful tasks per worker, its properties."""

    master: str
    tasks_by_worker: dict[str, int]
    failed_tasks: int
    properties: dict[str, str]


def event_summary(directory: Path) -> EventSummary:
    worker_of: dict[str, str] = {}
    master, tasks, failed, properties = "", {}, 0, {}
    for event in _events(directory):
        kind = event.get("Event", "")
        if kind == "SparkListenerEnvironmentUpdate":
            properties = dict(event.get("Spark Properties", {}))
            master = properties.get("spark.master", "")
        elif kind == "SparkListenerExecutorAdded":
            url = event["Executor Info"].get("Log Urls", {}).get("stdout", "")
            worker_of[event["Executor ID"]] = standalone.worker_of_url(url) or f"executor {event['Executor ID']}"
        elif kind == "SparkListenerTaskEnd":
            executor = event["Task Info"]["Executor ID"]
            worker = worker_of.get(executor, "driver" if executor == "driver" else f"executor {executor}")
            if event.get("Task End Reason", {}).get("Reason") == "Success":
                tasks[worker] = tasks.get(worker, 0) + 1
            else:
                failed += 1
    return EventSummary(master, tasks, failed, properties)
