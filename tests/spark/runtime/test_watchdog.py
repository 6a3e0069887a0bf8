"""Every process of a run ends with its driver (issue 43, deliverable 7): a driver killed with
SIGKILL leaves no JVM and no Python worker, even when its JVM cannot run its own exit (stopped
here, as one thrashing in its collector near a full heap would be): bpe_spark.spark.runtime.watchdog."""

from __future__ import annotations

import gzip
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.conftest import ROOT

from bpe_spark.spark.runtime import watchdog

pytestmark = [pytest.mark.spark,
              pytest.mark.skipif(not Path("/proc").is_dir(), reason="follows the processes through /proc")]

SAMPLE = ROOT / "data" / "sample" / "tiny_shakespeare.txt.gz"


def _processes() -> dict[int, tuple[int, str]]:
    """``{pid: (parent pid, name)}`` of the processes alive (zombies have ended)."""
    found = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        name, rest = text[text.index("(") + 1 : text.rindex(")")], text.rsplit(")", 1)[1].split()
        if rest[0] not in ("Z", "X"):
            found[int(stat.parent.name)] = (int(rest[1]), name)
    return found


def _tree(root: int) -> dict[int, str]:
    procs, tree, todo = _processes(), {}, [root]
    while todo:
        parent = todo.pop()
        for pid, (ppid, name) in procs.items():
            if ppid == parent and pid not in tree:
                tree[pid] = name
                todo.append(pid)
    return tree


def _alive(pids) -> list[int]:
    procs = _processes()
    return [pid for pid in pids if pid in procs]


def test_a_killed_driver_leaves_no_jvm_or_python_worker(tmp_path):
    corpus = tmp_path / "corpus.txt.gz"  # big enough that Python workers are still counting it
    corpus.write_bytes(gzip.compress(gzip.decompress(SAMPLE.read_bytes()) * 12, compresslevel=1))
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    driver = subprocess.Popen([sys.executable, "-m", "bpe_spark.cli", "train", "--input", str(corpus), "--vocab-size",
                               "2000", "--out", str(tmp_path / "m"), "--master", "local[2]"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=ROOT)
    run: dict[int, str] = {}
    try:
        deadline = time.monotonic() + 120
        jvms: list[int] = []
        while time.monotonic() < deadline and driver.poll() is None:
            run = _tree(driver.pid)
            jvms = [pid for pid, name in run.items() if name == "java"]
            if jvms and sum(1 for pid in _tree(jvms[0]) if run.get(pid, "").startswith("python")) >= 2:
                break  # the Python daemon and a worker under the JVM
            time.sleep(0.2)
        assert driver.poll() is None and jvms, "the run ended before its Python workers were seen"
        os.kill(jvms[0], signal.SIGSTOP)  # a JVM that cannot run its own exit
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait()
        deadline = time.monotonic() + 15
        while _alive(run) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = {pid: run[pid] for pid in _alive(run)}
        assert left == {}, f"still running after the driver was killed: {left}"
    finally:
        driver.kill()
        for pid in _alive(run):  # whatever a failure left
            os.kill(pid, signal.SIGKILL)


def test_end_tree_gives_a_grace_then_kills_a_process_and_its_children():
    parent = subprocess.Popen([sys.executable, "-c", "import subprocess, time, signal\n"
                               "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                               "subprocess.Popen(['sleep', '60']); time.sleep(60)"])
    try:
        deadline = time.monotonic() + 10
        while not _tree(parent.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        children = list(_tree(parent.pid))
        assert children
        start = watchdog._stat(parent.pid)[2]
        began = time.monotonic()
        watchdog.end_tree(parent.pid, start, grace=0.5, child_grace=0.5)
        assert time.monotonic() - began < 5
        parent.wait(timeout=5)
        time.sleep(0.2)
        assert _alive(children) == []
    finally:
        parent.kill()


def test_the_watch_ends_with_the_jvm_it_watches():
    # a JVM that exits while the driver lives: the watchdog goes too (it never outlives its JVM)
    jvm = subprocess.Popen(["sleep", "60"])
    try:
        watchdog.watch(jvm.pid)
        guard = watchdog._WATCHDOGS[-1]
        time.sleep(0.5)
        assert guard.poll() is None
        jvm.kill()
        jvm.wait()
        assert guard.wait(timeout=10) == 0
    finally:
        jvm.kill()
        watchdog._WATCHDOGS[-1].kill()
