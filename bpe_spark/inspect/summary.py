"""What ``bpe-spark inspect`` says of a model: :func:`describe` as plain data (its ``--json``) and
:func:`describe_text` as lines for people: the settings, the vocabulary by kind, a histogram of
token lengths, the longest tokens, the first and last merges with their training counts and why
training stopped, the rounds, and the rest of the training metadata. The figures come from
:mod:`bpe_spark.inspect.vocab_stats`; tokens are shown by :mod:`bpe_spark.inspect.token_display`.

>>> from bpe_spark import TrainerConfig, train
>>> tok = train(["low lower lowest"], TrainerConfig(vocab_size=260, pattern="words"))
>>> summary = describe(tok, merges=2)
>>> summary["kinds"], summary["last_merges"], summary["stopped"]["reason"]
({'byte': 256, 'merge': 4}, [['low', 'e', 2], ['s', 't', 1]], 'the vocabulary reached its target size (260)')
"""

from __future__ import annotations

import json

from bpe_spark.bpe.patterns import PRESETS, pattern_source
from bpe_spark.inspect.extension import extension_lines, extension_summary
from bpe_spark.inspect.token_display import json_token, readable
from bpe_spark.inspect.vocab_stats import kind_counts, length_histogram, longest_tokens
from bpe_spark.models.token_kinds import merge_counts

BAR_WIDTH = 40
LONGEST_SHOWN = 64  # characters of a long token shown (then …)
_EIGHTHS = " ▏▎▍▌▋▊▉"


def describe(tok, *, merges: int = 10, longest: int = 10) -> dict:
    """A summary of ``tok``: its settings, ``kinds`` (:func:`~bpe_spark.inspect.vocab_stats.kind_counts`),
    ``token_lengths`` (bytes -> tokens), ``longest_tokens`` (``[id, token, bytes]``), the first and
    last ``merges`` merges (``[left, right, count]``; the last ones end at rank ``merges - 1``),
    ``stopped`` (the count of the last merge and why training ended; None when the counts are
    unknown) and the model's metadata (``stats``, ``rounds``, ``timings``, ``source``...)."""
    summary = {
        "scheme": tok.scheme,
        "vocab_size": tok.vocab_size,
        "merges": len(tok.merge_ids),
        "merge_rule": tok.merge_rule,
        "special_tokens": dict(tok.special_tokens),
    }
    if getattr(tok, "pipeline", None) is not None:  # an imported tokenizer.json: its own steps
        summary["merge_rule"] = "tokenizers"
        summary.update(pipeline_steps(tok.pipeline.spec))
    else:
        summary.update({
            "pattern": tok.pattern if tok.pattern in PRESETS else "custom",
            "pattern_regex": pattern_source(tok.pattern),
            "lowercase": tok.lowercase,
            "normalization": tok.normalization,
        })
    if tok.scheme == "char" and getattr(tok, "pipeline", None) is None:
        summary["end_of_word"] = tok.end_of_word
        summary["unk_token"] = tok.unk_token
    if tok.config is not None:
        summary["tie_break"] = tok.config.tie_break
    summary["kinds"] = kind_counts(tok)
    summary["token_lengths"] = length_histogram(tok)
    summary["longest_tokens"] = [[token_id, json_token(token), len(token)]
                                 for token_id, token in longest_tokens(tok, longest)]
    counts = merge_counts(tok)
    pairs = tok.merges
    last = max(len(pairs) - merges, merges, 0)  # the last ones never repeat the first ones

    def shown(start: int, stop: int) -> list:
        return [[json_token(left), json_token(right), None if counts is None else counts[rank]]
                for rank, (left, right) in enumerate(pairs[start:stop], start)]

    summary["first_merges"] = shown(0, merges)
    summary["last_merges"] = shown(last, len(pairs))
    summary["stopped"] = _stopped(tok, counts)
    extension = extension_summary(tok)
    if extension is not None:
        summary["extension"] = extension
    for key, value in tok.metadata.items():
        if key not in ("merge_counts", "base"):  # the base: in "extension"
            summary[key] = value
    return summary


