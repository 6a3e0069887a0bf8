"""Superword training, SuperBPE's two stages (docs/design.md 1.7): stage 1 is fresh training to
``cfg.superword_transition`` merges with ``cfg.pattern``; stage 2 continues that model
(continued training, :class:`~bpe_spark.training.extend.BaseStart`, with another pattern) over
the corpus counted with ``cfg.superword_pattern``, whose pretokens span words: each starts as
stage 1's encoding of it whole, and the exact merge loop runs on to ``cfg.vocab_size``. One
engine, two starts; what is here is the split of the config into its stages
(:func:`stage_configs`), the second start (:func:`stage2_start`) and the record the model keeps
of both (:func:`finish`). The same functions drive the Spark run
(:mod:`bpe_spark.spark.training.run`).

>>> from bpe_spark.bpe.config import TrainerConfig
>>> tok = train_superword(["by the way, by the way"] * 3, TrainerConfig(vocab_size=269, superword_transition=8))
>>> tok.decode([tok.encode("by the way")[0]]), tok.metadata["superword"]["stage1_merges"]
('by the way', 8)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping

from bpe_spark.bpe.config import SUPERWORD_PATTERN, TrainerConfig
from bpe_spark.bpe.pretokenize import Pretokenizer
from bpe_spark.errors import ConfigError
from bpe_spark.training.engine import Merge
from bpe_spark.training.extend import BaseStart
from bpe_spark.training.starts import FreshStart, run_in_process


def is_superword_run(cfg: TrainerConfig, *, base=None, like=None, pattern: str | None = None) -> bool:
    """Whether a run of ``cfg`` is superword training: the config asks for it and no model
    starts the run (continued training refuses the superword fields itself)."""
    return cfg.superword_transition is not None and base is None and like is None and pattern is None


def stage_configs(cfg: TrainerConfig) -> tuple[TrainerConfig, TrainerConfig]:
    """The configs of stage 1 (``cfg``'s pretokenization, at most ``superword_transition``
    merges) and of stage 2 (what continued training reads: the total ``vocab_size``, the merges
    ``max_merges`` leaves, ``min_frequency``, ``tie_break``, ``max_token_length``)."""
    transition = cfg.superword_transition
    if transition is None:
        raise ConfigError("superword training needs superword_transition (the merges of stage 1)")
    first = transition if cfg.max_merges is None else min(transition, cfg.max_merges)
    stage1 = cfg.replace(superword_transition=None, superword_pattern=SUPERWORD_PATTERN, max_merges=first)
    stage2 = TrainerConfig(
        vocab_size=cfg.vocab_size,
        min_frequency=cfg.min_frequency,
        tie_break=cfg.tie_break,
        max_merges=None if cfg.max_merges is None else cfg.max_merges - first,
        max_token_length=cfg.max_token_length,
    )
    return stage1, stage2


def stage2_start(stage1_model, cfg: TrainerConfig) -> BaseStart:
    """Stage 2's start: continued training of the stage-1 model, counted with the superword
    pattern, its ties broken as stage 1 broke them (as SuperBPE's trainer, which numbers the
    bytes afresh, does)."""
    return BaseStart(stage1_model, cfg.tie_break, cfg.superword_pattern, fresh_order=True)


def count_table(counts: Mapping[str, int]) -> dict:
    """The figures of a count table: distinct pretokens, pretokens, their UTF-8 bytes (distinct)."""
    return {
        "distinct_pretokens": len(counts),
        "pretokens": sum(counts.values()),
        "pretoken_bytes": sum(len(p.encode("utf-8", "surrogatepass")) for p in counts),
    }


def finish(tok, stage1_model, cfg: TrainerConfig, stage1: dict, stage2: dict):
    """The superword model as saved: ``cfg`` as its config, the special tokens after every other
    token (as fresh training places them; stage 2 kept them where stage 1 put them), and
    ``metadata["superword"]`` (transition, both patterns, stage 1's merges, each stage's count
    table) in place of the continued-training record of a base that is no file."""
    from bpe_spark.encoding.tokenizer import Tokenizer

    data = tok.to_dict()
    data["config"] = cfg.to_dict()
    metadata = data["metadata"]
    metadata.pop("base", None)
    done = len(stage1_model.merge_ids)  # stage 2 knows its own merges' counts; stage 1 knew these
    metadata["merge_counts"] = list(stage1_model.metadata.get("merge_counts") or [None] * done)[:done] + \
        list(metadata.get("merge_counts") or [])[done:]
    metadata["superword"] = {
        "transition": cfg.superword_transition,
        "stage1_merges": len(stage1_model.merges),
        "stage1_pattern": cfg.pattern,
        "stage2_pattern": cfg.superword_pattern,
        "stage1": stage1,
        "stage2": stage2,
    }
    specials = data["special_tokens"]
    if specials:
        order = sorted(data["vocab"])
        new = {old: position for position, old in enumerate(order)}
        for position, (_, old) in enumerate(sorted(specials.items(), key=lambda item: item[1])):
            new[old] = len(order) + position
        data["vocab"] = {new[i]: value for i, value in data["vocab"].items()}
        data["merges"] = [(new[left], new[right]) for left, right in data["merges"]]
        data["special_tokens"] = {token: new[i] for token, i in specials.items()}
    return Tokenizer.from_dict(data)


def train_superword_from_counts(
    stage1_counts: Mapping[str, int],
    stage2_counts: Mapping[str, int],
    cfg: TrainerConfig,
    *,
    progress: Callable[[int, Merge], None] | None = None,
):
    """Both stages in process from the corpus's counts under ``cfg.pattern`` (stage 1) and
    under ``cfg.superword_pattern`` (stage 2, e.g. :func:`count_superwords`)."""
    cfg1, cfg2 = stage_configs(cfg)
    started = time.perf_counter()
    stage1_model = run_in_process(FreshStart(cfg1), stage1_counts, cfg1, progress=progress)
    first = {**count_table(stage1_counts), "seconds": round(time.perf_counter() - started, 6)}
    started = time.perf_counter()
    start = stage2_start(stage1_model, cfg)
    done = len(stage1_model.merges)
    step = None if progress is None else (lambda n, merge: progress(done + n, merge))
    tok = run_in_process(start, stage2_counts, cfg2, progress=step, inherited=done)
    second = {**count_table(stage2_counts), "seconds": round(time.perf_counter() - started, 6)}
    return finish(tok, stage1_model, cfg, first, second)


def count_superwords(texts: Iterable[str], cfg: TrainerConfig):
    """``{pretoken: count}`` of documents under stage 2's pretokenization (``superword_pattern``
    with ``cfg``'s normalization and special tokens)."""
    return Pretokenizer(cfg.superword_pattern, lowercase=cfg.lowercase, normalization=cfg.normalization,
                        special_tokens=cfg.special_tokens).count(texts)


def train_superword(texts: Iterable[str], cfg: TrainerConfig, *,
                    progress: Callable[[int, Merge], None] | None = None):
    """Both stages in process on documents (read twice: a one-pass iterator is listed first)."""
    texts = texts if isinstance(texts, (list, tuple)) else list(texts)
    started = time.perf_counter()
    first = Pretokenizer.from_config(cfg).count(texts)
    second = count_superwords(texts, cfg)
    count_seconds = time.perf_counter() - started
    tok = train_superword_from_counts(first, second, cfg, progress=progress)
    tok.metadata.setdefault("stats", {})["count_seconds"] = round(count_seconds, 6)
    return tok
