"""A class-data-sharing archive that makes the Spark JVM start faster.

A local Spark run spends seconds loading and verifying the same ~15,000 JVM classes every time
(measured on en_books: 3.0 s to a usable session and ~2 s more in the first jobs). The JVM can
keep those classes, parsed and verified, in a class-data-sharing (AppCDS) archive and map it at
start-up: with it, ``bpe-spark train`` on en_books starts its first job about 3 s sooner.

The archive belongs to one Java installation and one set of Spark jars, so its file name carries
a key of both; a stale or foreign archive is never used (the JVM also checks, and silently falls
back to loading classes normally). It is only used when bpe-spark launches the JVM itself
(``build_session`` in a Python process, local mode or a client-mode driver), never under
``spark-submit``, which has started its JVM already.

Build it once per machine (``make install`` does)::

    python -m bpe_spark.spark.jvm_cache build     # ~30 s: runs a small train + encode
    python -m bpe_spark.spark.jvm_cache path      # where it is (or would be)
    python -m bpe_spark.spark.jvm_cache clear     # every archive (one per Java + Spark install)

``BPE_SPARK_JVM_CACHE=off`` disables it; ``BPE_SPARK_CACHE_DIR`` moves it (default
``$XDG_CACHE_HOME/bpe-spark`` or ``~/.cache/bpe-spark``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ENV_SWITCH = "BPE_SPARK_JVM_CACHE"
ENV_DIR = "BPE_SPARK_CACHE_DIR"
# -Xlog:...=off: a mismatching archive must not print warnings into the user's output.
_QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"


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
    ours = f"-XX:SharedArchiveFile={path} {_QUIET}"
    return f"{existing} {ours}" if existing else ours


# --- building the archive ---------------------------------------------------------------------
_WARMUP_TEXT = (
    "The quick brown fox jumps over the lazy dog. It's 2026, and we'll encode 1,234 lines!\n"
    "Über café naïve résumé — 東京 北京 上海 Москва Αθήνα 🙂\n"
    "<|endoftext|>def f(x):\n    return x ** 2  # tabs\tand spaces\n"
)


def _warm_up(work: Path) -> None:
    """Run what bpe-spark runs (read, count both ways, train, encode both formats) so that the
    archive holds the classes those jobs load."""
    from bpe_spark.config import TrainerConfig
    from bpe_spark.spark.encoding import encode_dataset
    from bpe_spark.spark.io import read_documents
    from bpe_spark.spark.session import build_session
    from bpe_spark.spark.training import train

    corpus = work / "corpus.txt"
    corpus.write_text(_WARMUP_TEXT * 200, encoding="utf-8")
    jsonl = work / "corpus.jsonl"
    jsonl.write_text("".join(json.dumps({"text": line}) + "\n" for line in _WARMUP_TEXT.splitlines()) * 50)
    spark = build_session("bpe-spark jvm-cache", master="local[2]",
                          overrides={"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"})
    spark.sparkContext.setLogLevel("ERROR")
    docs = read_documents(spark, str(corpus))
    cfg = TrainerConfig(vocab_size=300, special_tokens=("<|endoftext|>",))
    tok = train(docs, cfg)
    train(read_documents(spark, str(jsonl), input_format="jsonl"), TrainerConfig(vocab_size=280, lowercase=True))
    encode_dataset(docs, tok, str(work / "ids"), output_format="parquet")
    encode_dataset(docs, tok, str(work / "shards"), output_format="bin")
    spark.read.parquet(str(work / "ids")).count()
    spark.stop()


def _dump(target: str) -> int:
    """Child process: warm up under ``-XX:ArchiveClassesAtExit`` and let the JVM exit and write."""
    from pyspark import SparkContext

    with tempfile.TemporaryDirectory(prefix="bpe-spark-jvm-cache-") as work:
        _warm_up(Path(work))
    proc = getattr(SparkContext._gateway, "proc", None)
    if proc is not None:  # the JVM exits on EOF on its stdin, and writes the archive as it exits
        proc.stdin.close()
        proc.wait(timeout=120)
    return 0 if Path(target).is_file() else 1


def build_archive(force: bool = False, quiet: bool = False) -> Path | None:
    """Build the archive for this JVM and these Spark jars (if missing, or ``force``)."""
    path = archive_path()
    if path is None:
        if not quiet:
            print("jvm-cache: no java or no Spark jars found; nothing to build", file=sys.stderr)
        return None
    if path.is_file() and not force:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    env = dict(os.environ)
    env[ENV_SWITCH] = "off"  # the child must not map the archive it is writing
    env["BPE_SPARK_JVM_DUMP"] = f"-XX:ArchiveClassesAtExit={tmp} {_QUIET}"
    started = time.perf_counter()
    if not quiet:
        print(f"jvm-cache: building {path} (a small train + encode, ~30 s)", file=sys.stderr)
    try:
        try:
            result = subprocess.run([sys.executable, "-m", "bpe_spark.spark.jvm_cache", "_dump", str(tmp)],
                                    check=False, env=env, capture_output=True, text=True, timeout=300)
        except (subprocess.TimeoutExpired, OSError) as exc:
            if not quiet:
                print(f"jvm-cache: not built ({exc}); Spark starts without it", file=sys.stderr)
            return None
        if result.returncode != 0 or not tmp.is_file():
            if not quiet:
                tail = "\n".join((result.stderr or "").splitlines()[-5:])
                print(f"jvm-cache: not built (exit {result.returncode}); Spark starts without it\n{tail}", file=sys.stderr)
            return None
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    if not quiet:
        size = path.stat().st_size / 2**20
        print(f"jvm-cache: {path} ({size:.0f} MB) in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bpe_spark.spark.jvm_cache",
        description="Build, show or clear the JVM class archive that makes Spark start faster.",
    )
    parser.add_argument("action", choices=["build", "path", "clear", "_dump"])
    parser.add_argument("target", nargs="?")
    parser.add_argument("--force", action="store_true", help="rebuild even if the archive exists")
    parser.add_argument("--quiet", action="store_true")
    parser.add_argument("--quiet-if-present", action="store_true", help="say nothing when it is already built")
    args = parser.parse_args(argv)
    if args.action == "_dump":
        return _dump(args.target)
    if args.action == "path":
        path = archive_path()
        print(f"{path} ({'present' if path and path.is_file() else 'absent'})")
        return 0
    if args.action == "clear":
        for stale in cache_dir().glob("spark-classes-*.jsa"):
            stale.unlink()
        return 0
    path = archive_path()
    if args.quiet_if_present and not args.force and path is not None and path.is_file():
        return 0
    try:
        built = build_archive(force=args.force, quiet=args.quiet)
    except OSError as exc:  # e.g. an unwritable cache directory
        print(f"jvm-cache: not built ({exc}); Spark starts without it", file=sys.stderr)
        return 0
    if built is not None and not args.quiet:
        print(built)
    return 0  # a missing archive only costs start-up time: never fail an install for it


if __name__ == "__main__":
    sys.exit(main())
