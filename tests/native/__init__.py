"""The compiled accelerators (bpe_spark.native) against their pure-Python references."""
