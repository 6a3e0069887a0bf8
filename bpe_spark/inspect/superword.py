"""What a superword model (SuperBPE, docs/design.md 1.7) shows of its two stages: bytes per token
of a sample as the vocabulary grows, stage 1 under its own pattern (the model truncated to its
first merges is the stage-1 model) and stage 2 under the superword pattern, which the report
plots with the transition marked; and the rows of the report's table.

>>> from bpe_spark import TrainerConfig, train
>>> tok = train(["by the way, by the way"] * 3, TrainerConfig(vocab_size=269, superword_transition=8))
>>> first, second = superword_curves(tok, "by the way, it is", [0, 1, 4])
>>> first[-1][0] == second[0][0] == 8, second[-1][0] == len(tok.merge_ids)
(True, True)
"""

from __future__ import annotations

from bpe_spark.inspect import vocab_stats

STAGE2_POINTS = 8  # evenly spaced merge counts after the transition, besides the log-spaced ones


def superword_record(tok) -> dict | None:
    """``tok.metadata["superword"]`` when ``tok`` is a superword model, else None."""
    record = (getattr(tok, "metadata", None) or {}).get("superword")
    return record if isinstance(record, dict) and getattr(tok, "pipeline", None) is None else None


def stage1_model(tok, record: dict):
    """``tok`` with stage 1's pattern: its first ``stage1_merges`` merges are the stage-1 model."""
    from bpe_spark.encoding.tokenizer import Tokenizer

    data = tok.to_dict()
    data["pattern"] = record["stage1_pattern"]
    return Tokenizer.from_dict(data)


def superword_curves(tok, text: str, steps: list[int]):
    """``(stage 1, stage 2)`` curves of ``(merges, vocabulary size, bytes per token)`` of ``text``:
    stage 1 at ``steps`` (merge counts up to the transition) and at the transition, stage 2 from
    the transition to every merge; None for a model that is no superword model."""
    record = superword_record(tok)
    if record is None:
        return None
    total, transition = len(tok.merge_ids), record["stage1_merges"]
    base = tok.vocab_size - total
    first = sorted({k for k in steps if k <= transition} | {transition})
    span = total - transition
    second = sorted({transition, total} | {transition + round(span * i / STAGE2_POINTS) for i in range(STAGE2_POINTS)})
    one = vocab_stats.bytes_per_token_at(stage1_model(tok, record), text, first)
    two = vocab_stats.bytes_per_token_at(tok, text, second)
    return ([(k, base + k, b) for k, b in zip(first, one)], [(k, base + k, b) for k, b in zip(second, two)])


def superword_rows(tok) -> list[tuple[str, str]]:
    """The report table's rows of a superword model (none for another model)."""
    record = superword_record(tok)
    if record is None:
        return []
    first, second = record.get("stage1") or {}, record.get("stage2") or {}

    def table(stage: dict) -> str:
        shown = f"{stage.get('distinct_pretokens') or 0:,} distinct pretokens"
        if stage.get("pretoken_bytes") is not None:
            shown += f" of {stage['pretoken_bytes']:,} bytes"
        if stage.get("seconds") is not None:
            shown += f", {stage['seconds']:.2f} s"
        return shown

    return [
        ("superword stage 1", f"{record['stage1_merges']:,} merges, pattern {record['stage1_pattern']}: {table(first)}"),
        ("superword stage 2", f"{len(tok.merge_ids) - record['stage1_merges']:,} merges, pattern "
                              f"{record['stage2_pattern']}: {table(second)}"),
    ]
