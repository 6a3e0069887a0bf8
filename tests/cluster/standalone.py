"""A standalone Spark cluster on this machine, for the cluster tests and benchmark: a master on
127.0.0.1 and two 1-core workers on 127.0.0.2 and .3 (together, local[2]), started from the pyspark
installation.

    python tests/cluster/standalone.py up | down | status | kill-worker N | restart-worker N

(``make cluster-up`` / ``make cluster-down``). Everything lives in the git-ignored ``.cluster/``:
the processes' record (``processes.json``), the master's and workers' logs and work directories,
the workers' Spark home, the event logs, and ``shared/``, the one data directory the driver and
the executors both see at the same path (it stands in for HDFS: inputs and outputs go there).

Each worker is a machine of its own as far as its executors can tell: it runs in a private
mount namespace (``unshare -m``) in which the checkout and the driver's virtual environment are
hidden under empty tmpfs mounts, ``/tmp`` is its own, and only its Spark home (a hard-linked copy
of pyspark's, since pyspark's own lives in the hidden venv), ``shared/``, ``node-envs/`` (Python
environments "installed on the nodes", when a test puts them there) and its own directory are
mounted back, at the same paths. Its executors therefore run the Python the job ships
(``--archives``) or finds on the node, never the driver's.

``down`` stops exactly the recorded processes, their process groups and their descendants: a
process whose id was reused since (another start time) is left alone. It is idempotent.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STATE = ROOT / ".cluster"
RECORD = STATE / "processes.json"
SPARK_HOME = STATE / "spark-home"
SHARED = STATE / "shared"
EVENTS = STATE / "events"
NODE_ENVS = STATE / "node-envs"  # Python environments "installed on the nodes"

HOST = "127.0.0.1"
# Another checkout's cluster on the same machine: BPE_SPARK_CLUSTER_PORT_OFFSET=100 moves every port.
PORT_OFFSET = int(os.environ.get("BPE_SPARK_CLUSTER_PORT_OFFSET", "0"))
MASTER_PORT = 7077 + PORT_OFFSET
MASTER_URL = f"spark://{HOST}:{MASTER_PORT}"
MASTER_UI_PORT = 18080 + PORT_OFFSET
# name -> (address, web UI port). Each worker has an address of its own, as machines do: Spark
# reads the shuffle files of an executor on the same host from its disk, which a worker's private
# namespace hides. Its executors' log URLs name the port.
WORKERS = {"worker-1": ("127.0.0.2", 18081 + PORT_OFFSET), "worker-2": ("127.0.0.3", 18082 + PORT_OFFSET)}
WORKER_CORES = 1
WORKER_MEMORY = "4g"
START_TIMEOUT = 180.0


class ClusterError(RuntimeError):
    """The cluster could not be brought up (or a worker back); the message names the log."""


# --- processes ---------------------------------------------------------------------------------

def _start_time(pid: int) -> int | None:
    """The kernel's start time of ``pid`` (clock ticks since boot), or None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    return None if fields[0] == "Z" else int(fields[19])


def _processes() -> dict[int, tuple[int, int]]:
    """Every live process: pid -> (parent pid, process group)."""
    table = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[0] != "Z":
            table[int(entry.name)] = (int(fields[1]), int(fields[2]))
    return table


def _owned(record: dict) -> set[int]:
    """The live processes that belong to a recorded start: the recorded process (if it is still
    the one we started), the members of its process group, and all their descendants."""
    pid, group = record["pid"], record["pgid"]
    started = _start_time(pid)
    if started is not None and started != record["start_time"]:
        return set()  # the id was reused: not ours (and then neither is a group of that id)
    table = _processes()
    owned = {p for p, (_, g) in table.items() if g == group}
    if started is not None:
        owned.add(pid)
    grew = True
    while grew:
        children = {p for p, (parent, _) in table.items() if parent in owned} - owned
        owned |= children
        grew = bool(children)
    return owned


