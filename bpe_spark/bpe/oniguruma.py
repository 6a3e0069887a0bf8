r"""Patterns in a ``tokenizer.json``: translation between Python's ``regex`` (ours, tiktoken's) and
the Oniguruma dialect ``tokenizers`` compiles (``onig::Regex::new``: Ruby syntax), and recognising a
preset by its translation. Used by the export
(``tokenizer_json_write``), the import (``tokenizer_json_read``) and the imported pipeline's steps
(:mod:`bpe_spark.pipeline`).

Entry points:

- :func:`python_pattern` (Oniguruma -> Python ``regex`` text with the same meaning; raises
  :class:`UnsupportedPattern`, a ValueError whose message says what construct was found, for
  anything it cannot reproduce exactly) and :func:`onig_pattern` (ours -> Oniguruma);
- :func:`onig_preset_name` (the preset ``python_pattern(source)`` is, by its text, or None);
- :func:`compile_onig` (the compiled translation, cached); matching it as tokenizers iterates
  is :func:`bpe_spark.pipeline.pre_tokenizers.find_matches`.

Where Oniguruma's Ruby syntax means something else than Python's (each checked against
``tokenizers`` in tests/bpe/test_oniguruma.py):

- ``X{n,m}+`` is not possessive but a greedy repeat of ``X{n,m}``: ``(?:X{n,m})+`` (tiktoken's raw
  cl100k ``\p{N}{1,3}+`` keeps "1870" whole there, which BPE then merges as ``18|70``); ``X{n}?``
  is ``(?:X{n})?``. The atomic ``(?>X{n,m})`` is written back as Python's possessive ``X{n,m}+``.
- ``^`` and ``$`` are line anchors (Python's ``(?m:^)``, ``(?m:$)``); ``$`` right after a
  possessive whitespace run (``\s++$``, cl100k) can only meet the end of the text, so it stays.
  ``\Z`` is "end, or before a final newline", ``\z`` the end (Python's ``\Z``).
- ``(?m)`` is Python's ``(?s)`` (dot matches a newline); ``\h`` is a hex digit.
- ``(?i)`` folds several characters at once (``ß`` matches ``ss``): a case-insensitive group
  whose text holds such a character or sequence gets Python's full case folding ``(?fi)``.
- ``\w`` (and ``\W``, ``\b``, ``\B``) is Alphabetic, marks, decimal digits and connector
  punctuation, never ZWNJ/ZWJ (which Python's ``\w`` has), and outside a class also
  ``² ³ ¹ ¼ ½ ¾``. ``\p{Word}`` and other properties pass through as Python reads them.
- A nested class is a union (its items join the outer class; a negated one is refused); ``&&``,
  ``\R \X \K \G \O \y \Y \N``, back-references, calls and absent groups are refused.
- Unicode tables: tokenizers 0.23's Oniguruma has Unicode 16.0, the ``regex`` module 17.0: the
  characters assigned in 17.0 (CJK Extension J, 2025's emoji, ...; Oniguruma sees them
  unassigned) and U+0295 (Ll there, Lo here) differ in ``\p{..}``, ``\w``, ``\d``; not
  reproduced (the translation keeps a preset's text, hence its compiled fast path). Every other
  code point agrees (tests/bpe/test_oniguruma.py checks each class the hub patterns use).
"""

from __future__ import annotations

from functools import lru_cache

import regex

from bpe_spark.bpe.patterns import preset_name
from bpe_spark.bpe.regex_source import atom_start, escaped, in_class

# the regex tokenizers' ByteLevel pre-tokenizer splits with when use_regex is true
GPT2_ONIG_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


class UnsupportedPattern(ValueError):
    """An Oniguruma construct :func:`python_pattern` does not reproduce; the message names it."""


_QUANT_START = "*+?{"
_INTERVAL = regex.compile(r"\{(\d*)(?:(,)(\d*))?\}")
_REFUSED_ESCAPES = {  # escape letter: what it is
    "R": "a linebreak", "X": "a grapheme cluster", "K": "keep", "G": "the search start",
    "O": "any character, multiline", "y": "a grapheme boundary", "Y": "no grapheme boundary",
    "N": "no newline", "k": "a named back-reference", "g": "a subexpression call",
}
_PASSED_ESCAPES = set("tnrfvaAdDsSpPx0123456789u")
_HEX = "0-9a-fA-F"
# subtle: Oniguruma's \w is Alphabetic, marks, decimal digits and connector punctuation, never
# Python's Join_Control (ZWNJ, ZWJ); outside a class it also takes six Latin-1 characters its
# ISO-8859-1 table counts as word characters (² ³ ¹ ¼ ½ ¾), inside a class it does not
_CLASS_WORD = r"\p{Alpha}\p{M}\p{Nd}\p{Pc}"
_WORD = rf"[{_CLASS_WORD}\xb2\xb3\xb9\xbc-\xbe]"
_NOT_WORD = rf"[^{_CLASS_WORD}\xb2\xb3\xb9\xbc-\xbe]"


