"""tokenizers' decoders, reproduced exactly: :func:`build_decoder` turns the ``decoder`` object of a
tokenizer.json into a :class:`Decoder`, ``decoder(tokens)`` being tokenizers'
``decoder.decode(tokens)`` (each step maps the list of token strings, as Rust's ``decode_chain``,
then the strings are joined).

Supported: ByteLevel, Metaspace, ByteFallback, Fuse, Strip (content/start/stop), Replace,
BPEDecoder (suffix) and Sequence. Refused: WordPiece, CTC and any other type.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from bpe_spark.pipeline.normalizers import replace_function
from bpe_spark.pipeline.pre_tokenizers import (
    ErrorFactory,
    get_option,
    metaspace_options,
    only_options,
    pattern_of,
)
from bpe_spark.bpe.symbols import unicode_to_bytes

Chain = Callable[[list[str]], list[str]]


class Decoder:
    """A decoder: ``decoder(tokens)`` is tokenizers' ``decoder.decode(tokens)``."""

    def __init__(self, chain: Chain, kind: str) -> None:
        self.chain, self.kind = chain, kind

    def __call__(self, tokens: list[str]) -> str:
        return "".join(self.chain(list(tokens)))

    def __repr__(self) -> str:
        return f"Decoder({self.kind})"


def byte_level(tokens: list[str]) -> list[str]:
    """GPT-2's printable characters back to bytes (a token with any other character stays its
    UTF-8), all tokens' bytes decoded as one text, invalid sequences as U+FFFD."""
    table = unicode_to_bytes()
    data = bytearray()
    for token in tokens:
        try:
            data.extend(table[c] for c in token)
        except KeyError:
            data.extend(token.encode("utf-8"))
    return [data.decode("utf-8", errors="replace")]


def _byte_token(token: str) -> int | None:
    """The byte of a ``<0xHH>`` token, as Rust's ``u8::from_str_radix(&token[3..5], 16)`` reads it."""
    if len(token.encode("utf-8")) != 6 or not token.startswith("<0x") or not token.endswith(">"):
        return None
    digits = token[3:5]
    body = digits.removeprefix("+")
    if not body or any(c not in "0123456789abcdefABCDEF" for c in body):
        return None
    return int(body, 16)


def byte_fallback(tokens: list[str]) -> list[str]:
    """Runs of ``<0xHH>`` tokens as the text their bytes spell; a run that is not UTF-8 is one
    U+FFFD per byte."""
    out: list[str] = []
    run = bytearray()

    def flush() -> None:
        if run:
            try:
                out.append(run.decode("utf-8"))
            except UnicodeDecodeError:
                out.extend("\ufffd" for _ in run)
            run.clear()

    for token in tokens:
        byte = _byte_token(token)
        if byte is not None:
            run.append(byte)
            continue
        flush()
        out.append(token)
    flush()
    return out


def _metaspace(replacement: str, prepend_scheme: str) -> Chain:
    """Each replacement character a space; in the first token (unless prepend_scheme is "never")
    tokenizers drops every replacement character, not only a leading one."""

    def chain(tokens: list[str]) -> list[str]:
        return [
            t.replace(replacement, "" if i == 0 and prepend_scheme != "never" else " ")
            for i, t in enumerate(tokens)
        ]

    return chain


def _strip(content: str, start: int, stop: int) -> Chain:
    def one(token: str) -> str:
        begin = 0
        while begin < min(start, len(token)) and token[begin] == content:
            begin += 1
        end = len(token)
        for i in range(stop):
            if i >= len(token):
                raise ValueError(f"Strip(stop={stop}) of the token {token!r}: tokenizers panics here")
            if token[len(token) - i - 1] != content:
                break
            end = len(token) - i - 1
        if begin > end:
            raise ValueError(f"Strip(start={start}, stop={stop}) of {token!r}: tokenizers panics here")
        return token[begin:end]

    return lambda tokens: [one(t) for t in tokens]


def _bpe_decoder(suffix: str) -> Chain:
    def chain(tokens: list[str]) -> list[str]:
        last = len(tokens) - 1
        return [t.replace(suffix, "" if i == last else " ") for i, t in enumerate(tokens)]

    return chain


def _sequence(chains: Sequence[Chain]) -> Chain:
    def chain(tokens: list[str]) -> list[str]:
        for step in chains:
            tokens = step(tokens)
        return tokens

    return chain


def build_decoder(spec: Any, field: str, error: ErrorFactory) -> Decoder | None:
    """The decoder a tokenizer.json's ``decoder`` object (at ``field``) describes; None for null.
    Raises ``error(field, message)`` for anything not reproduced exactly."""
    if spec is None:
        return None
    if not isinstance(spec, dict):
        raise error(field, f"is {spec!r}; expected an object")
    return Decoder(_chain(spec, field, error), str(spec.get("type")))


def _chain(spec: Any, field: str, error: ErrorFactory) -> Chain:
    if not isinstance(spec, dict):
        raise error(field, f"is {spec!r}; expected an object")
    kind = spec.get("type")
    if kind == "ByteLevel":
        only_options(spec, {"add_prefix_space", "trim_offsets", "use_regex"}, field, error)
        return byte_level
    if kind == "Metaspace":
        replacement, scheme, _ = metaspace_options(spec, field, error)
        return _metaspace(replacement, scheme)
    if kind == "ByteFallback":
        only_options(spec, set(), field, error)
        return byte_fallback
    if kind == "Fuse":
        only_options(spec, set(), field, error)
        return lambda tokens: ["".join(tokens)]
    if kind == "Strip":
        only_options(spec, {"content", "start", "stop"}, field, error)
        content = get_option(spec, "content", str, field, error)
        if len(content) != 1:
            raise error(f"{field}.content", f"is {content!r}; expected one character")
        start = get_option(spec, "start", int, field, error)
        stop = get_option(spec, "stop", int, field, error)
        for key, value in (("start", start), ("stop", stop)):
            if value < 0:
                raise error(f"{field}.{key}", f"is {value}; expected a count of at least 0")
        return _strip(content, start, stop)
    if kind == "Replace":
        only_options(spec, {"pattern", "content"}, field, error)
        replace = replace_function(pattern_of(spec, field, error), get_option(spec, "content", str, field, error))
        return lambda tokens: [replace(t) for t in tokens]
    if kind == "BPEDecoder":
        only_options(spec, {"suffix"}, field, error)
        return _bpe_decoder(get_option(spec, "suffix", str, field, error, "</w>"))
    if kind == "Sequence":
        only_options(spec, {"decoders"}, field, error)
        steps = get_option(spec, "decoders", list, field, error)
        return _sequence([_chain(s, f"{field}.decoders[{i}]", error) for i, s in enumerate(steps)])
    raise error(
        f"{field}.type",
        f"{kind!r} is not supported (bpe-spark reproduces the decoders ByteLevel, Metaspace, "
        "ByteFallback, Fuse, Strip, Replace, BPEDecoder and Sequence)",
    )
