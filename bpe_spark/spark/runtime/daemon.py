"""Spark's Python worker daemon, importing the installed pyspark instead of Spark's zip copy.

Spark starts its Python workers with ``$SPARK_HOME/python/lib/pyspark.zip`` (and py4j's zip)
first on ``sys.path``. From a zip, every worker compiles pyspark's modules from source (zipimport
keeps no bytecode cache), and each new worker re-reads the zip's directory once per package
(``importlib.invalidate_caches()`` after Spark adds its files directory to the path; spark-core's
jar, also on the path, is re-read the same way), all before a fresh worker runs its first task,
on every executor. When the same pyspark version is installed beside the interpreter (pip
install, as bpe-spark's own install does), this daemon drops the zips from the path, so workers
import compiled modules (docs/performance.md has the figures).

It is Spark's own daemon otherwise (``pyspark.daemon.manager`` from the zip): where no pyspark is
installed (a packed executor environment holds none), another version is, or it fails to import.
``build_session`` sets ``spark.python.daemon.module`` to this module for local masters only, whose
executors run the driver's interpreter and so import bpe_spark; a cluster's executors may not
(``--py-files`` puts the package on the workers' path, not the daemon's), so there Spark's own
daemon runs unless the user sets this one (with bpe-spark installed on the nodes).

It imports nothing that starts threads (pyarrow, pandas, numpy: ``bpe_spark.spark`` loads its
names lazily for that): the daemon must have no thread when it forks its workers.
"""

from __future__ import annotations

import importlib.machinery
import os
import re
import sys
import zipfile

_ZIP = re.compile(r"(^|[\\/])(pyspark\.zip|py4j-[^\\/]*\.zip)$")
_VERSION = re.compile(r"""__version__(?::\s*str)?\s*=\s*["']([^"']+)["']""")


def _zip_version(path: str) -> str | None:
    try:
        with zipfile.ZipFile(path) as archive:
            match = _VERSION.search(archive.read("pyspark/version.py").decode("utf-8"))
    except (OSError, KeyError, zipfile.BadZipFile):
        return None
    return match.group(1) if match else None


def _installed_version(paths: list[str]) -> str | None:
    spec = importlib.machinery.PathFinder.find_spec("pyspark", paths)
    if spec is None or not spec.submodule_search_locations:
        return None
    version_file = os.path.join(next(iter(spec.submodule_search_locations)), "version.py")
    try:
        with open(version_file, encoding="utf-8") as fh:
            match = _VERSION.search(fh.read())
    except OSError:
        return None
    return match.group(1) if match else None


def _holds_python(path: str) -> bool:
    try:
        with zipfile.ZipFile(path) as archive:
            return any(name.endswith((".py", ".pyc")) for name in archive.namelist())
    except (OSError, zipfile.BadZipFile):
        return False


def prefer_installed_pyspark(path: list[str]) -> list[str]:
    """``path`` without Spark's pyspark/py4j zips, if the same pyspark is installed elsewhere on
    it, and without jars that hold no Python (Spark puts spark-core's jar there)."""
    zips = [entry for entry in path if _ZIP.search(entry)]
    pyspark_zips = [entry for entry in zips if entry.endswith("pyspark.zip")]
    if not pyspark_zips:
        return path
    zips += [entry for entry in path if entry.endswith(".jar") and not _holds_python(entry)]
    rest = [entry for entry in path if entry not in zips]
    wanted = _zip_version(pyspark_zips[0])
    if wanted is None or _installed_version(rest) != wanted:
        return path
    if importlib.machinery.PathFinder.find_spec("py4j", rest) is None:
        return path
    return rest


def _forget(dropped: tuple[str, ...]) -> None:
    # subtle: invalidate_caches() walks sys.path_importer_cache, not sys.path: forget the dropped
    # archives (and the package entries made inside them) there too, or every worker re-reads them
    for key in [key for key in sys.path_importer_cache if key.startswith(dropped)]:
        del sys.path_importer_cache[key]


def load_manager():
    """Spark's daemon entry point, ``pyspark.daemon.manager``: from the installed pyspark when it
    is Spark's version (:func:`prefer_installed_pyspark`), else from Spark's own zip, as Spark's
    daemon runs. An installed pyspark that fails to import falls back to the zip too."""
    original = list(sys.path)
    kept = prefer_installed_pyspark(original)
    if kept != original:
        sys.path[:] = kept
        try:
            from pyspark.daemon import manager
        except ImportError:
            for name in [name for name in sys.modules if name.partition(".")[0] in ("pyspark", "py4j")]:
                del sys.modules[name]
            sys.path[:] = original
        else:
            _forget(tuple(entry for entry in original if entry not in kept))
            return manager
    from pyspark.daemon import manager

    return manager


if __name__ == "__main__":
    load_manager()()
