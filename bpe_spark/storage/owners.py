"""Who owns a run's files: the process (host, pid, start time) that made a staging sibling or
holds a checkpoint lock, and whether that owner is gone; and the lock files' shared rules (the
owner's record, a lock held by a gone process of this host, a local file created exclusively).

A process of this host is gone when its pid no longer runs or now belongs to a later process
(Linux's /proc start time tells them apart); another host's owner is taken as gone once its files
are older than :data:`STALE_AFTER_SECONDS`, since its processes cannot be seen from here.
"""

from __future__ import annotations

import os
import re
import socket
import time
from dataclasses import dataclass
from functools import cache

STALE_AFTER_SECONDS = 7 * 24 * 3600  # another host's run is taken as dead after this


@dataclass(frozen=True)
class Owner:
    """The run that made a staging sibling."""

    host: str
    pid: int
    start: int  # the process's start, seconds since the epoch


def host() -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", socket.gethostname()) or "host"


def process_start(pid: int) -> int | None:
    """When process ``pid`` started (epoch seconds), from Linux's /proc; None when unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rpartition(b")")[2].split()
        ticks = int(fields[19])  # field 22 of stat: start time in clock ticks after boot
        return int(_boot_time() + ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


@cache
def _boot_time() -> float:
    with open("/proc/stat", "rb") as fh:
        for line in fh:
            if line.startswith(b"btime"):
                return float(line.split()[1])
    raise OSError("no btime in /proc/stat")


@cache
def current_owner() -> Owner:
    pid = os.getpid()
    return Owner(host(), pid, process_start(pid) or int(time.time()))


def owner_is_dead(owner: Owner, modified: float, *, now: float | None = None) -> bool:
    """True when the run that made a staging sibling is gone: a process of this host that no
    longer runs (or whose pid now belongs to a later process); on another host, a sibling whose
    start and last change are both older than :data:`STALE_AFTER_SECONDS`."""
    if owner.host != host():
        return (now or time.time()) - max(owner.start, modified) > STALE_AFTER_SECONDS
    if owner.pid == os.getpid():
        return False
    started = process_start(owner.pid)
    if started is not None:
        return abs(started - owner.start) > 2  # subtle: two readings of a start may differ by rounding
    if os.path.isdir("/proc"):
        return True  # /proc is there and the pid is not: gone
    try:
        os.kill(owner.pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


# --- lock files (the checkpoint's and a resumed encode's) ----------------------------------------
def lock_record(**extra) -> dict:
    """The JSON a lock file holds: this process as :func:`current_owner` records it, and ``extra``."""
    owner = current_owner()
    return {"host": owner.host, "pid": owner.pid, "start": owner.start, **extra}


def held_by_gone_process(held: dict) -> bool | None:
    """Whether the lock record ``held`` belongs to a process of this host that no longer runs;
    False for another host's (never judged from here); None when it names no owner."""
    if held.get("host") != host():
        return False
    try:
        owner = Owner(str(held["host"]), int(held["pid"]), int(held["start"]))
    except (KeyError, TypeError, ValueError):
        return None
    return owner_is_dead(owner, modified=0.0)


def create_exclusive(path: str, data: bytes) -> bool:
    """Create the local file ``path`` holding ``data`` (``O_EXCL``); False when it exists."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    return True
