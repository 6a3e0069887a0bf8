"""The BPE model of ``tokenizers`` 0.23 on string tokens, as a ``tokenizer.json`` holds them: the
vocabulary, the merges by rank, and the model's options (``ignore_merges``, ``byte_fallback``,
``unk_token`` + ``fuse_unk``, ``continuing_subword_prefix``, ``end_of_word_suffix``).

What ``tokenizers`` does, reproduced here (``models/bpe/model.rs``, ``word.rs``):

- a merge ``"a b"`` makes ``a + b`` with the ``continuing_subword_prefix`` cut off ``b``; when two
  merges name the same pair, the later one counts (the merge map is built by overwriting);
- ``ignore_merges``: a pretoken that is itself a vocabulary token (looked up as it is, without
  prefix or suffix) is that token; otherwise merges apply, so files listing every split of each
  token (transformers' ``TikTokenConverter``) give tiktoken's ids;
- a pretoken starts as its characters, each looked up with the prefix (all but the first) and the
  suffix (the last); a character not in the vocabulary becomes its ``<0xXX>`` byte tokens
  (``byte_fallback``, when all of them exist), else ``unk_token`` (consecutive ones fused into one
  with ``fuse_unk``), else it is dropped;
- then the adjacent pair of lowest rank merges, leftmost first, until none is left.

BPE dropout above 0 is refused (it is random). ``model.tokenize(pretoken) -> list[int]`` caches
its answers, as ``tokenizers`` does, and merges with the compiled BPE of ``bpe_spark.native._fastenc``
when it is built (``bpe_spark.bpe.words.bpe_merge`` otherwise: the same rule);
``model.encode_units(pretokens)`` runs the whole step compiled (characters, ignore_merges, BPE,
cache) when the model has no prefix or suffix, and falls back to ``tokenize`` for a text with a
character that is not a token.

>>> m = BpeModel({"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]})
>>> m.tokenize("abba")
[2, 1, 0]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bpe_spark.native import compiled as _compiled
from bpe_spark.errors import ModelFormatError
from bpe_spark.bpe.fields import ID_RANGE, MAX_TOKEN_BYTES, MAX_TOKENS, is_id, show
from bpe_spark.bpe.words import PRETOKEN_CACHE_LIMIT, PretokenCache, bpe_ids

_IN_VOCAB, _BYTES, _UNKNOWN = range(3)  # what a symbol of a pretoken becomes (BpeModel._symbol)
MODEL_KEYS = frozenset({
    "type", "dropout", "unk_token", "continuing_subword_prefix", "end_of_word_suffix", "fuse_unk",
    "byte_fallback", "ignore_merges", "vocab", "merges",
})


def _default_error(field: str, message: str) -> Exception:
    return ModelFormatError(f"tokenizer.json: field '{field}': {message}")


def check_token_size(token: str, field: str, error: Callable[[str, str], Exception]) -> None:
    """Refuse a token of more than ``MAX_TOKEN_BYTES`` UTF-8 bytes (the limit of every reader)."""
    size = len(token.encode("utf-8"))
    if size > MAX_TOKEN_BYTES:
        raise error(field, f"the token {token[:20]!r}... has {size:,} bytes; tokens of at "
                           f"most {MAX_TOKEN_BYTES} bytes are allowed")


def byte_fallback_token(byte: int) -> str:
    """The token ``byte_fallback`` uses for one byte: ``<0x0A>`` (upper-case hex digits)."""
    return f"<0x{byte:02X}>"


class BpeModel:
    """The ``model`` object of a ``tokenizer.json`` (``type`` BPE), checked and ready to encode.

    ``field`` is its path in the file, ``error(field, message)`` the exception to raise for
    anything ``tokenizers`` would refuse or that cannot be reproduced.
    """

    def __init__(self, spec: Any, field: str = "model", error: Callable[[str, str], Exception] = _default_error):
        if not isinstance(spec, dict):
            raise error(field, f"{show(spec)} is not an object")
        kind = spec.get("type", "BPE")
        if kind != "BPE":
            raise error(f"{field}.type", f"{kind!r} is not supported; bpe-spark reads BPE models only")
        unknown = sorted(set(spec) - MODEL_KEYS)
        if unknown:
            raise error(f"{field}.{unknown[0]}", f"{show(spec[unknown[0]])}: an option of the BPE model bpe-spark does not know")
        dropout = spec.get("dropout")
        if dropout not in (None, 0, 0.0):
            raise error(f"{field}.dropout", f"{show(dropout)}: BPE dropout is random, so no ids can be reproduced")

        def option(key: str, kind: type, default):
            value = spec.get(key, default)
            if value is None:
                return default
            if not isinstance(value, kind):
                raise error(f"{field}.{key}", f"{show(value)} is not {'a boolean' if kind is bool else 'a string'}")
            # subtle: tokenizers takes an empty prefix or suffix as given, and "" + c is c: the
            # same as none (CLIP's files carry continuing_subword_prefix "")
            return default if value == "" and key != "unk_token" else value

        self.unk_token: str | None = option("unk_token", str, None)
        self.fuse_unk: bool = option("fuse_unk", bool, False)
        self.byte_fallback: bool = option("byte_fallback", bool, False)
        self.ignore_merges: bool = option("ignore_merges", bool, False)
        self.prefix: str | None = option("continuing_subword_prefix", str, None)
        self.suffix: str | None = option("end_of_word_suffix", str, None)

        vocab = spec.get("vocab")
        if not isinstance(vocab, dict):
            raise error(f"{field}.vocab", f"{show(vocab)} is not an object of token: id")
        if len(vocab) > MAX_TOKENS:
            raise error(f"{field}.vocab", f"{len(vocab):,} entries; at most {MAX_TOKENS:,} are allowed")
        for token, token_id in vocab.items():
            if not is_id(token_id):
                raise error(f"{field}.vocab[{token[:40]!r}]", f"id {show(token_id)} is not {ID_RANGE}")
            if len(token) * 4 > MAX_TOKEN_BYTES:
                check_token_size(token, f"{field}.vocab[{token[:20]!r}]", error)
        self.vocab: dict[str, int] = dict(vocab)
        self.id_to_token: dict[int, str] = {token_id: token for token, token_id in vocab.items()}
        if len(self.id_to_token) != len(self.vocab):
            seen: dict[int, str] = {}
            for token, token_id in vocab.items():
                if token_id in seen:
                    raise error(f"{field}.vocab[{token[:40]!r}]", f"id {token_id} is also the id of {seen[token_id][:40]!r}")
                seen[token_id] = token
        if self.unk_token is not None and self.unk_token not in self.vocab:
            raise error(f"{field}.unk_token", f"{show(self.unk_token)} is not in {field}.vocab")

        merges = spec.get("merges", [])
        if not isinstance(merges, list):
            raise error(f"{field}.merges", f"{show(merges)} is not a list")
        if len(merges) > MAX_TOKENS:
            raise error(f"{field}.merges", f"{len(merges):,} merges; at most {MAX_TOKENS:,} are allowed")
        prefix = self.prefix
        cut = len(prefix) if prefix else 0
        lookup = self.vocab.get
        self.merges: dict[tuple[int, int], tuple[int, int]] = {}
        self.merge_list: list[tuple[int, int, int]] = []
        merge_map, merge_list = self.merges, self.merge_list
        for rank, entry in enumerate(merges):
            parts = entry.split(" ") if type(entry) is str else entry
            try:
                left, right = parts
                left_id, right_id = lookup(left), lookup(right)
                merged = left + right[cut:] if cut and right.startswith(prefix) else left + right
                new_id = lookup(merged)
            except (TypeError, ValueError):
                left_id = None
            if left_id is None or right_id is None or new_id is None or (cut and not right.startswith(prefix)):
                raise self._bad_merge(rank, entry, field, error)
            # subtle: tokenizers builds its merge map by overwriting, so a repeated pair takes
            # the rank of its last listing
            merge_map[(left_id, right_id)] = (rank, new_id)
            merge_list.append((left_id, right_id, new_id))
        self._fallback: list[int | None] | None = None
        if self.byte_fallback:
            self._fallback = [self.vocab.get(byte_fallback_token(b)) for b in range(256)]
        self._cache = PretokenCache()
        self._symbol_ids: dict[str, tuple[int, Any]] = {}
        merge_map = self.merges
        self._priority = lambda left, right: merge_map.get((left, right))
        self._fast = None  # the compiled BPE (bpe_spark.native._fastenc), built on first use
        self._fast_ready = False
        self._fast_chars = False  # the compiled encoder takes whole pretokens (no prefix or suffix)

    def _bad_merge(self, rank: int, entry: Any, field: str, error) -> Exception:
        """The error of a merge the loop above could not take, saying what is wrong with it."""
        where = f"{field}.merges[{rank}]"
        parts = entry.split(" ") if isinstance(entry, str) else entry
        if not (isinstance(parts, list) and len(parts) == 2 and all(isinstance(p, str) for p in parts)):
            return error(where, f"{show(entry)} is not a pair of two tokens (\"left right\" or [left, right])")
        for part in parts:
            if part not in self.vocab:
                return error(where, f"token {part!r} is not in {field}.vocab")
        left, right = parts
        if self.prefix and not right.startswith(self.prefix):
            return error(where, f"{right!r} does not start with continuing_subword_prefix {self.prefix!r}")
        merged = left + right[len(self.prefix or ""):]
        return error(where, f"the merged token {merged!r} is not in {field}.vocab")

    # --- encoding ---------------------------------------------------------------------------------
    def initial_ids(self, pretoken: str) -> list[int]:
        """The ids of the characters of ``pretoken`` before any merge (``merge_word``)."""
        vocab, prefix, suffix = self.vocab, self.prefix, self.suffix
        if not (prefix or suffix):
            try:
                return [vocab[char] for char in pretoken]  # the usual case: every character a token
            except KeyError:
                pass
        ids: list[int] = []
        pending_unk = False  # an unknown run not yet added (fuse_unk)
        unk_id = vocab[self.unk_token] if self.unk_token is not None else None
        symbol_ids, lookup = self._symbol_ids, self._symbol_ids.get
        last = len(pretoken) - 1
        for position, char in enumerate(pretoken):
            symbol = char
            if prefix and position:
                symbol = prefix + symbol
            if suffix and position == last:
                symbol = symbol + suffix
            found = lookup(symbol)
            if found is None:
                found = self._symbol(symbol)
                if len(symbol_ids) < PRETOKEN_CACHE_LIMIT:
                    symbol_ids[symbol] = found
            kind, symbol_ids_found = found
            if kind == _IN_VOCAB:
                if pending_unk:
                    ids.append(unk_id)
                    pending_unk = False
                ids.append(symbol_ids_found)
            elif kind == _BYTES:
                # subtle: tokenizers adds these without first adding a pending unk token
                ids.extend(symbol_ids_found)
            elif unk_id is not None:
                if pending_unk and not self.fuse_unk:
                    ids.append(unk_id)
                pending_unk = True
        if pending_unk:
            ids.append(unk_id)
        return ids

    def _symbol(self, symbol: str) -> tuple[int, Any]:
        """What one symbol becomes: ``(_IN_VOCAB, id)``, ``(_BYTES, ids)`` by byte_fallback, or
        ``(_UNKNOWN, None)``."""
        token_id = self.vocab.get(symbol)
        if token_id is not None:
            return _IN_VOCAB, token_id
        if self._fallback is not None:
            fallback = [self._fallback[b] for b in symbol.encode("utf-8")]
            if None not in fallback:
                return _BYTES, fallback
        return _UNKNOWN, None

    def _compiled(self):
        """The compiled BPE (bpe_spark.native._fastenc), built on first use, or None when not built."""
        if not self._fast_ready:
            self._fast_ready = True
            # the compiled table keeps a repeated pair's first rank: give it each pair's last
            merge_map = self.merges
            last = [(left, right, new_id) for rank, (left, right, new_id) in enumerate(self.merge_list)
                    if merge_map[(left, right)][0] == rank]
            if self.prefix or self.suffix:
                self._fast = _compiled.new_encoder(last, None, None)
            else:
                # the whole model step in C: characters looked up in the vocabulary (one that is
                # not raises LookupError, and the Python path knows unk_token and byte_fallback),
                # ignore_merges, BPE and a cache
                vocab = [(token.encode("utf-8", "surrogatepass"), token_id) for token, token_id in self.vocab.items()]
                self._fast = _compiled.new_encoder(last, None, None, vocab=vocab, whole=self.ignore_merges, chars=True)
                self._fast_chars = self._fast is not None
        return self._fast

    def tokenize(self, pretoken: str) -> list[int]:
        """The ids of one pretoken (cached)."""
        if not pretoken:
            return []
        if self.ignore_merges:
            whole = self.vocab.get(pretoken)
            if whole is not None:
                return [whole]
        ids = self._cache.get(pretoken)
        if ids is None:
            ids = self._cache.put(pretoken, bpe_ids(self.initial_ids(pretoken), self._priority, self._compiled()))
        return ids

    def encode_units(self, units: list[str | int]) -> list[int]:
        """The ids of pretokens (str) and added-token ids (int), in order: in one compiled call
        when every character is a token and the model has no prefix or suffix."""
        fast = self._compiled()
        if self._fast_chars:
            try:
                if not any(type(unit) is int for unit in units):
                    return fast.encode_pretokens(units)
                ids: list[int] = []
                run: list[str] = []
                for unit in units:
                    if type(unit) is int:
                        ids.extend(fast.encode_pretokens(run))
                        ids.append(unit)
                        run = []
                    else:
                        run.append(unit)
                ids.extend(fast.encode_pretokens(run))
                return ids
            except (LookupError, UnicodeEncodeError):  # an unknown character, a lone surrogate
                pass
        tokenize = self.tokenize
        ids = []
        for unit in units:
            if type(unit) is int:
                ids.append(unit)
            else:
                ids.extend(tokenize(unit))
        return ids
