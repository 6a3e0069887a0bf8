"""Where a training run starts: the :class:`Start` contract that every kind of run honours (fresh
training from a config, continued training from a base model, a new vocabulary with an imported
model's pipeline), so that the engine's callers (in process, the Spark driver, the exact rounds)
run any of them the same way: count with ``pretokenizer()``, build ``table(pretokens)``, turn
each pretoken into ``words(pretoken, table)``, merge at most ``budget(cfg, table)`` new tokens,
and assemble the result with ``tokenizer(table, merges, stats=)``.

>>> from bpe_spark.bpe.config import TrainerConfig
>>> start = FreshStart(TrainerConfig(vocab_size=258))
>>> table = start.table(["ab"]); start.words("ab", table), start.budget(start.cfg, table)
([[97, 98]], 2)
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from bpe_spark.bpe.config import TrainerConfig
from bpe_spark.bpe.pretokenize import Pretokenizer
from bpe_spark.bpe.symbols import SymbolTable
from bpe_spark.bpe.words import word_symbols
from bpe_spark.training.engine import Merge


class Start(Protocol):
    """What a kind of training run gives the engine (module docstring). Instances pickle: Spark
    tasks receive them."""

    def pretokenizer(self) -> Pretokenizer:
        """How documents become pretoken counts."""

    def table(self, pretokens: Iterable[str] = ()) -> SymbolTable:
        """The symbol table before any merge (``pretokens``: every counted pretoken, for an
        alphabet taken from the corpus)."""

    def budget(self, cfg: TrainerConfig, table: SymbolTable) -> int:
        """How many new tokens ``cfg`` leaves room for."""

    def words(self, pretoken: str, table: SymbolTable) -> list[list[int]]:
        """The engine's words of one pretoken (symbol ids of ``table``)."""

    def tokenizer(self, table: SymbolTable, merges: list[Merge], *, stats: dict | None = None):
        """The tokenizer of a finished run."""


class FreshStart:
    """Fresh training from a :class:`~bpe_spark.bpe.config.TrainerConfig` (docs/design.md 1.3, 1.4)."""

    def __init__(self, cfg: TrainerConfig):
        self.cfg = cfg

    def pretokenizer(self) -> Pretokenizer:
        return Pretokenizer.from_config(self.cfg)

    def table(self, pretokens: Iterable[str] = ()) -> SymbolTable:
        from bpe_spark.training.trainer import check_vocab_floor, initial_table

        table = initial_table(self.cfg, pretokens)
        check_vocab_floor(self.cfg, table)
        return table

    def budget(self, cfg: TrainerConfig, table: SymbolTable) -> int:
        return cfg.vocab_size - len(cfg.special_tokens) - len(table)

    def words(self, pretoken: str, table: SymbolTable) -> list[list[int]]:
        return [word_symbols(pretoken, table, self.cfg)]

    def tokenizer(self, table: SymbolTable, merges: list[Merge], *, stats: dict | None = None):
        from bpe_spark.encoding.tokenizer import Tokenizer

        return Tokenizer.from_training(self.cfg, table, merges, stats=stats)
