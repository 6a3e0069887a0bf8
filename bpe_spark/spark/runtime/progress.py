"""Progress of the long phases (counting, merging, rounds, encoding, writing), on stderr.

A :class:`Progress` reporter is ``off`` (the Python API's default: library calls stay silent),
``bar`` (a ``tqdm`` bar per phase, updated in place: a terminal) or ``log`` (one line every
``every`` seconds and a final line per phase: cluster logs, pipes). A phase counts one quantity
(bytes, tasks or merges) against a total when it is known, and shows what else it knows (the
tasks, the round's threshold) beside it; the rate and the time left are the phase's average rate
since it started. Log lines read, e.g.::

    bpe-spark train: counting: 12.5/40.3 MB, 3/8 tasks, 4.2 MB/s, 7 s left
    bpe-spark train: merging: 12,000/31,743 merges, 2,345 merges/s, 8 s left
    bpe-spark train: round 3: 14,000 merges so far, threshold 1,234

and never hold the words a log filter takes for a failure (see :func:`log_line`). Spark's stage
figures come from :mod:`bpe_spark.spark.runtime.stage_progress`; this module imports no pyspark.

>>> clock = iter([0.0, 4.0, 8.0]).__next__
>>> import io; out = io.StringIO()
>>> progress = Progress("log", command="train", stream=out, every=1.0, clock=clock)
>>> with progress.phase("merging", total=100, unit="merges") as phase:
...     phase.update(50)
>>> print(out.getvalue(), end="")
bpe-spark train: merging: 50/100 merges, 12 merges/s, 4 s left
bpe-spark train: merging: done, 50/100 merges in 8 s, 6.2 merges/s
"""

from __future__ import annotations

import shutil
import sys
import threading
import time
from collections.abc import Callable

MODES = ("off", "bar", "log")
OPTION_CHOICES = ("auto", "on", "off")  # --progress: auto is bar on a terminal, else log
DEFAULT_EVERY = 10.0  # seconds between two log lines of one phase
_MB = 1_000_000
FAILURE_WORDS = ("WARN", "INFO", "ERROR", "Exception", "Traceback")


def resolve_mode(option: str, stream) -> str:
    """The reporter mode of a ``--progress`` choice: ``auto`` is ``bar`` when ``stream`` is a
    terminal, else ``log``; ``on`` is the same as ``auto`` (bars need a terminal).

    >>> import io
    >>> resolve_mode("auto", io.StringIO()), resolve_mode("off", io.StringIO())
    ('log', 'off')
    """
    if option not in OPTION_CHOICES:
        raise ValueError(f"progress must be one of {OPTION_CHOICES}, got {option!r}")
    if option == "off":
        return "off"
    isatty = getattr(stream, "isatty", None)
    return "bar" if isatty is not None and isatty() else "log"


def duration(seconds: float) -> str:
    """A short time: ``42 s``, ``3 min 05 s``, ``2 h 07 min``.

    >>> duration(4.4), duration(185), duration(7625)
    ('4 s', '3 min 05 s', '2 h 07 min')
    """
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def amount(value: float | None, unit: str) -> str:
    """A quantity as shown: bytes in MB with one decimal (two below 1 MB), anything else with
    thousands separators; ``?`` when unknown.

    >>> amount(12_345_678, "bytes"), amount(20_480, "bytes"), amount(31743, "merges"), amount(None, "bytes")
    ('12.3', '0.02', '31,743', '?')
    """
    if value is None:
        return "?"
    if unit == "bytes":
        return f"{value / _MB:.{1 if value >= _MB else 2}f}"
    return f"{int(value):,}"


def per_second(rate: float, unit: str) -> str:
    """A rate as shown: in MB for bytes; whole with thousands separators from 10 up, else with
    one decimal (two below 1).

    >>> per_second(4_213_000, "bytes"), per_second(23_456.7, "merges"), per_second(0.048, "tasks")
    ('4.2', '23,457', '0.05')
    """
    if unit == "bytes":
        rate /= _MB
    if rate >= 10:
        return f"{rate:,.0f}"
    return f"{rate:.{1 if rate >= 1 else 2}f}"


