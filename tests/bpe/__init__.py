"""The BPE algorithm's parts (bpe_spark.bpe): config, text rule, pretokenization, patterns."""
