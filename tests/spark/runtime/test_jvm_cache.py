"""The JVM class archive: keyed to the Java + Spark installation, used only when present; the
build tool shows and clears it."""

from __future__ import annotations

import pytest

from bpe_spark.spark import jvm_cache_build
from bpe_spark.spark.runtime import jvm_cache


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(jvm_cache.ENV_DIR, str(tmp_path))
    monkeypatch.delenv(jvm_cache.ENV_SWITCH, raising=False)
    return tmp_path


def test_no_archive_no_options(cache):
    assert jvm_cache.archive_path().parent == cache
    assert jvm_cache.driver_java_options(None) is None
    assert jvm_cache.driver_java_options("-Xss4m") == "-Xss4m"


def test_present_archive_is_appended_quietly(cache):
    path = jvm_cache.archive_path()
    path.write_bytes(b"archive")
    assert jvm_cache.driver_java_options(None) == f"-XX:SharedArchiveFile={path} -Xlog:cds=off -Xlog:cds+dynamic=off"
    assert jvm_cache.driver_java_options("-Xss4m").startswith("-Xss4m -XX:SharedArchiveFile=")
    # the user's own archive options win
    assert jvm_cache.driver_java_options("-XX:SharedArchiveFile=/x.jsa") == "-XX:SharedArchiveFile=/x.jsa"


def test_switch_off(cache, monkeypatch):
    jvm_cache.archive_path().write_bytes(b"archive")
    monkeypatch.setenv(jvm_cache.ENV_SWITCH, "off")
    assert jvm_cache.driver_java_options(None) is None


def test_key_follows_the_java_installation(cache, monkeypatch, tmp_path):
    key = jvm_cache.archive_key()
    assert key and key == jvm_cache.archive_key()
    fake = tmp_path / "jdk" / "bin"
    fake.mkdir(parents=True)
    (fake / "java").write_text("#!/bin/sh\n")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk"))
    assert jvm_cache.archive_key() not in (None, key)
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "nowhere"))
    assert jvm_cache.archive_key() is None and jvm_cache.archive_path() is None
    assert jvm_cache.driver_java_options(None) is None


def test_build_tool_path_and_clear(cache, capsys):
    assert jvm_cache_build.main(["path"]) == 0
    assert "absent" in capsys.readouterr().out
    jvm_cache.archive_path().write_bytes(b"archive")
    assert jvm_cache_build.main(["path"]) == 0
    assert "present" in capsys.readouterr().out
    # already built: --quiet-if-present (make install) neither rebuilds nor says anything
    assert jvm_cache_build.main(["build", "--quiet-if-present"]) == 0
    assert capsys.readouterr() == ("", "")
    assert jvm_cache.archive_path().read_bytes() == b"archive"
    assert jvm_cache_build.main(["clear"]) == 0
    assert not list(cache.glob("*.jsa"))


def test_running_session_is_never_relaunched(spark):
    from bpe_spark.spark.runtime.session import _launches_jvm

    assert not _launches_jvm()


def test_light_jvm_compiles_with_c1_and_a_lean_heap_unless_the_user_chose(cache):
    from bpe_spark.spark.runtime.session import LEAN_GC, LEAN_INITIAL_HEAP, QUICK_JIT, launch_java_options

    lean = f"{LEAN_GC} {LEAN_INITIAL_HEAP}"
    assert launch_java_options(None, light=False) is None
    assert launch_java_options("-Xss4m", light=False) == "-Xss4m"
    # any local JVM collects serially (G1's humongous regions failed Spark's 64 MiB sort pages)
    assert launch_java_options(None, light=False, local=True) == LEAN_GC
    assert launch_java_options("-Xms2g", light=False, local=True) == f"-Xms2g {LEAN_GC}"
    assert launch_java_options("-XX:+UseG1GC", light=False, local=True) == "-XX:+UseG1GC"
    assert launch_java_options(None, light=True) == f"{QUICK_JIT} {lean}"
    assert launch_java_options("-Xss4m", light=True) == f"-Xss4m {QUICK_JIT} {lean}"
    assert launch_java_options("-XX:-TieredCompilation", light=True) == f"-XX:-TieredCompilation {lean}"
    assert launch_java_options("-XX:+UseParallelGC -Xms2g", light=True) == f"-XX:+UseParallelGC -Xms2g {QUICK_JIT}"
    jvm_cache.archive_path().write_bytes(b"archive")
    options = launch_java_options(None, light=True)
    assert options.startswith("-XX:SharedArchiveFile=") and options.endswith(f"{QUICK_JIT} {lean}")


def test_reads_local_text():
    from bpe_spark.spark.read.documents import reads_local_text

    assert reads_local_text(["a.txt", "file:///b/*.gz"])
    assert not reads_local_text(["a.txt", "hdfs://nn/b.txt"])
    assert not reads_local_text("a.jsonl", "jsonl")
    assert not reads_local_text("a.txt", "text", "file")
    # JSON Lines that the encoding tasks read themselves (no id columns, no resume)
    assert reads_local_text(["a.jsonl"], "jsonl", "line", True)
    assert not reads_local_text(["hdfs://nn/a.jsonl"], "jsonl", "line", True)
    assert not reads_local_text(["a.parquet"], "parquet", "line", True)
