"""Where a training run starts: the :class:`Start` contract that every kind of run honours (fresh
training from a config, continued training from a base model, a new vocabulary with an imported
model's pipeline), so that the engine's callers (in process, the Spark driver, the exact rounds)
run any of them the same way: count with ``pretokenizer()``, build ``table(pretokens)``, turn
each pretoken into ``words(pretoken, table)``, merge at most ``budget(cfg, table)`` new tokens,
and assemble the result with ``tokenizer(table, merges, stats=)``. :func:`run_in_process` is
that run in this process; :func:`initial_table` and :func:`check_vocab_floor`, fresh training's
table before any merge and the least ``vocab_size`` it allows.

>>> from bpe_spark.bpe.config import TrainerConfig
>>> start = FreshStart(TrainerConfig(vocab_size=258))
>>> table = start.table(["ab"]); start.words("ab", table), start.budget(start.cfg, table)
([[97, 98]], 2)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

from bpe_spark.errors import ConfigError
from bpe_spark.bpe.config import TrainerConfig
from bpe_spark.bpe.pretokenize import Pretokenizer
from bpe_spark.bpe.symbols import SymbolTable
from bpe_spark.bpe.words import word_symbols
from bpe_spark.training.checks import checked_counts, note_early_stop
from bpe_spark.training.engine import Merge, MergeEngine
from bpe_spark.training.length_limit import LengthLimit


def initial_table(cfg: TrainerConfig, pretokens: Iterable[str], *, final_chars: Iterable[str] | None = None) -> SymbolTable:
    """The symbol table before any merge: 256 bytes, or the alphabet of ``pretokens`` (char;
    ``final_chars``: the characters that end a pretoken, when ``pretokens`` are characters)."""
    if cfg.scheme == "byte":
        return SymbolTable.for_bytes(cfg.tie_break)
    alphabet: set[str] = set()
    finals: set[str] = set()
    for pretoken in pretokens:
        alphabet.update(pretoken)
        if pretoken and final_chars is None:
            finals.add(pretoken[-1])
    if final_chars is not None:
        finals.update(final_chars)
    return SymbolTable.for_chars(
        alphabet,
        cfg.tie_break,
        final_chars=finals,
        end_of_word=cfg.end_of_word,
        marker=cfg.end_of_word_marker,
        first_id=len(cfg.special_tokens),
    )


def check_vocab_floor(cfg: TrainerConfig, table: SymbolTable) -> None:
    """Refuse a ``vocab_size`` below the initial alphabet plus the special tokens."""
    floor = len(cfg.special_tokens) + len(table)
    if cfg.vocab_size < floor:
        raise ConfigError(
            f"vocab_size {cfg.vocab_size} is below the initial alphabet ({len(table)} symbols) + "
            f"{len(cfg.special_tokens)} special tokens = {floor}; set vocab_size >= {floor}"
        )


class Start(Protocol):
    """What a kind of training run gives the engine (module docstring). Instances pickle: Spark
    tasks receive them."""

    def pretokenizer(self) -> Pretokenizer:
        """How documents become pretoken counts."""

    def alphabet(self, pretokens: Iterable[str]) -> set[str]:
        """What the table takes from ``pretokens`` (opaque strings; empty when the table takes
        nothing from the corpus): the union over any split of the pretokens is the alphabet of
        them all, so Spark tasks gather it part by part."""

    def table_of(self, alphabet: set[str]) -> SymbolTable:
        """The symbol table before any merge, of an :meth:`alphabet`."""

    def table(self, pretokens: Iterable[str] = ()) -> SymbolTable:
        """``table_of(alphabet(pretokens))``: the table of every counted pretoken."""

    def budget(self, cfg: TrainerConfig, table: SymbolTable) -> int:
        """How many new tokens ``cfg`` leaves room for."""

    def words(self, pretoken: str, table: SymbolTable) -> list[list[int]]:
        """The engine's words of one pretoken (symbol ids of ``table``)."""

    def tokenizer(self, table: SymbolTable, merges: list[Merge], *, stats: dict | None = None):
        """The tokenizer of a finished run."""

    # optional: packed_words(pretokens) -> PackedWords | None, one word per pretoken in one call


class FreshStart:
    """Fresh training from a :class:`~bpe_spark.bpe.config.TrainerConfig` (docs/design.md 1.3, 1.4)."""

    def __init__(self, cfg: TrainerConfig):
        self.cfg = cfg

    def pretokenizer(self) -> Pretokenizer:
        return Pretokenizer.from_config(self.cfg)

    def alphabet(self, pretokens: Iterable[str]) -> set[str]:
        """Char scheme: ``"c" + character`` of every character, ``"f" + character`` of every last
        one (its fused ``</w>`` symbol); byte scheme: nothing."""
        if self.cfg.scheme == "byte":
            return set()
        items: set[str] = set()
        for pretoken in pretokens:
            if pretoken:
                items.update("c" + char for char in set(pretoken))
                items.add("f" + pretoken[-1])
        return items

    def table_of(self, alphabet: set[str]) -> SymbolTable:
        table = initial_table(self.cfg, (item[1:] for item in alphabet if item[0] == "c"),
                              final_chars=(item[1:] for item in alphabet if item[0] == "f"))
        check_vocab_floor(self.cfg, table)
        return table

    def table(self, pretokens: Iterable[str] = ()) -> SymbolTable:
        return self.table_of(self.alphabet(pretokens))

    def budget(self, cfg: TrainerConfig, table: SymbolTable) -> int:
        return cfg.vocab_size - len(cfg.special_tokens) - len(table)

    def words(self, pretoken: str, table: SymbolTable) -> list[list[int]]:
        return [word_symbols(pretoken, table, self.cfg)]

    def tokenizer(self, table: SymbolTable, merges: list[Merge], *, stats: dict | None = None):
        from bpe_spark.encoding.tokenizer import Tokenizer

        return Tokenizer.from_training(self.cfg, table, merges, stats=stats)


def run_in_process(start: Start, counts: Mapping[str, int], cfg: TrainerConfig, *,
                   progress: Callable[[int, Merge], None] | None = None, inherited: int = 0):
    """Any run on ``{pretoken: count}`` in this process: the table, the words, the merge engine
    within ``start.budget``, ``cfg``'s ``max_merges`` and ``min_frequency``, then the tokenizer
    with its statistics and the early-stop note (``inherited``: the merges of a base model)."""
    started = time.perf_counter()
    items = checked_counts(counts)
    table = start.table(pretoken for pretoken, _ in items)
    packed = getattr(start, "packed_words", None)  # a start may give every word in one call
    words = packed([pretoken for pretoken, _ in items]) if packed is not None else None
    if words is not None:
        word_counts = [count for _, count in items]
    else:
        words, word_counts = [], []
        for pretoken, count in items:
            for word in start.words(pretoken, table):
                words.append(word)
                word_counts.append(count)
    engine = MergeEngine(table, words, word_counts, limit=LengthLimit.of(cfg))
    merges = engine.run(
        max_new_tokens=start.budget(cfg, table),
        max_merges=cfg.max_merges,
        min_frequency=cfg.min_frequency,
        progress=progress,
    )
    stats = {
        "distinct_pretokens": len(items),
        "pretokens": sum(count for _, count in items),
        "merge_seconds": round(time.perf_counter() - started, 6),
    }
    return note_early_stop(cfg, start.tokenizer(table, merges, stats=stats), inherited=inherited)
