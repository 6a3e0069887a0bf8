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

    models: int  # token_counts[m]: int64 array, index = token id
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
        self.token_counts = self.token_counts or [np.zeros(0, dtype=np.int64) for _ in range(self.models)]
        self.failures = self.failures or [0] * self.models
        self.failure_examples = self.failure_examples or [None] * self.models

    def add_counts(self, m: int, counts: np.ndarray) -> None:
        """Add an array of token counts (index = id) to model ``m``'s."""
        mine = self.token_counts[m]
        if len(mine) < len(counts):
            mine = np.concatenate([mine, np.zeros(len(counts) - len(mine), dtype=np.int64)])
        mine[:len(counts)] += counts
        self.token_counts[m] = mine

    def counts_of(self, m: int) -> dict[int, int]:
        """Model ``m``'s token counts as ``{id: times}``, the tokens produced only."""
        counts = self.token_counts[m]
        produced = np.flatnonzero(counts)
        return dict(zip(produced.tolist(), counts[produced].tolist()))

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
            self.add_counts(m, other.token_counts[m])
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
            for token_id, count in self.counts_of(m).items():
                yield "token", m, "", token_id, count, None
            yield "failures", m, "", 0, self.failures[m], self.failure_examples[m]
        for group, row in self.groups.items():
            for key, value in enumerate(row):
                yield "group", -1, group, key, int(value), None

    @classmethod
    def from_rows(cls, models: int, rows: Iterable[Sequence]) -> Tally:
        tally = cls(models)
        counts: list[dict] = [{} for _ in range(models)]
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
                counts[m][key] = counts[m].get(key, 0) + value
            elif kind == "failures":
                tally.failures[m] += value
                tally.failure_examples[m] = _smallest(tally.failure_examples[m], example)
            elif kind == "group":
                tally.group_row(group)[key] += value
            else:
                raise ValueError(f"internal: unknown tally row kind {kind!r}")
        for m, found in enumerate(counts):
            array = np.zeros(max(found, default=-1) + 1, dtype=np.int64)
            array[list(found)] = list(found.values())
            tally.token_counts[m] = array
        return tally


def _smallest(a: str | None, b: str | None) -> str | None:
    return b if a is None else a if b is None else min(a, b)


# --- measuring a batch ------------------------------------------------------------------------
def tally_texts(encoders: Sequence, texts: Sequence[str | None], groups: Sequence[str] | None = None) -> Tally:
    """The :class:`Tally` of a batch of ``texts`` under each of ``encoders``
    (:class:`~bpe_spark.encoding.batch_encoder.BatchEncoder`), ``groups``: each text's group
    (None: all in ``all``)."""
    nulls = np.fromiter((text is None for text in texts), dtype=bool, count=len(texts))
    encoded = [("" if t is None else t).encode("utf-8", "surrogatepass") for t in texts]
    offsets = np.concatenate([[0], np.cumsum([len(e) for e in encoded], dtype=np.int64)]).astype(np.int64)
    chars = np.fromiter((0 if t is None else len(t) for t in texts), dtype=np.int64, count=len(texts))
    return tally_utf8(encoders, b"".join(encoded), offsets, nulls, chars, groups, texts=list(texts))


def tally_utf8(encoders: Sequence, data, offsets: np.ndarray, nulls: np.ndarray, char_lengths: np.ndarray,
               groups: Sequence[str] | None = None, *, texts: list | None = None) -> Tally:
    """:func:`tally_texts` of texts laid out in one buffer: text ``i`` is
    ``data[offsets[i]:offsets[i + 1]]`` (an Arrow string column's buffers: valid UTF-8), null
    where ``nulls``, of ``char_lengths`` code points. Encoders that take UTF-8 buffers encode
    them as they are; ``str`` texts (``texts``, else decoded here) are made only for the others."""
    models = len(encoders)
    tally = Tally(models)
    n = len(nulls)
    keep = ~nulls
    byte_lengths = np.diff(offsets)
    tally.null_documents = int(nulls.sum())
    tally.documents = n - tally.null_documents
    tally.doc_bytes.update(_histogram(byte_lengths[keep]))
    tally.doc_chars.update(_histogram(char_lengths[keep]))
    if groups is None:
        names, codes = [ALL], np.zeros(n, dtype=np.int64)
    else:
        names, codes = np.unique(np.array(groups, dtype=object), return_inverse=True)
    codes = np.asarray(codes).reshape(-1)[keep]
    columns = [np.ones(len(codes)), byte_lengths[keep], char_lengths[keep]]
    for m, encoder in enumerate(encoders):
        if encoder.takes_utf8 and texts is None and not tally.null_documents:
            values, doc_offsets, _ = encoder.encode_utf8(data, offsets)
        else:
            if texts is None:
                texts = [None if null else bytes(data[a:b]).decode("utf-8")
                         for null, a, b in zip(nulls.tolist(), offsets[:-1].tolist(), offsets[1:].tolist())]
            values, doc_offsets, _ = encoder.encode_texts(texts, nulls=nulls)
        per_doc = np.diff(doc_offsets)
        tally.doc_tokens[m].update(_histogram(per_doc[keep]))
        columns.append(per_doc[keep])
        tally.add_counts(m, np.bincount(values, minlength=0).astype(np.int64))
        failed = round_trip_failures(encoder.tok, values, doc_offsets, data, offsets, nulls)
        tally.failures[m] = len(failed)
        for i in failed:
            text = texts[i] if texts is not None else bytes(data[offsets[i]:offsets[i + 1]]).decode("utf-8")
            tally.failure_examples[m] = _smallest(tally.failure_examples[m], text[:EXAMPLE_CHARS])
    # exact: float64 sums of integers below 2**53
    sums = [np.bincount(codes, weights=column, minlength=len(names)).astype(np.int64).tolist() for column in columns]
    for g, name in enumerate(names):
        if sums[0][g]:
            tally.groups[str(name)] = [column[g] for column in sums]
    return tally


