"""What a model records of its tokens, beside the tokens themselves: each id's kind (the ``kind``
column of a model directory's ``vocab.parquet``) and each merge's training count.
"""

from __future__ import annotations

from bpe_spark.bpe.fields import is_integer

KIND_ORDER = ("byte", "char", "merge", "special")


def token_kinds(tok) -> dict[int, str]:
    """Kind of every id: ``special``; ``merge`` for what some merge makes (and, byte scheme, any
    longer token); otherwise ``byte`` (byte scheme) or ``char`` (char scheme alphabet). The
    ``kind`` column of a model directory's ``vocab.parquet``."""
    made = {new_id for _, _, new_id in tok.merge_ids}
    kinds = {}
    for token_id, value in tok.ordinary_vocab.items():
        if token_id in made:
            kinds[token_id] = "merge"
        elif tok.scheme == "byte":
            kinds[token_id] = "byte" if len(value) == 1 else "merge"
        else:
            kinds[token_id] = "char"
    for token_id in tok.special_tokens.values():
        kinds[token_id] = "special"
    return kinds


def merge_counts(tok) -> list[int] | None:
    """The training count of each merge, by rank; None when the model does not know them (an
    imported file) or they do not match its merges."""
    counts = tok.metadata.get("merge_counts")
    if (
        isinstance(counts, list)
        and len(counts) == len(tok.merge_ids)
        and all(is_integer(c) for c in counts)
    ):
        return counts
    return None
