"""The Spark side of bpe-spark: the only package that imports pyspark.

Every function takes a DataFrame first and returns a DataFrame or a result: reading
(``read_documents``, ``read_counts``), training (docs/design.md 2.1: ``count_pretokens``, ``train``,
``train_from_counts``) and encoding (docs/design.md 2.2: ``encode``, ``encode_dataset``); comparing tokenizers on a
corpus (``evaluate``, docs/guides/evaluate.md). Models at any
URI Spark or pyarrow reaches take the session first: ``save_model(spark, tok, uri)``,
``load_model(spark, uri)``. The ``pyspark.ml`` Estimator and Transformer: ``BPETokenizer``,
``BPETokenizerModel`` (:mod:`bpe_spark.spark.ml`).

The names load on first use (PEP 562): importing one module of the package, such as the Python
worker daemon (:mod:`bpe_spark.spark.runtime.daemon`), must not import pyarrow, pandas or numpy, which
start threads, before Spark forks its workers.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "BPETokenizer": "bpe_spark.spark.ml",
    "BPETokenizerModel": "bpe_spark.spark.ml",
    "count_pretokens": "bpe_spark.spark.training.count",
    "encode": "bpe_spark.spark.encoding.dataframe",
    "encode_dataset": "bpe_spark.spark.encoding.dataset",
    "evaluate": "bpe_spark.spark.evaluation",
    "ColumnError": "bpe_spark.errors",
    "InputError": "bpe_spark.errors",
    "InputNotFoundError": "bpe_spark.spark.read.documents",
    "read_counts": "bpe_spark.spark.read.documents",
    "read_documents": "bpe_spark.spark.read.documents",
    "load_model": "bpe_spark.spark.storage.uris",
    "save_model": "bpe_spark.spark.storage.uris",
    "DEFAULT_DRIVER_BUDGET": "bpe_spark.spark.options",
    "train": "bpe_spark.spark.training.run",
    "train_from_counts": "bpe_spark.spark.training.run",
}

__all__ = [
    "DEFAULT_DRIVER_BUDGET",
    "BPETokenizer",
    "BPETokenizerModel",
    "ColumnError",
    "InputError",
    "InputNotFoundError",
    "count_pretokens",
    "encode",
    "encode_dataset",
    "evaluate",
    "load_model",
    "read_counts",
    "read_documents",
    "save_model",
    "train",
    "train_from_counts",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'bpe_spark.spark' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
