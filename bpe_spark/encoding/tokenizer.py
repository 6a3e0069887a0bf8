"""The Tokenizer: encode with merges by rank, decode, save and load; the special-token policy it
follows is :mod:`bpe_spark.encoding.special_tokens`.

>>> from bpe_spark import TrainerConfig, train
>>> tok = train(["hello hello world"], TrainerConfig(vocab_size=262))
>>> tok.decode(tok.encode("hello world"))
'hello world'
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Literal

from bpe_spark.native import compiled as _compiled
from bpe_spark.bpe.config import END_OF_WORD_MARKER, TrainerConfig
from bpe_spark.errors import ConfigError, UnknownCharacterError
from bpe_spark.bpe.patterns import compiled_preset
from bpe_spark.bpe.pretokenize import Pretokenizer, SpecialTokenMatcher
from bpe_spark.models.fingerprint import model_fingerprint
from bpe_spark.bpe.symbols import missing_bytes
from bpe_spark.bpe.text import clean
from bpe_spark.encoding.special_tokens import check_disallowed, special_policy
from bpe_spark.bpe.words import PretokenCache, bpe_ids, initial_symbols, merge_table

MERGE_RULES = ("pairs", "ranks")


class Tokenizer:
    """A BPE tokenizer built from plain data: vocabulary, merges, special tokens, pretokenizer.

    ``merge_rule="pairs"`` encodes with the merge table (GPT-2 ``encoder.py`` / ``tokenizers``);
    ``"ranks"`` merges the adjacent pair whose concatenation has the lowest rank and looks whole
    pretokens up first (tiktoken), for models imported from ``.tiktoken`` files.

    ``pipeline=``: an imported ``tokenizer.json`` that runs as ``tokenizers`` runs it (its spec,
    or a :class:`~bpe_spark.pipeline.Pipeline`); the vocabulary, merges and special tokens are
    then the pipeline's (``scheme``, ``vocab``, ``merges``, ``special_tokens`` and the pattern
    options are not given) and encode / decode run through it.
    """

    def __init__(
        self,
        *,
        scheme: str | None = None,
        vocab: Mapping[int, bytes | str] | None = None,
        merges: Iterable[tuple[int, int]] = (),
        special_tokens: Mapping[str, int] | None = None,
        pattern: str = "gpt2",
        lowercase: bool = False,
        normalization: str | None = None,
        end_of_word: str | None = None,
        end_of_word_marker: str = END_OF_WORD_MARKER,
        unk_token: str | None = None,
        merge_rule: str = "pairs",
        config: TrainerConfig | None = None,
        metadata: dict[str, Any] | None = None,
        pipeline: Any = None,
    ):
        self.pipeline = None
        if pipeline is not None:
            from bpe_spark.pipeline import Pipeline

            if vocab is not None or special_tokens or tuple(merges):
                raise ConfigError("a pipeline= tokenizer takes its vocab, merges and special tokens from the pipeline")
            self.pipeline = pipeline if isinstance(pipeline, Pipeline) else Pipeline(pipeline, path="pipeline")
            scheme, vocab, special_tokens = self.pipeline.views()
            pattern = None
        elif vocab is None:
            raise ConfigError("Tokenizer needs vocab= (or pipeline=)")
        if scheme not in ("byte", "char"):
            raise ConfigError(f"scheme must be 'byte' or 'char', got {scheme!r}")
        if merge_rule not in MERGE_RULES:
            raise ConfigError(f"merge_rule must be one of {MERGE_RULES}, got {merge_rule!r}")
        self.scheme = scheme
        self.merge_rule = merge_rule
        self.pattern = pattern
        self.lowercase = lowercase
        self.normalization = normalization
        self.end_of_word = end_of_word if scheme == "char" else None
        self.end_of_word_marker = end_of_word_marker
        self.unk_token = unk_token
        self.config = config
        self.metadata: dict[str, Any] = dict(metadata or {})
        self.special_tokens: dict[str, int] = dict(special_tokens or {})
        self._vocab: dict[int, bytes | str] = {int(i): t for i, t in vocab.items()}
        self._token_to_id: dict[bytes | str, int] = {}
        for token_id in sorted(self._vocab):
            self._token_to_id.setdefault(self._vocab[token_id], token_id)
        for token, token_id in self.special_tokens.items():
            if token_id in self._vocab:
                raise ConfigError(f"special token {token!r} has id {token_id}, which the vocabulary uses")
        self._merge_ids, self._pair_rank = merge_table(merges, self._vocab, self._token_to_id)
        if self.pipeline is not None:
            self._merge_ids = self.pipeline.model.merge_list
        self._pretokenizer = None if pattern is None else Pretokenizer(pattern, lowercase=lowercase, normalization=normalization)
        self._special_matcher = SpecialTokenMatcher(self.special_tokens)
        if unk_token is not None and unk_token not in self._token_to_id and unk_token not in self.special_tokens:
            raise ConfigError(f"unk_token {unk_token!r} is neither in the vocabulary nor a special token")
        self._unk_id = None
        if unk_token is not None:
            self._unk_id = self.special_tokens.get(unk_token, self._token_to_id.get(unk_token))
        self._byte_ids: list[int] | None = None
        if scheme == "byte":
            missing = missing_bytes(self._token_to_id)
            if missing and merge_rule == "pairs" and self.pipeline is None:
                raise ConfigError(f"a byte-scheme vocabulary needs all 256 single bytes; missing {missing[:8]}")
            self._byte_ids = [self._token_to_id.get(bytes([b]), -1) for b in range(256)]
        if merge_rule == "ranks":
            self._priority = self._rank_priority
        else:
            pair_rank = self._pair_rank
            self._priority = lambda left, right: pair_rank.get((left, right))
        self._cache = PretokenCache()
        self._fast = None  # the compiled encoder (bpe_spark.native._fastenc), built on first use
        self._fast_ready = self.pipeline is not None  # a pipeline encodes in Python
        self._fast_split = False  # compiled end to end (a compiled preset)
        self._fast_pretokens = False  # pretokens split by regex in Python, BPE and cache compiled
        self._line = None  # the compiled encode of one text when no normalization applies
        self._fingerprint: str | None = None

    # --- construction ---------------------------------------------------------------------------
    @classmethod
    def from_training(cls, cfg: TrainerConfig, table, merges, *, stats: dict | None = None) -> Tokenizer:
        """Assemble the tokenizer of a training run (``table``: the engine's SymbolTable)."""
        vocab = {table.first_id + i: value for i, value in enumerate(table.values)}
        if cfg.scheme == "byte":
            first_special = table.next_id
        else:
            first_special = 0
        specials = {token: first_special + i for i, token in enumerate(cfg.special_tokens)}
        tok = cls(
            scheme=cfg.scheme,
            vocab=vocab,
            merges=[(m.left, m.right) for m in merges],
            special_tokens=specials,
            pattern=cfg.pattern,
            lowercase=cfg.lowercase,
            normalization=cfg.normalization,
            end_of_word=cfg.end_of_word if cfg.scheme == "char" else None,
            end_of_word_marker=cfg.end_of_word_marker,
            unk_token=cfg.unk_token,
            config=cfg,
            metadata={"stats": dict(stats or {}), "merge_counts": [m.count for m in merges]},
        )
        return tok

    def to_dict(self) -> dict[str, Any]:
        """Plain data (no code): what pickling and Spark broadcasts carry."""
        if self.pipeline is not None:
            return {"pipeline": self.pipeline.spec, "config": None, "metadata": self.metadata}
        return {
            "scheme": self.scheme,
            "vocab": dict(self._vocab),
            "merges": [(left, right) for left, right, _ in self._merge_ids],
            "special_tokens": dict(self.special_tokens),
            "pattern": self.pattern,
            "lowercase": self.lowercase,
            "normalization": self.normalization,
            "end_of_word": self.end_of_word,
            "end_of_word_marker": self.end_of_word_marker,
            "unk_token": self.unk_token,
            "merge_rule": self.merge_rule,
            "config": self.config.to_dict() if self.config is not None else None,
            "metadata": self.metadata,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Tokenizer:
        data = dict(data)
        config = data.pop("config", None)
        return cls(config=TrainerConfig.from_dict(config) if config else None, **data)

    def __reduce__(self):
        return (Tokenizer.from_dict, (self.to_dict(),))

    # --- views ----------------------------------------------------------------------------------
    @property
    def merges(self) -> list[tuple[bytes, bytes]] | list[tuple[str, str]]:
        """Merges in rank order, as token values (bytes, or str for the char scheme)."""
        vocab = self._vocab
        return [(vocab[left], vocab[right]) for left, right, _ in self._merge_ids]

    @property
    def fingerprint(self) -> str:
        """``sha256:<hex>`` of what decides the ids (:func:`bpe_spark.models.fingerprint.model_fingerprint`),
        computed once: a tokenizer does not change after it is built."""
        if self._fingerprint is None:
            self._fingerprint = model_fingerprint(self.to_dict())
        return self._fingerprint

    @property
    def merge_ids(self) -> list[tuple[int, int, int]]:
        """Merges in rank order as ``(left_id, right_id, new_id)``."""
        return list(self._merge_ids)

    @property
    def ordinary_vocab(self) -> Mapping[int, bytes | str]:
        """Every id but the special tokens', with its token (a read-only view, no copy)."""
        return MappingProxyType(self._vocab)

    @property
    def vocab(self) -> dict[int, bytes | str]:
        """Every id, special tokens included (as UTF-8 bytes in the byte scheme)."""
        full = dict(self._vocab)
        for token, token_id in self.special_tokens.items():
            full[token_id] = token.encode("utf-8") if self.scheme == "byte" else token
        return dict(sorted(full.items()))

    @property
    def vocab_size(self) -> int:
        return len(self._vocab) + len(self.special_tokens)

    @property
    def max_token_id(self) -> int:
        return max(list(self._vocab) + list(self.special_tokens.values()))

    def token_to_id(self, token: bytes | str) -> int | None:
        if isinstance(token, str) and token in self.special_tokens:
            return self.special_tokens[token]
        return self._token_to_id.get(token)

    def id_to_token(self, token_id: int) -> bytes | str:
        """The token (bytes, or str for the char scheme) of an id, special tokens included."""
        value = self._vocab.get(token_id)
        if value is not None:
            return value
        for token, special_id in self.special_tokens.items():
            if special_id == token_id:
                return token.encode("utf-8") if self.scheme == "byte" else token
        raise KeyError(f"token id {token_id} is not in the vocabulary (ids run 0..{self.max_token_id})")

    @property
    def pretokenizer(self) -> Pretokenizer:
        return self._pretokenizer

    # --- encoding -------------------------------------------------------------------------------
    def _rank_priority(self, left: int, right: int) -> tuple[int, int] | None:
        merged = self._vocab[left] + self._vocab[right]
        token_id = self._token_to_id.get(merged)
        return None if token_id is None else (token_id, token_id)

    def _initial_ids(self, pretoken: str) -> list[int]:
        if self.scheme == "byte":
            byte_ids = self._byte_ids
            ids = [byte_ids[b] for b in pretoken.encode("utf-8")]
            if -1 in ids:
                raise ConfigError("this vocabulary lacks a single byte that the text needs")
            return ids
        index = self._token_to_id
        symbols = initial_symbols(pretoken, self.end_of_word, self.end_of_word_marker)
        ids = []
        for position, symbol in enumerate(symbols):
            token_id = index.get(symbol)
            if token_id is None:
                if self._unk_id is None:
                    char = pretoken[min(position, len(pretoken) - 1)]
                    if self.end_of_word == "fused" and position == len(pretoken) - 1 and char in index:
                        raise UnknownCharacterError(
                            f"character {char!r} (U+{ord(char):04X}) ends {pretoken!r} but never ended a "
                            f"word in training, so {symbol!r} is not in the vocabulary; train with such "
                            "words, or configure unk_token"
                        )
                    raise UnknownCharacterError(
                        f"character {char!r} (U+{ord(char):04X}) in {pretoken!r} was not in the "
                        "training alphabet; train with it, or configure unk_token"
                    )
                token_id = self._unk_id
            ids.append(token_id)
        return ids

    def _fast_encoder(self):
        """The compiled encoder (merge table in C; for a byte-scheme model also a pretoken cache,
        and for the compiled presets, COMPILED_PRESETS, the pretokenizer), or None: bpe_spark.native._fastenc not
        built, or BPE_SPARK_ENCODER=python, or merge_rule "ranks" outside the byte scheme (or
        with a single byte missing from the vocabulary)."""
        if not self._fast_ready:
            self._fast_ready = True
            byte_ids = self._byte_ids if self.scheme == "byte" else None
            if self.merge_rule == "pairs":
                self._fast = _compiled.new_encoder(self._merge_ids, byte_ids, compiled_preset(self.pattern))
            elif byte_ids is not None and -1 not in byte_ids:
                # tiktoken's rule: whole-pretoken lookup, then the lowest rank (= token id)
                vocab = list(self._token_to_id.items())
                self._fast = _compiled.new_encoder((), byte_ids, compiled_preset(self.pattern), vocab=vocab, ranks=True)
            if self._fast is not None and byte_ids is not None:
                self._fast_split = compiled_preset(self.pattern) is not None
                self._fast_pretokens = not self._fast_split
                if self._fast_split and not (self.lowercase or self.normalization):
                    self._line = self._fast.encode
        return self._fast

    @property
    def compiled_encoding(self) -> bool:
        """True when ``encode_ordinary`` / ``encode_ordinary_flat`` run compiled end to end
        (pretokenizer, cache and BPE in ``bpe_spark.native._fastenc``); False on the Python path."""
        self._fast_encoder()
        return self._fast_split

    def encode_pretoken(self, pretoken: str) -> list[int]:
        """Ids of one pretoken (cached); the unit that encoding repeats."""
        ids = self._cache.get(pretoken)
        if ids is not None:
            return ids
        if self.pipeline is not None:
            return self.pipeline.model.tokenize(pretoken)
        if self.merge_rule == "ranks":
            whole = self._token_to_id.get(pretoken.encode("utf-8") if self.scheme == "byte" else pretoken)
            if whole is not None:
                return self._cache.put(pretoken, [whole])
        return self._cache.put(pretoken, bpe_ids(self._initial_ids(pretoken), self._priority, self._fast_encoder()))

    def encode_ordinary(self, text: str) -> list[int]:
        """Encode treating special-token text as ordinary text.

        >>> from bpe_spark import TrainerConfig, train
        >>> train(["ab ab"], TrainerConfig(vocab_size=257)).encode_ordinary("ab")
        [256]
        """
        line = self._line
        if line is None and not self._fast_ready:
            self._fast_encoder()
            line = self._line
        if line is not None:
            try:  # the common case in one compiled call: no normalization, no lone surrogate
                return line(text)
            except UnicodeEncodeError:
                pass
        text = clean(text)  # lone surrogates become U+FFFD (bpe_spark.bpe.text)
        if self.pipeline is not None:  # non-special added tokens still match, as in tokenizers
            return self.pipeline.encode(text, frozenset())
        fast = self._fast
        if self._fast_split:
            return fast.encode(self._pretokenizer.normalize(text))
        pretokens = self._pretokenizer.split_ordinary(self._pretokenizer.normalize(text))
        if self._fast_pretokens:
            return fast.encode_pretokens(pretokens)
        out: list[int] = []
        encode_pretoken = self.encode_pretoken
        for pretoken in pretokens:
            out.extend(encode_pretoken(pretoken))
        return out

    def encode_ordinary_flat(self, texts: Sequence[str | None]):
        """Encode many texts as ordinary text into flat arrays: ``(ids, lengths)``, numpy int32
        ids of every text one after the other, and int64 ``lengths[i]``, the number of ids of
        ``texts[i]`` (0 for None). What a batch encoder (Arrow, Spark) wants: no per-id object.

        >>> from bpe_spark import TrainerConfig, train
        >>> ids, lengths = train(["ab ab"], TrainerConfig(vocab_size=257)).encode_ordinary_flat(["ab", None, "a b"])
        >>> ids.tolist(), lengths.tolist()
        ([256, 97, 32, 98], [1, 0, 3])
        """
        import numpy as np

        fast = self._fast_encoder()
        if fast is not None and (self._fast_split or self._fast_pretokens):
            normalize = self._pretokenizer.normalize
            if self.lowercase or self.normalization:
                texts = [None if text is None else normalize(text) for text in texts]
            if self._fast_pretokens:
                split = self._pretokenizer.split_ordinary
                ids, lengths = fast.encode_split([None if text is None else split(clean(text)) for text in texts])
            else:
                try:
                    ids, lengths = fast.encode_many(texts)
                except UnicodeEncodeError:  # a lone surrogate: the text rule, then again (rare)
                    ids, lengths = fast.encode_many([None if text is None else clean(text) for text in texts])
            return np.frombuffer(ids, dtype=np.int32), np.frombuffer(lengths, dtype=np.int64)
        rows = [[] if text is None else self.encode_ordinary(text) for text in texts]
        lengths = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
        ids = np.fromiter((i for row in rows for i in row), dtype=np.int32, count=int(lengths.sum()))
        return ids, lengths

    def special_policy(
        self,
        allowed_special: Literal["all"] | Collection[str],
        disallowed_special: Literal["all"] | Collection[str],
    ) -> tuple[set[str], set[str]]:
        """The ``(allowed, disallowed)`` special tokens of a tiktoken-style policy
        (:func:`bpe_spark.encoding.special_tokens.special_policy`)."""
        return special_policy(self.special_tokens, allowed_special, disallowed_special)

    def check_disallowed(self, text: str, disallowed: Collection[str]) -> None:
        """Raise :class:`DisallowedSpecialTokenError` if ``text`` holds a ``disallowed`` token."""
        check_disallowed(self._special_matcher, text, disallowed)

    def encode(
        self,
        text: str,
        *,
        allowed_special: Literal["all"] | Collection[str] = frozenset(),
        disallowed_special: Literal["all"] | Collection[str] = "all",
    ) -> list[int]:
        """Encode text; special tokens follow tiktoken's policy.

        Text that holds a disallowed special token raises (by default every special token is
        disallowed): pass ``allowed_special={...}`` to encode it as the special token, or
        ``disallowed_special=()`` to encode it as ordinary text. A lone surrogate encodes as
        U+FFFD (the text rule of :mod:`bpe_spark.bpe.text`).

        >>> from bpe_spark import TrainerConfig, train
        >>> tok = train(["a b"], TrainerConfig(vocab_size=258, special_tokens=("<|eot|>",)))
        >>> tok.encode("a<|eot|>", allowed_special="all")
        [97, 257]
        """
        if not self.special_tokens:
            return self.encode_ordinary(text)
        text = clean(text)
        allowed, disallowed = self.special_policy(allowed_special, disallowed_special)
        self.check_disallowed(text, disallowed)
        if not allowed:
            return self.encode_ordinary(text)
        if self.pipeline is not None:
            return self.pipeline.encode(text, allowed)
        matcher = self._special_matcher if allowed == set(self.special_tokens) else SpecialTokenMatcher(allowed)
        out: list[int] = []
        for segment, is_special in matcher.split(text):
            if is_special:
                out.append(self.special_tokens[segment])
            else:
                out.extend(self.encode_ordinary(segment))
        return out

    def encode_batch(self, texts: Iterable[str], **kwargs) -> list[list[int]]:
        return [self.encode(text, **kwargs) for text in texts]

    # --- decoding -------------------------------------------------------------------------------
    def _token_values(self, ids: Iterable[int]) -> list[bytes | str]:
        vocab = self._vocab
        values = []
        for token_id in ids:
            value = vocab.get(token_id)
            if value is None:
                value = self.id_to_token(int(token_id))
            values.append(value)
        return values

    def decode_bytes(self, ids: Iterable[int]) -> bytes:
        """The bytes of ``ids`` joined (char scheme, pipeline: the decoded text as UTF-8)."""
        if self.scheme == "byte" and self.pipeline is None:
            return b"".join(self._token_values(ids))
        return self.decode(ids).encode("utf-8")

    def decode(self, ids: Iterable[int]) -> str:
        """Text of ``ids``: UTF-8 with ``errors="replace"``; char scheme: ``</w>`` ends a word.

        >>> from bpe_spark import TrainerConfig, train
        >>> cfg = TrainerConfig(vocab_size=30, scheme="char", pattern="words")
        >>> tok = train(["low lower"], cfg)
        >>> tok.decode(tok.encode("lower low"))
        'lower low'
        """
        if self.pipeline is not None:
            return self.pipeline.decode(ids)
        if self.scheme == "byte":
            return self.decode_bytes(ids).decode("utf-8", errors="replace")
        text = "".join(self._token_values(ids))
        marker = self.end_of_word_marker
        if self.end_of_word is None or marker not in text:
            return text
        words = text.split(marker)
        if words and words[-1] == "":
            words.pop()
        return " ".join(words)

    def tokens(self, text: str, **kwargs) -> list[str]:
        """The token strings of ``text`` for people to read (byte tokens: UTF-8, invalid bytes
        escaped as ``\\xNN``).

        >>> from bpe_spark import TrainerConfig, train
        >>> train(["ab ab"], TrainerConfig(vocab_size=257)).tokens("ab c")
        ['ab', ' ', 'c']
        """
        values = self._token_values(self.encode(text, **kwargs))
        if self.scheme == "byte":
            return [value.decode("utf-8", errors="backslashreplace") for value in values]
        return list(values)

    # --- files ----------------------------------------------------------------------------------
    def save(self, directory, *, overwrite: bool = False, exports: Iterable[str] = ()) -> None:
        """Write the model directory (docs/design.md section 3)."""
        from bpe_spark.models.model_dir import save_model  # Parquet: pyarrow loads on first use
        save_model(self, directory, overwrite=overwrite, exports=exports)

    @classmethod
    def load(cls, path, **kwargs) -> Tokenizer:
        """Load our model directory, a ``tokenizer.json``, GPT-2 ``vocab.json``+``merges.txt``
        (a directory holding them, or the ``vocab.json`` path), or a ``.tiktoken`` file.
        ``kwargs`` go to the format's reader (e.g. ``pattern=``, ``special_tokens=``)."""
        from bpe_spark.models.load import load_any  # its readers return this class's keyword arguments
        return load_any(path, build=cls, **kwargs)

    def __repr__(self) -> str:
        return (
            f"Tokenizer(scheme={self.scheme!r}, vocab_size={self.vocab_size}, "
            f"merges={len(self._merge_ids)}, pattern={self.pattern!r}, specials={len(self.special_tokens)})"
        )