def _signal_all(pids: set[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def _stop(record: dict, *, kill: bool = False, timeout: float = 20.0) -> bool:
    """Stop a recorded start (SIGTERM, then SIGKILL after ``timeout``; SIGKILL at once when
    ``kill``: a machine lost). True when something was running."""
    owned = _owned(record)
    if not owned:
        return False
    _signal_all(owned, signal.SIGKILL if kill else signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while True:
        owned = _owned(record)
        if not owned:
            return True
        if time.monotonic() > deadline:
            _signal_all(owned, signal.SIGKILL)
            deadline = time.monotonic() + timeout
        time.sleep(0.2)


def _read_record() -> dict:
    try:
        return json.loads(RECORD.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}


def _write_record(record: dict) -> None:
    STATE.mkdir(parents=True, exist_ok=True)
    staged = RECORD.with_suffix(".tmp")
    staged.write_text(json.dumps(record, indent=2, sort_keys=True), encoding="utf-8")
    staged.replace(RECORD)


def _launch(name: str, command: list[str], env: dict[str, str]) -> dict:
    log_dir = STATE / name
    log_dir.mkdir(parents=True, exist_ok=True)
    with open(log_dir / f"{name}.log", "ab") as log:
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                   env=env, cwd=log_dir, start_new_session=True)
    entry = {"pid": process.pid, "pgid": process.pid, "start_time": _start_time(process.pid),
             "command": command, "log": str(log_dir / f"{name}.log")}
    record = _read_record()
    record[name] = entry
    _write_record(record)
    return entry


def running(name: str) -> bool:
    entry = _read_record().get(name)
    return entry is not None and bool(_owned(entry))


# --- set-up --------------------------------------------------------------------------------------

def _pyspark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def _hidden() -> list[Path]:
    """What the workers must not see: the checkout and the driver's environment."""
    paths = sorted({ROOT, Path(sys.prefix).resolve(), _pyspark_home()})
    return [p for p in paths if not any(p != q and p.is_relative_to(q) for q in paths)]


def _prepare_spark_home() -> None:
    """The workers' Spark home: pyspark's, hard-linked (the same files, no copy of the jars), or
    copied where the venv lies on another file system."""
    source = _pyspark_home()
    version = (source / "version.py").read_bytes()
    if (SPARK_HOME / "version.py").is_file() and (SPARK_HOME / "version.py").read_bytes() == version:
        return
    shutil.rmtree(SPARK_HOME, ignore_errors=True)
    staged = STATE / "spark-home.tmp"
    shutil.rmtree(staged, ignore_errors=True)
    if subprocess.run(["cp", "-al", str(source), str(staged)], capture_output=True, check=False).returncode:
        shutil.rmtree(staged, ignore_errors=True)  # another file system: no hard links, a copy
        shutil.copytree(source, staged, symlinks=True)
    staged.replace(SPARK_HOME)


def _check_isolation_possible() -> None:
    try:
        done = subprocess.run(["unshare", "-m", "--propagation", "private", "true"], capture_output=True,
                              text=True, timeout=30, check=False)
    except FileNotFoundError:
        raise ClusterError("cluster-up needs `unshare` (util-linux) to give the workers their own "
                           "mount namespace") from None
    if done.returncode != 0:
        raise ClusterError(f"cluster-up needs root for `unshare -m` (private mount namespaces for "
                           f"the workers): {done.stderr.strip()}")
    java = shutil.which("java")
    if java and any(Path(java).resolve().is_relative_to(p) for p in _hidden()):
        raise ClusterError(f"java ({Path(java).resolve()}) lies inside the checkout, which the workers "
                           "cannot see: install Java 17+ outside it (make java)")


def _base_env() -> dict[str, str]:
    """The daemons' environment: none of the driver's Python or Spark settings, no PATH entry
    into what the workers cannot see."""
    hidden = _hidden()
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("PYSPARK", "SPARK_", "PYTHON", "VIRTUAL_ENV", "BPE_SPARK"))}
    env["PATH"] = os.pathsep.join(entry for entry in os.environ.get("PATH", "").split(os.pathsep)
                                  if entry and not any(Path(entry).is_relative_to(p) for p in hidden))
    env.update(SPARK_HOME=str(SPARK_HOME), SPARK_LOCAL_IP=HOST, SPARK_NO_DAEMONIZE="1")
    return env


def _worker_command(name: str) -> list[str]:
    """The worker, in a mount namespace of its own (see the module docstring)."""
    own = STATE / name
    host, ui_port = WORKERS[name]
    keep = [SPARK_HOME, SHARED, NODE_ENVS, own]
    lines = ["set -e", "mount -t tmpfs bpe-stage /mnt"]
    for number, path in enumerate(keep):
        lines += [f"mkdir /mnt/{number}", f"mount --bind {shlex.quote(str(path))} /mnt/{number}"]
    lines += [f"mount -t tmpfs bpe-hidden {shlex.quote(str(path))}" for path in _hidden()]
    for number, path in enumerate(keep):
        lines += [f"mkdir -p {shlex.quote(str(path))}", f"mount --move /mnt/{number} {shlex.quote(str(path))}"]
    lines += [f"mount --bind {shlex.quote(str(own / 'tmp'))} /tmp", 'exec "$@"']
    return ["unshare", "-m", "--propagation", "private", "sh", "-c", "\n".join(lines), name,
            str(SPARK_HOME / "bin" / "spark-class"), "org.apache.spark.deploy.worker.Worker", MASTER_URL,
            "--host", host, "--cores", str(WORKER_CORES), "--memory", WORKER_MEMORY,
            "--work-dir", str(own / "work"), "--webui-port", str(ui_port)]