def _unit_label(unit: str) -> str:
    return "MB" if unit == "bytes" else unit


def rate_and_left(done: float, total: float | None, elapsed: float) -> tuple[float | None, float | None]:
    """The average rate since the start (per second) and the seconds left at that rate (None when
    not known yet: nothing done, no time passed, or no total).

    >>> rate_and_left(50, 100, 10.0)
    (5.0, 10.0)
    >>> rate_and_left(0, 100, 10.0), rate_and_left(5, None, 1.0)
    ((None, None), (5.0, None))
    """
    if done <= 0 or elapsed <= 0:
        return None, None
    rate = done / elapsed
    if total is None:
        return rate, None
    return rate, max(0.0, total - done) / rate


def log_line(command: str, text: str) -> str:
    """A progress line of ``command``: ``bpe-spark <command>: text``. Words a log filter reads as a
    failure (WARN, INFO, ERROR, Exception, Traceback) never appear, whatever a phase is named.

    >>> log_line("encode", "encoding: 2/4 tasks")
    'bpe-spark encode: encoding: 2/4 tasks'
    """
    for word in FAILURE_WORDS:
        text = text.replace(word, word.lower())
    return f"bpe-spark {command}: {text}"


class Phase:
    """One phase's figures: ``done`` of ``total`` in ``unit`` (``bytes``, ``tasks``, ``merges``),
    plus ``extra`` figures shown beside them (e.g. ``{"tasks": (3, 8)}``, ``{"threshold": 1234}``).
    Made by :meth:`Progress.phase`; a context manager whose exit prints the final line."""

    def __init__(self, progress: Progress, name: str, total: float | None, unit: str, start: float = 0):
        self.progress = progress
        self.name = name
        self.total = total
        self.unit = unit
        self.done: float = start
        self.start = start  # done before the phase began (merges of earlier rounds): not in its rate
        self.extra: dict[str, object] = {}
        self.started = progress.clock()
        self._last_line = self.started
        self._bar = None
        self._lock = threading.Lock()  # Spark phases are updated from a polling thread
        if progress.mode == "bar":
            from tqdm import tqdm

            # subtle: a terminal that reports no size (some ptys) would get no bar drawn at all
            size = shutil.get_terminal_size((100, 24))
            self._bar = tqdm(total=self._bar_total(), desc=name, unit=_unit_label(unit), file=progress.stream,
                             leave=True, ncols=size.columns if size.columns >= 40 else 100,
                             nrows=size.lines if size.lines >= 2 else 24, initial=start,
                             unit_scale=1 / _MB if unit == "bytes" else False)

    def _bar_total(self):
        return None if self.total is None else self.total

    def _rate_and_left(self, now: float) -> tuple[float | None, float | None]:
        total = None if self.total is None else self.total - self.start
        return rate_and_left(self.done - self.start, total, now - self.started)

    def update(self, done: float, *, total: float | None = None, **extra) -> None:
        """Set the figures (absolute, not increments); a log line when ``every`` seconds passed."""
        mode = self.progress.mode
        if mode == "off":
            return
        with self._lock:
            self.done = done
            if total is not None:
                self.total = total
            self.extra.update(extra)
            now = self.progress.clock()
            if self._bar is not None:
                if self._bar.total != self.total:
                    self._bar.total = self.total
                self._bar.n = done
                postfix = self._extra_text()
                if postfix:
                    self._bar.set_postfix_str(postfix, refresh=False)
                self._bar.refresh()
            elif now - self._last_line >= self.progress.every:
                self._last_line = now
                self.progress.write(self.line(now))

    def _extra_text(self) -> str:
        parts = []
        for key, value in self.extra.items():
            if isinstance(value, tuple):
                done, total = value
                if done is None and total is None:
                    parts.append(f"? {_unit_label(key)}")  # e.g. the bytes of remote globs
                else:
                    parts.append(f"{amount(done, key)}/{amount(total, key)} {_unit_label(key)}")
            elif value is not None:
                parts.append(f"{key} {amount(value, key) if isinstance(value, int) else value}")
        return ", ".join(parts)

    def figures(self, now: float, *, final: bool = False) -> str:
        """``done/total unit``, the extra figures, the rate and the time left (``final``: the time
        taken instead)."""
        rate, left = self._rate_and_left(now)
        label = _unit_label(self.unit)
        parts = [f"{amount(self.done, self.unit)}/{amount(self.total, self.unit)} {label}"]
        if final:
            parts[0] += f" in {duration(now - self.started)}"
        if self.extra:
            parts.append(self._extra_text())
        if rate is not None:
            parts.append(f"{per_second(rate, self.unit)} {label}/s")
        if not final:
            parts.append(f"{duration(left)} left" if left is not None else f"{duration(now - self.started)} so far")
        return ", ".join(parts)

    def line(self, now: float) -> str:
        return f"{self.name}: {self.figures(now)}"

    def final_line(self, now: float) -> str:
        return f"{self.name}: done, {self.figures(now, final=True)}"

    def close(self, *, finished: bool = True) -> None:
        """End the phase: the bar's last state, or the final log line; ``finished=False`` (a
        failure, an interrupt): no final line, which would read as done."""
        if self.progress.mode == "off":
            return
        with self._lock:
            if self._bar is not None:
                if finished:
                    self._bar.n = self.done
                    self._bar.refresh()
                self._bar.close()
                self._bar = None
            elif finished:
                self.progress.write(self.final_line(self.progress.clock()))

    def __enter__(self):
        return self

    def __exit__(self, kind, value, traceback) -> None:
        self.close(finished=kind is None)


