"""Where outputs go, without Spark: file systems, files at any URI pyarrow reaches, the output guard
(markers, placement, staging) and the owners of a run's files.
"""
