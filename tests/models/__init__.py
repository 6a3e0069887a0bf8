"""Model files (bpe_spark.models): every format read and written, and untrusted files."""
