"""The values the Spark functions' options take: their choices and defaults, in one place.

A leaf that imports nothing (the output formats are :mod:`bpe_spark.datasets.formats`'s table): the command line (:mod:`bpe_spark.cli`) builds its parser from
these without importing pyspark, and the Spark modules check their arguments against the same
tuples. In each tuple of choices the first is the default.

>>> INPUT_FORMATS[0], DOCUMENT_UNITS[0], ENGINES[0]
('auto', 'line', 'auto')
"""

from __future__ import annotations

# read_documents(input_format=); auto: from the files' names (bpe_spark.storage.input_format)
INPUT_FORMATS = ("auto", "text", "jsonl", "parquet")
DOCUMENT_UNITS = ("line", "file", "paragraph")  # read_documents(document=): what one text document is
ENGINES = ("auto", "jvm", "python")  # count_pretokens(engine=): who pretokenizes
# train(driver_budget=): distinct pretokens the driver may hold at once; "auto": as many as the
# driver's memory holds, at the bytes per pretoken measured (bpe_spark.training.driver_budget)
DEFAULT_DRIVER_BUDGET = "auto"
JSON_SAMPLE_LINES = 200  # read_documents: the JSON Lines records whose fields are the columns
DEFAULT_SHARD_TOKENS = 100_000_000  # encode_dataset(shard_tokens=): about this many per file


def column_name(given: str) -> str:
    """The column a user names: a name is the column of that name, dots and all (``meta.text`` is
    a top-level column so named, never a field of a struct), and a name in backticks, as Spark
    writes one (a doubled backtick inside for one), is the name between them.

    >>> column_name("meta.text"), column_name("`meta.text`"), column_name("`a``b`"), column_name("text")
    ('meta.text', 'meta.text', 'a`b', 'text')
    """
    if len(given) >= 2 and given.startswith("`") and given.endswith("`"):
        return given[1:-1].replace("``", "`")
    return given

