"""Readers: documents (text, JSON Lines, Parquet) and pretoken counts into DataFrames, and the files
the Python tasks read themselves.
"""
