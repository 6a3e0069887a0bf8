"""Encoding with a trained or imported model: the :class:`~bpe_spark.encoding.tokenizer.Tokenizer`
and the batch encoder.
"""
