"""Continued training (docs/design.md 1.6): a tokenizer bpe-spark loads (the *base*) learns new
merges from new text with every base id, merge and special token kept.

:class:`BaseStart` is what the merge engine needs from the base, wherever the engine runs (in
process here; on the Spark driver or in exact rounds, :mod:`bpe_spark.spark.training`):

- ``pretokenizer()``: the base's own pretokenization for counting (its pattern, normalization and
  special tokens; an imported pipeline's normalizers, pre-tokenizers and added tokens);
- ``table()``: a :class:`~bpe_spark.bpe.symbols.SymbolTable` of the base's ordinary tokens,
  densely numbered in the order of their ids (the engine's ids; ``hf`` ties prefer the smaller
  pair in the base's id order, new tokens after every base token; ``lexicographic`` compares
  the tokens as for fresh training);
- ``words(pretoken)``: the base's encoding of a pretoken, in the engine's ids; a byte-fallback
  token or the unknown token is never merged, so it cuts the word in pieces;
- ``tokenizer(table, merges)``: the extended tokenizer: the base with the new tokens at the ids
  after its highest (special tokens included) and the new merges after its own.

The rest is the exact merge loop of fresh training (1.4) over those words. For rank models
(``.tiktoken``, tekken, ``ignore_merges`` layouts) a new token's rank is its id: after every base
rank, so the base's encoding of any text is reached first, as the reference library reaches it.

>>> from bpe_spark import TrainerConfig, train
>>> base = train(["low low lower"], TrainerConfig(vocab_size=258, pattern="words"))
>>> ext = extend_from_counts({"lowest": 3, "low": 1}, base, TrainerConfig(vocab_size=261))
>>> ext.merges[:2] == base.merges, ext.merges[2:]
(True, [(b'e', b's'), (b'low', b'es'), (b'lowes', b't')])
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import fields
from typing import Any

from bpe_spark.bpe.config import TrainerConfig
from bpe_spark.bpe.patterns import compile_pattern
from bpe_spark.bpe.pretokenize import Pretokenizer, SpecialTokenMatcher
from bpe_spark.bpe.symbols import SymbolTable, _reverse_key_bytes, _reverse_key_str
from bpe_spark.bpe.words import bpe_merge, initial_symbols
from bpe_spark.errors import ConfigError, option
from bpe_spark.pipeline.model import byte_fallback_token
from bpe_spark.training.engine import Merge, PackedWords
from bpe_spark.training.starts import run_in_process

# the TrainerConfig fields that continued training reads; the base decides every other one
EXTEND_FIELDS = ("vocab_size", "max_merges", "min_frequency", "tie_break", "max_token_length")


class PipelinePretokenizer(Pretokenizer):
    """An imported pipeline's pretokens as ``tokenizers``' trainer counts them: added tokens
    (special or not) cut out, each other piece normalized and pre-tokenized. Counts as a
    :class:`~bpe_spark.bpe.pretokenize.Pretokenizer` does (``count``, ``tally``)."""

    def __init__(self, pipeline):  # the parent's pattern machinery is not used
        self.pipeline = pipeline
        self.pattern = None
        self.lowercase = False
        self.normalization = None
        self.findall = None
        self.specials = SpecialTokenMatcher(())

    def normalize(self, text: str) -> str:
        return text

    def pretokens(self, text: str) -> list[str]:
        return [unit for unit in self.pipeline.pretokens(text) if type(unit) is str]


def check_extend_pattern(base, pattern: str | None) -> str | None:
    """``pattern`` (a preset name or a regex) if continued training may count and encode with it
    instead of the base's own (None: the base's): a model of bpe-spark's own form only, whose
    pattern is a field (an imported pipeline's pre-tokenizers are steps of their own)."""
    if pattern is None:
        return None
    if base.pipeline is not None:
        raise ConfigError(
            f"{option('pattern', pattern)} cannot replace the pre-tokenizers of an imported tokenizer.json "
            "pipeline; extend it with its own, or convert it to a bpe-spark model first"
        )
    compile_pattern(pattern)
    return pattern


def refuse_pattern_without_base(pattern: str | None) -> None:
    """Refuse ``pattern=`` given without a base: a new model takes its pattern from its config."""
    if pattern is not None:
        raise ConfigError(f"{option('pattern', pattern)} goes with base= (continued training with another "
                          "pattern); to train a new model with it, set TrainerConfig(pattern=...)")


def refuse_base_fields(cfg: TrainerConfig, allowed: tuple[str, ...], when: str) -> None:
    """Refuse a config that sets a field outside ``allowed``: the base model decides it."""
    default = TrainerConfig(vocab_size=cfg.vocab_size)
    for item in fields(TrainerConfig):
        if item.name not in allowed and getattr(cfg, item.name) != getattr(default, item.name):
            raise ConfigError(
                f"{option(item.name, getattr(cfg, item.name))} does not apply when {when}: the base "
                f"model decides its scheme, pattern, normalization and special tokens; leave it unset"
            )


def check_extend_config(cfg: TrainerConfig, base) -> None:
    """Refuse a config that sets what the base decides, or a ``vocab_size`` below the base's."""
    refuse_base_fields(cfg, EXTEND_FIELDS, "extending a model")
    if cfg.vocab_size < base.vocab_size:
        raise ConfigError(
            f"{option('vocab_size', cfg.vocab_size)} is below the base model's vocabulary ({base.vocab_size:,}); "
            f"when extending, vocab_size is the new total: set it above {base.vocab_size:,}"
        )


class BaseStart:
    """The engine's view of a base tokenizer (module docstring). Plain data once built: Spark
    tasks receive it pickled."""

    def __init__(self, base, tie_break: str = "hf", pattern: str | None = None, *, fresh_order: bool = False):
        self.base = base
        self.tie_break = tie_break
        # hf ties as fresh training orders them: bytes in tokenizers' alphabet order (GPT-2's
        # characters), then the other tokens in id order; SuperBPE's stage 2 continues so
        self.fresh_order = fresh_order and base.pipeline is None and base.scheme == "byte"
        pipeline = base.pipeline
        self.pattern = check_extend_pattern(base, pattern)
        if pipeline is not None:
            model = pipeline.model
            ordinary = dict(model.id_to_token)
            self.scheme = "char"  # the model's tokens are strings, whatever its pre-tokenizer
            self.prefix = model.prefix or None
            blocked = set()
            if model.byte_fallback:
                blocked.update(model.vocab[t] for t in map(byte_fallback_token, range(256)) if t in model.vocab)
            if model.unk_token is not None:
                blocked.add(model.vocab[model.unk_token])
            self.symbol_form = (model.prefix or "", model.suffix or "")
        else:
            ordinary = dict(base.ordinary_vocab)
            self.scheme = base.scheme
            self.prefix = None
            blocked = {base._unk_id} if base._unk_id is not None and base._unk_id in ordinary else set()
            self.symbol_form = (base.end_of_word, base.end_of_word_marker) if base.scheme == "char" else None
        self.base_ids = sorted(ordinary)  # engine id -> base id
        self.values = [ordinary[i] for i in self.base_ids]
        self.dense = {token_id: position for position, token_id in enumerate(self.base_ids)}
        self.dense_of_value = {}  # a token -> its engine id (the lowest, for a token listed twice)
        for position, value in enumerate(self.values):
            self.dense_of_value.setdefault(value, position)
        self.blocked = frozenset(self.dense[i] for i in blocked)
        self.first_new_id = base.max_token_id + 1
        self._encode = pipeline.model.tokenize if pipeline is not None else base.encode_pretoken
        self._merges: dict | None = None  # the base's merges in the engine's ids, built on first use

    def __getstate__(self):
        state = dict(self.__dict__)
        del state["_encode"]
        state["_merges"] = None
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        base = self.base
        self._encode = base.pipeline.model.tokenize if base.pipeline is not None else base.encode_pretoken

    # --- what the engine needs ------------------------------------------------------------------
    def pretokenizer(self) -> Pretokenizer:
        """The base's pretokenization, for counting the new corpus."""
        base = self.base
        if base.pipeline is not None:
            return PipelinePretokenizer(base.pipeline)
        return Pretokenizer(self.pattern or base.pattern, lowercase=base.lowercase,
                            normalization=base.normalization, special_tokens=base.special_tokens)

    def symbols(self, pretoken: str) -> list[str] | None:
        """The symbols the base starts ``pretoken`` from, as its vocabulary spells them (a
        pipeline's characters with prefix and suffix; a char model's, with its end-of-word
        marker), or None for a byte model (every byte is a token)."""
        form = self.symbol_form
        if form is None:
            return None
        if self.base.pipeline is None:
            return initial_symbols(pretoken, *form)
        prefix, suffix = form
        symbols = [prefix + char if position and prefix else char for position, char in enumerate(pretoken)]
        if suffix and symbols:
            symbols[-1] += suffix
        return symbols

    def alphabet(self, pretokens: Iterable[str]) -> set[str]:
        """The symbols of ``pretokens`` that the base lacks (characters it would cut to bytes or
        to its unknown token, or drop)."""
        if self.symbol_form is None:
            return set()
        known = self.dense_of_value
        return {symbol for pretoken in pretokens for symbol in self.symbols(pretoken) if symbol not in known}

    def table_of(self, alphabet: set[str]) -> SymbolTable:
        """The base's ordinary tokens in the engine's ids, then the symbols of ``alphabet`` in
        code-point order: new tokens, so that the new text's characters can merge."""
        table = SymbolTable(self.scheme, self.tie_break, 0)
        table.prefix = self.prefix
        reverse = _reverse_key_bytes if self.scheme == "byte" else _reverse_key_str
        hf = self.tie_break == "hf"
        bytes_first = hf and self.fresh_order
        order = SymbolTable.for_bytes("hf").keys if bytes_first else None
        for position, value in enumerate(self.values):
            table.values.append(value)
            table.index.setdefault(value, position)
            if bytes_first:
                table.keys.append(order[value[0]] if len(value) == 1 else position)
            else:
                table.keys.append(position if hf else reverse(value))
        for symbol in sorted(alphabet):
            table.add(symbol)
        return table

    def table(self, pretokens: Iterable[str] = ()) -> SymbolTable:
        return self.table_of(self.alphabet(pretokens))

    def budget(self, cfg: TrainerConfig, table: SymbolTable) -> int:
        """The new merged tokens ``cfg.vocab_size`` leaves room for, after the characters the
        table adds."""
        added = len(table) - len(self.values)
        left = cfg.vocab_size - self.base.vocab_size - added
        if left < 0:
            raise ConfigError(
                f"{option('vocab_size', cfg.vocab_size)} is below the base model's vocabulary ({self.base.vocab_size:,}) "
                f"+ the {added:,} characters of the new text it lacks; set vocab_size >= {self.base.vocab_size + added:,}"
            )
        return left

    def words(self, pretoken: str, table: SymbolTable | None = None) -> list[list[int]]:
        """The base's encoding of ``pretoken`` in the engine's ids, cut at blocked tokens; pieces
        of one token hold no pair and are left out."""
        dense, blocked = self.dense, self.blocked
        symbols = self.symbols(pretoken)
        if symbols is not None and table is not None and len(table) > len(self.values):
            index = table.index
            if any(symbol not in index or index[symbol] >= len(self.values) for symbol in symbols):
                return self._words_with_new_symbols(symbols, table)
        ids = [dense[i] for i in self._encode(pretoken)]
        if not blocked:
            return [ids] if len(ids) > 1 else []
        out, piece = [], []
        for token_id in ids:
            if token_id in blocked:
                if len(piece) > 1:
                    out.append(piece)
                piece = []
            else:
                piece.append(token_id)
        if len(piece) > 1:
            out.append(piece)
        return out

    def packed_words(self, pretokens: Sequence[str]) -> PackedWords | None:
        """The words of all ``pretokens`` at once, one per pretoken, by the base's compiled
        encoder in one call (no Python list per word), when the base is a byte model whose
        ordinary ids run without a gap (the engine's ids are theirs, shifted); else None, and
        :meth:`words` gives them one by one."""
        base = self.base
        ids = self.base_ids
        if base.pipeline is not None or self.symbol_form is not None or self.blocked or not ids:
            return None
        if ids[-1] - ids[0] != len(ids) - 1:
            return None
        fast = base._fast_encoder()
        if fast is None or not (base._fast_split or base._fast_pretokens):
            return None
        import numpy as np

        data, lengths = fast.encode_split([[pretoken] for pretoken in pretokens])
        words = np.frombuffer(data, dtype=np.int32)
        if ids[0]:
            words = words - np.int32(ids[0])
        offsets = np.zeros(len(pretokens) + 1, dtype=np.int64)
        np.cumsum(np.frombuffer(lengths, dtype=np.int64), out=offsets[1:])
        return PackedWords(words, offsets)

    def _words_with_new_symbols(self, symbols: list[str], table: SymbolTable) -> list[list[int]]:
        """Words of a pretoken holding a symbol the base lacks: its symbols in the table's ids,
        then the base's merges (none of which involves a new symbol); a symbol the table lacks
        too cuts the word."""
        if self._merges is None:
            dense, merges = self.dense, {}
            pairs = self.base.pipeline.model.merge_list if self.base.pipeline is not None else self.base.merge_ids
            for rank, (left, right, new_id) in enumerate(pairs):
                merges[(dense[left], dense[right])] = (rank, dense[new_id])  # a repeated pair: its last rank
            self._merges = merges
        lookup, priority = table.index.get, self._merges.get
        out, piece = [], []
        for symbol in symbols + [None]:
            token_id = lookup(symbol) if symbol is not None else None
            if token_id is None or token_id in self.blocked:
                if len(piece) > 1:
                    merged = bpe_merge(piece, lambda left, right: priority((left, right)))
                    if len(merged) > 1:
                        out.append(merged)
                piece = []
            else:
                piece.append(token_id)
        return out

    def tokenizer(self, table: SymbolTable, merges: list[Merge], *, stats: dict | None = None,
                  source: str | None = None):
        """The extended tokenizer: the base, plus each new merge (``merges``, in the engine's ids)."""
        from bpe_spark.encoding.tokenizer import Tokenizer

        base, first = self.base, len(self.base_ids)
        to_base = lambda engine_id: self.base_ids[engine_id] if engine_id < first else self.first_new_id + engine_id - first  # noqa: E731
        new_tokens = {to_base(i): table.values[i] for i in range(first, len(table.values))}
        new_merges = [(to_base(m.left), to_base(m.right), to_base(m.new_id)) for m in merges]
        data = base.to_dict()
        metadata = copy.deepcopy(data.get("metadata") or {})
        metadata.pop("merge_counts", None)
        base_source = metadata.pop("source", None)  # what the base's file was: the extended model is not it
        inherited = len(base.merge_ids)
        metadata["base"] = {
            "file": source if source is not None else _source_name(base_source),
            "format": base_source.get("format") if isinstance(base_source, dict) else base_source,
            "fingerprint": base.fingerprint,
            "vocab_size": base.vocab_size,
            "merges": inherited,
            "first_new_id": self.first_new_id,
        }
        if self.pattern is not None:  # counted and encoded with another pattern than the base's
            metadata["base"]["pattern"] = base.pattern
            data["pattern"] = self.pattern
        metadata["stats"] = dict(stats or {})
        metadata["merge_counts"] = [None] * inherited + [m.count for m in merges]
        data["metadata"] = metadata
        if base.pipeline is not None:
            data["pipeline"] = _extended_spec(base.pipeline.spec, new_tokens, new_merges, base.pipeline.model.id_to_token)
        else:
            data["vocab"] = {**data["vocab"], **new_tokens}
            data["merges"] = list(data["merges"]) + [(left, right) for left, right, _ in new_merges]
        return Tokenizer.from_dict(data)


def _source_name(source) -> str | None:
    """The file a loaded model came from, as its loader recorded it (None for a trained one)."""
    if isinstance(source, dict):
        return source.get("path") or source.get("vocab") or source.get("file")
    return None


def _extended_spec(spec: Mapping[str, Any], new_tokens: dict[int, str], new_merges, id_to_token) -> dict[str, Any]:
    """A pipeline spec with new tokens in its model's vocabulary and new merges after its own,
    written as the file writes merges (``"left right"`` unless it uses pairs or a token holds a
    space); the added tokens join the model's vocabulary at their ids."""
    spec = copy.deepcopy(dict(spec))
    model = spec["model"]
    strings = dict(id_to_token)
    strings.update(new_tokens)
    vocab = dict(model.get("vocab") or {})
    # subtle: tokenizers gives an added token outside the model's vocabulary the id after that
    # vocabulary, whatever the file says; in the vocabulary, each keeps its id past the new tokens
    for added in spec.get("added_tokens") or []:
        vocab.setdefault(added["content"], added["id"])
    for token_id, token in new_tokens.items():
        vocab[token] = token_id
    model["vocab"] = vocab
    merges = list(model.get("merges") or [])
    pairs = [[strings[left], strings[right]] for left, right, _ in new_merges]
    as_pairs = any(not isinstance(m, str) for m in merges) or any(" " in t for pair in pairs for t in pair)
    if as_pairs:
        merges = [m.split(" ") if isinstance(m, str) else list(m) for m in merges] + pairs
    else:
        merges += [f"{left} {right}" for left, right in pairs]
    model["merges"] = merges
    return spec


# the exports that keep an extended model in its base's own format, beside the tokenizer.json
# every model directory holds: rank files stay rank files, GPT-2 files GPT-2 files
_OWN_FORMAT_EXPORTS = {"tiktoken": ("tiktoken",), "tekken": ("tiktoken",), "gpt2": ("gpt2",)}


def base_exports(tok) -> tuple[str, ...]:
    """The export formats (``tok.save(..., exports=)``) that keep an extended ``tok`` in its
    base's own format: a ``.tiktoken`` file for a ``.tiktoken`` or tekken base, GPT-2 files
    for GPT-2 files; none for a model not extended, or one whose ``tokenizer.json`` is its format.

    >>> base_exports(type("T", (), {"metadata": {"base": {"format": "tiktoken"}}, "pipeline": None})())
    ('tiktoken',)
    """
    record = tok.metadata.get("base")
    if not isinstance(record, dict) or getattr(tok, "pipeline", None) is not None:
        return ()
    return _OWN_FORMAT_EXPORTS.get(record.get("format"), ())


def count_with_base(texts: Iterable[str], base, pattern: str | None = None) -> Counter:
    """``{pretoken: count}`` of documents under the base's own pretokenization (or ``pattern``,
    with the base's normalization and special tokens)."""
    return BaseStart(base, pattern=pattern).pretokenizer().count(texts)


def extend_from_counts(
    counts: Mapping[str, int],
    base,
    cfg: TrainerConfig,
    *,
    progress: Callable[[int, Merge], None] | None = None,
    pattern: str | None = None,
):
    """Continue training ``base`` on pretoken counts made with its pretokenization
    (:func:`count_with_base`). ``cfg``: ``vocab_size`` (the new total), ``max_merges`` (a cap
    on the new merges), ``min_frequency`` and ``tie_break``; the base decides the rest.
    ``pattern``: counted with this pattern instead of the base's, which the extended model keeps
    (each pretoken starts as the base's encoding of it whole: SuperBPE's stage 2)."""
    check_extend_config(cfg, base)
    return run_in_process(BaseStart(base, cfg.tie_break, pattern), counts, cfg, progress=progress,
                          inherited=len(base.merge_ids))
