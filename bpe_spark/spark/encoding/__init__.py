"""Encoding on Spark: ``encode(df)`` and ``encode_dataset`` with its pieces, shards, shuffle, splits
and resume.
"""