class _Translator:
    """One left-to-right pass over an Oniguruma pattern; each group is one atom for quantifiers."""

    def __init__(self, source: str) -> None:
        self.s = source
        self.i = 0

    def fail(self, what: str) -> UnsupportedPattern:
        return UnsupportedPattern(f"{what} at position {self.i} of the pattern is not supported")

    def sequence(self, *, top: bool) -> str:
        atoms: list[str] = []
        s = self.s
        while self.i < len(s):
            c = s[self.i]
            if c == ")":
                if top:
                    raise self.fail("an unbalanced ')'")
                break
            if c == "|":
                atoms.append("|")
                self.i += 1
                continue
            if c in _QUANT_START and atoms and atoms[-1] != "|" and self._is_quantifier():
                atoms[-1] = self.quantify(atoms[-1], atoms)
                continue
            atoms.append(self.atom(atoms))
        return "".join(atoms)

    def _is_quantifier(self) -> bool:
        if self.s[self.i] != "{":
            return True
        return _INTERVAL.match(self.s, self.i) is not None and _INTERVAL.match(self.s, self.i).group() != "{}"

    def quantify(self, atom: str, atoms: list[str]) -> str:
        s = self.s
        if s[self.i] == "{":
            match = _INTERVAL.match(s, self.i)
            interval = match.group()
            self.i = match.end()
            follow = s[self.i : self.i + 1]
            if follow == "+":  # Ruby syntax: a repeat of the interval, not a possessive one
                self.i += 1
                return f"(?:{atom}{interval})+"
            if follow == "?" and match.group(2) is None:  # X{n}? is an optional X{n}
                self.i += 1
                return f"(?:{atom}{interval})?"
            if follow == "?":
                self.i += 1
                return atom + interval + "?"
            return atom + interval
        op = s[self.i]
        self.i += 1
        if s[self.i : self.i + 1] in ("+", "?"):
            op += s[self.i]
            self.i += 1
        return atom + op

    def atom(self, atoms: list[str]) -> str:
        s = self.s
        c = s[self.i]
        if c == "(":
            return self.group()
        if c == "[":
            return self.char_class()
        if c == "\\":
            return self.escape(in_class=False)
        self.i += 1
        if c == "^":
            return "(?m:^)"
        if c == "$":
            previous = atoms[-1] if atoms else ""
            if previous in (r"\s++", r"\s*+"):
                return "$"  # after a possessive whitespace run only the end of the text is left
            return "(?m:$)"
        return c

    def group(self) -> str:
        s = self.s
        start = self.i
        self.i += 1
        if not s.startswith("?", self.i):
            body = self.sequence(top=False)
            self.close(start)
            return f"({body})"
        for opener in ("?:", "?=", "?!", "?<=", "?<!", "?>"):
            if s.startswith(opener, self.i):
                self.i += len(opener)
                body = self.sequence(top=False)
                self.close(start)
                if opener == "?>":
                    possessive = self._atomic_interval(body)
                    if possessive is not None:
                        return possessive
                return f"({opener}{body})"
        named = regex.compile(r"\?<([A-Za-z_]\w*)>").match(s, self.i)
        if named:
            self.i = named.end()
            body = self.sequence(top=False)
            self.close(start)
            return f"(?P<{named.group(1)}>{body})"
        flags = regex.compile(r"\?([im]*)(?:-([im]*))?([:)])").match(s, self.i)
        if not flags:
            raise self.fail(f"the group {s[start : start + 4]!r}")
        self.i = flags.end()
        on, off = (flags.group(1) or "").replace("m", "s"), (flags.group(2) or "").replace("m", "s")
        # (?i) switches the flag until the end of the enclosing group: scoped explicitly here
        body = self.sequence(top=False)
        if flags.group(3) == ":":
            self.close(start)
        if "i" in on and _needs_full_folding(body):
            on = "f" + on  # Oniguruma folds ß as "ss", ﬁ as "fi": Python's full case folding
        spec = on + (f"-{off}" if off else "")
        return f"(?{spec}:{body})" if spec else f"(?:{body})"

    def _atomic_interval(self, body: str) -> str | None:
        """``(?>X{n,m})`` (one atom, one interval) as Python's possessive ``X{n,m}+``."""
        match = regex.fullmatch(r"(\\p\{\w+\}|\\[a-zA-Z]|\[[^\[\]]*\]|[^\\\[\]()|*+?{}])(\{\d+(?:,\d*)?\})", body)
        return f"{match.group(1)}{match.group(2)}+" if match else None

    def close(self, start: int) -> None:
        if self.i >= len(self.s) or self.s[self.i] != ")":
            self.i = start
            raise self.fail("an unclosed '('")
        self.i += 1

    def escape(self, *, in_class: bool) -> str:
        s = self.s
        if self.i + 1 >= len(s):
            raise self.fail("a trailing backslash")
        c = s[self.i + 1]
        if c in _REFUSED_ESCAPES and not in_class:
            raise self.fail(f"\\{c} ({_REFUSED_ESCAPES[c]})")
        if c == "p" or c == "P":
            return self.property()
        self.i += 2
        if c == "w":
            return _CLASS_WORD if in_class else _WORD
        if c == "W":
            if in_class:
                raise self.fail("\\W inside a class")
            return _NOT_WORD
        if c in "bB" and not in_class:
            if c == "b":
                return f"(?:(?<={_WORD})(?!{_WORD})|(?<!{_WORD})(?={_WORD}))"
            return f"(?:(?<={_WORD})(?={_WORD})|(?<!{_WORD})(?!{_WORD}))"
        if c == "b":
            return r"\x08"
        if c == "h":
            return _HEX if in_class else f"[{_HEX}]"
        if c == "H":
            if in_class:
                raise self.fail("\\H inside a class")
            return f"[^{_HEX}]"
        if c == "z" and not in_class:
            return r"\Z"
        if c == "Z" and not in_class:
            return r"(?=\n?\Z)"
        if c == "e":
            return r"\x1b"
        if c == "x" and s.startswith("{", self.i):
            end = s.find("}", self.i)
            digits = s[self.i + 1 : end]
            if end < 0 or not regex.fullmatch(r"[0-9a-fA-F]{1,8}", digits) or int(digits, 16) > 0x10FFFF:
                raise self.fail("a malformed \\x{...}")
            self.i = end + 1
            return f"\\U{int(digits, 16):08x}"
        if c == "u":
            text = s[self.i - 2 : self.i + 4]
            self.i += 4
            return text
        if c.isalpha() and c not in _PASSED_ESCAPES:
            self.i -= 2
            raise self.fail(f"the escape \\{c}")
        if c.isdigit() and c != "0" and not in_class:
            raise self.fail(f"the back-reference \\{c}")
        return "\\" + c

    def property(self) -> str:
        s = self.s
        negated = s[self.i + 1] == "P"
        if s.startswith("{", self.i + 2):
            end = s.find("}", self.i)
            if end < 0:
                raise self.fail("an unclosed \\p{")
            name = s[self.i + 3 : end]
            self.i = end + 1
        else:
            name = s[self.i + 2 : self.i + 3]
            self.i += 3
        if name.startswith("^"):
            negated, name = not negated, name[1:]
        if not regex.fullmatch(r"[A-Za-z_]+", name):
            raise self.fail(f"the property \\p{{{name}}}")
        return f"\\{'P' if negated else 'p'}{{{name}}}"

    def char_class(self) -> str:
        s = self.s
        start = self.i
        out = ["["]
        self.i += 1
        if s.startswith("^", self.i):
            out.append("^")
            self.i += 1
        first = True
        while True:
            if self.i >= len(s):
                self.i = start
                raise self.fail("an unclosed '['")
            c = s[self.i]
            if c == "]" and not first:
                self.i += 1
                out.append("]")
                break
            if c == "\\":
                out.append(self.escape(in_class=True))
            elif c == "[":
                posix = regex.compile(r"\[:\^?[a-z]+:\]").match(s, self.i)
                if posix:
                    out.append(posix.group())
                    self.i = posix.end()
                else:  # a nested class is a union in Oniguruma: its items join this class
                    here = self.i
                    inner = self.char_class()
                    if inner.startswith("[^"):
                        self.i = here
                        raise self.fail("a negated nested character class")
                    out.append(inner[1:-1])
            elif s.startswith("&&", self.i):
                raise self.fail("a class intersection '&&'")
            else:
                out.append("\\]" if c == "]" else c)
                self.i += 1
            first = False
        return "".join(out)


