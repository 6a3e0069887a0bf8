"""Superword training on Spark (docs/design.md 1.7): SuperBPE's two stages, each a Spark training
run of its own start (:mod:`bpe_spark.spark.training.run`), in driver mode or in exact rounds as
its count table decides: stage 1, fresh training to the transition; stage 2, continued training
of the stage-1 model over the corpus counted with the superword pattern (the core's
:mod:`bpe_spark.training.superword` splits the config and assembles the model). With a
checkpoint directory each stage keeps its own checkpoint in a subdirectory (``stage1``,
``stage2``); a resumed run resumes stage 1 (replaying its merges) and resumes stage 2 if it had
begun, else starts it.

>>> tok = train_superword(documents, TrainerConfig(vocab_size=32000, superword_transition=28800),  # doctest: +SKIP
...                       train_start, text_col="text", checkpoint_dir=None, resume=False, ...)
>>> tok.metadata["superword"]["stage2"]["distinct_pretokens"]                                    # doctest: +SKIP
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from pyspark.sql import DataFrame

from bpe_spark.bpe.config import TrainerConfig
from bpe_spark.errors import ConfigError
from bpe_spark.spark.training.checkpoint import Checkpoint
from bpe_spark.training.starts import FreshStart
from bpe_spark.training.superword import finish, stage2_start, stage_configs

log = logging.getLogger("bpe_spark")
STAGES = ("stage1", "stage2")  # the checkpoint subdirectories


def _stage_checkpoints(spark, checkpoint_dir: str | None, resume: bool) -> list[tuple[str | None, bool]]:
    """Each stage's checkpoint directory and whether to resume it: stage 1 as asked (a resumed
    run must have saved stage 1's counts), stage 2 only once it has begun."""
    if checkpoint_dir is None:
        return [(None, False), (None, False)]
    first, second = (f"{checkpoint_dir.rstrip('/')}/{stage}" for stage in STAGES)
    return [(first, resume), (second, resume and Checkpoint(spark, second).holds_run())]


def _table(tok) -> dict:
    """A stage's count table and its time (counting and merging, seconds)."""
    stats = tok.metadata.get("stats") or {}
    table = {key: stats.get(key) for key in ("distinct_pretokens", "pretokens", "pretoken_bytes")}
    table["seconds"] = (tok.metadata.get("timings") or {}).get("total_seconds")
    return table


def _stage_log(stage: int, cfg: TrainerConfig) -> None:
    if stage == 1:
        log.info("bpe-spark: superword stage 1 of 2: %s merges with pattern %s", f"{cfg.superword_transition:,}",
                 cfg.pattern)
    else:
        log.info("bpe-spark: superword stage 2 of 2: to vocab_size %s with pattern %s", f"{cfg.vocab_size:,}",
                 cfg.superword_pattern)


def train_superword(df: DataFrame, cfg: TrainerConfig, train_start: Callable, *, checkpoint_dir: str | None,
                    resume: bool, **options):
    """Both stages on the documents of ``df``, each by ``train_start`` (the run of one start,
    :func:`~bpe_spark.spark.training.run.train_start`, with ``options``)."""
    cfg1, cfg2 = stage_configs(cfg)
    (first_dir, first_resume), (second_dir, second_resume) = _stage_checkpoints(df.sparkSession, checkpoint_dir,
                                                                                resume)
    _stage_log(1, cfg)
    stage1 = train_start(df, cfg1, FreshStart(cfg1), checkpoint_dir=first_dir, resume=first_resume, **options)
    _stage_log(2, cfg)
    tok = train_start(df, cfg2, stage2_start(stage1, cfg), checkpoint_dir=second_dir, resume=second_resume,
                      **options)
    return finish(tok, stage1, cfg, _table(stage1), _table(tok))


def train_superword_from_counts(counts: DataFrame, superword_counts: DataFrame | None, cfg: TrainerConfig,
                                counts_start: Callable, *, checkpoint_dir: str | None, resume: bool, **options):
    """Both stages from count tables: ``counts`` under ``cfg.pattern``, ``superword_counts``
    under ``cfg.superword_pattern``, each by ``counts_start`` (the run of one start on counts,
    :func:`~bpe_spark.spark.training.run.counts_start`, with ``options``)."""
    if superword_counts is None:
        raise ConfigError("superword training from counts needs superword_counts= too: the corpus counted "
                          "with cfg.superword_pattern (count_pretokens(df, cfg.replace(pattern=cfg.superword_pattern)))")
    cfg1, cfg2 = stage_configs(cfg)
    (first_dir, first_resume), (second_dir, second_resume) = _stage_checkpoints(counts.sparkSession,
                                                                                checkpoint_dir, resume)
    _stage_log(1, cfg)
    stage1 = counts_start(counts, cfg1, FreshStart(cfg1), checkpoint_dir=first_dir, resume=first_resume, **options)
    _stage_log(2, cfg)
    tok = counts_start(superword_counts, cfg2, stage2_start(stage1, cfg), checkpoint_dir=second_dir,
                       resume=second_resume, **options)
    return finish(tok, stage1, cfg, _table(stage1), _table(tok))
