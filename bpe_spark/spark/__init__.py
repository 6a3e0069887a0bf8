"""The Spark side of bpe-spark: the only package that imports pyspark.

Every function takes a DataFrame first and returns a DataFrame or a result.
"""
