"""Build hook for the optional C extension; all metadata lives in pyproject.toml.

``bpe_spark._fastbpe`` speeds the merge engine up; when it cannot be compiled (no C compiler or
no Python headers) the install goes on and bpe_spark uses its pure-Python engine.
"""

import os

from setuptools import Extension, setup

compile_args = [] if os.name == "nt" else ["-O3", "-Wno-missing-field-initializers"]

setup(
    ext_modules=[
        Extension(
            "bpe_spark._fastbpe",
            sources=["bpe_spark/_fastbpe.c"],
            extra_compile_args=compile_args,
            optional=os.environ.get("BPE_SPARK_REQUIRE_EXTENSION", "") != "1",
        )
    ]
)
