"""How tokens look to people: a token's text with its boundaries visible, for ``bpe-spark inspect``.

A token is shown as its text, with the bytes that are not whole UTF-8 characters as ``<0xE2>``
(a byte token, or a merge that cuts a character), control characters as ``<0x1B>`` (never sent
raw to a terminal) and whitespace made visible: ``␣`` a space, ``↵`` a line break, ``⇥`` a tab,
``␍`` a carriage return. A text is shown as its tokens side by side, each in ``[brackets]``, or
on a terminal in alternating background colours (ANSI). Plain strings, no printing.

>>> show_tokens([b"Hello", b" wor", b"ld\\n"])
'[Hello][␣wor][ld↵]'
>>> readable(b" \\xe2\\x80")
'␣<0xE2><0x80>'
"""

from __future__ import annotations

import os
import unicodedata
from collections.abc import Iterable

from bpe_spark.pipeline.model import byte_fallback_token

VISIBLE = {" ": "␣", "\n": "↵", "\t": "⇥", "\r": "␍"}
# light backgrounds (xterm 256-colour palette) under black text: blue, yellow, green, pink, violet
COLOURS = (153, 229, 157, 217, 183)
RESET = "\x1b[0m"
COLOUR_CHOICES = ("auto", "always", "never")


def readable(token: bytes | str) -> str:
    """A token (bytes, or the char scheme's text) as people read it: see the module's rules.

    >>> readable(b"\\x80abc\\xe4\\xb8")
    '<0x80>abc<0xE4><0xB8>'
    >>> readable("a\\tb\\x1b")
    'a⇥b<0x1B>'
    """
    if isinstance(token, str):
        return "".join(_visible(char) for char in token)
    shown, pos = [], 0
    while pos < len(token):
        try:
            shown.append(_visible_text(token[pos:].decode("utf-8")))
            break
        except UnicodeDecodeError as exc:  # the valid start, then the bytes that are no character
            shown.append(_visible_text(token[pos:pos + exc.start].decode("utf-8")))
            shown.extend(byte_fallback_token(byte) for byte in token[pos + exc.start:pos + exc.end])
            pos += exc.end
    return "".join(shown)


def _visible_text(text: str) -> str:
    return "".join(_visible(char) for char in text)


def _visible(char: str) -> str:
    if char in VISIBLE:
        return VISIBLE[char]
    if unicodedata.category(char) in ("Cc", "Cf", "Zl", "Zp") and char not in "\u200d":
        # the bytes of the character: what a terminal would otherwise act on, or hide
        return "".join(byte_fallback_token(byte) for byte in char.encode("utf-8"))
    return char


def show_tokens(tokens: Iterable[bytes | str], *, colour: bool = False) -> str:
    """Tokens side by side with visible boundaries: ``[..][..]``, or (``colour``) each on the next
    of :data:`COLOURS` as background, for a terminal.

    >>> show_tokens(["ab", "c"], colour=True) == "\\x1b[30;48;5;153mab\\x1b[0m\\x1b[30;48;5;229mc\\x1b[0m"
    True
    """
    if not colour:
        return "".join(f"[{readable(token)}]" for token in tokens)
    return "".join(f"\x1b[30;48;5;{COLOURS[i % len(COLOURS)]}m{readable(token)}{RESET}"
                   for i, token in enumerate(tokens))


def legend(*, colour: bool) -> str:
    """What the marks of :func:`show_tokens` mean, in a line."""
    boundaries = "tokens in alternating colours" if colour else "each token in [ ]"
    return f"{boundaries}; ␣ space, ↵ line break, ⇥ tab, ␍ carriage return, <0xNN> a byte that is not a whole character, or of a control character"


def use_colour(choice: str, stream) -> bool:
    """``--color``: ``always``, ``never``, or ``auto``: when ``stream`` is a terminal and neither
    ``NO_COLOR`` nor ``TERM=dumb`` says otherwise (https://no-color.org)."""
    if choice != "auto":
        return choice == "always"
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty()) and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"


def json_token(value: bytes | str) -> str:
    """A token in JSON: its text, bytes that are not UTF-8 as ``\\xNN``."""
    return value.decode("utf-8", errors="backslashreplace") if isinstance(value, bytes) else value
