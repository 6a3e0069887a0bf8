"""The Python worker daemon imports the installed pyspark, not Spark's zip copy."""

from __future__ import annotations

import os
import zipfile

import pyspark

from bpe_spark.spark.runtime.daemon import prefer_installed_pyspark

HOME = os.path.dirname(pyspark.__file__)
SITE = os.path.dirname(HOME)


def spark_zips() -> list[str]:
    lib = os.path.join(HOME, "python", "lib")
    return sorted(os.path.join(lib, name) for name in os.listdir(lib) if name.endswith(".zip"))


def test_zips_and_python_free_jars_are_dropped_when_the_same_pyspark_is_installed(tmp_path):
    jar = tmp_path / "spark-core.jar"
    with zipfile.ZipFile(jar, "w") as archive:
        archive.writestr("org/apache/Foo.class", b"")
    with_python = tmp_path / "py.jar"
    with zipfile.ZipFile(with_python, "w") as archive:
        archive.writestr("mod.py", "x = 1\n")
    path = [*spark_zips(), str(jar), str(with_python), SITE]
    assert prefer_installed_pyspark(path) == [str(with_python), SITE]


def test_zips_are_kept_when_no_installed_pyspark_matches(tmp_path):
    path = [*spark_zips(), str(tmp_path)]
    assert prefer_installed_pyspark(path) == path  # only the zip has pyspark
    fake = tmp_path / "site" / "pyspark"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "version.py").write_text('__version__: str = "0.0.1"\n')
    path = [*spark_zips(), str(tmp_path / "site"), SITE]
    assert prefer_installed_pyspark(path) == path  # another version first on the path


def test_paths_without_spark_zips_are_untouched():
    assert prefer_installed_pyspark(["/a", SITE]) == ["/a", SITE]


LOAD_SCRIPT = """
import sys
sys.path[:0] = {front!r}
from bpe_spark.spark.runtime.daemon import load_manager
manager = load_manager()
print(manager.__module__, sys.modules["pyspark"].__file__)
"""


def _load_manager_with(front: list[str]) -> str:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", LOAD_SCRIPT.format(front=front)], capture_output=True,
                          text=True, timeout=120, check=True)
    return done.stdout.strip()


def test_the_daemon_runs_spark_s_own_pyspark_where_the_installed_one_is_missing_or_broken(tmp_path):
    import pyspark

    # the installed pyspark, Spark's version: the daemon imports it
    assert _load_manager_with(spark_zips()) == f"pyspark.daemon {pyspark.__file__}"
    # the same version, but it fails to import (as a half-installed environment would): the zip's
    broken = tmp_path / "site" / "pyspark"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("")
    (broken / "version.py").write_text(f'__version__: str = "{pyspark.__version__}"\n')
    (broken / "daemon.py").write_text("raise ImportError('half installed')\n")
    loaded = _load_manager_with([*spark_zips(), str(tmp_path / "site")])
    assert loaded.startswith("pyspark.daemon ") and "pyspark.zip" in loaded, loaded