def _start_worker(name: str) -> None:
    own = STATE / name
    for sub in ("work", "tmp", "home"):
        (own / sub).mkdir(parents=True, exist_ok=True)
    env = dict(_base_env(), HOME=str(own / "home"), TMPDIR="/tmp", SPARK_LOCAL_IP=WORKERS[name][0])
    _launch(name, _worker_command(name), env)


def _port_open(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(1.0)
        return probe.connect_ex((HOST, port)) == 0


def master_state() -> dict:
    """The master's JSON status (workers, applications), or {} when it does not answer."""
    try:
        with urllib.request.urlopen(f"http://{HOST}:{MASTER_UI_PORT}/json/", timeout=5) as reply:
            return json.loads(reply.read())
    except (OSError, ValueError):
        return {}


def worker_of_url(url: str) -> str | None:
    """The worker (by name) whose web UI ``url`` points into (a worker's or an executor's log URL).

    >>> worker_of_url(f"http://127.0.0.3:{WORKERS['worker-2'][1]}/logPage/?appId=app-1&executorId=0")
    'worker-2'
    """
    port = url.split("//", 1)[-1].split("/", 1)[0].rsplit(":", 1)[-1]
    return next((name for name, (_, ui_port) in WORKERS.items() if str(ui_port) == port), None)


def alive_workers() -> set[str]:
    """The workers (by name) the master counts alive."""
    return {worker_of_url(worker.get("webuiaddress", "")) for worker in master_state().get("workers", [])
            if worker.get("state") == "ALIVE"} - {None}


def _wait(condition, what: str, log: str, timeout: float = START_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise ClusterError(f"{what} within {timeout:.0f} s; see {log}")
        time.sleep(0.5)


def up() -> None:
    """Start the master and the workers that are not running; wait until all are registered."""
    _check_isolation_possible()
    for path in (STATE, SHARED, EVENTS, NODE_ENVS):
        path.mkdir(parents=True, exist_ok=True)
    _prepare_spark_home()
    if not running("master"):
        if _port_open(MASTER_PORT):
            raise ClusterError(f"port {MASTER_PORT} is taken by a process cluster-up did not start; "
                               f"stop it (or its cluster) first")
        _launch("master", [str(SPARK_HOME / "bin" / "spark-class"), "org.apache.spark.deploy.master.Master",
                           "--host", HOST, "--port", str(MASTER_PORT), "--webui-port", str(MASTER_UI_PORT)],
                _base_env())
        _wait(lambda: master_state().get("status") == "ALIVE", "the master did not start",
              str(STATE / "master" / "master.log"))
    for name in WORKERS:
        if not running(name):
            _start_worker(name)
    _wait(lambda: alive_workers() == set(WORKERS), "the workers did not register with the master",
          str(STATE / "worker-*" / "worker-*.log"))


def down() -> list[str]:
    """Stop every recorded process (workers first); the names of those that were running."""
    record = _read_record()
    stopped = [name for name in sorted(record, key=lambda n: n == "master") if _stop(record[name])]
    RECORD.unlink(missing_ok=True)
    return stopped


def kill_worker(name: str) -> None:
    """Lose a worker as a machine is lost: SIGKILL to it, its executors and their Python workers;
    return once the master no longer counts it alive."""
    entry = _read_record().get(name)
    if entry is None:
        raise ClusterError(f"{name} was not started by cluster-up")
    _stop(entry, kill=True)
    _wait(lambda: name not in alive_workers(), f"the master still counts {name} alive", entry["log"], 120.0)


def restart_worker(name: str) -> None:
    """Start a worker again (after :func:`kill_worker`) and wait until it is registered."""
    if not running(name):
        _start_worker(name)
    _wait(lambda: name in alive_workers(), f"{name} did not register again", str(STATE / name / f"{name}.log"))


def main(argv: list[str]) -> int:
    usage = "usage: standalone.py up | down | status | kill-worker NAME | restart-worker NAME"
    if not argv or argv[0] not in {"up", "down", "status", "kill-worker", "restart-worker"}:
        print(usage, file=sys.stderr)
        return 2
    try:
        if argv[0] == "up":
            up()
            print(f"cluster up: {MASTER_URL} (UI http://{HOST}:{MASTER_UI_PORT}), workers "
                  f"{', '.join(sorted(alive_workers()))}; shared data directory {SHARED}")
        elif argv[0] == "down":
            stopped = down()
            print(f"cluster down: stopped {', '.join(stopped)}" if stopped else "cluster down: nothing was running")
        elif argv[0] == "status":
            print(json.dumps({name: running(name) for name in ("master", *WORKERS)}))
            print(f"alive at the master: {sorted(alive_workers())}")
        elif len(argv) != 2 or argv[1] not in WORKERS:
            print(f"{usage} (NAME: {', '.join(WORKERS)})", file=sys.stderr)
            return 2
        elif argv[0] == "kill-worker":
            kill_worker(argv[1])
        else:
            restart_worker(argv[1])
    except ClusterError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
