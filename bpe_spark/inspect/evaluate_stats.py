"""The per-document statistics of ``bpe-spark evaluate`` and the tally they add up to: for a batch
of documents and several tokenizers, each document's bytes, characters and tokens under every
model, the tokens each model produced, the sums by group, and the round-trip failures; and the
"script of a document" that ``--group-by script`` groups by.

A :class:`Tally` holds only exact integers (histograms of per-document lengths, sums, token
counts), so tallies add up in any order to the same figures: the Spark pass
(:mod:`bpe_spark.spark.evaluation`) makes one per task and sums them as rows
(:meth:`Tally.rows` / :meth:`Tally.from_rows`); :func:`tally_texts` makes one in process. The
figures are computed from it by :mod:`bpe_spark.inspect.evaluate_figures`. No Spark here.

Definitions. A document's *bytes* are its text's UTF-8 length, its *characters* its code points,
its *tokens* the ids ``BatchEncoder(tok)`` gives it (``tok.encode(text, disallowed_special=())``:
special-token text is ordinary text). A null text is no document (counted apart). A *round-trip
failure* is a document with ``tok.decode(tok.encode(text)) != text``.

>>> from bpe_spark import TrainerConfig, train
>>> from bpe_spark.encoding.batch_encoder import BatchEncoder
>>> tok = train(["low lower lowest"], TrainerConfig(vocab_size=262))
>>> t = tally_texts([BatchEncoder(tok)], ["low", "lower", None])
>>> t.documents, t.null_documents, dict(t.doc_bytes), dict(t.doc_tokens[0]), t.failures
(2, 1, {3: 1, 5: 1}, {1: 1, 3: 1}, [0])
>>> document_script("Привет, мир 42"), document_script("水は water"), document_script("42 !")
('Cyrillic', 'Latin', 'none')
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from bpe_spark.inspect.vocab_stats import char_class

NULL_GROUP = "(null)"  # the group of a document whose group column is null
NO_SCRIPT = "none"  # the script of a document without letters
ALL = "all"  # the one group when none is asked for
EXAMPLE_CHARS = 200  # a round-trip failure's example text is cut to this many characters
_DECODE_CHUNK = 16 << 20  # bytes of decoded text gathered at once by the round-trip check


def document_script(text: str) -> str:
    """The script of a document: the script most of its letters belong to (Unicode category
    L*, named as :func:`bpe_spark.inspect.vocab_stats.token_script` names them: Latin, Han,
    Cyrillic, Arabic, Hiragana...; letters of other scripts count as ``other``); a tie goes to
    the name first in alphabetical order; ``none`` when the text holds no letter."""
    scripts: Counter = Counter()
    for char, count in Counter(text).items():
        kind = char_class(char)
        if kind is not None and kind.startswith("script:"):
            scripts[kind[len("script:"):]] += count
    if not scripts:
        return NO_SCRIPT
    return min(scripts.items(), key=lambda item: (-item[1], item[0]))[0]


@dataclass
class Tally:
    """Exact integer sums of an evaluation over ``models`` tokenizers (index ``m``): documents;
    histograms (length -> documents) of bytes, characters and each model's tokens per document;
    per group ``[documents, bytes, characters, tokens of model 0, tokens of model 1...]``; each
    model's token counts (id -> times produced), round-trip failures and the smallest failing
    text (cut to ``EXAMPLE_CHARS``)."""

    models: int
    documents: int = 0
    null_documents: int = 0
    doc_bytes: Counter = field(default_factory=Counter)
    doc_chars: Counter = field(default_factory=Counter)
    doc_tokens: list = field(default_factory=list)
    groups: dict = field(default_factory=dict)
    token_counts: list = field(default_factory=list)
    failures: list = field(default_factory=list)
    failure_examples: list = field(default_factory=list)

    def __post_init__(self) -> None:
        self.doc_tokens = self.doc_tokens or [Counter() for _ in range(self.models)]
        self.token_counts = self.token_counts or [Counter() for _ in range(self.models)]
        self.failures = self.failures or [0] * self.models
        self.failure_examples = self.failure_examples or [None] * self.models

    def group_row(self, group: str) -> list[int]:
        return self.groups.setdefault(group, [0] * (3 + self.models))

    def add(self, other: Tally) -> Tally:
        """Add ``other`` into this tally (in place); returns it."""
        self.documents += other.documents
        self.null_documents += other.null_documents
        self.doc_bytes.update(other.doc_bytes)
        self.doc_chars.update(other.doc_chars)
        for m in range(self.models):
            self.doc_tokens[m].update(other.doc_tokens[m])
            self.token_counts[m].update(other.token_counts[m])
            self.failures[m] += other.failures[m]
            self.failure_examples[m] = _smallest(self.failure_examples[m], other.failure_examples[m])
        for group, row in other.groups.items():
            mine = self.group_row(group)
            for i, value in enumerate(row):
                mine[i] += value
        return self

    # --- as rows: how the Spark pass sums tallies -----------------------------------------------
    def rows(self) -> Iterable[tuple[str, int, str, int, int, str | None]]:
        """``(kind, model, group, key, value, example)`` rows whose sums by ``(kind, model,
        group, key)`` (and smallest ``example``) give the sum of tallies back (:meth:`from_rows`)."""
        yield "documents", -1, "", 0, self.documents, None
        yield "documents", -1, "", 1, self.null_documents, None
        for kind, histogram in (("doc_bytes", self.doc_bytes), ("doc_chars", self.doc_chars)):
            for length, docs in histogram.items():
                yield kind, -1, "", int(length), int(docs), None
        for m in range(self.models):
            for length, docs in self.doc_tokens[m].items():
                yield "doc_tokens", m, "", int(length), int(docs), None
            for token_id, count in self.token_counts[m].items():
                yield "token", m, "", int(token_id), int(count), None
            yield "failures", m, "", 0, self.failures[m], self.failure_examples[m]
        for group, row in self.groups.items():
            for key, value in enumerate(row):
                yield "group", -1, group, key, int(value), None

    @classmethod
    def from_rows(cls, models: int, rows: Iterable[Sequence]) -> Tally:
        tally = cls(models)
        for kind, m, group, key, value, example in rows:
            if kind == "documents":
                if key == 0:
                    tally.documents += value
                else:
                    tally.null_documents += value
            elif kind in ("doc_bytes", "doc_chars"):
                getattr(tally, kind)[key] += value
            elif kind == "doc_tokens":
                tally.doc_tokens[m][key] += value
            elif kind == "token":
                tally.token_counts[m][key] += value
            elif kind == "failures":
                tally.failures[m] += value
                tally.failure_examples[m] = _smallest(tally.failure_examples[m], example)
            elif kind == "group":
                tally.group_row(group)[key] += value
            else:
                raise ValueError(f"internal: unknown tally row kind {kind!r}")
        return tally


def _smallest(a: str | None, b: str | None) -> str | None:
    return b if a is None else a if b is None else min(a, b)


# --- measuring a batch ------------------------------------------------------------------------
def tally_texts(encoders: Sequence, texts: Sequence[str | None], groups: Sequence[str] | None = None,
                *, byte_lengths: np.ndarray | None = None, char_lengths: np.ndarray | None = None) -> Tally:
    """The :class:`Tally` of a batch of ``texts`` under each of ``encoders``
    (:class:`~bpe_spark.encoding.batch_encoder.BatchEncoder`), ``groups``: each text's group
    (None: all in ``all``). ``byte_lengths`` / ``char_lengths``: the texts' UTF-8 and code point
    lengths when the caller has them (an Arrow column does), else measured here."""
    tally = Tally(len(encoders))
    nulls = np.fromiter((text is None for text in texts), dtype=bool, count=len(texts))
    keep = ~nulls
    tally.null_documents = int(nulls.sum())
    tally.documents = len(texts) - tally.null_documents
    if byte_lengths is None:
        byte_lengths = np.fromiter((0 if t is None else len(t.encode("utf-8", "surrogatepass")) for t in texts),
                                   dtype=np.int64, count=len(texts))
    if char_lengths is None:
        char_lengths = np.fromiter((0 if t is None else len(t) for t in texts), dtype=np.int64, count=len(texts))
    byte_lengths, char_lengths = np.asarray(byte_lengths, dtype=np.int64), np.asarray(char_lengths, dtype=np.int64)
    tally.doc_bytes.update(_histogram(byte_lengths[keep]))
    tally.doc_chars.update(_histogram(char_lengths[keep]))
    names, codes = np.unique(np.array([ALL if groups is None else g for g in (groups or [None] * len(texts))],
                                      dtype=object), return_inverse=True) if len(texts) else ([], np.zeros(0, int))
    codes = np.asarray(codes)[keep]
    sums = np.zeros((len(names), 3 + len(encoders)), dtype=np.int64)
    np.add.at(sums[:, 0], codes, 1)
    np.add.at(sums[:, 1], codes, byte_lengths[keep])
    np.add.at(sums[:, 2], codes, char_lengths[keep])
    data = None
    for m, encoder in enumerate(encoders):
        values, offsets, _ = encoder.encode_texts(texts, nulls=nulls)
        per_doc = np.diff(offsets)
        tally.doc_tokens[m].update(_histogram(per_doc[keep]))
        np.add.at(sums[:, 3 + m], codes, per_doc[keep])
        ids, counts = np.unique(values, return_counts=True)
        tally.token_counts[m].update(dict(zip(ids.tolist(), counts.tolist())))
        if data is None:
            data = "".join(t for t in texts if t is not None).encode("utf-8", "surrogatepass")
        failed = round_trip_failures(encoder.tok, texts, values, offsets, byte_lengths, data)
        tally.failures[m] = len(failed)
        for i in failed:
            tally.failure_examples[m] = _smallest(tally.failure_examples[m], texts[i][:EXAMPLE_CHARS])
    for name, row in zip(names, sums.tolist()):
        if row[0]:
            tally.groups[str(name)] = row
    return tally


def _histogram(lengths: np.ndarray) -> dict[int, int]:
    values, counts = np.unique(lengths, return_counts=True)
    return dict(zip(values.tolist(), counts.tolist()))


_TABLES: dict[str, tuple] = {}  # the byte table of a model (by fingerprint), once per process


def _byte_table(tok) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(data uint8, starts int64, lengths int64)``: token ``i``'s bytes are
    ``data[starts[i]:starts[i] + lengths[i]]`` (special tokens as their UTF-8 text)."""
    key = tok.fingerprint
    if key not in _TABLES:
        vocab = tok.vocab
        size = max(vocab) + 1
        lengths = np.zeros(size, dtype=np.int64)
        for token_id, value in vocab.items():
            lengths[token_id] = len(value)
        starts = np.cumsum(lengths) - lengths
        data = np.zeros(int(lengths.sum()), dtype=np.uint8)
        for token_id, value in vocab.items():
            data[starts[token_id]:starts[token_id] + len(value)] = np.frombuffer(value, dtype=np.uint8)
        if len(_TABLES) >= 8:
            _TABLES.clear()
        _TABLES[key] = (data, starts, lengths)
    return _TABLES[key]


