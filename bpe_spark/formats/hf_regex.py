"""Our pretokenization patterns in a ``tokenizer.json``: translation between Python's ``regex``
(ours, tiktoken's) and the Oniguruma dialect ``tokenizers`` compiles, recognising a preset, and
the presets whose ``Split`` keeps all text. Used by the export (``hf_json``) and the import
(``hf_json_read``).
"""

from __future__ import annotations

from collections.abc import Iterator

import regex

from bpe_spark.patterns import PRESETS, preset_name

# Presets whose regex matches every character of any text: Split "Isolated" (which keeps the text
# between matches too) then gives exactly our pretokens. Other patterns drop unmatched text, which
# Split "Removed" with invert=True reproduces.
COVERING_PRESETS = ("gpt2", "cl100k", "o200k")


# subtle: tokenizers compiles Split patterns with Oniguruma (Ruby syntax), where ``X{1,3}+`` is not
# a possessive interval (as in Python's regex and tiktoken) but ``(?:X{1,3})+``. cl100k uses it.
# Export rewrites it as the atomic group ``(?>X{1,3})``; import reads Onig's meaning back.
_INTERVAL_PLUS = regex.compile(r"\{\d+(?:,\d*)?\}\+")


def _atom_start(source: str, end: int) -> int:
    """Start of the regex atom that ends just before ``end`` (a group, a class, an escape, a char)."""
    last = source[end - 1]
    if last == ")":
        depth = 0
        for i in range(end - 1, -1, -1):
            if source[i] in ")(" and not _escaped(source, i):
                depth += 1 if source[i] == ")" else -1
                if depth == 0:
                    return i
        return 0
    if last == "]" and not _escaped(source, end - 1):
        # the class that closes here, found from the start (classes may hold escaped brackets)
        for start, close in _classes(source, end):
            if close == end - 1:
                return start
        return end - 1
    if last == "}":
        k = source.rfind("\\", 0, end)
        if k >= 0 and source[k + 1 : k + 2] in ("p", "P", "x", "N", "u"):
            return k
    if end >= 2 and _escaped(source, end - 1):
        return end - 2
    return end - 1


def _escaped(source: str, i: int) -> bool:
    slashes = 0
    while i - 1 - slashes >= 0 and source[i - 1 - slashes] == "\\":
        slashes += 1
    return slashes % 2 == 1


def _class_end(source: str, start: int) -> int:
    i = start + 1
    if i < len(source) and source[i] == "^":
        i += 1
    if i < len(source) and source[i] == "]":
        i += 1
    while i < len(source):
        if source[i] == "\\":
            i += 2
            continue
        if source[i] == "[":
            i = _class_end(source, i) + 1
            continue
        if source[i] == "]":
            return i
        i += 1
    return len(source) - 1


def _classes(source: str, stop: int) -> Iterator[tuple[int, int]]:
    """``(start, end)`` of each outermost character class that opens before ``stop``."""
    i = 0
    while i < stop:
        if source[i] == "\\":
            i += 2
        elif source[i] == "[":
            end = _class_end(source, i)
            yield i, end
            i = end + 1
        else:
            i += 1


def _in_class(source: str, position: int) -> bool:
    return any(end >= position for _, end in _classes(source, position))


def _rewrite_interval_plus(source: str, *, to: str) -> str:
    """``X{n,m}+`` as ``(?>X{n,m})`` (``to="atomic"``, Python's meaning for Onig) or
    ``(?:X{n,m})+`` (``to="repeat"``, Onig's meaning for Python)."""
    out = source
    offset = 0
    for match in list(_INTERVAL_PLUS.finditer(source)):
        start = match.start()
        if _escaped(source, start) or _in_class(source, start):
            continue
        atom = _atom_start(source, start)
        interval = match.group()[:-1]
        body = source[atom:start] + interval
        replacement = f"(?>{body})" if to == "atomic" else f"(?:{body})+"
        out = out[: atom + offset] + replacement + out[match.end() + offset :]
        offset += len(replacement) - (match.end() - atom)
    return out


def onig_pattern(source: str) -> str:
    r"""Our (Python ``regex``) pattern in the Oniguruma syntax ``tokenizers`` compiles.

    >>> onig_pattern(r"\p{N}{1,3}+|\s")
    '(?>\\p{N}{1,3})|\\s'
    """
    return _rewrite_interval_plus(source, to="atomic")


def python_pattern(source: str) -> str:
    """An Oniguruma pattern from a ``tokenizer.json`` in Python ``regex`` syntax."""
    return _rewrite_interval_plus(source, to="repeat")


def onig_preset_name(source: str) -> str | None:
    """The preset whose regex ``source`` is, as we write it or in its Oniguruma form; None for
    any other regex (:func:`bpe_spark.patterns.preset_name`, which knows our form only)."""
    name = preset_name(source)
    if name is not None:
        return name
    for name, preset in PRESETS.items():
        if source == onig_pattern(preset):
            return name
    return None
