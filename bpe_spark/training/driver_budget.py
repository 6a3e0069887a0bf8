"""The driver budget: how many distinct pretokens the driver may hold at once (docs/design.md 2.1 step 3).

Given as a count, a fraction of the distinct pretokens (``0.3``, ``"30%"``), or ``"auto"`` (the
default): derived from the driver's memory by :func:`memory_budget`, from the bytes per distinct
pretoken measured where the driver holds them:

- the JVM driver receives the collected Arrow batches (``toArrow``): all the counts as text in
  driver mode, a pretoken's bytes plus 12 (string offset, 64-bit count), measured 19.3-31.7
  bytes per pretoken on the shared corpora's counts; in rounds, the frequent pretokens as
  symbols, 12 plus 4 per symbol (``list<int32>``). Every task result of a job counts against
  ``spark.driver.maxResultSize`` (over it the job fails), and out-of-order partitions wait in
  the heap: both bound the budget at ``12 + 1 x`` the corpus's mean pretoken bytes for the
  question "do all the counts fit" (``as_text=True``), and at ``12 + 4 x`` for the pretokens
  that rounds keep on the driver;
- the Python driver holds the Arrow table, the packed words and the merge engine at its peak:
  measured (peak RSS over the same process before the counts arrived, vocabulary 32k) 139 bytes
  per pretoken on all shared corpora (884,531 distinct, 15.6 bytes each), 181 on en_books
  (8.1 bytes), 208 on zh_classics (19.7 bytes); 193 and 350 at a 100k vocabulary; 44 MB whatever
  the corpus. The model, ``48 + 12 x`` the mean pretoken bytes per pretoken plus 64 MiB and 512
  bytes per vocabulary entry, lies 1.3-1.7x above every measurement, and takes at most
  :data:`PYTHON_SHARE` of the memory available to the process (the JVM, and in local mode the
  executors, share the machine).

>>> memory_budget(DriverMemory(jvm_heap=2 << 30, max_result_size=1 << 30, python_available=16 << 30),
...               mean_pretoken_bytes=8.0, vocab_size=32000)
(21962900, 'spark.driver.maxResultSize 1.0 GiB at 44 bytes a pretoken')
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from typing import Any

from bpe_spark.errors import ConfigError

AUTO = "auto"
JVM_BYTES_PER_PRETOKEN = 12  # Arrow: the string's (or list's) offset and the 64-bit count
JVM_BYTES_PER_SYMBOL = 4  # rounds collect int32 symbols; a byte-scheme pretoken starts with one per byte
JVM_BYTES_PER_TEXT_BYTE = 1  # driver mode collects the pretokens' UTF-8 text
PYTHON_BYTES_PER_PRETOKEN = 48
PYTHON_BYTES_PER_PRETOKEN_BYTE = 12
PYTHON_FIXED_BYTES = 64 << 20  # allocator arenas, the engine's tables (measured 44 MB)
PYTHON_BYTES_PER_TOKEN = 512  # the symbol table and the pairs a merge creates, per vocabulary entry
PYTHON_SHARE = 0.75  # of the memory available to the driver's Python process
JVM_HEAP_SHARE = 0.5  # of the driver JVM's max heap (Spark's own memory takes the rest)
RESULT_SHARE = 0.9  # of spark.driver.maxResultSize (Arrow framing, the job's other results)
MIN_BUDGET = 10_000


# --- given budgets ----------------------------------------------------------------------------
def resolve_budget(driver_budget: float | str, distinct: int) -> int:
    """Distinct pretokens the driver may hold: an int, or a fraction of ``distinct`` (0.3, "30%").

    >>> resolve_budget("10%", 5000), resolve_budget(0.5, 11), resolve_budget(1000, 10**9)
    (500, 5, 1000)
    """
    value = _parse_budget(driver_budget)
    if value == AUTO:
        raise ValueError("an 'auto' budget comes from the driver's memory: memory_budget()")
    if isinstance(value, int):
        return value
    return max(1, math.floor(value * distinct))


def absolute_budget(driver_budget: float | str) -> int | None:
    """The budget as a count when it is one (not a fraction, not ``"auto"``).

    >>> absolute_budget("2000000"), absolute_budget("30%"), absolute_budget(1.0), absolute_budget("auto")
    (2000000, None, None, None)
    """
    value = _parse_budget(driver_budget)
    return value if isinstance(value, int) else None


def is_auto(driver_budget: float | str) -> bool:
    """Whether the budget is the driver's memory's (``"auto"``).

    >>> is_auto("auto"), is_auto(" AUTO "), is_auto(5)
    (True, True, False)
    """
    return _parse_budget(driver_budget) == AUTO


def _parse_budget(driver_budget: float | str) -> int | float | str:
    """A count (int), a fraction in (0, 1] (float) or ``"auto"``; anything else is a ConfigError."""
    value: Any = driver_budget
    if isinstance(value, str):
        text = value.strip()
        if text.lower() == AUTO:
            return AUTO
        try:
            if text.endswith("%"):
                value = float(text[:-1]) / 100
            else:
                value = int(text) if text.isdigit() else float(text)
        except ValueError:
            raise ConfigError(
                f"driver budget {driver_budget!r} is neither a count (2000000), a fraction (0.3, 30%) nor 'auto'"
            ) from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ConfigError(f"driver budget must be a positive count, a fraction in (0, 1] or 'auto', got {driver_budget!r}")
    if isinstance(value, int) or value <= 1:
        return value
    if value.is_integer():
        return int(value)
    raise ConfigError(f"a fractional driver budget must be in (0, 1], got {driver_budget!r}")


# --- the budget from the driver's memory ------------------------------------------------------
def reachable_vocab(vocab_size: int, *, scheme: str, distinct: int, pretoken_bytes: int, special_tokens: int = 0) -> int:
    """The largest vocabulary training can reach on ``distinct`` pretokens of ``pretoken_bytes``
    UTF-8 bytes in all, capped at ``vocab_size``: the memory the merges need never depends on a
    ``vocab_size`` the corpus cannot fill. A merge removes at least one symbol from the pretokens
    holding its pair, so there are at most as many merges as symbols beyond each pretoken's last
    one: ``bytes - distinct`` in the byte scheme (one symbol a byte), ``bytes`` in the char scheme
    (a character has at least one byte, and an end-of-word marker may add one symbol); the
    alphabet is at most 256 bytes, or one symbol a character.

    >>> reachable_vocab(2**31, scheme="byte", distinct=25_000, pretoken_bytes=200_000, special_tokens=1)
    175257
    >>> reachable_vocab(32_000, scheme="char", distinct=10**6, pretoken_bytes=10**7)
    32000
    """
    if scheme == "byte":
        most = 256 + max(0, pretoken_bytes - distinct)
    else:
        most = 2 * pretoken_bytes + 1  # the alphabet, a marker symbol, and the merges
    return min(vocab_size, most + special_tokens)



@dataclass(frozen=True)
class DriverMemory:
    """What bounds the driver: the JVM's max heap and ``spark.driver.maxResultSize`` (0: no
    limit), and the memory available to the Python process (None: unknown); ``python_limit``
    names what bounds the last (the machine, a cgroup, the container's overhead)."""

    jvm_heap: int
    max_result_size: int
    python_available: int | None
    python_limit: str = "the driver's available memory"


def memory_budget(memory: DriverMemory, *, mean_pretoken_bytes: float, vocab_size: int,
                  as_text: bool = False) -> tuple[int, str]:
    """The distinct pretokens the driver can hold, and what binds it (a few words for the notice
    when training goes to rounds), for pretokens of ``mean_pretoken_bytes`` UTF-8 bytes on average:
    collected as text (``as_text``: driver mode, every count at once) or as int32 symbols (the
    pretokens that rounds keep on the driver).

    >>> memory_budget(DriverMemory(32 << 30, 8 << 30, 28 << 30), mean_pretoken_bytes=8.0, vocab_size=50000)[0]
    155943537
    >>> memory_budget(DriverMemory(1 << 30, 0, None), mean_pretoken_bytes=20.0, vocab_size=32000)
    (5835553, 'the driver JVM heap 1.0 GiB at 92 bytes a pretoken')
    >>> memory_budget(DriverMemory(1 << 30, 0, None), mean_pretoken_bytes=20.0, vocab_size=32000, as_text=True)
    (16777216, 'the driver JVM heap 1.0 GiB at 32 bytes a pretoken')
    """
    jvm_each = JVM_BYTES_PER_PRETOKEN + (JVM_BYTES_PER_TEXT_BYTE if as_text else JVM_BYTES_PER_SYMBOL) * mean_pretoken_bytes
    limits = [(JVM_HEAP_SHARE * memory.jvm_heap / jvm_each, f"the driver JVM heap {_gib(memory.jvm_heap)}", jvm_each)]
    if memory.max_result_size > 0:
        limits.append((RESULT_SHARE * memory.max_result_size / jvm_each,
                       f"spark.driver.maxResultSize {_gib(memory.max_result_size)}", jvm_each))
    if memory.python_available is not None:
        python_each = PYTHON_BYTES_PER_PRETOKEN + PYTHON_BYTES_PER_PRETOKEN_BYTE * mean_pretoken_bytes
        room = PYTHON_SHARE * memory.python_available - PYTHON_FIXED_BYTES - PYTHON_BYTES_PER_TOKEN * vocab_size
        limits.append((room / python_each, f"{memory.python_limit} {_gib(memory.python_available)}", python_each))
    count, what, each = min(limits)
    return max(MIN_BUDGET, math.floor(count)), f"{what} at {each:.0f} bytes a pretoken"


def _gib(size: int) -> str:
    """A size in GiB (MiB below one), for messages.

    >>> _gib(3 << 29), _gib(80_000)
    ('1.5 GiB', '0.1 MiB')
    """
    return f"{size / (1 << 30):.1f} GiB" if size >= 1 << 30 else f"{size / (1 << 20):.1f} MiB"


_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50}


