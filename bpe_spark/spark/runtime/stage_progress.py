"""The progress of a Spark phase (counting, encoding, writing, a round's pair counts): tasks done of
the stages submitted so far and input bytes read, from ``SparkContext.statusTracker()``, polled in
a daemon thread into a :class:`~bpe_spark.spark.runtime.progress.Phase`.

Input bytes are known up front when the input is local files (their sizes on disk, compressed
when they are); bytes done are that total times the share of the phase's first stage (the one
that reads the input) whose tasks are done. Remote inputs show ``?``. The phase's jobs are those
started while it lasts (the driver runs one phase at a time); a stage counts once submitted
(a stage Spark skips, its shuffle already computed, is never submitted).

>>> with spark_phase(spark, progress, "encoding", input_size=lambda: local_input_bytes(df)):  # doctest: +SKIP
...     df.write.parquet("out")
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator

from bpe_spark.spark.runtime.progress import Phase, Progress

POLL_SECONDS = {"bar": 0.5, "log": 1.0}


class StageWatch:
    """Polls the status tracker for the jobs that run while it watches, and feeds ``phase``."""

    def __init__(self, spark, phase: Phase, input_bytes: int | None, interval: float, *, show_bytes: bool = True):
        self.tracker = spark.sparkContext.statusTracker()
        self.phase = phase
        self.input_bytes = input_bytes
        self.show_bytes = show_bytes  # False: the phase reads no input (bytes are no figure of it)
        self.interval = interval
        self.jobs: set[int] = set()
        # the jobs before the phase: the tracker lists them too (a job shorter than a poll is only
        # found that way, after it ended)
        self.before = max([*self._known_jobs(), -1])
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bpe-spark-progress", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, *, last_poll: bool = True) -> None:
        """Stop polling; ``last_poll``: take the final figures first (not after a failure or an
        interrupt: the session may be gone)."""
        self._stop.set()
        self._thread.join(timeout=5)
        if last_poll:
            with contextlib.suppress(Exception):
                self.poll()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.poll()
            except Exception:  # noqa: BLE001 - progress is never worth a failure (e.g. the JVM is stopping)
                return

    def _known_jobs(self) -> list[int]:
        return [*self.tracker.getActiveJobsIds(), *self.tracker.getJobIdsForGroup()]

    def poll(self) -> None:
        tracker = self.tracker
        self.jobs.update(job for job in self._known_jobs() if job > self.before)
        stages = {}
        for job in sorted(self.jobs):
            info = tracker.getJobInfo(job)
            for stage_id in (list(info.stageIds) if info is not None else ()):
                stage = tracker.getStageInfo(stage_id)
                # submitted: a task ran or runs (a stage skipped or still pending has neither)
                if stage is not None and (stage.numCompletedTasks or stage.numActiveTasks):
                    stages[stage.stageId] = stage  # a stage shared by two jobs counts once
        done = sum(s.numCompletedTasks for s in stages.values())
        total = sum(s.numTasks for s in stages.values()) if stages else None
        if self.input_bytes is None:
            self.phase.update(done, total=total, **({"bytes": (None, None)} if self.show_bytes else {}))
        else:
            first = stages[min(stages)] if stages else None
            share = first.numCompletedTasks / max(1, first.numTasks) if first is not None else 0.0
            self.phase.update(self.input_bytes * min(1.0, share), tasks=(done, total))


@contextlib.contextmanager
def spark_phase(spark, progress: Progress, name: str, *,
                input_size: Callable[[], int | None] | None = None) -> Iterator[Phase]:
    """A phase of ``progress`` fed by Spark's status tracker while the block runs: the input bytes
    the phase reads (``input_size()``: the local files' sizes, e.g.
    :func:`bpe_spark.spark.read.documents.local_input_bytes`, or None for ``?``) and the tasks;
    ``input_size=None``: tasks only (the phase reads no input, e.g. writing shards from pieces).
    Nothing is looked up when ``progress`` is off."""
    if not progress.enabled:
        yield progress.phase(name)
        return
    reads = input_size is not None
    input_bytes = input_size() if reads else None
    if input_bytes is not None:
        phase = progress.phase(name, total=input_bytes, unit="bytes")
    else:
        phase = progress.phase(name, unit="tasks")
    watch = StageWatch(spark, phase, input_bytes, POLL_SECONDS[progress.mode], show_bytes=reads)
    watch.start()
    try:
        yield phase
    except BaseException:
        watch.stop(last_poll=False)
        phase.close(finished=False)  # no "done" line for a failed or interrupted phase
        raise
    watch.stop()
    phase.close()
