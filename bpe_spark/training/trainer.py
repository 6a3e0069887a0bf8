"""In-process training: the symbol table and words from pretoken counts, and the entry points
``train`` (documents) and ``train_from_counts`` ({pretoken: count}) over the merge engine
(:mod:`bpe_spark.training.engine`).

>>> from bpe_spark.bpe.config import TrainerConfig
>>> tok = train_from_counts({"low": 5, "lower": 2}, TrainerConfig(vocab_size=258, pattern="whitespace"))
>>> tok.merges
[(b'l', b'o'), (b'lo', b'w')]
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping


from bpe_spark.bpe.config import TrainerConfig
from bpe_spark.bpe.pretokenize import Pretokenizer
from bpe_spark.bpe.symbols import SymbolTable
from bpe_spark.bpe.words import word_symbols
from bpe_spark.training.engine import Merge, MergeEngine
from bpe_spark.training.checks import checked_counts, note_early_stop
from bpe_spark.training.extend import BaseStart, extend_from_counts, refuse_pattern_without_base
from bpe_spark.training.length_limit import LengthLimit
from bpe_spark.training.starts import check_vocab_floor, initial_table
from bpe_spark.training.superword import train_superword, train_superword_from_counts
from bpe_spark.errors import ConfigError

# --- words from pretokens ---------------------------------------------------------------------


def build_engine(counts: Mapping[str, int], cfg: TrainerConfig) -> MergeEngine:
    """An engine over ``{pretoken: count}`` with the initial symbol table of ``cfg``."""
    items = checked_counts(counts)
    table = initial_table(cfg, (pretoken for pretoken, _ in items))
    check_vocab_floor(cfg, table)
    words = [word_symbols(pretoken, table, cfg) for pretoken, _ in items]
    return MergeEngine(table, words, [count for _, count in items], limit=LengthLimit.of(cfg))


def new_token_budget(cfg: TrainerConfig, table: SymbolTable) -> int:
    return cfg.vocab_size - len(cfg.special_tokens) - len(table)


def train_from_counts(
    counts: Mapping[str, int],
    cfg: TrainerConfig,
    *,
    progress: Callable[[int, Merge], None] | None = None,
    base=None,
    pattern: str | None = None,
    superword_counts: Mapping[str, int] | None = None,
):
    """Train on pretoken counts computed elsewhere (``{pretoken: count}``, already pretokenized).

    ``base``: a tokenizer to extend (continued training, :mod:`bpe_spark.training.extend`): its
    ids, merges and special tokens are kept and ``cfg.vocab_size`` is the new total; with
    ``pattern``, counted and encoded with that pattern instead of the base's.
    ``superword_counts``: with ``cfg.superword_transition`` (SuperBPE,
    :mod:`bpe_spark.training.superword`), the counts under ``cfg.superword_pattern``.

    >>> tok = train_from_counts({"aaabdaaabac": 1}, TrainerConfig(vocab_size=259, pattern="whitespace"))
    >>> [tok.decode([i]) for i in tok.encode("aaabdaaabac")]
    ['aaab', 'd', 'aaab', 'a', 'c']
    """
    from bpe_spark.encoding.tokenizer import Tokenizer

    if base is not None:
        return extend_from_counts(counts, base, cfg, progress=progress, pattern=pattern)
    refuse_pattern_without_base(pattern)
    if cfg.superword_transition is not None:
        if superword_counts is None:
            raise ConfigError("superword training from counts needs superword_counts= too: the corpus "
                              "counted with cfg.superword_pattern (bpe_spark.training.superword.count_superwords)")
        return train_superword_from_counts(counts, superword_counts, cfg, progress=progress)
    started = time.perf_counter()
    engine = build_engine(counts, cfg)
    merges = engine.run(
        max_new_tokens=new_token_budget(cfg, engine.table),
        max_merges=cfg.max_merges,
        min_frequency=cfg.min_frequency,
        progress=progress,
    )
    stats = {
        "distinct_pretokens": len(engine.counts),
        "pretokens": sum(engine.counts),
        "merge_seconds": round(time.perf_counter() - started, 6),
    }
    return note_early_stop(cfg, Tokenizer.from_training(cfg, engine.table, merges, stats=stats))


def count_pretokens(texts: Iterable[str], cfg: TrainerConfig) -> Counter:
    """``{pretoken: count}`` of documents, in process (the Spark jobs do the same at scale)."""
    return Pretokenizer.from_config(cfg).count(texts)


def train(texts: Iterable[str] | str, cfg: TrainerConfig, *, base=None, pattern: str | None = None, **kwargs):
    """Train in process on an iterable of documents (a single ``str`` is one document).

    ``base``: a tokenizer to extend (:func:`train_from_counts`); the documents are counted with
    its own pretokenization (pattern, normalization, special tokens; an imported pipeline's steps),
    or with ``pattern`` instead of its pattern. ``cfg.superword_transition``: SuperBPE's two
    stages (:mod:`bpe_spark.training.superword`).

    >>> tok = train(["low low lower newest"], TrainerConfig(vocab_size=260, pattern="words"))
    >>> len(tok.merges)
    4
    """
    if isinstance(texts, str):
        texts = [texts]
    if base is None:
        refuse_pattern_without_base(pattern)
        if cfg.superword_transition is not None:
            return train_superword(texts, cfg, **kwargs)
    started = time.perf_counter()
    if base is not None:
        pretokenizer = BaseStart(base, pattern=pattern).pretokenizer()
    else:
        pretokenizer = Pretokenizer.from_config(cfg)
    counts = pretokenizer.count(texts)
    count_seconds = time.perf_counter() - started
    tok = train_from_counts(counts, cfg, base=base, pattern=pattern, **kwargs)
    stats = tok.metadata.setdefault("stats", {})
    stats["count_seconds"] = round(count_seconds, 6)
    if pretokenizer.dropped_characters:  # only a custom pattern leaves text unmatched
        stats["dropped_characters"] = pretokenizer.dropped_characters
    return tok
