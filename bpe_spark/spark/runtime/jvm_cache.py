"""The JVM class-data-sharing archive at run time: where the archive for this Java and these
Spark jars lives, and the driver JVM options that map it (:func:`driver_java_options`).

A local Spark run spends seconds loading and verifying the same thousands of JVM classes every
time. The JVM can keep those classes, parsed and verified, in a class-data-sharing (AppCDS)
archive and map it at start-up, so the first job starts sooner.

The archive belongs to one Java installation and one set of Spark jars, so its file name carries
a key of both; a stale or foreign archive is never used (the JVM also checks, and silently falls
back to loading classes normally). It is only used when bpe-spark launches the JVM itself
(``build_session`` in a Python process, local mode or a client-mode driver), never under
``spark-submit``, which has started its JVM already. Building, showing and clearing archives is
the build tool's job (:mod:`bpe_spark.spark.jvm_cache_build`; ``make install`` builds one).

``BPE_SPARK_JVM_CACHE=off`` disables it; ``BPE_SPARK_CACHE_DIR`` moves it (default
``$XDG_CACHE_HOME/bpe-spark`` or ``~/.cache/bpe-spark``).
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

ENV_SWITCH = "BPE_SPARK_JVM_CACHE"
ENV_DIR = "BPE_SPARK_CACHE_DIR"
# Set by the build tool for the JVM that writes the archive: these options replace the driver's.
ENV_DUMP = "BPE_SPARK_JVM_DUMP"
# -Xlog:...=off: a mismatching archive must not print warnings into the user's output.
QUIET_LOGGING = "-Xlog:cds=off -Xlog:cds+dynamic=off"


def enabled() -> bool:
    return os.environ.get(ENV_SWITCH, "on").strip().lower() not in ("0", "off", "false", "no")


def cache_dir() -> Path:
    if os.environ.get(ENV_DIR):
        return Path(os.environ[ENV_DIR])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "bpe-spark"


def java_executable() -> Path | None:
    """The java that Spark's launcher will run: ``$JAVA_HOME/bin/java``, else ``java`` on the PATH."""
    home = os.environ.get("JAVA_HOME")
    candidate = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if not candidate or not os.path.isfile(candidate):
        return None
    return Path(os.path.realpath(candidate))


def spark_jars_dir() -> Path | None:
    home = os.environ.get("SPARK_HOME")
    if not home:
        import pyspark

        home = os.path.dirname(pyspark.__file__)
    jars = Path(home) / "jars"
    return jars if jars.is_dir() else None


def archive_key() -> str | None:
    """A digest of the JVM binary and the Spark jars (names, sizes, times): what the archive is valid for."""
    java, jars = java_executable(), spark_jars_dir()
    if java is None or jars is None:
        return None
    digest = hashlib.sha256()
    stat = java.stat()
    digest.update(f"{java}\0{stat.st_size}\0{int(stat.st_mtime)}\0".encode())
    for jar in sorted(jars.iterdir()):
        info = jar.stat()
        digest.update(f"{jar.name}\0{info.st_size}\0{int(info.st_mtime)}\0".encode())
    return digest.hexdigest()[:16]


def archive_path() -> Path | None:
    key = archive_key()
    return cache_dir() / f"spark-classes-{key}.jsa" if key else None


def driver_java_options(existing: str | None) -> str | None:
    """``existing`` driver JVM options plus the archive's, when there is a usable archive.

    >>> os.environ[ENV_SWITCH] = "off"; driver_java_options("-Xss4m")
    '-Xss4m'
    >>> del os.environ[ENV_SWITCH]
    """
    if not enabled() or (existing and ("SharedArchiveFile" in existing or "ArchiveClassesAtExit" in existing)):
        return existing
    path = archive_path()
    if path is None or not path.is_file():
        return existing
    ours = f"-XX:SharedArchiveFile={path} {QUIET_LOGGING}"
    return f"{existing} {ours}" if existing else ours
