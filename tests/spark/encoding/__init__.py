"""Encoding on Spark (bpe_spark.spark.encoding): encode, encode_dataset and its outputs."""
