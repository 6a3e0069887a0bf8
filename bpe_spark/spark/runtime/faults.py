"""The fault-injection test hook: one task of a stage fails (or stalls) once, to show that Spark's
retry (or a rerun) changes nothing in the result.

:func:`fail_once` is called from one line in each task body that does the work: counting
(``count``), applying a training round's merges (``round``), encoding (``encode``) and writing
an encoded dataset's shards (``shards``, after the task's first shard is committed). When the
fault names that stage, attempt 0 of partition 0 raises :class:`InjectedFault`; Spark retries the
task (local mode too: ``local[N,F]``, see :func:`bpe_spark.spark.runtime.session.with_task_retries`).
``STAGE:stall`` makes that task sleep instead, so that a test can kill the run mid-job.

The fault is read in the task: the job's Spark local property ``bpe_spark.fault``
(``spark.sparkContext.setLocalProperty("bpe_spark.fault", "count")``: reaches the Python workers
whatever started them), else the environment variable ``BPE_SPARK_FAULT`` of the Python workers
(set before Spark starts, it reaches local workers through the JVM's environment; on a cluster,
``spark.executorEnv.BPE_SPARK_FAULT``). Several stages: ``count,encode``. Unset, it costs one
lookup per call.
"""

from __future__ import annotations

import os
import time

from pyspark import TaskContext

STAGES = ("count", "round", "encode", "shards")
PROPERTY = "bpe_spark.fault"
ENV = "BPE_SPARK_FAULT"
STALL_SECONDS = 3600


class InjectedFault(RuntimeError):
    """The failure :func:`fail_once` injects (a test asked for it)."""


def fail_once(stage: str) -> None:
    """In a task body of ``stage``: fail (or stall) attempt 0 of partition 0 when asked to."""
    context = TaskContext.get()
    if context is None or context.partitionId() != 0 or context.attemptNumber() != 0:
        return
    asked = context.getLocalProperty(PROPERTY) or os.environ.get(ENV, "")
    for fault in asked.split(","):
        name, _, action = fault.strip().partition(":")
        if name != stage:
            continue
        if action == "stall":
            time.sleep(STALL_SECONDS)
        raise InjectedFault(f"injected fault in stage {stage} ({PROPERTY} / {ENV}), partition 0, attempt 0")