def _histogram(lengths: np.ndarray) -> dict[int, int]:
    values, counts = np.unique(lengths, return_counts=True)
    return dict(zip(values.tolist(), counts.tolist()))


_TABLES: dict[int, tuple] = {}  # the byte table of a model, once per process (by id, the model kept)


def _byte_table(tok) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(data uint8, starts int64, lengths int64)``: token ``i``'s bytes are
    ``data[starts[i]:starts[i] + lengths[i]]`` (special tokens as their UTF-8 text)."""
    found = _TABLES.get(id(tok))
    if found is None or found[0] is not tok:
        vocab = tok.vocab
        lengths = np.zeros(max(vocab) + 1, dtype=np.int64)
        lengths[list(vocab)] = [len(value) for value in vocab.values()]
        starts = np.cumsum(lengths) - lengths
        data = np.zeros(int(lengths.sum()), dtype=np.uint8)
        joined = np.frombuffer(b"".join(vocab[i] if i in vocab else b"" for i in range(len(lengths))), dtype=np.uint8)
        data[:len(joined)] = joined
        if len(_TABLES) >= 8:
            _TABLES.clear()
        found = _TABLES[id(tok)] = (tok, data, starts, lengths)
    return found[1:]


def round_trip_failures(tok, values: np.ndarray, doc_offsets: np.ndarray, data, offsets: np.ndarray,
                        nulls: np.ndarray) -> list[int]:
    """The indices of the texts with ``tok.decode(ids) != text`` (``values``/``doc_offsets``:
    every text's ids; text ``i``: ``data[offsets[i]:offsets[i + 1]]``, UTF-8). A byte-level model
    without an imported pipeline is checked on the bytes, gathered with numpy (a document whose
    decoded bytes equal its UTF-8 decodes to it); any other model, and any document whose bytes
    differ, by ``tok.decode``."""
    n = len(nulls)
    suspects: Iterable[int] = range(n)
    if tok.scheme == "byte" and getattr(tok, "pipeline", None) is None:
        table, starts, lengths = _byte_table(tok)
        token_lengths = lengths[values]
        bounds = np.concatenate([[0], np.cumsum(token_lengths)])[doc_offsets]  # decoded bytes before each document
        doc_out = np.diff(bounds)
        ok = doc_out == np.diff(offsets)
        expected = np.frombuffer(data, dtype=np.uint8)
        lo = 0
        while lo < n:  # documents in chunks of at most _DECODE_CHUNK decoded bytes (or one document)
            hi = min(n, max(lo + 1, int(np.searchsorted(bounds, bounds[lo] + _DECODE_CHUNK, "right")) - 1))
            first, last = doc_offsets[lo], doc_offsets[hi]
            piece = token_lengths[first:last]
            out_first = np.cumsum(piece) - piece
            gather = np.arange(int(piece.sum()), dtype=np.int64) + np.repeat(starts[values[first:last]] - out_first, piece)
            decoded = table[gather]
            if ok[lo:hi].all() and np.array_equal(decoded, expected[offsets[lo]:offsets[hi]]):
                lo = hi
                continue
            # which documents differ: compare the ones of the right length byte by byte
            doc_of = np.repeat(np.arange(lo, hi), doc_out[lo:hi])
            same_length = ok[doc_of]
            at = np.arange(len(decoded), dtype=np.int64) - (bounds[doc_of] - bounds[lo]) + offsets[doc_of]
            differ = decoded[same_length] != expected[at[same_length]]
            ok[np.unique(doc_of[same_length][differ])] = False
            lo = hi
        suspects = np.flatnonzero(~ok).tolist()
    failed = []
    for i in suspects:
        if nulls[i]:
            continue
        text = bytes(data[offsets[i]:offsets[i + 1]]).decode("utf-8", "surrogatepass")
        if tok.decode(values[doc_offsets[i]:doc_offsets[i + 1]].tolist()) != text:
            failed.append(i)
    return failed
