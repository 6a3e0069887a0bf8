"""The Spark runtime (bpe_spark.spark.runtime): sessions, daemon, JVM cache, progress, faults."""
