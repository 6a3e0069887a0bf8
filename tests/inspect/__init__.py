"""What a model holds (bpe_spark.inspect): inspect and the training report."""
