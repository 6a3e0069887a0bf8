"""Run a command and watch the memory of its whole process tree, from /proc (Linux only).

Each process's own peak (``VmHWM``, kept by the kernel, so no sample can miss it) is read as
long as the process lives; the whole job's peak is the largest sum of ``VmRSS`` over the tree
seen at any sample. Processes are classed as the root (the command's own Python), ``jvm``
(java) and ``workers`` (every other descendant, e.g. Spark's Python workers).

>>> run = monitored([sys.executable, "-c", "print(1)"])  # doctest: +SKIP
>>> run.returncode, run.peak_mb["root"] > 0              # doctest: +SKIP
(0, True)
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

SAMPLE_SECONDS = 0.05


def _read_status(pid: int) -> dict[str, int] | None:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as fh:
            out = {}
            for line in fh:
                if line.startswith(("VmHWM:", "VmRSS:")):
                    key, value = line.split(":", 1)
                    out[key] = int(value.split()[0])  # kB
            return out
    except OSError:
        return None


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as fh:
            return fh.read().strip()
    except OSError:
        return ""


def _children(pid: int) -> list[int]:
    kids: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return kids
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", encoding="ascii") as fh:
                kids.extend(int(k) for k in fh.read().split())
        except OSError:
            continue
    return kids


def _tree(root: int) -> list[int]:
    seen = [root]
    stack = [root]
    while stack:
        for kid in _children(stack.pop()):
            if kid not in seen:
                seen.append(kid)
                stack.append(kid)
    return seen


@dataclass
class MonitoredRun:
    returncode: int
    wall_seconds: float
    stdout: str
    stderr: str
    peak_mb: dict[str, float] = field(default_factory=dict)  # root / jvm / workers / total
    processes: dict[int, tuple[str, float]] = field(default_factory=dict)  # pid -> (comm, peak MB)
    pid: int = 0  # the root process


def monitored(
    argv: list[str],
    *,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
    timeout: float | None = None,
) -> MonitoredRun:
    """Run ``argv`` to completion; wall time and peak memory of every process it started."""
    started = time.perf_counter()
    proc = subprocess.Popen(
        argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    peaks: dict[int, tuple[str, int]] = {}
    total_peak = 0
    stop = threading.Event()

    def sample() -> None:
        nonlocal total_peak
        while not stop.is_set():
            total = 0
            for pid in _tree(proc.pid):
                status = _read_status(pid)
                if not status:
                    continue
                total += status.get("VmRSS", 0)
                # subtle: read the name every time: spark-submit is a shell script that execs
                # java, so the JVM first shows up as "bash" under the same pid
                name = _comm(pid) or peaks.get(pid, ("", 0))[0]
                best = peaks.get(pid, ("", 0))[1]
                peaks[pid] = (name, max(best, status.get("VmHWM", 0)))
            total_peak = max(total_peak, total)
            stop.wait(SAMPLE_SECONDS)

    watcher = threading.Thread(target=sample, daemon=True)
    watcher.start()
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate()
    finally:
        stop.set()
        watcher.join()
    wall = time.perf_counter() - started
    root_kb = peaks.get(proc.pid, ("", 0))[1]
    jvm_kb = sum(kb for pid, (name, kb) in peaks.items() if pid != proc.pid and name == "java")
    workers_kb = max(
        [kb for pid, (name, kb) in peaks.items() if pid != proc.pid and name != "java"], default=0
    )
    return MonitoredRun(
        returncode=proc.returncode,
        wall_seconds=wall,
        stdout=stdout,
        stderr=stderr,
        peak_mb={
            "root": root_kb / 1024,
            "jvm": jvm_kb / 1024,
            "worker_max": workers_kb / 1024,
            "total": max(total_peak, root_kb) / 1024,
        },
        processes={pid: (name, kb / 1024) for pid, (name, kb) in peaks.items()},
        pid=proc.pid,
    )


if __name__ == "__main__":  # python -m bench.procmon CMD...: a quick look at one command
    run = monitored(sys.argv[1:])
    print(f"rc={run.returncode} wall={run.wall_seconds:.2f}s peaks={run.peak_mb}")
