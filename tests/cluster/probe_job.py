"""A spark-submit job of the cluster tests: what the executors' Python tasks see, one JSON line.

    spark-submit --master spark://... tests/cluster/probe_job.py CHECKOUT DRIVER_PYTHON

Each of a few tasks reports its interpreter, working directory, where it imports pyspark and
bpe_spark from, whether the compiled extensions loaded, and whether the checkout and the driver's
interpreter are visible; the driver adds its master. Printed as ``PROBE {json}``.
"""

import json
import sys

from pyspark.sql import SparkSession


def look(checkout: str, driver_python: str):
    def task(_):
        import os

        import pyspark
        from pyspark import TaskContext

        import bpe_spark
        from bpe_spark.native import compiled as _compiled

        try:
            listed = sorted(os.listdir(checkout))
        except OSError as error:
            listed = repr(error)
        yield {
            "partition": TaskContext.get().partitionId(),
            "executable": sys.executable,
            "cwd": os.getcwd(),
            "pyspark": pyspark.__file__,
            "bpe_spark": bpe_spark.__file__,
            "compiled": _compiled._fastbpe is not None and _compiled._fastenc is not None,
            "checkout_listing": listed,
            "checkout_readme": os.path.exists(os.path.join(checkout, "README.md")),
            "driver_python": os.path.exists(driver_python),
        }

    return task


if __name__ == "__main__":
    checkout, driver_python = sys.argv[1], sys.argv[2]
    spark = SparkSession.builder.appName("bpe-spark-cluster-probe").getOrCreate()
    sc = spark.sparkContext
    tasks = sc.parallelize(range(4), 4).mapPartitions(look(checkout, driver_python)).collect()
    print("PROBE " + json.dumps({"master": sc.master, "tasks": tasks}))
    spark.stop()
