"""Training a new vocabulary with an imported model's pipeline (transformers'
``PreTrainedTokenizerFast.train_new_from_iterator`` for a BPE model): :class:`LikeStart`, the
:class:`~bpe_spark.training.starts.Start` of such a run, and the in-process entry points
:func:`train_like` (documents) and :func:`train_like_from_counts` ({pretoken: count}).

What transformers 5 and ``tokenizers`` 0.23 do, reproduced here (the *base* is the model whose
``tokenizer.json`` is copied):

- counting: the base's normalizer and pre-tokenizer, **without** its added tokens (transformers
  removes them before training, so ``<|endoftext|>`` in the text is ordinary text);
- ids: the base's *special* added tokens first, in the order of their ids (0, 1, ...); then the
  alphabet in code-point order: every character of the pretokens, plus the 256 characters of
  ``ByteLevel.alphabet()`` when the pre-tokenizer is a ByteLevel or a Sequence holding one; then
  the symbols that ``continuing_subword_prefix`` (a character that does not start its pretoken)
  and ``end_of_word_suffix`` (the last character) make, in code-point order of the symbol
  (``tokenizers`` numbers them in the iteration order of a hash map, which varies from run to
  run); then one id per new merge token (a merge that makes an existing token reuses its id);
- merges: the exact loop of docs/design.md 1.4, ties to the smaller pair of ids; the run stops
  at ``vocab_size`` tokens, specials included, or below ``min_frequency`` (default 0, as
  ``BpeTrainer``'s);
- the result: the base's ``tokenizer.json`` with the new vocabulary and merges; its special added
  tokens at their new ids, with their flags (lstrip, rstrip, normalized, single_word); its
  non-special added tokens dropped; the model's options (``unk_token``, ``byte_fallback``,
  ``fuse_unk``, ``ignore_merges``, prefix and suffix) kept; the post-processor's top-level
  special-token ids (TemplateProcessing's ``special_tokens``, Roberta/Bert's ``cls`` and ``sep``)
  set to the new ids, as transformers sets them (inside a Sequence they are left as they were).

>>> from bpe_spark import TrainerConfig, train
>>> base = train(["low low lower"], TrainerConfig(vocab_size=258, special_tokens=("<eos>",)))
>>> tok = train_like_from_counts({"Ġlowest": 3, "Ġlow": 1}, base, TrainerConfig(vocab_size=261))
>>> tok.pipeline.spec["model"]["merges"], tok.special_tokens
([['l', 'o'], ['Ġ', 'lo'], ['Ġlo', 'w'], ['e', 's']], {'<eos>': 0})
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from bpe_spark.bpe.config import TrainerConfig
from bpe_spark.bpe.pretokenize import Pretokenizer
from bpe_spark.bpe.symbols import SymbolTable, bytes_to_unicode
from bpe_spark.errors import ConfigError, option
from bpe_spark.training.engine import Merge
from bpe_spark.training.extend import PipelinePretokenizer, refuse_base_fields
from bpe_spark.training.starts import run_in_process

# the TrainerConfig fields a run like a base reads; the base decides every other one
LIKE_FIELDS = ("vocab_size", "max_merges", "min_frequency", "tie_break")


def base_spec(base) -> dict[str, Any]:
    """The ``tokenizer.json`` content (a spec) a loaded or trained tokenizer stands for."""
    from bpe_spark.models.huggingface.tokenizer_json_write import to_hf_dict

    return copy.deepcopy(base.pipeline.spec) if base.pipeline is not None else to_hf_dict(base)


def byte_level_alphabet(pre_tokenizer: Any) -> bool:
    """Whether transformers gives the trainer ``ByteLevel.alphabet()``: a ByteLevel
    pre-tokenizer, or a Sequence with a ByteLevel among its own steps."""
    if not isinstance(pre_tokenizer, dict):
        return False
    if pre_tokenizer.get("type") == "ByteLevel":
        return True
    steps = pre_tokenizer.get("pretokenizers") if pre_tokenizer.get("type") == "Sequence" else None
    return isinstance(steps, list) and any(isinstance(s, dict) and s.get("type") == "ByteLevel" for s in steps)


def check_like_config(cfg: TrainerConfig) -> None:
    """Refuse a config that sets what the base decides."""
    refuse_base_fields(cfg, LIKE_FIELDS, "training like a model")


class LikeStart:
    """A run that learns a new vocabulary with ``base``'s pipeline (module docstring). Holds
    plain data (the spec and ``cfg``): it pickles for Spark tasks."""

    def __init__(self, base, cfg: TrainerConfig):
        check_like_config(cfg)
        self.cfg = cfg
        self.spec = base_spec(base)
        self.base_fingerprint = base.fingerprint
        source = base.metadata.get("source")
        self.base_source = copy.deepcopy(source) if isinstance(source, dict) else source
        model = self.spec["model"]
        self.prefix: str | None = model.get("continuing_subword_prefix")
        self.suffix: str | None = model.get("end_of_word_suffix")
        entries = sorted(self.spec.get("added_tokens") or [], key=lambda entry: entry["id"])
        self.special_entries = [entry for entry in entries if entry.get("special")]
        self.initial_alphabet = bytes_to_unicode() if byte_level_alphabet(self.spec.get("pre_tokenizer")) else ()
        self._pretokenizer = None

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_pretokenizer"] = None
        return state

    # --- what the engine needs ------------------------------------------------------------------
    def pretokenizer(self) -> Pretokenizer:
        """The base's normalizer and pre-tokenizer, no added token cut out (module docstring)."""
        if self._pretokenizer is None:
            from bpe_spark.pipeline import Pipeline

            counting = {key: self.spec.get(key) for key in ("normalizer", "pre_tokenizer")}
            counting["model"] = {"type": "BPE", "vocab": {}, "merges": []}
            self._pretokenizer = PipelinePretokenizer(Pipeline(counting, path="pipeline"))
        return self._pretokenizer

    def affixed(self, symbols: set[str]) -> list[str]:
        """The order in which the prefixed and suffixed symbols get their ids: code-point order
        (``tokenizers``' own order is its word map's, which varies from run to run)."""
        return sorted(symbols)

    def alphabet(self, pretokens: Iterable[str]) -> set[str]:
        """``"c" + character`` of every character of ``pretokens``, ``"s" + symbol`` of every
        symbol that the prefix (a character that does not start its pretoken) or the suffix (the
        last character) makes."""
        prefix, suffix = self.prefix, self.suffix
        items: set[str] = set()
        for pretoken in pretokens:
            items.update("c" + c for c in set(pretoken))
            if prefix is not None and len(pretoken) > 1:  # the last one is suffixed too, when a suffix is set
                items.update("s" + prefix + c for c in (pretoken[1:] if suffix is None else pretoken[1:-1]))
            if suffix is not None and pretoken:
                items.add("s" + (prefix if prefix is not None and len(pretoken) > 1 else "") + pretoken[-1] + suffix)
        return items

    def table_of(self, alphabet: set[str]) -> SymbolTable:
        """Special tokens, alphabet, then the prefixed and suffixed symbols (module docstring)."""
        table = SymbolTable("char", self.cfg.tie_break, 0)
        table.prefix = self.prefix
        for entry in self.special_entries:
            table.add(entry["content"])
        chars = set(self.initial_alphabet) | {item[1:] for item in alphabet if item[0] == "c"}
        for c in sorted(chars):
            table.add(c)
        symbols = {item[1:] for item in alphabet if item[0] == "s"}
        for symbol in self.affixed({s for s in symbols if s not in table.index}):
            table.add(symbol)
        if self.cfg.vocab_size < len(table):
            raise ConfigError(
                f"{option('vocab_size', self.cfg.vocab_size)} is below the special tokens and alphabet of the "
                f"corpus ({len(table):,} tokens); set vocab_size >= {len(table):,}"
            )
        return table

    def table(self, pretokens: Iterable[str] = ()) -> SymbolTable:
        return self.table_of(self.alphabet(pretokens))

    def budget(self, cfg: TrainerConfig, table: SymbolTable) -> int:
        """The new tokens ``cfg.vocab_size`` leaves room for (it counts every token)."""
        return cfg.vocab_size - len(table)

    def words(self, pretoken: str, table: SymbolTable) -> list[list[int]]:
        """The pretoken's characters as symbols, the prefix on all but the first and the suffix
        on the last; a character outside the table is left out (``tokenizers``' rule)."""
        index, prefix, suffix = table.index, self.prefix, self.suffix
        if prefix is None and suffix is None:
            ids = [index[c] for c in pretoken if c in index]
        else:
            ids, last = [], len(pretoken) - 1
            for position, c in enumerate(pretoken):
                if c not in index:
                    continue
                if position and prefix is not None:
                    c = prefix + c
                if position == last and suffix is not None:
                    c += suffix
                ids.append(index[c])
        return [ids] if len(ids) > 1 else []

    def tokenizer(self, table: SymbolTable, merges: list[Merge], *, stats: dict | None = None):
        """The base's pipeline with the new vocabulary, merges, special-token ids and
        post-processor ids (module docstring)."""
        from bpe_spark.encoding.tokenizer import Tokenizer

        values = table.values
        vocab = {value: token_id for token_id, value in enumerate(values)}
        spec = copy.deepcopy(self.spec)
        model = spec["model"]
        model["vocab"] = vocab
        model["merges"] = [[values[m.left], values[m.right]] for m in merges]
        unk = model.get("unk_token")
        if unk is not None and unk not in vocab:
            raise ConfigError(
                f"the base model's unk_token {unk!r} is not one of its special tokens, so the new vocabulary "
                f"lacks it (transformers' train_new_from_iterator gives a tokenizer that fails on it); make it "
                f"a special added token of the base"
            )
        spec["added_tokens"] = [{**entry, "id": vocab[entry["content"]], "special": True}
                                for entry in self.special_entries]
        spec["post_processor"] = renumbered_post_processor(spec.get("post_processor"), vocab)
        source = self.base_source
        metadata = {
            "like": {
                "file": source.get("path") if isinstance(source, dict) else None,
                "format": source.get("format") if isinstance(source, dict) else source,
                "fingerprint": self.base_fingerprint,
            },
            "stats": dict(stats or {}),
            "merge_counts": [m.count for m in merges],
        }
        return Tokenizer(pipeline=spec, metadata=metadata)


