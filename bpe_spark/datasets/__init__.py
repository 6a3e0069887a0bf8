"""Encoded-data files without Spark: binary shards (Megatron layout), datatrove's layout, and the
order and splits of an encoded dataset's documents.
"""
