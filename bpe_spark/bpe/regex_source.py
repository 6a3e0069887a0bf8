"""Reading a regex's source text without parsing it: where the atom before a position starts, whether
a character is escaped, where a character class ends and whether a position lies in one. What the
Oniguruma translation (:mod:`bpe_spark.bpe.oniguruma`) rewrites by.
"""

from __future__ import annotations

from collections.abc import Iterator


def atom_start(source: str, end: int) -> int:
    """Start of the regex atom that ends just before ``end`` (a group, a class, an escape, a char)."""
    last = source[end - 1]
    if last == ")":
        depth = 0
        for i in range(end - 1, -1, -1):
            if source[i] in ")(" and not escaped(source, i):
                depth += 1 if source[i] == ")" else -1
                if depth == 0:
                    return i
        return 0
    if last == "]" and not escaped(source, end - 1):
        for start, close in classes(source, end):
            if close == end - 1:
                return start
        return end - 1
    if last == "}":
        k = source.rfind("\\", 0, end)
        if k >= 0 and source[k + 1 : k + 2] in ("p", "P", "x", "N", "u"):
            return k
    if end >= 2 and escaped(source, end - 1):
        return end - 2
    return end - 1


def escaped(source: str, i: int) -> bool:
    slashes = 0
    while i - 1 - slashes >= 0 and source[i - 1 - slashes] == "\\":
        slashes += 1
    return slashes % 2 == 1


def class_end(source: str, start: int) -> int:
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
            i = class_end(source, i) + 1
            continue
        if source[i] == "]":
            return i
        i += 1
    return len(source) - 1


def classes(source: str, stop: int) -> Iterator[tuple[int, int]]:
    """``(start, end)`` of each outermost character class that opens before ``stop``."""
    i = 0
    while i < stop:
        if source[i] == "\\":
            i += 2
        elif source[i] == "[":
            end = class_end(source, i)
            yield i, end
            i = end + 1
        else:
            i += 1


def in_class(source: str, position: int) -> bool:
    return any(end >= position for _, end in classes(source, position))

