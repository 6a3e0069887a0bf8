"""The bpe-spark command (bpe_spark.cli) without Spark: parsing, failures, remote stores."""
