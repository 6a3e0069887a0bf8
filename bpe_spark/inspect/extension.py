"""What an extended model (continued training, docs/design.md 1.6) adds to its base: the base
rebuilt from the model itself (its ids below the first new one, its merges before the new ones),
the new tokens with the counts of the merges that made them, and bytes per token of a sample,
base against extended. ``inspect`` and the report show them.

>>> from bpe_spark import TrainerConfig, train
>>> base = train(["low low lower"], TrainerConfig(vocab_size=258, pattern="words"))
>>> ext = train(["lowest lowest"], TrainerConfig(vocab_size=261), base=base)
>>> base_of(ext).merge_ids == base.merge_ids, [row[1:] for row in new_tokens(ext)]
(True, [['es', 2], ['lowes', 2], ['lowest', 2]])
"""

from __future__ import annotations

import copy

from bpe_spark.inspect.token_display import json_token, readable
from bpe_spark.inspect.vocab_stats import bytes_per_token

NEW_TOKENS_SHOWN = 20


def extension_of(tok) -> dict | None:
    """The model's record of its base (``metadata["base"]``), or None for a model not extended."""
    base = tok.metadata.get("base")
    return base if isinstance(base, dict) and isinstance(base.get("first_new_id"), int) else None


def base_of(tok):
    """The base model an extended ``tok`` was trained from, rebuilt from ``tok`` (None when it
    is not extended): it encodes as the base did."""
    record = extension_of(tok)
    if record is None:
        return None
    first_new, inherited = record["first_new_id"], record["merges"]
    data = tok.to_dict()
    data["metadata"] = {}
    if data.get("pipeline") is not None:
        spec = copy.deepcopy(data["pipeline"])
        model = spec["model"]
        model["vocab"] = {token: token_id for token, token_id in model["vocab"].items() if token_id < first_new}
        model["merges"] = model["merges"][:inherited]
        data["pipeline"] = spec
    else:
        data["vocab"] = {token_id: token for token_id, token in data["vocab"].items() if token_id < first_new}
        data["merges"] = data["merges"][:inherited]
    return type(tok).from_dict(data)


def new_tokens(tok, limit: int | None = None) -> list[list]:
    """``[id, token, count]`` of the tokens continued training added, in id order: a merge's
    token with the count of its merge, a character the base lacked with None."""
    record = extension_of(tok)
    if record is None:
        return []
    counts = tok.metadata.get("merge_counts") or []
    made = {}
    for rank, (_, _, new_id) in enumerate(tok.merge_ids):
        if new_id >= record["first_new_id"] and new_id not in made:
            made[new_id] = counts[rank] if rank < len(counts) else None
    vocab = tok.vocab
    ids = sorted(i for i in vocab if i >= record["first_new_id"])
    return [[i, json_token(vocab[i]), made.get(i)] for i in ids[:limit]]


def extension_summary(tok, *, shown: int = NEW_TOKENS_SHOWN) -> dict | None:
    """The base, what was inherited and added, and the first ``shown`` new tokens."""
    record = extension_of(tok)
    if record is None:
        return None
    added = new_tokens(tok)
    return {
        "base": {key: record.get(key) for key in ("file", "format", "fingerprint", "vocab_size")},
        "inherited_merges": record["merges"],
        "new_merges": len(tok.merge_ids) - record["merges"],
        "new_tokens": len(added),
        "new_characters": sum(1 for row in added if row[2] is None),
        "first_new_tokens": added[:shown],
    }


def sample_comparison(tok, text: str) -> dict | None:
    """Bytes per token of ``text`` with the base and with the extended model (None when ``tok``
    is not extended)."""
    base = base_of(tok)
    if base is None:
        return None
    return {"base": round(bytes_per_token(base, text), 6), "extended": round(bytes_per_token(tok, text), 6)}


def extension_lines(tok, summary: dict) -> list[str]:
    """:func:`extension_summary` of ``tok`` for people."""
    base = summary["base"]
    lines = [
        f"extended from: {base['file'] or 'a model'} ({base['format'] or '?'}, {base['fingerprint']})",
        f"  {summary['inherited_merges']:,} merges and {base['vocab_size']:,} tokens inherited; "
        f"{summary['new_tokens']:,} new tokens: {summary['new_merges']:,} merges, "
        f"{summary['new_characters']:,} characters the base lacked",
        f"  first new tokens ({len(summary['first_new_tokens'])} of {summary['new_tokens']:,}; id, token, count):",
    ]
    for token_id, _, count in summary["first_new_tokens"]:
        lines.append(f"  {token_id:>8}  {readable(tok.id_to_token(token_id)):<24} {'' if count is None else f'{count:,}'}".rstrip())
    return lines