@lru_cache(maxsize=1)
def _multi_char_folds() -> tuple[frozenset[str], tuple[str, ...]]:
    """The characters whose full case folding is several characters, and those foldings."""
    sources = frozenset(c for c in map(chr, range(0x110000)) if len(c.casefold()) > 1)
    return sources, tuple(sorted({c.casefold() for c in sources}))


def _needs_full_folding(body: str) -> bool:
    """A case-insensitive group whose text holds a character or a sequence that Oniguruma folds
    to or from several characters (the hub patterns' contractions hold none)."""
    sources, targets = _multi_char_folds()
    if "\u0130" in body or "i\u0307" in body.casefold():
        raise UnsupportedPattern("a case-insensitive dotted I (U+0130) is not supported")
    folded = body.casefold()
    return any(c in sources for c in body) or any(t in folded for t in targets)


@lru_cache(maxsize=256)
def python_pattern(source: str) -> str:
    r"""An Oniguruma pattern from a ``tokenizer.json`` in Python ``regex`` syntax, same meaning.

    >>> python_pattern(r"\p{N}{1,3}+| ?\p{L}+|\s+$")
    '(?:\\p{N}{1,3})+| ?\\p{L}+|\\s+(?m:$)'
    >>> python_pattern(r"(?>\p{N}{1,3})|\s++$")
    '\\p{N}{1,3}+|\\s++$'
    """
    translator = _Translator(source)
    out = translator.sequence(top=True)
    try:
        regex.compile(out)
    except regex.error as exc:
        raise UnsupportedPattern(f"the pattern does not compile as translated ({exc})") from None
    return out


