"""Java-regex forms of the pretokenization presets, for counting with Spark SQL's own functions.

Spark's ``regexp_extract_all`` and ``split`` run ``java.util.regex`` inside the JVM, with no
Python per row. The presets need one change to mean in Java what they mean in Python's
``regex``: the flags ``(?U)`` (UNICODE_CHARACTER_CLASS: ``\\s``, ``\\w``, ``\\d`` and case
folding follow Unicode, not ASCII) and ``(?d)`` (UNIX_LINES: only ``\\n`` ends a line for
``$`` and ``.``, as in Python). Possessive quantifiers, ``\\p{..}`` classes and ``(?i:..)``
groups mean the same in both engines.

Measured agreement (``tests/spark/training/test_count.py``, and once on the full files): the Java forms
of ``gpt2``, ``cl100k``, ``o200k``, ``words`` and ``whitespace`` give exactly the pretoken
counts of the Python ``Pretokenizer`` on all four shared corpora (English books, Chinese
classics, the multilingual file with hundreds of scripts and every RGI emoji, Shakespeare).

Known exceptions: the engines' Unicode versions differ (Java 17: Unicode 13.0; the ``regex``
module: Unicode 16+). About 27,000 code points assigned or re-categorized after Unicode 13.0
(CJK Extensions G-I, Vithkuqi, Kawi, Garay, Latin additions in U+A7C0-U+A7DC, U+0295 Lo->Ll,
...) are letters, marks or numbers in Python but unassigned or of another category in Java, so
text that holds them splits differently. Whitespace (``\\s``) agrees on every code point. Use
``engine="python"`` in :func:`bpe_spark.spark.count_pretokens` to count with the core's regex
when such characters matter; a newer JVM narrows the gap.

>>> java_pattern("whitespace")
'(?Ud)\\\\S+'
>>> java_quote("a\\\\Eb")
'\\\\Qa\\\\E\\\\\\\\E\\\\Qb\\\\E'
"""

from __future__ import annotations

from collections.abc import Iterable

from bpe_spark.bpe.patterns import pattern_source
from bpe_spark.bpe.pretokenize import longest_first

JAVA_FLAGS = "(?Ud)"


def java_pattern(pattern: str) -> str:
    """The Java regex for a preset name or a custom pattern (custom ones are not verified)."""
    return JAVA_FLAGS + pattern_source(pattern)


def java_quote(literal: str) -> str:
    """A Java regex matching ``literal`` exactly (what ``Pattern.quote`` does)."""
    return "\\Q" + literal.replace("\\E", "\\E\\\\E\\Q") + "\\E"


def special_tokens_regex(special_tokens: Iterable[str]) -> str | None:
    """One Java alternation of the special tokens, in the core matcher's order."""
    ordered = longest_first(special_tokens)
    if not ordered:
        return None
    return "|".join(java_quote(token) for token in ordered)
