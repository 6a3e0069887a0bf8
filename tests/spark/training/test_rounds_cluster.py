"""Rounds that survive a cluster (issue 13 items 5-6): cached blocks lost mid-run (what a lost or
released executor does) cost a recomputation, not the run; nothing stays cached after training,
whatever its outcome; our aggregations run in few tasks whatever ``spark.sql.shuffle.partitions``
says; the default driver budget comes from the driver's memory, and a line says why training
goes to rounds."""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path

import pytest
from tests.conftest import corpus_lines

from bpe_spark import TrainerConfig
from bpe_spark.training import driver_budget
from bpe_spark import train as core_train
from bpe_spark import train_from_counts as core_train_from_counts
from bpe_spark.spark import count_pretokens, train, train_from_counts
from bpe_spark.spark.runtime import resources
from bpe_spark.spark.training import round_words
from bpe_spark.spark.training import rounds as spark_rounds
from bpe_spark.spark.training.count import write_pretoken_counts
from bpe_spark.spark.training.round_tasks import initial_words
from bpe_spark.spark.training.round_words import sized_counts
from bpe_spark.training.trainer import count_pretokens as core_count_pretokens
from bpe_spark.training.trainer import initial_table
from bpe_spark.training.starts import FreshStart

pytestmark = pytest.mark.spark
CFG = TrainerConfig(vocab_size=300)


@pytest.fixture(scope="module")
def lines():
    return corpus_lines("tiny_shakespeare", 12_000)


@pytest.fixture(scope="module")
def expected(lines):
    return core_train(lines, CFG)


def documents(spark, lines, partitions=3):
    return spark.createDataFrame([(line,) for line in lines], "text string").repartition(partitions)


def persistent_rdds(spark) -> set[int]:
    return {int(key) for key in spark.sparkContext._jsc.getPersistentRDDs().keySet()}


def drop_blocks(spark, keep: set[int]) -> int:
    """Remove the cached blocks of every persistent RDD not in ``keep``, as a lost executor
    would (the RDDs keep their storage level and lineage); returns how many were dropped."""
    dropped = persistent_rdds(spark) - keep
    for rdd_id in dropped:
        spark.sparkContext._jsc.sc().unpersistRDD(rdd_id, True)
    return len(dropped)


@contextlib.contextmanager
def spark_checkpoint_dir(spark, path):
    """Spark's own checkpoint directory set for the block; unset again after (local mode)."""
    sc = spark.sparkContext
    assert sc.getCheckpointDir() is None
    sc.setCheckpointDir(str(path))
    try:
        yield sc.getCheckpointDir()
    finally:
        sc._jsc.sc().setCheckpointDir(None)
    assert sc.getCheckpointDir() is None


def short_speculations(monkeypatch) -> None:
    """Rounds of at most 8 merges: this corpus's 44 take six rounds or more."""
    monkeypatch.setattr(spark_rounds, "FIRST_LIMIT", 8)
    monkeypatch.setattr(spark_rounds, "MAX_LIMIT", 8)


@pytest.mark.parametrize("where", ["lineage", "checkpoint-dir", "spark-checkpoint-dir"])
def test_rounds_survive_lost_cached_blocks(spark, lines, expected, tmp_path, where, monkeypatch):
    """After rounds 1 and 3 every block training cached is dropped: the words come back from the
    files (checkpoint directories) or from their lineage (rebuilt from the counts every second
    round here), and the merges are the same."""
    monkeypatch.setattr(round_words, "LINEAGE_ROUNDS", 2)
    short_speculations(monkeypatch)
    before = persistent_rdds(spark)
    dropped, scratch = [], []
    checkpoint = str(tmp_path / "ckpt") if where == "checkpoint-dir" else None

    def lose_blocks(record):
        if checkpoint is not None:
            scratch.extend(p.name for p in (Path(checkpoint) / "rounds").iterdir())
        if where == "spark-checkpoint-dir":
            scratch.extend(p.name for p in Path(base.removeprefix("file:")).iterdir())
        if record["round"] in (1, 3):
            dropped.append(drop_blocks(spark, before))

    with spark_checkpoint_dir(spark, tmp_path / "spark") if where == "spark-checkpoint-dir" else contextlib.nullcontext() as base:
        tok = train(documents(spark, lines), CFG, driver_budget=0.25, checkpoint_dir=checkpoint, on_round=lose_blocks)
        if base is not None:
            assert list(Path(base.removeprefix("file:")).iterdir()) == []  # its rounds directory is gone
    assert tok.merges == expected.merges and tok.vocab == expected.vocab
    assert tok.metadata["stats"]["rounds"] > 3
    assert len(dropped) == 2 and all(dropped)
    if where == "checkpoint-dir":
        assert any(name.startswith("words-") for name in scratch)
        assert not (Path(checkpoint) / "rounds").exists()  # scratch, removed when training ends
    if where == "spark-checkpoint-dir":
        assert any(name.startswith("bpe-spark-rounds-") for name in scratch)
    assert persistent_rdds(spark) <= before


