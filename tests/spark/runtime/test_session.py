"""Sessions respect what the user or spark-submit already set (issue 13, item 1): the master, the
properties (our defaults fill only missing keys) and the driver's Java options (appended to)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from bpe_spark.errors import ConfigError
from bpe_spark.spark.runtime.session import build_session

ROOT = Path(__file__).resolve().parents[3]

PROBE = textwrap.dedent("""
    import json
    from bpe_spark.spark.runtime.session import build_session
    spark = build_session("probe", overrides={"spark.ui.enabled": "false"})
    jvm = spark.sparkContext._jvm
    print("PROBE " + json.dumps({
        "master": spark.sparkContext.master,
        "timezone": spark.conf.get("spark.sql.session.timeZone"),
        "daemon": spark.conf.get("spark.python.daemon.module", None),
        "java_options": spark.sparkContext.getConf().get("spark.driver.extraJavaOptions", ""),
        "marker": jvm.java.lang.System.getProperty("bpe.test"),
    }))
    spark.stop()
""")


def _probe(tmp_path: Path, command_prefix: list[str], env: dict[str, str]) -> dict:
    script = tmp_path / "probe.py"
    script.write_text(PROBE, encoding="utf-8")
    result = subprocess.run([*command_prefix, str(script)], capture_output=True, text=True, env=env,
                            cwd=tmp_path, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    line = next(line for line in result.stdout.splitlines() if line.startswith("PROBE "))
    return json.loads(line[len("PROBE "):])


def test_spark_submit_keeps_its_master_and_conf(tmp_path):
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    seen = _probe(tmp_path, [
        str(Path(sys.executable).parent / "spark-submit"), "--master", "local[1]",  # the venv of the tests
        "--conf", "spark.sql.session.timeZone=Asia/Tokyo",
        "--conf", "spark.python.daemon.module=pyspark.daemon",
        "--driver-java-options", "-Dbpe.test=submitted",
    ], env)
    assert seen["master"] == "local[1]"  # not our local[*]
    assert seen["timezone"] == "Asia/Tokyo"  # not our UTC
    assert seen["daemon"] == "pyspark.daemon"
    assert seen["marker"] == "submitted"


def test_a_jvm_we_start_keeps_spark_defaults_and_appends_java_options(tmp_path):
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    (conf_dir / "spark-defaults.conf").write_text(
        "spark.sql.session.timeZone  Europe/Paris\nspark.driver.extraJavaOptions  -Dbpe.test=cluster\n",
        encoding="utf-8")
    env = dict(os.environ, SPARK_CONF_DIR=str(conf_dir))
    env.pop("PYSPARK_GATEWAY_PORT", None)
    seen = _probe(tmp_path, [sys.executable], env)
    assert seen["master"].startswith("local[")
    assert seen["timezone"] == "Europe/Paris"
    assert seen["marker"] == "cluster"  # the cluster's option is kept, ours appended after it
    assert "-Dbpe.test=cluster" in seen["java_options"]


def test_a_running_session_keeps_its_conf_and_takes_what_is_asked(spark):
    before = spark.conf.get("spark.sql.shuffle.partitions")
    spark.conf.set("spark.sql.session.timeZone", "Asia/Tokyo")
    try:
        same = build_session("again", overrides={"spark.sql.execution.arrow.maxRecordsPerBatch": "777"})
        assert same is spark
        assert spark.conf.get("spark.sql.session.timeZone") == "Asia/Tokyo"  # our UTC default did not win
        assert spark.conf.get("spark.sql.shuffle.partitions") == before
        assert spark.conf.get("spark.sql.execution.arrow.maxRecordsPerBatch") == "777"
        with pytest.raises(ConfigError, match="spark.executor.memory cannot change"):
            build_session("again", overrides={"spark.executor.memory": "3g"})
    finally:
        spark.conf.set("spark.sql.session.timeZone", "UTC")
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
