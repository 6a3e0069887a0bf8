"""An ``OSError`` as one line that names what to fix: the path (when known) and the system's
reason; for a full disk or quota (``ENOSPC``, ``EDQUOT``) also the free space on that path's file
system, read where the message is made. Pure: no pyspark.

Some writers' errors name no path (Python's ``write`` on a full disk, pyarrow's "Error writing
bytes to file"): the caller then gives the path it was writing (``fallback``, e.g. the command's
``--out``), which the line names as such.

>>> os_error_line(PermissionError(13, "Permission denied", "/models/locked"))
'/models/locked: Permission denied'
>>> os_error_line(OSError("[Errno 28] Error writing bytes to file. Detail: [errno 28] No space left on device"))
'No space left on device (Error writing bytes to file)'
"""

from __future__ import annotations

import errno
import os
import re
import shutil

from bpe_spark.storage.output_guard import is_local, local_path

FULL = (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC))
_ERRNO = re.compile(r"\[errno (\d+)\]\s*", re.IGNORECASE)
_DETAIL = re.compile(r"\.?\s*Detail:.*$", re.DOTALL)


def error_number(exc: BaseException | str) -> int | None:
    """The ``errno`` of an OSError, or the one its message quotes (``[Errno 28]``: pyarrow's, or a
    Spark task's line)."""
    number = getattr(exc, "errno", None)
    if isinstance(number, int):
        return number
    found = _ERRNO.search(str(exc))
    if found:
        return int(found.group(1))
    return errno.ENOSPC if "No space left on device" in str(exc) else None


def is_disk_full(exc: BaseException | str) -> bool:
    return error_number(exc) in FULL


def os_error_line(exc: BaseException, fallback: str | None = None, *, fallback_role: str = "writing") -> str:
    """The one line of ``exc``: ``PATH: reason``, plus the free space when the disk is full.
    ``fallback``: the path being written when ``exc`` names none (then named as
    ``fallback_role fallback``)."""
    number = error_number(exc)
    reason = _reason(exc, number)
    path = getattr(exc, "filename", None)
    if path is not None:
        line = f"{path}: {reason}"
    elif fallback:
        line = f"{reason} ({fallback_role} {fallback})"
    else:
        detail = _detail(exc)
        line = f"{reason} ({detail})" if detail else reason
    where = path if path is not None else fallback
    if number in FULL and where is not None:
        space = free_space(os.fspath(where))
        line += f"; {space}" if space else ""
        line += ": free space there or write elsewhere"
    return line


def _reason(exc: BaseException, number: int | None) -> str:
    strerror = getattr(exc, "strerror", None)
    if strerror:
        return strerror
    if number is not None:
        try:
            return os.strerror(number)
        except ValueError:
            pass
    text = _ERRNO.sub("", str(exc).splitlines()[0] if str(exc) else "").strip()
    return text or type(exc).__name__


def _detail(exc: BaseException) -> str:
    """What a pathless message says beyond its reason ("Error writing bytes to file")."""
    text = str(exc).splitlines()[0] if str(exc) else ""
    text = _DETAIL.sub("", _ERRNO.sub("", text)).strip(" .")
    return "" if not text or text == getattr(exc, "strerror", None) else text


def free_space(path: str) -> str | None:
    """``"N free of M on its file system"`` for a local ``path`` (its nearest existing parent);
    None when it cannot be read (a remote store, a path not on this machine).

    >>> free_space("/").endswith("on its file system")
    True
    """
    if not is_local(path):
        return None
    probe = local_path(path)
    while not os.path.exists(probe) and os.path.dirname(probe) != probe:
        probe = os.path.dirname(probe)
    try:
        usage = shutil.disk_usage(probe)
    except OSError:
        return None
    return f"{size_text(usage.free)} free of {size_text(usage.total)} on its file system"


def size_text(size: int) -> str:
    """A size for messages.

    >>> size_text(0), size_text(1536), size_text(5 << 30)
    ('0 bytes', '1.5 KiB', '5.0 GiB')
    """
    if size < 1024:
        return f"{size} bytes"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        size /= 1024
        if size < 1024 or unit == "TiB":
            return f"{size:.1f} {unit}"
    raise AssertionError("unreachable")
