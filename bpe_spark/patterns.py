"""The pretokenization patterns: the presets by name, which of them the compiled pretokenizer
implements, and compiling a preset name or a custom regex. A leaf: it imports nothing of ours
but the errors, so every layer (config, pretokenizer, compiled accelerators, formats, the Spark
side's Java regex) can name a pattern without importing another.

>>> compile_pattern("words").findall("a, b")
['a', ',', 'b']
>>> compiled_preset(PRESETS["gpt2"]), compiled_preset("words")
('gpt2', None)
"""

from __future__ import annotations

import regex

from bpe_spark.errors import ConfigError

# subtle: these are the exact patterns of the reference implementations (GPT-2's encoder.py and
# tiktoken's cl100k_base / o200k_base), so that pretokens, hence merges and ids, agree with them.
PRESETS: dict[str, str] = {
    "gpt2": r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""",
    "cl100k": (
        r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
        r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
    ),
    "o200k": "|".join(  # noqa: FLY002 (one alternative per line reads better)
        [
            r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
            r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
            r"""\p{N}{1,3}""",
            r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
            r"""\s*[\r\n]+""",
            r"""\s+(?!\S)""",
            r"""\s+""",
        ]
    ),
    "words": r"""\w+|[^\s\w]+""",
    "whitespace": r"""\S+""",
}


def compile_pattern(pattern: str) -> regex.Pattern:
    """Compile a preset name or a custom regex (Python ``regex`` syntax).

    """
    if not isinstance(pattern, str) or not pattern:
        raise ConfigError(f"pattern must be a preset name {sorted(PRESETS)} or a regex, got {pattern!r}")
    source = PRESETS.get(pattern)
    if source is None:
        if pattern.isidentifier():
            # A bare word that is no preset is almost certainly a typo, not a regex meant to match it.
            raise ConfigError(
                f"unknown pattern preset {pattern!r}; choose one of {sorted(PRESETS)} or give a regex"
            )
        source = pattern
    try:
        compiled = regex.compile(source)
    except regex.error as exc:
        raise ConfigError(f"invalid pretokenization regex {pattern!r}: {exc}") from None
    if compiled.search("") is not None and compiled.fullmatch("") is not None:
        raise ConfigError(f"pretokenization regex {pattern!r} matches the empty string; it must not")
    return compiled


# Presets the compiled pretokenizer (bpe_spark._fastenc) implements by hand over UTF-8.
COMPILED_PRESETS = ("gpt2", "cl100k")


def pattern_source(pattern: str) -> str:
    """The regex source of a preset name or a custom regex."""
    return PRESETS.get(pattern, pattern)


def preset_name(pattern: str) -> str | None:
    """The preset a pattern is (given by name or by its exact regex), or None for a custom one."""
    if pattern in PRESETS:
        return pattern
    for name, source in PRESETS.items():
        if source == pattern:
            return name
    return None


def compiled_preset(pattern: str) -> str | None:
    """The name the compiled pretokenizer knows ``pattern`` by (a name or its regex), or None."""
    name = preset_name(pattern)
    return name if name in COMPILED_PRESETS else None