def round_trip_failures(tok, texts: Sequence[str | None], values: np.ndarray, offsets: np.ndarray,
                        byte_lengths: np.ndarray, data: bytes) -> list[int]:
    """The indices of the texts with ``tok.decode(ids) != text`` (``values``/``offsets``: every
    text's ids; ``data``: the non-null texts' UTF-8 joined). A byte-level model without an
    imported pipeline is checked on the bytes, gathered with numpy (a document whose decoded
    bytes equal its UTF-8 decodes to it); any other model, and any document whose bytes differ,
    by ``tok.decode``."""
    n = len(texts)
    suspects: Iterable[int] = range(n)
    if tok.scheme == "byte" and getattr(tok, "pipeline", None) is None:
        table, starts, lengths = _byte_table(tok)
        token_lengths = lengths[values]
        bounds = np.concatenate([[0], np.cumsum(token_lengths)])[offsets]  # decoded bytes before each document
        doc_out = np.diff(bounds)
        ok = doc_out == byte_lengths
        text_starts = np.concatenate([[0], np.cumsum(byte_lengths)])
        expected = np.frombuffer(data, dtype=np.uint8)
        lo = 0
        while lo < n:  # documents in chunks of at most _DECODE_CHUNK decoded bytes (or one document)
            hi = max(lo + 1, int(np.searchsorted(bounds, bounds[lo] + _DECODE_CHUNK, "right")) - 1)
            hi = min(hi, n)
            first, last = offsets[lo], offsets[hi]
            piece = token_lengths[first:last]
            out_first = np.cumsum(piece) - piece
            gather = np.arange(int(piece.sum()), dtype=np.int64) + np.repeat(starts[values[first:last]] - out_first, piece)
            decoded = table[gather]
            if ok[lo:hi].all() and np.array_equal(decoded, expected[text_starts[lo]:text_starts[hi]]):
                lo = hi
                continue
            # which documents differ: compare the ones of the right length byte by byte
            doc_of = np.repeat(np.arange(lo, hi), doc_out[lo:hi])
            same_length = ok[doc_of]
            at = np.arange(len(decoded), dtype=np.int64) - (bounds[doc_of] - bounds[lo]) + text_starts[doc_of]
            differ = decoded[same_length] != expected[at[same_length]]
            ok[np.unique(doc_of[same_length][differ])] = False
            lo = hi
        suspects = np.flatnonzero(~ok).tolist()
    failed = []
    for i in suspects:
        if texts[i] is not None and tok.decode(values[offsets[i]:offsets[i + 1]].tolist()) != texts[i]:
            failed.append(i)
    return failed