def renumbered_post_processor(post: Any, vocab: Mapping[str, int]) -> Any:
    """The post-processor with its top-level special-token ids at ``vocab``'s ids, as transformers
    renumbers them (TemplateProcessing's ``special_tokens``; ``cls`` and ``sep``)."""
    if not isinstance(post, dict):
        return post

    def new_id(token: str) -> int:
        if token not in vocab:
            raise ConfigError(f"the base model's post_processor names {token!r}, which the new vocabulary lacks; "
                              f"make it a special added token of the base")
        return vocab[token]

    for entry in (post.get("special_tokens") or {}).values():
        entry["ids"] = [new_id(token) for token in entry["tokens"]]
    for key in ("cls", "sep"):
        if key in post:
            post[key] = [post[key][0], new_id(post[key][0])]
    return post


def train_like_from_counts(
    counts: Mapping[str, int],
    base,
    cfg: TrainerConfig,
    *,
    progress: Callable[[int, Merge], None] | None = None,
):
    """A new vocabulary with ``base``'s pipeline, from pretoken counts made with it
    (``LikeStart(base, cfg).pretokenizer().count(texts)``). ``cfg``: ``vocab_size`` (every token,
    special ones included), ``min_frequency``, ``max_merges``, ``tie_break``."""
    return run_in_process(LikeStart(base, cfg), counts, cfg, progress=progress)


def train_like(texts: Iterable[str] | str, base, cfg: TrainerConfig, **kwargs):
    """``base``'s ``train_new_from_iterator(texts, cfg.vocab_size)`` in process: documents
    counted with its pipeline (a single ``str`` is one document), then
    :func:`train_like_from_counts`."""
    if isinstance(texts, str):
        texts = [texts]
    started = time.perf_counter()
    counts = LikeStart(base, cfg).pretokenizer().count(texts)
    count_seconds = time.perf_counter() - started
    tok = train_like_from_counts(counts, base, cfg, **kwargs)
    tok.metadata.setdefault("stats", {})["count_seconds"] = round(count_seconds, 6)
    return tok
