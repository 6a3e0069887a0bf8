"""Files on Spark (bpe_spark.spark.storage): remote stores and output safety."""
