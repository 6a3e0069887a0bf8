"""Encoded-data files without Spark (bpe_spark.datasets): shards, datatrove, document order."""
