"""Build hook for the optional C extensions; all metadata lives in pyproject.toml.

``bpe_spark.native._fastbpe`` speeds the merge engine up and ``bpe_spark.native._fastenc`` the encoder. When
they cannot be compiled (no C compiler or no Python headers) the install goes on and bpe_spark
uses its pure-Python code; BPE_SPARK_REQUIRE_EXTENSION=1 makes a failed build an error instead.
"""

import os

from setuptools import Extension, setup

compile_args = [] if os.name == "nt" else ["-O3", "-Wno-missing-field-initializers"]

optional = os.environ.get("BPE_SPARK_REQUIRE_EXTENSION", "") != "1"

# What both extensions include (allocation, growth, hashing, tables): a change rebuilds both, and
# the sdist ships it.
common = ["bpe_spark/native/_bpe_common.h", "bpe_spark/native/_pretokenizer.h", "bpe_spark/native/_bpe_merge.h", "bpe_spark/native/_pretoken_cache.h",
          "bpe_spark/native/_jsonl_scan.h"]

setup(
    # The wheel holds the built extensions, not their sources (the sdist has those).
    exclude_package_data={"bpe_spark.native": ["*.c", "*.h"]},
    ext_modules=[
        Extension(
            name, sources=[source], depends=common, extra_compile_args=compile_args, optional=optional
        )
        for name, source in (
            ("bpe_spark.native._fastbpe", "bpe_spark/native/_fastbpe.c"),  # the merge engine's core
            ("bpe_spark.native._fastenc", "bpe_spark/native/_fastenc.c"),  # pretokenizer + cached BPE encoder
        )
    ]
)
