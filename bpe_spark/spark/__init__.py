"""The Spark side of bpe-spark: the only package that imports pyspark.

Every function takes a DataFrame first and returns a DataFrame or a result.
"""

# --- training (DESIGN 2.1) --------------------------------------------------------------------
from bpe_spark.spark.count import count_pretokens  # noqa: E402
from bpe_spark.spark.io import (  # noqa: E402
    InputError,
    InputNotFoundError,
    MissingColumnError,
    read_counts,
    read_documents,
)
from bpe_spark.spark.train import DEFAULT_DRIVER_BUDGET, train, train_from_counts  # noqa: E402

# --- encoding (DESIGN 2.2) --------------------------------------------------------------------
from bpe_spark.spark.encode import encode, encode_dataset  # noqa: E402
