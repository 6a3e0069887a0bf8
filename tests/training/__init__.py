"""Training (bpe_spark.training): the merge engine, its cores, rounds' planning and replay."""
