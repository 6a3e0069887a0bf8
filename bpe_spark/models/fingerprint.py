"""A model's fingerprint: ``sha256:`` of everything that decides its ids, so two models that encode
alike share one. Encode outputs record it in their manifest (and datatrove's metadata when no
model path is given), and a resumed encode checks it against the model it is given.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

_JSON_SCALARS = frozenset((int, str, float, bool, type(None)))


def model_fingerprint(model: Any) -> str:
    """``sha256:<hex>`` of a tokenizer's plain data, everything that decides its ids.

    Training metadata (config, statistics, timings) is left out, so a model and the same model
    re-imported from its ``tokenizer.json`` share a fingerprint when they encode alike.

    >>> from bpe_spark import TrainerConfig, train
    >>> tok = train(["ab ab"], TrainerConfig(vocab_size=257))
    >>> model_fingerprint(tok) == model_fingerprint(tok.to_dict())
    True
    """
    data = model.to_dict() if hasattr(model, "to_dict") else dict(model)
    data = {key: value for key, value in data.items() if key not in ("config", "metadata")}

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
