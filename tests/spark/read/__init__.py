"""Readers (bpe_spark.spark.read): the task-side text, JSON Lines and the text rule on Spark."""