def _stopped(tok, counts: list[int] | None) -> dict | None:
    """Where training stopped: the last merge's rank and count, and the rule that ended it."""
    if counts is None or not counts:
        return None
    cfg = tok.config
    if cfg is None:
        reason = None
    elif tok.vocab_size >= cfg.vocab_size:
        reason = f"the vocabulary reached its target size ({cfg.vocab_size:,})"
    elif cfg.max_merges is not None and len(counts) >= cfg.max_merges:
        reason = f"the merge limit ({cfg.max_merges:,}) was reached"
    elif cfg.min_frequency > 1:
        reason = f"no pair left occurs at least {cfg.min_frequency:,} times (the minimum frequency)"
    else:
        reason = "no pair was left to merge"
    return {"rank": len(counts) - 1, "count": counts[-1], "reason": reason}


def pipeline_steps(spec: dict) -> dict:
    """The steps of an imported pipeline in a line each: ``Sequence[Split, ByteLevel]`` and the
    BPE options that are set.

    >>> pipeline_steps({"normalizer": None, "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
    ...     {"type": "Split"}, {"type": "ByteLevel"}]}, "model": {"type": "BPE", "ignore_merges": True}})
    {'normalizer': None, 'pre_tokenizer': 'Sequence[Split, ByteLevel]', 'decoder': None, 'model_options': {'ignore_merges': True}}
    """

    def name(step) -> str | None:
        if not isinstance(step, dict):
            return None
        inner = next((step[key] for key in ("normalizers", "pretokenizers", "decoders", "processors")
                      if isinstance(step.get(key), list)), None)
        kind = str(step.get("type"))
        return kind if inner is None else f"{kind}[{', '.join(str(name(s)) for s in inner)}]"

    model = spec.get("model") or {}
    options = {key: model[key] for key in ("ignore_merges", "byte_fallback", "unk_token", "fuse_unk",
                                           "continuing_subword_prefix", "end_of_word_suffix") if model.get(key)}
    return {"normalizer": name(spec.get("normalizer")), "pre_tokenizer": name(spec.get("pre_tokenizer")),
            "decoder": name(spec.get("decoder")), "model_options": options}


def describe_text(tok, *, merges: int = 10, longest: int = 10) -> str:
    """:func:`describe` as lines: the settings as ``key: value``, then the vocabulary's sections."""
    summary = describe(tok, merges=merges, longest=longest)
    lines = []
    sections = {"kinds", "token_lengths", "longest_tokens", "first_merges", "last_merges", "stopped", "rounds",
                "extension"}
    for key, value in summary.items():
        if key == "kinds":  # the sections, after the settings and before the training metadata
            lines.extend(_vocabulary_lines(tok, summary, merges=merges, longest=longest))
        if key in sections:
            continue
        if isinstance(value, dict) and value and key != "special_tokens":
            lines.append(f"{key}:")
            lines.extend(f"  {k}: {json.dumps(v, ensure_ascii=False)}" for k, v in value.items())
        else:
            lines.append(f"{key}: {json.dumps(value, ensure_ascii=False)}")
    return "\n".join(lines)


def _vocabulary_lines(tok, summary: dict, *, merges: int, longest: int) -> list[str]:
    kinds = summary["kinds"]
    parts = " + ".join(f"{n:,} {kind}" for kind, n in kinds.items())
    lines = [f"vocabulary by kind: {parts} = {sum(kinds.values()):,}"]
    lengths = summary["token_lengths"]
    lines.append(f"token length in bytes ({sum(lengths.values()):,} tokens, specials left out):")
    lines.extend(length_bars(lengths))
    lines.append(f"longest tokens ({len(summary['longest_tokens'])}):")
    # char scheme: the length without the end-of-word marker, as vocab_stats ranks them
    marker = tok.end_of_word_marker.encode("utf-8") if tok.scheme == "char" and tok.end_of_word else None
    for token_id, token in longest_tokens(tok, longest):
        size = len(token) - (len(marker) if marker and token.endswith(marker) else 0)
        shown = readable(token)
        lines.append(f"  {token_id:>7}  {size:>3} bytes  "
                     + (shown if len(shown) <= LONGEST_SHOWN else shown[:LONGEST_SHOWN - 1] + "…"))
    lines.extend(_merge_lines(tok, summary, merges))
    if summary.get("extension") is not None:
        lines.extend(extension_lines(tok, summary["extension"]))
    lines.extend(_round_lines(summary.get("rounds")))
    return lines