def test_nothing_stays_cached_after_training_whatever_its_outcome(spark, lines, expected, tmp_path):
    users = documents(spark, lines).cache()
    users.count()
    before = persistent_rdds(spark)
    tables = [t.name for t in spark.catalog.listTables()]
    shuffle_partitions = spark.conf.get("spark.sql.shuffle.partitions")

    assert train(users, CFG, driver_budget=0.3).merges == expected.merges
    assert persistent_rdds(spark) == before
    assert train(users, CFG).merges == expected.merges  # on the driver
    assert persistent_rdds(spark) == before

    class Stop(Exception):
        pass

    def stop(record):
        if record["round"] == 2:
            raise Stop

    for checkpoint in (None, str(tmp_path / "ckpt")):
        with pytest.raises(Stop):
            train(users, CFG, driver_budget=0.25, checkpoint_dir=checkpoint, on_round=stop)
        assert persistent_rdds(spark) == before
    assert not (tmp_path / "ckpt" / "rounds").exists()

    counts = count_pretokens(users, CFG)
    expected_counts = core_train_from_counts({r.pretoken: r["count"] for r in counts.collect()}, CFG)
    assert train_from_counts(counts, CFG, driver_budget=0.5).merges == expected_counts.merges
    assert persistent_rdds(spark) == before
    write_pretoken_counts(users, CFG, str(tmp_path / "counts"))
    assert persistent_rdds(spark) == before

    # the user's cached DataFrame is still cached, and the session as it was
    assert users.is_cached and users.storageLevel.useMemory
    assert [t.name for t in spark.catalog.listTables()] == tables
    assert spark.conf.get("spark.sql.shuffle.partitions") == shuffle_partitions
    users.unpersist()


@contextlib.contextmanager
def jobs_run(spark):
    """Yields a function giving the tasks of every stage the block's jobs ran."""
    tracker = spark.sparkContext.statusTracker()
    before = set(tracker.getJobIdsForGroup(None))

    def stage_tasks() -> list[int]:
        jobs = [job for job in tracker.getJobIdsForGroup(None) if job not in before]
        stages = {stage for job in jobs for stage in tracker.getJobInfo(job).stageIds}
        infos = [tracker.getStageInfo(stage) for stage in stages]
        return [info.numCompletedTasks for info in infos if info is not None and info.numCompletedTasks]

    yield stage_tasks


def test_rounds_run_few_tasks_under_200_shuffle_partitions(spark, lines, expected, monkeypatch):
    """Spark's default of 200 shuffle partitions made a 1 MB corpus run 27,187 tasks in rounds:
    our aggregations now take their partitions from the data and the cores."""
    short_speculations(monkeypatch)
    previous = spark.conf.get("spark.sql.shuffle.partitions")
    spark.conf.set("spark.sql.shuffle.partitions", "200")
    try:
        with jobs_run(spark) as stage_tasks:
            tok = train(documents(spark, lines), CFG, driver_budget=0.25)
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", previous)
    assert tok.merges == expected.merges
    tasks = stage_tasks()
    most = 2 * resources.cores(spark)
    assert max(tasks) <= most, sorted(tasks)[-5:]
    rounds = tok.metadata["stats"]["rounds"]
    assert rounds > 3
    assert sum(tasks) < 12 * most * (rounds + 2), (sum(tasks), rounds)  # with 200 partitions: over 1000 a round


def test_the_words_get_the_same_ids_on_every_computation(spark, lines):
    """A partition of the words recomputed after a loss holds the same rows with the same ids,
    though the counts come from a shuffle whose blocks arrive in any order: here the counts of
    the same documents in 5 and in 7 partitions (other map outputs, other orders)."""
    computed = []
    for partitions in (5, 7):
        counts = count_pretokens(documents(spark, lines, partitions), CFG)
        words = initial_words(sized_counts(counts, 3), FreshStart(CFG), initial_table(CFG, ()), [])
        computed.append(sorted(tuple(row) for row in words.collect()))
    assert len(computed[0]) > 500 and computed[0] == computed[1]
    assert len({wid for wid, _, _ in computed[0]}) == len(computed[0])


