"""Imported tokenizers' steps (bpe_spark.pipeline), each equal to tokenizers' own."""
