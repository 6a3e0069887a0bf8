"""The optional compiled accelerators, and when to use them.

``bpe_spark.native._fastbpe`` (the merge engine's core) and ``bpe_spark.native._fastenc`` (pretokenizer and
cached BPE encoder) are C extensions built by ``pip install -e .`` when a C compiler is present.
Without them bpe_spark runs its pure-Python code, with the same results (tests prove it), and
says so once per process in the ``bpe_spark`` log (a Spark executor's log shows it too).

Environment: ``BPE_SPARK_ENGINE=python`` forces the pure-Python merge engine and
``BPE_SPARK_ENCODER=python`` the pure-Python pretokenizer, counter, encoder and JSON Lines
parsing (for comparison and debugging).
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
import threading
import warnings

# The API each extension must have; a build from older sources (the .so files are built in
# place and not versioned, so a `git pull` without `pip install -e .` leaves them stale) is
# ignored, with a warning, rather than half used.
FASTBPE_API = 10
FASTENC_API = 8

_WHAT = {"_fastbpe": "the merge engine", "_fastenc": "the pretokenizer, counter, encoder and JSON scanner"}
# What pure Python costs, measured on en_books on one core (docs/performance.md).
_COST = {"_fastbpe": "merging about 10x", "_fastenc": "encoding about 15x, 2 MB/s per core instead of 30+"}
_not_built: list[str] = []


def _load(name: str, api: int):
    try:
        module = importlib.import_module(f"bpe_spark.native.{name}")
    except ImportError:
        _not_built.append(name)
        return None
    if getattr(module, "API_VERSION", 0) != api:
        warnings.warn(
            f"bpe_spark.native.{name} was built from older sources (API {getattr(module, 'API_VERSION', 0)}, "
            f"need {api}); using pure Python. Rebuild it with `pip install -e .`",
            RuntimeWarning,
            stacklevel=2,
        )
        return None
    return module


def not_built_message(names: list[str], package_file: str) -> str:
    """The one line that says which extensions did not load, why, what it costs and the fix.

    >>> not_built_message(["_fastbpe"], "/site/bpe_spark/__init__.py")  # doctest: +ELLIPSIS
    'bpe_spark.native._fastbpe is not built: the merge engine runs in pure Python, with the same results \
but slower (merging about 10x). Build it with `pip install -e .` (...).'
    """
    one = len(names) == 1
    modules = " and ".join(f"bpe_spark.native.{name}" for name in names)
    what = " and ".join(_WHAT[name] for name in names)
    runs = "runs" if names == ["_fastbpe"] else "run"
    cost = "; ".join(_COST[name] for name in names)
    if ".zip" in package_file:
        # subtle: zipimport loads no C extension, so --py-files ships the pure-Python package only
        why = "cannot be loaded from a zip (--py-files)"
        fix = ("Ship the wheel's environment instead (make dist: --archives dist/env.tar.gz#env) or "
               "install the wheel on the nodes.")
    else:
        why = "is not built" if one else "are not built"
        fix = (f"Build {'it' if one else 'them'} with `pip install -e .` (needs a C compiler and the "
               "Python headers).")
    return f"{modules} {why}: {what} {runs} in pure Python, with the same results but slower ({cost}). {fix}"


_fastbpe = _load("_fastbpe", FASTBPE_API)
_fastenc = _load("_fastenc", FASTENC_API)
if _not_built:
    # Once per process (this module is imported once); a Spark executor's log shows it too
    # (its Python workers' stderr: the logging module's last-resort handler).
    logging.getLogger("bpe_spark").warning(
        not_built_message(_not_built, getattr(sys.modules.get("bpe_spark"), "__file__", None) or ""))

_classes_lock = threading.Lock()


def encoder_available() -> bool:
    return _fastenc is not None and os.environ.get("BPE_SPARK_ENCODER", "auto") != "python"


def jsonl_scanner():
    """The compiled JSON Lines text scanner (``_fastenc.jsonl_texts``, ``_jsonl_scan.h``), or None."""
    return _fastenc.jsonl_texts if encoder_available() else None


def ensure_char_classes() -> None:
    """Give the compiled pretokenizer the ``\\p{L}``, ``\\p{N}`` and ``\\s`` code points of the
    ``regex`` module in use, and o200k's two letter classes, so that it splits exactly as
    ``regex.findall`` does (once per process)."""
    if _fastenc is None or _fastenc.has_char_classes():
        return
    with _classes_lock:
        if _fastenc.has_char_classes():
            return
        import regex

        ranges = []
        every = _every_code_point()
        classes = (
            (1, r"\p{L}+"), (2, r"\p{N}+"), (4, r"\s+"),
            (8, r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+"), (16, r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"),
        )
        for bit, pattern in classes:
            ranges.extend((match.start(), match.end(), bit) for match in regex.finditer(pattern, every))
        _fastenc.set_char_classes(ranges)


def _every_code_point() -> str:
    """All code points 0..0x10FFFF in order (surrogates too) as one str, built from UTF-32
    bytes laid out with strided copies (much faster than a loop over chr())."""
    n = 0x110000
    raw = bytearray(4 * n)
    raw[0::4] = bytes(range(256)) * (n // 256)
    raw[1::4] = b"".join(bytes([b]) * 256 for b in range(256)) * (n // 65536)
    raw[2::4] = b"".join(bytes([b]) * 65536 for b in range(n // 65536))
    return raw.decode("utf-32-le", "surrogatepass")


def new_counter(preset: str | None):
    """A compiled pretoken counter for the compiled pretokenizer's ``preset`` (one of
    ``COMPILED_PRESETS``: :func:`bpe_spark.bpe.patterns.compiled_preset`), or None."""
    name = preset if encoder_available() else None
    if name is None:
        return None
    ensure_char_classes()
    return _fastenc.PretokenCounter(name)


def new_encoder(merge_ids, byte_ids, preset: str | None, *, vocab=None, ranks: bool = False,
                whole: bool = False, chars: bool = False):
    """A compiled encoder over ``(left, right, new_id)`` merges in rank order, or None.

    ``preset``: the compiled pretokenizer's preset (:func:`bpe_spark.bpe.patterns.compiled_preset`),
    or None to encode pretokens given whole.
    ``vocab``: ``(token bytes, id)`` pairs. ``whole``: a pretoken that is a token encodes as that
    id. ``ranks``: tiktoken's rule (whole, and the merge table built from ``vocab``; ``merge_ids``
    empty). ``chars``: a pretoken starts as its characters, looked up in ``vocab``."""
    if not encoder_available():
        return None
    name = preset if byte_ids is not None else None
    if name is not None:
        ensure_char_classes()
    return _fastenc.Encoder(merge_ids, byte_ids, name, vocab=vocab, ranks=ranks, whole=whole, chars=chars)
