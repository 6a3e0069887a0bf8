"""Training on Spark (bpe_spark.spark.training): counting, driver mode, rounds, checkpoints."""
