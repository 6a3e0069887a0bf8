"""Outputs without Spark (bpe_spark.storage): the output guard and markers."""