def onig_pattern(source: str) -> str:
    r"""Our (Python ``regex``) pattern in the Oniguruma syntax ``tokenizers`` compiles, same
    meaning: a possessive interval ``X{n,m}+`` becomes the atomic group ``(?>X{n,m})``; Python's
    ``\w`` / ``\W`` their Unicode classes (Oniguruma's differ on ZWNJ, ZWJ and ``² ³ ¹ ¼ ½ ¾``);
    ``^``, ``$`` and ``\Z`` outside a class ``\A``, ``(?=\n?\z)``, ``\z`` (kept after a possessive
    whitespace run, where they mean the same).

    >>> onig_pattern(r"\p{N}{1,3}+|\s")
    '(?>\\p{N}{1,3})|\\s'
    >>> onig_pattern(r"\w+|[^\s\w]+$")
    '[\\p{Alpha}\\p{M}\\p{Nd}\\p{Pc}\\u200c\\u200d]+|[^\\s\\p{Alpha}\\p{M}\\p{Nd}\\p{Pc}\\u200c\\u200d]+(?=\\n?\\z)'
    """
    return _rewrite_python_only(_rewrite_interval_plus(source))


_PY_WORD = r"\p{Alpha}\p{M}\p{Nd}\p{Pc}\u200c\u200d"  # Python's \w, in Oniguruma


def _rewrite_python_only(source: str) -> str:
    out, i, depth = [], 0, 0  # depth: how many character classes are open
    while i < len(source):
        c = source[i]
        if c == "\\" and i + 1 < len(source):
            e = source[i + 1]
            if e == "w":
                out.append(_PY_WORD if depth else f"[{_PY_WORD}]")
            elif e == "W":
                out.append(f"[^{_PY_WORD}]")
            elif e == "Z" and not depth:
                out.append(r"\z")
            else:
                out.append(source[i : i + 2])
            i += 2
            continue
        if c == "[":
            depth += 1
            out.append(c)
            if source.startswith("^", i + 1):
                out.append("^")
                i += 1
            if source.startswith("]", i + 1):
                out.append("\\]")
                i += 1
        elif c == "]" and depth:
            depth -= 1
            out.append(c)
        elif c == "^" and not depth:
            out.append(r"\A")
        elif c == "$" and not depth:
            after_run = "".join(out).endswith((r"\s++", r"\s*+"))
            out.append("$" if after_run else r"(?=\n?\z)")
        else:
            out.append(c)
        i += 1
    return "".join(out)


def onig_preset_name(source: str) -> str | None:
    """The preset an Oniguruma pattern is: the one whose Python source is exactly
    ``python_pattern(source)`` (never by the original text, whose meaning may differ); None for
    any other pattern and for one that does not translate."""
    try:
        return preset_name(python_pattern(source))
    except UnsupportedPattern:
        return None


@lru_cache(maxsize=256)
def compile_onig(source: str) -> regex.Pattern:
    """The translation of an Oniguruma pattern, compiled (raises :class:`UnsupportedPattern`)."""
    return regex.compile(python_pattern(source))


_INTERVAL_PLUS = regex.compile(r"\{\d+(?:,\d*)?\}\+")


def _rewrite_interval_plus(source: str) -> str:
    """``X{n,m}+`` (Python's possessive interval) as the atomic ``(?>X{n,m})``."""
    out = source
    offset = 0
    for match in list(_INTERVAL_PLUS.finditer(source)):
        start = match.start()
        if escaped(source, start) or in_class(source, start):
            continue
        atom = atom_start(source, start)
        replacement = f"(?>{source[atom:start]}{match.group()[:-1]})"
        out = out[: atom + offset] + replacement + out[match.end() + offset :]
        offset += len(replacement) - (match.end() - atom)
    return out
