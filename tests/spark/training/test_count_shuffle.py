"""The count shuffle (bpe_spark/spark/training/count_shuffle.py, docs/design.md 2.1 step 2): partial
counts packed by bucket give exactly the table Spark's own aggregation gives, whatever the
pieces, the tasks or the kind of tally; the driver's summary and collect read the packed pieces."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.sql.types import StructType

from bpe_spark import TrainerConfig
from bpe_spark import count_pretokens as core_count
from bpe_spark.spark import count_pretokens, read_documents
from bpe_spark.spark.training import count_shuffle
from tests.conftest import corpus_text

pytestmark = pytest.mark.spark


def as_dict(table) -> dict[str, int]:
    return dict(zip(table.column("pretoken").to_pylist(), table.column("count").to_pylist()))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    lines = corpus_text("tiny_shakespeare").splitlines(keepends=True)[:20_000]
    lines += ["naïve café ☕ 東京 <|endoftext|> 12345\n", "x" * 5000 + "\n"]
    path = tmp_path_factory.mktemp("shuffle") / "corpus.txt"
    path.write_text("".join(lines), encoding="utf-8")
    return path, lines


@pytest.mark.parametrize("pattern", ["gpt2", r"\w+|[^\w\s]+|\s+"])  # compiled, and a tally in Python
def test_packed_sums_equal_the_rows_aggregation(spark, corpus, monkeypatch, pattern):
    path, lines = corpus
    cfg = TrainerConfig(pattern=pattern, special_tokens=("<|endoftext|>",))
    docs = read_documents(spark, str(path))
    monkeypatch.setattr(count_shuffle, "PIECE_BYTES", 2000)  # many pieces per reduce task
    packed = count_pretokens(docs, cfg)
    assert count_shuffle.packed_of(packed) is not None
    expected = dict(core_count(lines, cfg))
    assert as_dict(packed.toArrow()) == expected
    collected = count_shuffle.collect(packed, 1 << 20)
    assert as_dict(collected) == expected and collected.column("pretoken").num_chunks > 10
    assert count_shuffle.summary(packed) == {
        "distinct": len(expected), "total": sum(expected.values()), "lowest": min(expected.values()),
        "bytes": sum(len(p.encode("utf-8")) for p in expected)}
    monkeypatch.setattr(count_shuffle, "packing_available", lambda: False)  # Spark's aggregation of rows
    rows = count_pretokens(docs, cfg)
    assert count_shuffle.packed_of(rows) is None
    assert as_dict(rows.toArrow()) == expected
    assert count_shuffle.summary(rows) == count_shuffle.summary(packed)


def test_the_sums_are_the_same_rows_in_the_same_order_whatever_the_tasks(spark, corpus):
    _, lines = corpus
    buckets = count_shuffle.buckets_for(3)

    def partial(tasks: int):
        def count(batches):
            for batch in batches:
                for task in batch.column(0).to_pylist():
                    counter = count_shuffle.new_counter()
                    counter.add(lines[task::tasks])
                    columns = count_shuffle.packed_columns(counter, buckets)
                    yield pa.RecordBatch.from_arrays(columns, names=[f.name for f in count_shuffle.PACKED_FIELDS])

        return spark.range(0, tasks, 1, numPartitions=tasks).mapInArrow(count, StructType(list(count_shuffle.PACKED_FIELDS)))

    tables = [count_shuffle.sum_packed(partial(tasks), 3).toArrow() for tasks in (1, 4, 7)]
    assert tables[0].equals(tables[1]) and tables[0].equals(tables[2])
    assert as_dict(tables[0]) == dict(core_count(lines, TrainerConfig()))
