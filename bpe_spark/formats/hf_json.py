"""Hugging Face ``tokenizer.json`` export (byte scheme); the import is ``hf_json_read``.

Export writes what ``tokenizers.Tokenizer.from_file`` and ``transformers.PreTrainedTokenizerFast``
load, with our ids: a BPE model whose vocab is in GPT-2's printable byte form, the merges in rank
order, a pre-tokenizer that reproduces our pretokens, a ByteLevel decoder, the special tokens as
``added_tokens``, and a normalizer when the tokenizer lowercases or normalizes.

>>> from bpe_spark import TrainerConfig, train
>>> data = to_hf_dict(train(["ab ab"], TrainerConfig(vocab_size=257)))
>>> data["model"]["merges"], data["model"]["vocab"]["ab"]
(['a b'], 256)
"""

from __future__ import annotations

import json
from typing import Any

from bpe_spark.errors import ConfigError
from bpe_spark.formats.gpt2 import display_merges, display_vocab
from bpe_spark.formats.hf_regex import COVERING_PRESETS, onig_pattern
from bpe_spark.patterns import pattern_source


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
    if tok.pattern == "gpt2":
        return _byte_level(use_regex=True)  # ByteLevel's own regex is the GPT-2 pattern
    source = onig_pattern(pattern_source(tok.pattern))
    covering = tok.pattern in COVERING_PRESETS
    split = {
        "type": "Split",
        "pattern": {"Regex": source},
        "behavior": "Isolated" if covering else "Removed",
        "invert": not covering,
    }
    return {"type": "Sequence", "pretokenizers": [split, _byte_level(use_regex=False)]}


def to_hf_dict(tok) -> dict[str, Any]:
    """The ``tokenizer.json`` content of a byte-scheme tokenizer."""
    if tok.scheme != "byte":
        raise ConfigError(
            "tokenizer.json export needs a byte-scheme tokenizer; this one is char scheme"
        )
    model_vocab = display_vocab(tok)
    added_tokens = []
    for token, token_id in sorted(tok.special_tokens.items(), key=lambda item: item[1]):
        # subtle: a special token also in the model vocab keeps its id when tokenizers loads it;
        # otherwise tokenizers numbers added tokens after the vocab, which breaks gaps in ids.
        model_vocab.setdefault(token, token_id)
        added_tokens.append(
            {
                "id": token_id,
                "content": token,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": True,
            }
        )
    merges = display_merges(tok)
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added_tokens,
        "normalizer": _normalizer(tok),
        "pre_tokenizer": _pre_tokenizer(tok),
        "post_processor": None,
        "decoder": _byte_level(use_regex=True),
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            # ranks rule (tiktoken): a pretoken that is a whole token is that token.
            "ignore_merges": tok.merge_rule == "ranks",
            "vocab": model_vocab,
            "merges": merges,
        },
    }


def write_tokenizer_json(tok, path) -> None:
    """Write ``tokenizer.json`` to ``path`` (not atomic; :func:`bpe_spark.formats.export_model` is)."""
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(to_hf_dict(tok), fh, ensure_ascii=False, indent=2)
        fh.write("\n")
