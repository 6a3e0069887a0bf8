"""bpe-spark: exact byte-pair-encoding training and bulk encoding, on Apache Spark at scale.

The core (this package outside ``bpe_spark.spark``) is pure Python and never imports pyspark.
"""

from bpe_spark._version import __version__
from bpe_spark.bpe.config import TrainerConfig
from bpe_spark.errors import (
    BpeSparkError,
    ConfigError,
    DisallowedSpecialTokenError,
    EmptyCorpusError,
    ModelFormatError,
    UnknownCharacterError,
)
from bpe_spark.bpe.patterns import PRESETS
from bpe_spark.bpe.pretokenize import Pretokenizer
from bpe_spark.encoding.tokenizer import Tokenizer
from bpe_spark.training.like import train_like, train_like_from_counts
from bpe_spark.training.trainer import count_pretokens, train, train_from_counts

__all__ = [
    "PRESETS",
    "BpeSparkError",
    "ConfigError",
    "DisallowedSpecialTokenError",
    "EmptyCorpusError",
    "ModelFormatError",
    "Pretokenizer",
    "Tokenizer",
    "TrainerConfig",
    "UnknownCharacterError",
    "__version__",
    "count_pretokens",
    "train",
    "train_from_counts",
    "train_like",
    "train_like_from_counts",
]
