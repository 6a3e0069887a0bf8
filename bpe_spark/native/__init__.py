"""The compiled accelerators: the C sources of the merge engine's core and the encoder, and their
loader (:mod:`bpe_spark.native.compiled`).
"""
