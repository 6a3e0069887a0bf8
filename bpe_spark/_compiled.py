"""The optional compiled accelerators, and when to use them.

``bpe_spark._fastbpe`` (the merge engine's core) and ``bpe_spark._fastenc`` (pretokenizer and
cached BPE encoder) are C extensions built by ``pip install -e .`` when a C compiler is present.
Without them bpe_spark runs its pure-Python code, with the same results (tests prove it), and
says so once per process in the ``bpe_spark`` log (a Spark executor's log shows it too).

Environment: ``BPE_SPARK_ENGINE=python`` forces the pure-Python merge engine and
``BPE_SPARK_ENCODER=python`` the pure-Python pretokenizer, counter and encoder (for comparison
and debugging).
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
import warnings

from bpe_spark.patterns import compiled_preset

# The API each extension must have; a build from older sources (the .so files are built in
# place and not versioned, so a `git pull` without `pip install -e .` leaves them stale) is
# ignored, with a warning, rather than half used.
FASTBPE_API = 6
FASTENC_API = 4

_WHAT = {"_fastbpe": "the merge engine", "_fastenc": "the pretokenizer, counter and encoder"}


def _load(name: str, api: int):
    try:
        module = importlib.import_module(f"bpe_spark.{name}")
    except ImportError as error:
        # Once per process: the module is imported once, so is this.
        logging.getLogger("bpe_spark").warning(
            "bpe_spark.%s is not built (%s): %s runs in pure Python, with the same results but "
            "slower. Build it with `pip install -e .` (needs a C compiler and the Python headers).",
            name, error, _WHAT[name],
        )
        return None
    if getattr(module, "API_VERSION", 0) != api:
        warnings.warn(
            f"bpe_spark.{name} was built from older sources (API {getattr(module, 'API_VERSION', 0)}, "
            f"need {api}); using pure Python. Rebuild it with `pip install -e .`",
            RuntimeWarning,
            stacklevel=2,
        )
        return None
    return module


_fastbpe = _load("_fastbpe", FASTBPE_API)
_fastenc = _load("_fastenc", FASTENC_API)

_classes_lock = threading.Lock()


def encoder_available() -> bool:
    return _fastenc is not None and os.environ.get("BPE_SPARK_ENCODER", "auto") != "python"


def ensure_char_classes() -> None:
    """Give the compiled pretokenizer the ``\\p{L}``, ``\\p{N}`` and ``\\s`` code points of the
    ``regex`` module in use, so that it splits exactly as ``regex.findall`` does (once per
    process)."""
    if _fastenc is None or _fastenc.has_char_classes():
        return
    with _classes_lock:
        if _fastenc.has_char_classes():
            return
        import regex

        ranges = []
        every = _every_code_point()
        for bit, pattern in ((1, r"\p{L}+"), (2, r"\p{N}+"), (4, r"\s+")):
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


def new_counter(pattern: str):
    """A compiled pretoken counter for ``pattern`` (gpt2 / cl100k), or None."""
    name = compiled_preset(pattern) if encoder_available() else None
    if name is None:
        return None
    ensure_char_classes()
    return _fastenc.PretokenCounter(name)


def new_encoder(merge_ids, byte_ids, pattern: str | None):
    """A compiled encoder over ``(left, right, new_id)`` merges in rank order, or None."""
    if not encoder_available():
        return None
    name = compiled_preset(pattern) if (pattern is not None and byte_ids is not None) else None
    if name is not None:
        ensure_char_classes()
    return _fastenc.Encoder(merge_ids, byte_ids, name)