# --- the driver budget from the driver's memory -----------------------------------------------------
def test_the_default_budget_comes_from_the_drivers_memory(spark, lines, expected):
    tok = train(documents(spark, lines), CFG)
    stats = tok.metadata["stats"]
    assert stats["mode"] == "driver" and tok.merges == expected.merges
    source = stats["driver_budget_from"]
    assert "bytes a pretoken" in source, source
    memory = resources.driver_memory(spark)
    assert memory.jvm_heap > 0 and memory.python_available > 0
    # the session's 2g heap and 1g maxResultSize bind long before this machine's memory
    assert 1_000_000 < stats["driver_budget"] < memory.max_result_size // driver_budget.JVM_BYTES_PER_PRETOKEN


def test_a_small_driver_goes_to_rounds_and_says_why(spark, lines, expected, monkeypatch, caplog):
    heap = 20_000  # bytes: a few hundred pretokens' worth
    monkeypatch.setattr(resources, "driver_memory",
                        lambda spark: driver_budget.DriverMemory(jvm_heap=heap, max_result_size=1 << 30,
                                                                 python_available=1 << 34))
    monkeypatch.setattr(driver_budget, "MIN_BUDGET", 1)
    df = documents(spark, lines)
    with caplog.at_level(logging.WARNING, logger="bpe_spark"):
        tok = train(df, CFG)
    stats = tok.metadata["stats"]
    assert stats["mode"] == "rounds" and tok.merges == expected.merges
    assert stats["driver_budget"] < stats["distinct_pretokens"]
    notices = [r.getMessage() for r in caplog.records if "training in rounds" in r.getMessage()]
    assert len(notices) == 1
    assert notices[0].startswith(f"bpe-spark: {stats['distinct_pretokens']:,} distinct pretokens > driver budget "
                                 f"{stats['driver_budget']:,} from the driver JVM heap 0.0 MiB at "), notices
    # an explicit budget wins over the memory's
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="bpe_spark"):
        tok = train(df, CFG, driver_budget=1.0)
    assert tok.metadata["stats"]["mode"] == "driver" and not caplog.records


def test_counts_that_fit_as_text_train_on_the_driver(spark, lines, expected, monkeypatch):
    """Driver mode collects every count as text (12 bytes plus the pretoken's); only the
    pretokens that rounds keep cross as int32 symbols. A heap that holds the text but not the
    symbols trains on the driver."""
    df = documents(spark, lines)
    first = train(df, CFG).metadata["stats"]
    distinct = first["distinct_pretokens"]
    mean = sum(len(p.encode()) for p in core_count_pretokens(lines, CFG)) / distinct
    text_each = driver_budget.JVM_BYTES_PER_PRETOKEN + mean
    heap = int(2.2 * text_each * distinct)  # the budget takes half the heap
    assert 0.5 * heap / (driver_budget.JVM_BYTES_PER_PRETOKEN + 4 * mean) < distinct  # as symbols: rounds
    monkeypatch.setattr(resources, "driver_memory",
                        lambda spark: driver_budget.DriverMemory(jvm_heap=heap, max_result_size=0,
                                                                 python_available=1 << 34))
    tok = train(df, CFG)
    stats = tok.metadata["stats"]
    assert stats["mode"] == "driver" and tok.merges == expected.merges
    assert distinct <= stats["driver_budget"] and f"at {text_each:.0f} bytes a pretoken" in stats["driver_budget_from"]


def test_counts_too_large_for_one_task_result_are_collected_in_more_tasks(spark, lines, expected, monkeypatch):
    """A task returns at most COLLECT_TASK_BYTES of the collected counts; fewer partitions than
    that needs are repartitioned for the collect, to the same merges."""
    seen = []
    monkeypatch.setattr(resources, "COLLECT_TASK_BYTES", 1024)
    real = resources.collectable
    monkeypatch.setattr(resources, "collectable", lambda *a: seen.append(real(*a)) or seen[-1])
    tok = train(documents(spark, lines, partitions=1), CFG)
    assert tok.metadata["stats"]["mode"] == "driver" and tok.merges == expected.merges
    assert seen[0].rdd.getNumPartitions() > 10
