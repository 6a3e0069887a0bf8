"""What every training run checks and notes, fresh or extending a model: the pretoken counts it
is given, and why it stopped before its ``vocab_size``.

>>> checked_counts({"a": 2, "": 5, "b": 0})
[('a', 2)]
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from bpe_spark.bpe.config import TrainerConfig
from bpe_spark.errors import ConfigError, EmptyCorpusError, option

log = logging.getLogger("bpe_spark")


def checked_counts(counts: Mapping[str, int]) -> list[tuple[str, int]]:
    """The ``(pretoken, count)`` items that train: empty pretokens and zero counts left out."""
    items = []
    for pretoken, count in counts.items():
        if not isinstance(pretoken, str):
            raise ConfigError(f"pretoken counts must be keyed by str, got {type(pretoken).__name__}: {pretoken!r}")
        count = int(count)
        if count < 0:
            raise ConfigError(f"pretoken {pretoken!r} has a negative count {count}")
        if count and pretoken:
            items.append((pretoken, count))
    if not items:
        raise EmptyCorpusError("the corpus has no pretoken to train on (empty input, or only special tokens)")
    return items


def early_stop(cfg: TrainerConfig, vocab_size: int, merges: int) -> str | None:
    """Why a run of ``cfg`` that ended at ``vocab_size`` tokens after ``merges`` merges (new
    merges, when extending a model) stopped before its ``vocab_size``, or None when it reached it
    (or its ``max_merges``).

    >>> early_stop(TrainerConfig(vocab_size=32000), 4000, 3744)
    'ran out of pairs at 3,744 merges: the vocabulary is 4,000, below vocab_size=32000'
    >>> early_stop(TrainerConfig(vocab_size=32000, min_frequency=5), 4000, 3744)
    'ran out of pairs occurring min_frequency=5 times at 3,744 merges: the vocabulary is 4,000, below vocab_size=32000'
    >>> early_stop(TrainerConfig(vocab_size=32000, max_token_length=2), 400, 144)
    'ran out of pairs within max_token_length=2 at 144 merges: the vocabulary is 400, below vocab_size=32000'
    >>> early_stop(TrainerConfig(vocab_size=32000, max_merges=3744), 4000, 3744) is None
    True
    """
    if vocab_size >= cfg.vocab_size or (cfg.max_merges is not None and merges >= cfg.max_merges):
        return None
    pairs = f"pairs occurring {option('min_frequency', cfg.min_frequency)} times" if cfg.min_frequency > 1 else "pairs"
    if cfg.max_token_length is not None:
        pairs += f" within {option('max_token_length', cfg.max_token_length)}"
    return (f"ran out of {pairs} at {merges:,} merges: the vocabulary is {vocab_size:,}, "
            f"below {option('vocab_size', cfg.vocab_size)}")


def note_early_stop(cfg: TrainerConfig, tok, *, inherited: int = 0):
    """``tok`` (a training run's tokenizer), with :func:`early_stop`'s reason in its statistics
    (``stopped_early``) and logged as a warning when it stopped before its ``vocab_size``;
    ``inherited``: the merges of the base model it extends."""
    reason = early_stop(cfg, tok.vocab_size, len(tok.merge_ids) - inherited)
    if reason is not None:
        tok.metadata.setdefault("stats", {})["stopped_early"] = reason
        log.warning("bpe-spark: %s", reason)
    return tok
