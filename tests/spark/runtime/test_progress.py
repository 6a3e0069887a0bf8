"""The progress reporter (bpe_spark.spark.runtime.progress): the lines it writes, their rate and time-left
arithmetic on a fake clock, the modes of --progress, and that merging with it on changes no merge."""

from __future__ import annotations

import io

import pytest

from bpe_spark.bpe.config import TrainerConfig
from bpe_spark.spark.runtime.progress import FAILURE_WORDS, OFF, Progress, log_line, merge_callback, resolve_mode
from bpe_spark.training.trainer import train


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def reporter(every: float = 10.0, command: str = "train"):
    out, clock = io.StringIO(), FakeClock()
    return Progress("log", command=command, stream=out, every=every, clock=clock), out, clock


def lines(out: io.StringIO) -> list[str]:
    return out.getvalue().splitlines()


def test_merging_lines_every_n_seconds_with_rate_and_time_left():
    progress, out, clock = reporter(every=10.0)
    with progress.phase("merging", total=32_000, unit="merges") as phase:
        clock.now += 4
        phase.update(1_000)  # before 10 s: no line
        clock.now += 6
        phase.update(8_000)  # 10 s: 800 merges/s, 24,000 left: 30 s
        clock.now += 5
        phase.update(12_000)  # 5 s after the last line: none
        clock.now += 10
        phase.update(16_000)  # 25 s: 640 merges/s, 16,000 left: 25 s
        clock.now += 1
    assert lines(out) == [
        "bpe-spark train: merging: 8,000/32,000 merges, 800 merges/s, 30 s left",
        "bpe-spark train: merging: 16,000/32,000 merges, 640 merges/s, 25 s left",
        "bpe-spark train: merging: done, 16,000/32,000 merges in 26 s, 615 merges/s",
    ]


def test_bytes_phase_shows_mb_tasks_and_what_is_not_known():
    progress, out, clock = reporter(every=1.0, command="encode")
    with progress.phase("encoding", total=40_296_784, unit="bytes") as phase:
        clock.now += 1
        phase.update(0, tasks=(0, None))  # nothing read yet: no rate, the time so far
        clock.now += 3
        phase.update(10_074_196, tasks=(2, 8))  # 4 s for a quarter: 12 s left
    with progress.phase("writing") as phase:  # tasks only, total unknown until the stages start
        clock.now += 61
        phase.update(3, total=4)
        clock.now += 2
    assert lines(out) == [
        "bpe-spark encode: encoding: 0.00/40.3 MB, 0/? tasks, 1 s so far",
        "bpe-spark encode: encoding: 10.1/40.3 MB, 2/8 tasks, 2.5 MB/s, 12 s left",
        "bpe-spark encode: encoding: done, 10.1/40.3 MB in 4 s, 2/8 tasks, 2.5 MB/s",
        "bpe-spark encode: writing: 3/4 tasks, 0.05 tasks/s, 20 s left",
        "bpe-spark encode: writing: done, 3/4 tasks in 1 min 03 s, 0.05 tasks/s",
    ]


def test_unknown_input_bytes_and_rounds_notes():
    progress, out, clock = reporter(every=1.0)
    with progress.phase("counting") as phase:
        clock.now += 2
        phase.update(5, total=20, bytes=(None, None))  # a remote glob: bytes unknown
    progress.note("round 3: 14,000 merges so far, threshold 1,234")
    with progress.phase("round 4: merging", total=32_000, unit="merges", start=14_000) as phase:
        clock.now += 2
        phase.update(18_000)  # the rate counts this phase's merges only: 2,000/s, 7 s left
    assert lines(out) == [
        "bpe-spark train: counting: 5/20 tasks, ? MB, 2.5 tasks/s, 6 s left",
        "bpe-spark train: counting: done, 5/20 tasks in 2 s, ? MB, 2.5 tasks/s",
        "bpe-spark train: round 3: 14,000 merges so far, threshold 1,234",
        "bpe-spark train: round 4: merging: 18,000/32,000 merges, 2,000 merges/s, 7 s left",
        "bpe-spark train: round 4: merging: done, 18,000/32,000 merges in 2 s, 2,000 merges/s",
    ]


def test_lines_never_hold_the_words_of_a_failure():
    progress, out, _ = reporter(every=0.0)
    progress.note("Traceback of an INFO WARN ERROR Exception")
    assert lines(out) == ["bpe-spark train: traceback of an info warn error exception"]
    assert not any(word in log_line("x", " ".join(FAILURE_WORDS)) for word in FAILURE_WORDS)


def test_modes_of_the_option():
    assert resolve_mode("auto", Terminal()) == resolve_mode("on", Terminal()) == "bar"
    assert resolve_mode("auto", io.StringIO()) == resolve_mode("on", io.StringIO()) == "log"
    assert resolve_mode("off", Terminal()) == "off"
    with pytest.raises(ValueError, match="progress must be one of"):
        resolve_mode("sometimes", io.StringIO())
    assert Progress.from_option("auto", "train", stream=Terminal()).mode == "bar"


def test_off_writes_nothing_and_bar_draws_a_tqdm_bar():
    quiet = io.StringIO()
    silent = Progress("off", stream=quiet)
    with silent.phase("merging", total=10, unit="merges") as phase:
        phase.update(5)
    silent.note("round 1")
    assert quiet.getvalue() == "" and not OFF.enabled

    screen = Terminal()
    bar = Progress.from_option("on", "train", stream=screen)
    with bar.phase("merging", total=1744, unit="merges") as phase:
        phase.update(872)
        bar.note("round 1: 872 merges so far, threshold 12")
        phase.update(1744)
    drawn = screen.getvalue()
    assert "\r" in drawn  # redrawn in place
    assert "merging: 100%" in drawn and "1744/1744" in drawn and "merges/s" in drawn
    assert "bpe-spark train: round 1: 872 merges so far, threshold 12\n" in drawn


def test_a_failed_or_interrupted_phase_has_no_done_line():
    progress, out, clock = reporter(every=1.0)
    with pytest.raises(KeyboardInterrupt), progress.phase("counting", total=10) as phase:
        clock.now += 2
        phase.update(3)
        raise KeyboardInterrupt
    assert lines(out) == ["bpe-spark train: counting: 3/10 tasks, 1.5 tasks/s, 5 s left"]


def test_a_closed_stream_is_no_failure():
    stream = io.StringIO()
    progress = Progress("log", stream=stream, every=0.0)
    stream.close()
    progress.note("round 1")  # no ValueError


def test_merging_with_progress_changes_no_merge():
    cfg = TrainerConfig(vocab_size=400, pattern="gpt2")
    texts = ["the quick brown fox jumps over the lazy dog " * 3, "pack my box with five dozen liquor jugs"] * 20
    plain = train(texts, cfg)
    progress, out, _ = reporter(every=0.0)
    with progress.phase("merging", total=len(plain.merges), unit="merges") as phase:
        shown = train(texts, cfg, progress=merge_callback(phase, every=16))
    assert shown.merges == plain.merges and shown.vocab == plain.vocab
    seen, n = lines(out), len(plain.merges)
    assert seen[0] == f"bpe-spark train: merging: 16/{n} merges, 0 s so far"  # the fake clock stands still
    assert len(seen) == n // 16 + 1
    assert seen[-1] == f"bpe-spark train: merging: done, {n // 16 * 16}/{n} merges in 0 s"
