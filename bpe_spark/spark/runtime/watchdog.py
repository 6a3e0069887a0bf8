"""The driver JVM's watchdog: a JVM that bpe-spark starts, and the Python workers under it, end
with the driver, however the driver ends (SIGKILL, a crash, an out-of-memory kill).

pyspark's JVM exits when the pipe on its stdin closes, through ``System.exit`` and its shutdown
hooks; a JVM that cannot run them (thrashing in its collector near a full heap, stopped, hung in a
hook) lives on with its heap after the driver is gone (issue 43: a 4.6 GB JVM), and the Python
daemon under it keeps its workers while the JVM holds its pipe open. Linux's
``PR_SET_PDEATHSIG`` would have to be set inside the JVM's process, which pyspark's launcher
starts (its own ``preexec_fn``), so the watch is a separate process instead:

- :func:`watch` (the driver, right after the JVM started) starts this file as a script: the
  standard library only, no package import, its own session (a terminal's Ctrl-C and a
  scheduler's signal to the driver's process group leave it be; it ignores SIGINT, SIGTERM and
  SIGHUP too). Its stdin is a pipe whose write end only the driver holds.
- The watchdog waits for that pipe to close (the driver ended, by any means) or the JVM to end
  (nothing left to watch; ``pidfd`` or ``/proc``, never a reused process id).
- The driver gone, the JVM has :data:`GRACE_SECONDS` to exit by itself (its shutdown hooks remove
  Spark's scratch directories); then it is killed (SIGKILL). The processes under it (the Python
  daemon and workers, collected from ``/proc`` while it lived) get :data:`CHILD_GRACE_SECONDS`
  more (the daemon ends its workers itself when the JVM's pipe closes), then are killed.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time

GRACE_SECONDS = 4.0
CHILD_GRACE_SECONDS = 2.0
_WATCHDOGS: list = []  # the driver side: the pipes' write ends live as long as the driver


def watch(jvm_pid: int) -> None:
    """Start the watchdog of the JVM ``jvm_pid`` (POSIX only; a no-op elsewhere)."""
    if os.name != "posix":
        return
    try:
        process = subprocess.Popen(  # noqa: S603 - this interpreter and this file
            [sys.executable, "-I", "-S", os.path.abspath(__file__), str(jvm_pid)],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True, close_fds=True,
        )
    except OSError:  # no interpreter to run it (an embedded one): the JVM's own EOF watch stays
        return
    _WATCHDOGS.append(process)


# --- the watchdog process ------------------------------------------------------------------------
def _stat(pid: int) -> tuple[int, str, int] | None:
    """``(parent pid, state, start time)`` of ``pid`` from ``/proc``; None when there is none."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            text = fh.read().decode("ascii", "replace")
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()
    return int(fields[1]), fields[0], int(fields[19])


def _alive(pid: int, start: int | None) -> bool:
    """``pid`` still runs and is the process that started at ``start`` (a zombie has ended)."""
    if start is None:  # no /proc: the best a process that is not the parent can ask
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    found = _stat(pid)
    return found is not None and found[1] not in ("Z", "X") and found[2] == start


def _descendants(root: int) -> dict[int, int]:
    """The processes under ``root`` (``{pid: start time}``), from ``/proc``."""
    parents: dict[int, list[tuple[int, int]]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return {}
    for name in names:
        if name.isdigit():
            found = _stat(int(name))
            if found is not None:
                parents.setdefault(found[0], []).append((int(name), found[2]))
    tree, todo = {}, [root]
    while todo:
        for pid, start in parents.get(todo.pop(), ()):
            if pid not in tree:
                tree[pid] = start
                todo.append(pid)
    return tree


def _kill(pid: int, start: int | None) -> None:
    if _alive(pid, start):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def _wait_for_driver(jvm: int, start: int | None) -> bool:
    """Block until the driver's pipe closes (True) or the JVM ends (False)."""
    try:
        pidfd = os.pidfd_open(jvm)
    except (AttributeError, OSError):
        pidfd = None
    watched = [0] if pidfd is None else [0, pidfd]
    while True:
        ready, _, _ = select.select(watched, [], [], 1.0)
        if (pidfd is not None and pidfd in ready) or not _alive(jvm, start):
            return False
        if 0 in ready:
            try:
                if os.read(0, 4096) == b"":
                    return True
            except OSError:
                return True


def end_tree(jvm: int, start: int | None, grace: float = GRACE_SECONDS,
             child_grace: float = CHILD_GRACE_SECONDS) -> None:
    """The driver is gone: give the JVM ``grace`` seconds to exit, then kill it; its descendants
    (as seen while it lived) ``child_grace`` more, then kill them."""
    tree: dict[int, int] = {}
    deadline = time.monotonic() + grace
    while _alive(jvm, start) and time.monotonic() < deadline:
        tree.update(_descendants(jvm))
        time.sleep(0.1)
    tree.update(_descendants(jvm))
    _kill(jvm, start)
    deadline = time.monotonic() + child_grace
    while any(_alive(pid, born) for pid, born in tree.items()) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid, born in tree.items():
        _kill(pid, born)


def main(argv: list[str]) -> int:
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    jvm = int(argv[1])
    found = _stat(jvm)
    start = found[2] if found is not None else None
    if found is None and not os.path.isdir("/proc") and not _alive(jvm, None):
        return 0
    if found is None and os.path.isdir("/proc"):
        return 0  # the JVM ended before the watch began
    if _wait_for_driver(jvm, start):
        end_tree(jvm, start)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
