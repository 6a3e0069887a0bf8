"""The figures of ``bpe-spark evaluate``, from a :class:`~bpe_spark.inspect.evaluate_stats.Tally`:
per-document distributions (mean, p50, p99), bytes per token, the figures of each group, parity
across groups (Gini coefficient, worst-to-best ratio), vocabulary use (tokens never produced,
LiteToken's residue, the use curve), the most frequent and the longest tokens used, and the
round-trip failures; as one JSON-ready dict (:func:`evaluation_figures`). Every figure is
computed from exact integer sums, in sorted order: the same tally gives the same figures, bit
for bit. The definitions (docs/guides/evaluate.md says them too):

- *p50*, *p99*: the nearest-rank percentile: the smallest length ``v`` such that at least
  ``p`` percent of the documents have a length ``<= v`` (so always a length some document has);
- *bytes per token*: all documents' bytes / all their tokens (of a model, or of a group);
  *tokens per byte* its inverse;
- *Gini*: over the groups' tokens per byte ``x_1..x_n`` (each group counts once, whatever its
  size), ``sum_i sum_j |x_i - x_j| / (2 n^2 mean(x))``: 0 when every group pays the same
  tokens per byte, towards 1 when one group pays for all; *worst to best*: the largest tokens
  per byte over the smallest (1: parity); both need two groups with bytes, else null;
- *unused*: the ordinary (non-special) vocabulary tokens the model never produced;
- *through count* of a token: how often it is merged through on the way to a longer token
  produced, counted on the canonical merge tree of each produced token (its first merge, then
  its parts' first merges, down to the alphabet): a produced token ``u`` made by ``l + r``
  adds ``produced(u) + through(u)`` to ``through(l)`` and ``through(r)``;
- *vocabulary-use curve*: the ordinary tokens sorted by how often they are produced, most
  first; at rank ``k``: ``[k, k / vocabulary size, share of all tokens produced that the first
  k tokens make]``, at about 64 ranks spaced evenly on a log scale;
- *residue* (LiteToken): a merge-made token whose through count is at least ``residue_min``
  (default 100) and at least ``residue_ratio`` (default 100) times the times it is produced:
  a token the encoder builds often but almost never emits.

>>> histogram = {1: 50, 2: 49, 10: 1}
>>> percentile(histogram, 50), percentile(histogram, 99), percentile(histogram, 100)
(1, 2, 10)
>>> gini([1.0, 1.0, 1.0]), round(gini([0.0, 0.0, 3.0]), 4)
(0.0, 0.6667)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from bpe_spark.errors import ConfigError, option_name
from bpe_spark.inspect.evaluate_stats import NO_SCRIPT, Tally
from bpe_spark.inspect.token_display import json_token
from bpe_spark.models.token_kinds import token_kinds

FORMAT = "bpe-spark-evaluation"
VERSION = 1
RESIDUE_RATIO = 100
RESIDUE_MIN = 100
TOP = 20  # most frequent, longest and residue tokens listed
CURVE_POINTS = 64  # about as many points of the vocabulary-use curve, log-spaced by rank


def check_counts(**counts) -> None:
    """Each of ``counts`` (``top``, ``residue_ratio``, ``residue_min``) a whole number >= 1, else a
    one-line :class:`~bpe_spark.errors.ConfigError` naming the option as the interface in use does
    (``--top`` on the command line, ``top`` in Python).

    >>> check_counts(top=20, residue_min=100)
    >>> check_counts(top=0)
    Traceback (most recent call last):
    bpe_spark.errors.ConfigError: top must be >= 1, got 0
    """
    for name, value in counts.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{option_name(name)} must be >= 1, got {value!r}")


def percentile(histogram: Mapping[int, int], p: float) -> int | None:
    """The nearest-rank ``p``-th percentile of a histogram (length -> documents); None when empty."""
    total = sum(histogram.values())
    if total == 0:
        return None
    rank = max(1, math.ceil(p / 100 * total))
    seen = 0
    for value in sorted(histogram):
        seen += histogram[value]
        if seen >= rank:
            return int(value)
    raise AssertionError("unreachable")


def distribution(histogram: Mapping[int, int]) -> dict:
    """``{mean, p50, p99, max, total}`` of a histogram of per-document lengths."""
    docs = sum(histogram.values())
    total = sum(length * n for length, n in histogram.items())
    return {"mean": total / docs if docs else None, "p50": percentile(histogram, 50),
            "p99": percentile(histogram, 99), "max": max(histogram) if histogram else None, "total": int(total)}


def gini(values: Sequence[float]) -> float | None:
    """The Gini coefficient of ``values`` (each counted once); None for none, 0 when all are 0."""
    values = sorted(values)
    n = len(values)
    if n == 0:
        return None
    mean = sum(values) / n
    if mean == 0:
        return 0.0
    # sum_i sum_j |x_i - x_j| = 2 sum_i (2i - n + 1) x_i over the sorted values (i from 0)
    return sum((2 * i - n + 1) * x for i, x in enumerate(values)) / (n * n * mean)


def parity(groups: Mapping[str, Mapping], leave_out: str | None = None) -> dict | None:
    """Gini and worst-to-best of the groups' tokens per byte (groups without bytes left out, and
    ``leave_out``: by script, the documents without letters, ``none``, which are no language)."""
    rates = {name: g["tokens_per_byte"] for name, g in sorted(groups.items()) if g["bytes"] and name != leave_out}
    if len(rates) < 2:
        return None
    worst = max(rates, key=lambda name: (rates[name], name))
    best = min(rates, key=lambda name: (rates[name], name))
    return {"gini": gini(list(rates.values())), "worst_to_best": rates[worst] / rates[best] if rates[best] else None,
            "worst_group": worst, "best_group": best, "groups": len(rates)}


def through_counts(tok, produced: Mapping[int, int]) -> dict[int, int]:
    """How often each token is merged through on the way to the tokens ``produced`` (id -> times):
    see the module's definition. Merges are walked longest token first (a token's parts are
    shorter than it), each token by its first merge."""
    vocab = tok.ordinary_vocab
    first: dict[int, tuple[int, int]] = {}
    for left, right, new in tok.merge_ids:
        first.setdefault(new, (left, right))
    through: dict[int, int] = {}
    for new in sorted(first, key=lambda token_id: (-len(vocab.get(token_id, b"")), token_id)):
        flow = produced.get(new, 0) + through.get(new, 0)
        if flow:
            for part in first[new]:
                through[part] = through.get(part, 0) + flow
    return through


def vocabulary_use(tok, counts: Mapping[int, int], *, residue_ratio: int = RESIDUE_RATIO,
                   residue_min: int = RESIDUE_MIN, top: int = TOP) -> dict:
    """The vocabulary-use figures of one model from its token counts."""
    kinds = token_kinds(tok)
    vocab = tok.ordinary_vocab
    ordinary = sorted(vocab)
    merged = [t for t in ordinary if kinds.get(t) == "merge"]
    used = sum(1 for t in ordinary if counts.get(t, 0))
    through = through_counts(tok, counts)
    residue = sorted((t for t in merged if through.get(t, 0) >= residue_min
                      and counts.get(t, 0) * residue_ratio <= through.get(t, 0)),
                     key=lambda t: (-through.get(t, 0), t))
    ranked = sorted((counts.get(t, 0) for t in ordinary), reverse=True)
    total = sum(ranked)
    cumulative, running = [], 0
    for count in ranked:
        running += count
        cumulative.append(running)
    curve = []
    for k in curve_ranks(len(ranked)):
        curve.append([k, k / len(ranked), cumulative[k - 1] / total if total else 0.0])
    size = len(ordinary)
    return {
        "size": size, "used": used, "unused": size - used, "unused_share": (size - used) / size if size else None,
        "merged": len(merged), "unused_merged": sum(1 for t in merged if not counts.get(t, 0)),
        "residue": len(residue), "residue_share": len(residue) / size if size else None,
        "residue_ratio": residue_ratio, "residue_min": residue_min,
        "residue_tokens": [{"id": t, "token": json_token(vocab[t]), "produced": counts.get(t, 0),
                            "through": through[t]} for t in residue[:top]],
        "curve": curve,
    }


def curve_ranks(size: int, points: int = CURVE_POINTS) -> list[int]:
    """The ranks (1 to ``size``) the vocabulary-use curve is given at: about ``points``, spaced
    evenly on a log scale.

    >>> curve_ranks(1000, 5)
    [1, 6, 32, 178, 1000]
    """
    if size <= 0:
        return []
    return sorted({max(1, round(size ** (i / (points - 1)))) for i in range(points)})


def top_tokens(tok, counts: Mapping[int, int], total: int, top: int = TOP) -> tuple[list, list]:
    """The ``top`` most frequent tokens produced (ties by id) and the ``top`` longest produced
    (by bytes, ties by id), as JSON rows."""
    vocab = tok.vocab

    def row(t: int) -> dict:
        value = vocab.get(t, b"")
        return {"id": t, "token": json_token(value), "bytes": len(value.encode("utf-8") if isinstance(value, str) else value),
                "count": counts[t], "share": counts[t] / total if total else None}

    produced = [t for t, c in counts.items() if c]
    frequent = sorted(produced, key=lambda t: (-counts[t], t))[:top]
    longest = sorted(produced, key=lambda t: (-row(t)["bytes"], t))[:top]
    return [row(t) for t in frequent], [row(t) for t in longest]


def evaluation_figures(tally: Tally, tokenizers: Sequence, names: Sequence[str], *, group_by: str | None = None,
                       residue_ratio: int = RESIDUE_RATIO, residue_min: int = RESIDUE_MIN, top: int = TOP,
                       sources: Sequence[str] | None = None) -> dict:
    """Every figure of an evaluation, JSON-ready (see the module's definitions)."""
    groups = {name: tally.groups[name] for name in sorted(tally.groups)}
    corpus_bytes = sum(row[1] for row in groups.values())
    corpus_chars = sum(row[2] for row in groups.values())
    out = {
        "format": FORMAT, "version": VERSION, "group_by": group_by,
        "documents": tally.documents, "null_documents": tally.null_documents,
        "bytes": corpus_bytes, "characters": corpus_chars,
        "bytes_per_document": distribution(tally.doc_bytes),
        "characters_per_document": distribution(tally.doc_chars),
        "groups": {name: {"documents": row[0], "bytes": row[1], "characters": row[2]} for name, row in groups.items()},
        "models": [],
    }
    for m, (tok, name) in enumerate(zip(tokenizers, names)):
        counts = tally.counts_of(m)
        tokens = sum(row[3 + m] for row in groups.values())
        by_group = {}
        for group, row in groups.items():
            g_tokens = row[3 + m]
            by_group[group] = {"documents": row[0], "bytes": row[1], "characters": row[2], "tokens": g_tokens,
                               "bytes_per_token": row[1] / g_tokens if g_tokens else None,
                               "tokens_per_byte": g_tokens / row[1] if row[1] else None}
        frequent, longest = top_tokens(tok, counts, tokens, top)
        out["models"].append({
            "name": name, "source": sources[m] if sources else None, "fingerprint": tok.fingerprint,
            "vocab_size": tok.vocab_size, "tokens": tokens,
            "bytes_per_token": corpus_bytes / tokens if tokens else None,
            "characters_per_token": corpus_chars / tokens if tokens else None,
            "tokens_per_document": distribution(tally.doc_tokens[m]),
            "round_trip_failures": tally.failures[m], "round_trip_example": tally.failure_examples[m],
            "groups": by_group, "parity": parity(by_group, NO_SCRIPT if group_by == "script" else None),
            "vocabulary": vocabulary_use(tok, counts, residue_ratio=residue_ratio, residue_min=residue_min, top=top),
            "most_frequent": frequent, "longest": longest,
        })
    return out
