"""A model's fingerprints: ``sha256:`` of everything that decides its ids, so two models that encode
alike share one, and of everything that decides the text of ids, so two models that decode alike
share one (a model and its ``.tiktoken`` export encode by different rules but decode alike).
Encode outputs record both in their manifest (and the first in datatrove's metadata when no model
path is given); a resumed encode checks the first against the model it is given, ``decode`` the
second.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

_JSON_SCALARS = frozenset((int, str, float, bool, type(None)))


# what decides only how text becomes ids (and training metadata): left out of the decoding fingerprint
_ENCODING_ONLY = ("config", "metadata", "merges", "pattern", "lowercase", "normalization", "merge_rule")


def decoding_fingerprint(model: Any) -> str:
    """``sha256:<hex>`` of what decides the text of ids: the vocabulary, special tokens, scheme,
    end-of-word marker and pipeline (its decoder), without the merges and the rules that only
    decide encoding.

    >>> from bpe_spark import TrainerConfig, train
    >>> tok = train(["ab ab"], TrainerConfig(vocab_size=257))
    >>> data = tok.to_dict()
    >>> decoding_fingerprint({**data, "merge_rule": "ranks"}) == decoding_fingerprint(tok) != model_fingerprint(tok)
    True
    """
    return model_fingerprint(model, _ENCODING_ONLY)


def model_fingerprint(model: Any, leave_out: tuple[str, ...] = ("config", "metadata")) -> str:
    """``sha256:<hex>`` of a tokenizer's plain data, everything that decides its ids.

    Training metadata (config, statistics, timings) is left out, so a model and the same model
    re-imported from its ``tokenizer.json`` share a fingerprint when they encode alike.
    ``leave_out``: the fields not fingerprinted.

    >>> from bpe_spark import TrainerConfig, train
    >>> tok = train(["ab ab"], TrainerConfig(vocab_size=257))
    >>> model_fingerprint(tok) == model_fingerprint(tok.to_dict())
    True
    """
    data = model.to_dict() if hasattr(model, "to_dict") else dict(model)
    data = {key: value for key, value in data.items() if key not in leave_out}

    def plain(value: Any) -> Any:
        if isinstance(value, bytes):
            return {"hex": value.hex()}
        if isinstance(value, Mapping):
            return [[plain(k), plain(v)] for k, v in sorted(value.items(), key=lambda kv: repr(kv[0]))]
        if isinstance(value, (list, tuple)):
            if all(type(v) in _JSON_SCALARS for v in value):
                return value  # json writes a tuple as the list it would be: no copy (a model's merges)
            return [plain(v) for v in value]
        return value

    blob = json.dumps(plain(data), sort_keys=True, ensure_ascii=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(blob.encode("ascii")).hexdigest()
