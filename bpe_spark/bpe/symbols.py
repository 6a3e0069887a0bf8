"""Initial symbols, the token table, and the tie-break order of each scheme.

Byte scheme: ids 0..255 are the byte values. Char scheme: ids follow the special tokens, the
alphabet in code-point order, then the end-of-word symbol(s).

>>> bytes_to_unicode()[ord(" ")]
'Ġ'
"""

from __future__ import annotations

from collections.abc import Container, Iterable
from functools import cache


@cache
def bytes_to_unicode() -> tuple[str, ...]:
    """GPT-2's printable character for each byte value (the ``tokenizers`` ByteLevel alphabet)."""
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    table: dict[int, int] = {b: b for b in printable}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = 256 + extra
            extra += 1
    return tuple(chr(table[b]) for b in range(256))


@cache
def unicode_to_bytes() -> dict[str, int]:
    return {ch: b for b, ch in enumerate(bytes_to_unicode())}


def bytes_to_display(token: bytes) -> str:
    """A token's bytes in GPT-2's printable form, as ``merges.txt`` and ``tokenizer.json`` hold it."""
    table = bytes_to_unicode()
    return "".join(table[b] for b in token)


def display_to_bytes(text: str) -> bytes:
    """Inverse of :func:`bytes_to_display`; raises KeyError for a character outside the alphabet."""
    table = unicode_to_bytes()
    return bytes(table[ch] for ch in text)


def utf8_bytes(value: bytes | str) -> bytes:
    """A token's bytes: byte-scheme tokens are bytes already, char-scheme ones are UTF-8 text."""
    return value if isinstance(value, bytes) else value.encode("utf-8")


def missing_bytes(tokens: Container[bytes]) -> list[int]:
    """The single bytes (0..255) that ``tokens`` lacks; a byte-level vocabulary needs all 256.

    >>> missing_bytes({bytes([b]) for b in range(1, 256)})
    [0]
    """
    return [b for b in range(256) if bytes([b]) not in tokens]


def _reverse_key_bytes(value: bytes) -> tuple[int, ...]:
    # Ascending order of these keys is descending byte-string order (a prefix sorts after).
    return tuple(255 - b for b in value) + (256,)


def _reverse_key_str(value: str) -> tuple[int, ...]:
    return tuple(0x10FFFF - ord(c) for c in value) + (0x110000,)


class SymbolTable:
    """Token values by id, the reverse index, and the tie-break key of each id.

    Identical values share one id: a merge whose result already exists reuses that id (as
    ``tokenizers`` does), so a vocabulary never holds the same token twice.

    The heap of the merge engine pops the smallest ``(-count, key[left], key[right])``:
    - ``hf``: key is the position in ``tokenizers``' id order (smaller pair wins);
    - ``lexicographic``: key reverses byte-string (or string) order (greater pair wins).
    """

    def __init__(self, scheme: str, tie_break: str, first_id: int = 0):
        self.scheme = scheme
        self.tie_break = tie_break
        self.first_id = first_id
        self.values: list = []  # index = id - first_id
        self.index: dict = {}
        self.keys: list = []
        self.prefix: str | None = None  # a continuing_subword_prefix that join cuts off the right token

    def join(self, left, right):
        """The token a merge of ``left`` and ``right`` makes: their concatenation, with the
        ``prefix`` cut off ``right`` when set (``tokenizers``' ``continuing_subword_prefix``).

        >>> table = SymbolTable("char", "hf"); table.prefix = "##"
        >>> table.join("a", "##b"), table.join("##a", "##b")
        ('ab', '##ab')
        """
        if self.prefix and right.startswith(self.prefix):
            right = right[len(self.prefix):]
        return left + right

    def __len__(self) -> int:
        return len(self.values)

    def copy(self) -> SymbolTable:
        """An independent table with the same tokens (values and keys are immutable)."""
        other = SymbolTable(self.scheme, self.tie_break, self.first_id)
        other.values, other.index, other.keys = list(self.values), dict(self.index), list(self.keys)
        other.prefix = self.prefix
        return other

    @property
    def next_id(self) -> int:
        return self.first_id + len(self.values)

    def value(self, token_id: int):
        return self.values[token_id - self.first_id]

    def _key_for(self, value, hf_position: int):
        if self.tie_break == "hf":
            return hf_position
        return _reverse_key_bytes(value) if self.scheme == "byte" else _reverse_key_str(value)

    def add(self, value, hf_position: int | None = None) -> tuple[int, bool]:
        """The id of ``value``, creating it when new; returns ``(id, created)``."""
        existing = self.index.get(value)
        if existing is not None:
            return existing, False
        token_id = self.next_id
        self.values.append(value)
        self.index[value] = token_id
        # subtle: tokenizers orders merged tokens after the whole alphabet, in creation order;
        # ids are allotted the same way, so the id itself is the hf position unless given.
        self.keys.append(self._key_for(value, token_id if hf_position is None else hf_position))
        return token_id, True

    # --- constructors -----------------------------------------------------------------------
    @classmethod
    def for_bytes(cls, tie_break: str) -> SymbolTable:
        table = cls("byte", tie_break, 0)
        display = bytes_to_unicode()
        order = sorted(range(256), key=lambda b: ord(display[b]))
        position = {b: i for i, b in enumerate(order)}
        for b in range(256):
            table.add(bytes([b]), hf_position=position[b])
        return table

    @classmethod
    def for_chars(
        cls,
        alphabet: Iterable[str],
        tie_break: str,
        *,
        final_chars: Iterable[str] = (),
        end_of_word: str,
        marker: str,
        first_id: int = 0,
    ) -> SymbolTable:
        table = cls("char", tie_break, first_id)
        chars = sorted(set(alphabet))
        for ch in chars:
            table.add(ch)
        if end_of_word == "separate":
            table.add(marker)
        else:
            # Only characters that end some word get a fused ``c</w>`` symbol.
            for ch in sorted(set(final_chars)):
                table.add(ch + marker)
        return table