def parse_bytes(text: str, default_unit: str = "b") -> int:
    """A JVM/Spark size (``4g``, ``512m``, ``1073741824``; no unit: ``default_unit``).

    >>> parse_bytes("1g"), parse_bytes("512MB"), parse_bytes("2048", "m"), parse_bytes("0")
    (1073741824, 536870912, 2147483648, 0)
    """
    match = re.fullmatch(r"\s*(\d+)\s*([kmgtp]?)i?b?\s*", str(text).lower())
    if match is None:
        raise ConfigError(f"{text!r} is not a size such as 4g or 512m")
    return int(match[1]) * _UNITS[match[2] or default_unit.lower()]


def available_memory() -> tuple[int | None, str]:
    """The memory this process may still take: the machine's available memory (Linux
    ``MemAvailable``, else the free physical pages), within a cgroup's limit when there is one;
    and which of them it is."""
    found: list[tuple[int, str]] = []
    meminfo = _read("/proc/meminfo")
    match = re.search(r"^MemAvailable:\s+(\d+) kB", meminfo or "", re.MULTILINE)
    if match:
        found.append((int(match[1]) << 10, "the driver's available memory"))
    else:
        try:
            found.append((os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"), "the driver's free memory"))
        except (ValueError, OSError, AttributeError):
            pass
    for limit_file, usage_file in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                                   ("/sys/fs/cgroup/memory/memory.limit_in_bytes",
                                    "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        limit, usage = _read(limit_file), _read(usage_file)
        if limit and usage and limit.strip().isdigit() and usage.strip().isdigit() and int(limit) < 1 << 60:
            found.append((max(0, int(limit) - int(usage)), "the driver cgroup's free memory"))
    return min(found) if found else (None, "the driver's available memory")


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as fh:
            return fh.read()
    except OSError:
        return None