class Progress:
    """The progress reporter of one run (see the module docstring). ``mode``: ``off``, ``bar`` or
    ``log``; ``command``: the prefix of log lines; ``every``: seconds between log lines;
    ``clock``: seconds (a fake clock in tests)."""

    def __init__(self, mode: str = "off", *, command: str = "run", stream=None, every: float = DEFAULT_EVERY,
                 clock: Callable[[], float] = time.monotonic):
        if mode not in MODES:
            raise ValueError(f"progress mode must be one of {MODES}, got {mode!r}")
        self.mode = mode
        self.command = command
        self.stream = stream
        self.every = every
        self.clock = clock

    @classmethod
    def from_option(cls, option: str, command: str, *, stream=None, every: float = DEFAULT_EVERY) -> Progress:
        """The reporter of a ``--progress auto|on|off`` choice, on ``stream`` (default stderr)."""
        stream = stream if stream is not None else sys.stderr
        return cls(resolve_mode(option, stream), command=command, stream=stream, every=every)

    @property
    def enabled(self) -> bool:
        return self.mode != "off"

    def phase(self, name: str, *, total: float | None = None, unit: str = "tasks", start: float = 0) -> Phase:
        """A new phase counting ``unit`` up to ``total`` (None: unknown), from ``start``."""
        return Phase(self, name, total, unit, start)

    def note(self, text: str) -> None:
        """One line, whatever the mode (e.g. a finished round); printed above a bar."""
        if self.mode == "bar":
            from tqdm import tqdm

            tqdm.write(log_line(self.command, text), file=self.stream)
        elif self.mode == "log":
            self.write(text)

    def write(self, text: str) -> None:
        stream = self.stream if self.stream is not None else sys.stderr
        try:
            print(log_line(self.command, text), file=stream, flush=True)
        except (BrokenPipeError, ValueError):  # a closed stream: progress is never worth a failure
            pass


OFF = Progress("off")


def merge_callback(phase: Phase, *, already: int = 0, every: int = 256) -> Callable[[int, object], None]:
    """A :meth:`MergeEngine.run` ``progress`` callback that updates ``phase`` every ``every``
    merges (a clock read per merge would cost more than the merge); ``already``: merges before
    this engine run (rounds).

    >>> calls = []
    >>> class Seen:
    ...     def update(self, done): calls.append(done)
    >>> callback = merge_callback(Seen(), already=10, every=2)
    >>> for n in range(1, 6): callback(n, None)
    >>> calls
    [12, 14]
    """
    update = phase.update

    def on_merge(n: int, merge) -> None:
        if n % every == 0:
            update(already + n)

    return on_merge
