"""The Spark side of bpe-spark: the only package that imports pyspark.

Every function takes a DataFrame first and returns a DataFrame or a result: reading
(``read_documents``, ``read_counts``), training (DESIGN 2.1: ``count_pretokens``, ``train``,
``train_from_counts``) and encoding (DESIGN 2.2: ``encode``, ``encode_dataset``).
"""

from bpe_spark.spark.count import count_pretokens
from bpe_spark.spark.encode import encode, encode_dataset
from bpe_spark.spark.io import (
    InputError,
    InputNotFoundError,
    MissingColumnError,
    read_counts,
    read_documents,
)
from bpe_spark.spark.train import DEFAULT_DRIVER_BUDGET, train, train_from_counts

__all__ = [
    "DEFAULT_DRIVER_BUDGET",
    "InputError",
    "InputNotFoundError",
    "MissingColumnError",
    "count_pretokens",
    "encode",
    "encode_dataset",
    "read_counts",
    "read_documents",
    "train",
    "train_from_counts",
]
