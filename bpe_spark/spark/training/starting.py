"""Which :class:`~bpe_spark.training.starts.Start` a Spark training run runs, and what the run
needs to know of it besides the contract: a fresh run from its config; ``base=``, continued
training of a loaded model (:class:`~bpe_spark.training.extend.BaseStart`, docs/design.md 1.6);
``like=``, a new vocabulary with a loaded model's pipeline
(:class:`~bpe_spark.training.like.LikeStart`). Also what the checkpoint records of the start
(:func:`start_record`), so that a resumed run continues the same model, and whether the rounds
gather an alphabet from the corpus before they build the start's table (:func:`gathers_alphabet`).

>>> from bpe_spark.bpe.config import TrainerConfig
>>> start = training_start(TrainerConfig(vocab_size=300)); start_record(start), gathers_alphabet(start)
({'kind': 'fresh'}, False)
"""

from __future__ import annotations

from bpe_spark.bpe.config import TrainerConfig
from bpe_spark.errors import ConfigError, option
from bpe_spark.training.driver_budget import reachable_vocab
from bpe_spark.training.extend import BaseStart, check_extend_config, refuse_pattern_without_base
from bpe_spark.training.like import LikeStart
from bpe_spark.training.starts import FreshStart, Start

# training.json's "kind" of each start (a start of another class is recorded by its class name)
KINDS = {"FreshStart": "fresh", "BaseStart": "extend", "LikeStart": "like"}


def training_start(cfg: TrainerConfig, *, base=None, like=None, pattern: str | None = None) -> Start:
    """The start of a run of ``cfg``: fresh, extending ``base`` (``cfg`` may set only what
    continued training reads: :func:`~bpe_spark.training.extend.check_extend_config`; ``pattern``
    in place of the base's), or with the pipeline of ``like``."""
    if base is None:
        refuse_pattern_without_base(pattern)
    if base is not None and like is not None:
        raise ConfigError(f"{option('base')} and {option('like')} exclude each other: extend one model, "
                          "or train a new vocabulary with another's pipeline")
    if base is not None:
        check_extend_config(cfg, base)
        return BaseStart(base, cfg.tie_break, pattern)
    if like is not None:
        return LikeStart(like, cfg)
    return FreshStart(cfg)


def start_record(start: Start) -> dict:
    """What the checkpoint records of ``start`` (training.json's ``"start"``): its kind and the
    fingerprint of the model it starts from, if any.

    >>> start_record(FreshStart(TrainerConfig()))
    {'kind': 'fresh'}
    """
    name = type(start).__name__
    record = {"kind": KINDS.get(name, name)}
    base = getattr(start, "base", None)
    fingerprint = getattr(start, "base_fingerprint", None) or (base.fingerprint if base is not None else None)
    if fingerprint is not None:
        record["fingerprint"] = fingerprint
    return record


def gathers_alphabet(start: Start) -> bool:
    """Whether ``start``'s table may take something from the corpus (its ``alphabet``: a fresh
    char-scheme run's characters, the characters a char-level or pipeline base lacks, a pipeline's
    alphabet): then the rounds gather it before they build the table. A fresh byte-scheme run and
    a byte-level base take nothing."""
    if isinstance(start, FreshStart):
        return start.cfg.scheme == "char"
    if isinstance(start, BaseStart):
        return start.symbol_form is not None
    return True


def memory_vocab(start: Start, cfg: TrainerConfig, *, distinct: int, pretoken_bytes: int) -> int:
    """The vocabulary the driver's memory is sized for: for a fresh run, the largest the corpus
    can reach (:func:`~bpe_spark.training.driver_budget.reachable_vocab`); else ``vocab_size``,
    the new total."""
    if isinstance(start, FreshStart):
        return reachable_vocab(cfg.vocab_size, scheme=cfg.scheme, distinct=distinct, pretoken_bytes=pretoken_bytes,
                               special_tokens=len(cfg.special_tokens))
    return cfg.vocab_size
