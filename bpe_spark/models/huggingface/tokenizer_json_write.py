"""Hugging Face ``tokenizer.json`` export; the import is :mod:`.tokenizer_json_read`.

Export writes what ``tokenizers.Tokenizer.from_file`` and ``transformers.PreTrainedTokenizerFast``
load, with our ids: a BPE model with the merges in rank order, a pre-tokenizer that reproduces our
pretokens, the special tokens as ``added_tokens``, and a normalizer when the tokenizer lowercases
or normalizes. Byte scheme: the vocab in GPT-2's printable byte form, ByteLevel steps. Char scheme
with ``end_of_word="fused"`` (subword-nmt's layout): the marker is the BPE model's
``end_of_word_suffix`` (tokenizers appends it to each word's last character, as we fuse it) and
the decoder a BPEDecoder of that suffix; ``"separate"`` (``</w>`` a symbol of its own) has no
tokenizers form and is refused (:func:`refusal`). A character outside the training alphabet
gives the ``unk_token`` in both; without one we raise and tokenizers leaves it out (no error).

>>> from bpe_spark import TrainerConfig, train
>>> data = to_hf_dict(train(["ab ab"], TrainerConfig(vocab_size=257)))
>>> data["model"]["merges"], data["model"]["vocab"]["ab"]
(['a b'], 256)
"""

from __future__ import annotations

import copy
import json
from typing import Any

from bpe_spark.errors import ConfigError, option
from bpe_spark.models.gpt2 import display_merges, display_vocab
from bpe_spark.bpe.oniguruma import onig_pattern
from bpe_spark.bpe.patterns import COVERING_PRESETS
from bpe_spark.bpe.patterns import pattern_source, split_source


def _normalizer(tok) -> dict | None:
    steps = []
    if tok.normalization:
        steps.append({"type": tok.normalization})
    if tok.lowercase:
        steps.append({"type": "Lowercase"})
    if not steps:
        return None
    return steps[0] if len(steps) == 1 else {"type": "Sequence", "normalizers": steps}


def _byte_level(*, use_regex: bool) -> dict:
    return {
        "type": "ByteLevel",
        "add_prefix_space": False,
        "trim_offsets": True,
        "use_regex": use_regex,
    }


def _pre_tokenizer(tok) -> dict:
    byte_level = tok.scheme == "byte"
    if tok.pattern == "gpt2" and byte_level:
        return _byte_level(use_regex=True)  # ByteLevel's own regex is the GPT-2 pattern
    covering = tok.pattern in COVERING_PRESETS
    source = onig_pattern(split_source(tok.pattern) if covering else pattern_source(tok.pattern))
    split = {
        "type": "Split",
        "pattern": {"Regex": source},
        "behavior": "Isolated" if covering else "Removed",
        "invert": not covering,
    }
    if not byte_level:
        return split
    return {"type": "Sequence", "pretokenizers": [split, _byte_level(use_regex=False)]}


def refusal(tok) -> str | None:
    """Why ``tok`` has no tokenizer.json form (one line naming the option), or None."""
    if _pipeline_spec(tok) is not None:
        return None
    if tok.scheme == "char" and tok.end_of_word == "separate":
        return (
            f"tokenizer.json cannot hold a char-scheme model with {option('end_of_word', 'separate')} "
            f"({tok.end_of_word_marker} a symbol of its own): tokenizers' end_of_word_suffix fuses "
            f"it onto the last character; train with {option('end_of_word', 'fused')}, or export to subword-nmt"
        )
    return None


def _pipeline_spec(tok) -> dict | None:
    """The tokenizer.json an imported pipeline model runs (:mod:`bpe_spark.pipeline`), or None."""
    pipeline = getattr(tok, "pipeline", None)
    return None if pipeline is None else pipeline.spec


_ADDED_TOKEN_FLAGS = {"single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": False}


def added_tokens(tok) -> list[dict[str, Any]]:
    """The ``added_tokens`` of tokenizer.json (transformers' ``added_tokens_decoder`` too): the
    special tokens in id order, matched in the text as it is; an imported pipeline's own."""
    spec = _pipeline_spec(tok)
    if spec is not None:
        return [{"id": entry["id"], "content": entry["content"], **_ADDED_TOKEN_FLAGS,
                 **{key: entry[key] for key in _ADDED_TOKEN_FLAGS if key in entry}}
                for entry in spec.get("added_tokens") or []]
    return [
        {
            "id": token_id,
            "content": token,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
        for token, token_id in sorted(tok.special_tokens.items(), key=lambda item: item[1])
    ]


def to_hf_dict(tok) -> dict[str, Any]:
    """The ``tokenizer.json`` content of a tokenizer (:func:`refusal` says which cannot have one)."""
    spec = _pipeline_spec(tok)
    if spec is not None:  # the file it was imported from, as it runs (validated, unused keys left out)
        empty = dict.fromkeys(("truncation", "padding", "normalizer", "pre_tokenizer", "post_processor", "decoder"))
        return {"version": "1.0", **empty, "added_tokens": [], **copy.deepcopy(spec)}
    reason = refusal(tok)
    if reason is not None:
        raise ConfigError(reason)
    byte_level = tok.scheme == "byte"
    if byte_level:
        model_vocab = display_vocab(tok)
        merges: list = display_merges(tok)
        decoder: dict | None = _byte_level(use_regex=True)
    else:
        model_vocab = {}
        for token_id in sorted(tok.ordinary_vocab):
            model_vocab.setdefault(tok.ordinary_vocab[token_id], token_id)
        merges = [list(pair) for pair in tok.merges]  # pairs: a char token may hold a space
        fused = tok.end_of_word == "fused"
        decoder = {"type": "BPEDecoder", "suffix": tok.end_of_word_marker} if fused else {"type": "Fuse"}
    entries = added_tokens(tok)
    for entry in entries:
        # subtle: a special token also in the model vocab keeps its id when tokenizers loads it;
        # otherwise tokenizers numbers added tokens after the vocab, which breaks gaps in ids.
        model_vocab.setdefault(entry["content"], entry["id"])
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": entries,
        "normalizer": _normalizer(tok),
        "pre_tokenizer": _pre_tokenizer(tok),
        "post_processor": None,
        "decoder": decoder,
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None if byte_level else tok.unk_token,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": tok.end_of_word_marker if tok.end_of_word == "fused" else None,
            "fuse_unk": False,
            "byte_fallback": False,
            # ranks rule (tiktoken): a pretoken that is a whole token is that token.
            "ignore_merges": tok.merge_rule == "ranks",
            "vocab": model_vocab,
            "merges": merges,
        },
    }


def write_tokenizer_json(tok, path) -> None:
    """Write ``tokenizer.json`` to ``path`` (not atomic; :func:`bpe_spark.models.load.export_model` is)."""
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(to_hf_dict(tok), fh, ensure_ascii=False, indent=2)
        fh.write("\n")
