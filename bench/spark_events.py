"""Where a Spark run's time went, read from its event log (``spark.eventLog.enabled``): the
benchmark's notes name the application's start to its first job and each job's duration."""

from __future__ import annotations

import json
from pathlib import Path


def spark_timeline(event_dir: Path) -> str:
    """Where a Spark run's time went, from its event log: the application's start to its first
    job (JVM and session start, driver work), then each job's duration and task count."""
    events = []
    for path in sorted(event_dir.rglob("*")):
        if path.is_file():
            with open(path, encoding="utf-8", errors="replace") as fh:
                for line in fh:
                    try:
                        events.append(json.loads(line))
                    except ValueError:
                        continue
    start = next((e["Timestamp"] for e in events if e.get("Event") == "SparkListenerApplicationStart"), None)
    if start is None:
        return ""
    jobs: dict[int, dict] = {}
    tasks: dict[int, int] = {}
    for e in events:
        kind = e.get("Event")
        if kind == "SparkListenerJobStart":
            jobs[e["Job ID"]] = {"start": e["Submission Time"], "stages": e["Stage IDs"]}
        elif kind == "SparkListenerJobEnd" and e["Job ID"] in jobs:
            jobs[e["Job ID"]]["end"] = e["Completion Time"]
        elif kind == "SparkListenerStageCompleted":
            tasks[e["Stage Info"]["Stage ID"]] = e["Stage Info"]["Number of Tasks"]
    end = next((e["Timestamp"] for e in events if e.get("Event") == "SparkListenerApplicationEnd"), None)
    parts = []
    if jobs:
        first = min(job["start"] for job in jobs.values())
        parts.append(f"app start to first job {(first - start) / 1000:.1f} s")
    for job_id in sorted(jobs):
        job = jobs[job_id]
        n_tasks = sum(tasks.get(stage, 0) for stage in job["stages"])
        if "end" in job:
            parts.append(f"job {job_id} {(job['end'] - job['start']) / 1000:.1f} s ({n_tasks} tasks)")
    if end is not None:
        parts.append(f"app total {(end - start) / 1000:.1f} s")
    return "; ".join(parts)
