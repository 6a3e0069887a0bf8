"""Encoding (bpe_spark.encoding): the Tokenizer, the batch encoder, token options, the seeds' examples."""