def _merge_lines(tok, summary: dict, merges: int) -> list[str]:
    pairs, total = tok.merges, len(tok.merge_ids)
    counts = merge_counts(tok)

    first, last = len(summary["first_merges"]), len(summary["last_merges"])
    ranks = [*range(first), *range(total - last, total)]
    shown = {rank: f"{readable(pairs[rank][0])} + {readable(pairs[rank][1])}" for rank in ranks}
    width = max(map(len, shown.values()), default=0)

    def merge_line(rank: int) -> str:
        count = "" if counts is None else f"  {counts[rank]:>12,}"
        return f"  {rank:>7}  {shown[rank]:<{width}}{count}".rstrip()

    lines = [f"first merges ({first} of {total:,}):", *map(merge_line, range(first))]
    if last:
        lines.append(f"last merges ({last} of {total:,}):")
        lines.extend(map(merge_line, range(total - last, total)))
    stopped = summary["stopped"]
    if stopped is not None:
        why = f": {stopped['reason']}" if stopped["reason"] else ""
        lines.append(f"training stopped at count {stopped['count']:,} (merge {stopped['rank']:,}){why}")
    elif total and summary.get("extension") is None:
        lines.append("merge counts: not in this model (only a bpe-spark training records them)")
    return lines


def _round_lines(rounds) -> list[str]:
    """The rounds of training (the ``rounds`` metadata) as a table, with the merges so far."""
    if not rounds:
        return []
    header = ("round", "kind", "merges", "so far", "speculated", "shipped", "seconds")
    rows, done = [], 0
    for record in rounds:
        done += record.get("merges", 0)
        kind = record.get("kind") or ("resumed" if record.get("resumed") else "")
        rows.append((_number(record, "round"), kind, _number(record, "merges"), f"{done:,}",
                     _number(record, "speculated"), _number(record, "shipped"), _number(record, "seconds", ".2f")))
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]

    def line(row) -> str:
        return "  " + "  ".join(cell.ljust(width) if i == 1 else cell.rjust(width)
                                for i, (cell, width) in enumerate(zip(row, widths))).rstrip()

    return [f"rounds: {len(rounds)}", line(header), *map(line, rows)]


def _number(record: dict, key: str, spec: str = ",") -> str:
    return "" if record.get(key) is None else format(record[key], spec)


def length_bars(lengths: dict[int, int], width: int = BAR_WIDTH) -> list[str]:
    """A text histogram of ``{length: tokens}``: one row per length up to 16, then rows that double
    (17-32, 33-64...), with a bar scaled to the fullest row.

    >>> for line in length_bars({1: 256, 2: 128, 4: 1}, width=8): print(line)
      1  ████████  256
      2  ████      128
      3              0
      4  ▏           1
    """
    if not lengths:
        return []
    rows: list[tuple[str, int]] = []
    low, high = min(lengths), max(lengths)
    length = low
    while length <= high:
        top = length if length <= 16 else 2 * (length - 1)  # 17-32, 33-64, ...
        rows.append((str(length) if top == length else f"{length}-{top}",
                     sum(n for size, n in lengths.items() if length <= size <= top)))
        length = top + 1
    fullest = max(n for _, n in rows)
    label_width = max(len(label) for label, _ in rows)
    count_width = len(f"{fullest:,}")
    return [f"  {label:>{label_width}}  {_bar(n / fullest * width).ljust(width)}  {n:>{count_width},}"
            for label, n in rows]


def _bar(cells: float) -> str:
    """A bar ``cells`` character cells long, in eighths; anything above 0 shows."""
    eighths = max(1, round(cells * 8)) if cells > 0 else 0
    full, part = divmod(eighths, 8)
    return "█" * full + (_EIGHTHS[part] if part else "")
