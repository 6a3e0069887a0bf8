"""Token options: the text or id of a token named by an option (encode's ``--eos``/``--bos``,
a model folder's ``--eos-token``/``--pad-token``...) resolved to an id, by one rule.

A leaf: it takes any tokenizer object (``special_tokens``, ``token_to_id``, ``id_to_token``,
``scheme``, ``max_token_id``) and imports nothing of ours but the errors, so the formats that
write model folders and the batch encoder share it without an import cycle.
"""

from __future__ import annotations

import re

import numpy as np

from bpe_spark.errors import ConfigError, option, option_name

_NUMBER = re.compile(r"\s*[+-]?\d+\s*")


def resolve_token(
    tok, name: str, *, text: str | None = None, token_id: int | None = None, id_form: bool = True
) -> int | None:
    """The id of an EOS/BOS option: ``text`` names a special token or one token of the
    vocabulary, ``token_id`` an id; at most one is given (None: neither). ``name`` is the text
    option's Python name (``"eos"``), the id option ``name + "_id"`` (``id_form=False``: the
    option has none, and errors name none); errors spell both as the interface in use does
    (:func:`bpe_spark.errors.option`: ``eos_id=100``, or ``--eos-id 100`` on the command line).

    Numeric text is never a token: ``text="100"`` is an error that names ``eos_id=100`` (GPT-2's
    vocabulary holds the text "100" as token 3064, which is not what such an option means).

    >>> from bpe_spark import TrainerConfig, train
    >>> tok = train(["ab ab"], TrainerConfig(vocab_size=258, special_tokens=("<|eot|>",)))
    >>> resolve_token(tok, "eos", text="<|eot|>"), resolve_token(tok, "bos", text="a"), resolve_token(tok, "bos", token_id=98)
    (257, 97, 98)
    >>> resolve_token(tok, "eos", text="100")
    Traceback (most recent call last):
    ...
    bpe_spark.errors.ConfigError: eos '100' looks like a token id, but eos takes token text; for id 100 use eos_id=100
    """
    spelled, id_spelled = option_name(name), option_name(name + "_id")
    if text is not None and token_id is not None:
        raise ConfigError(f"give {spelled} (token text) or {id_spelled} (a token id), not both")
    if token_id is not None:
        if isinstance(token_id, bool) or not isinstance(token_id, (int, np.integer)):
            raise ConfigError(f"{id_spelled} takes a token id (an integer), got {token_id!r}")
        try:
            tok.id_to_token(int(token_id))
        except KeyError:
            raise ConfigError(
                f"{id_spelled} {token_id} is not a token id of the model (ids 0..{tok.max_token_id})"
            ) from None
        return int(token_id)
    if text is None:
        return None
    if not isinstance(text, str):
        hint = f"; for a token id use {option(name + '_id', text)}" if id_form and isinstance(text, (int, np.integer)) else ""
        raise ConfigError(f"{spelled} takes token text (a string), got {text!r}{hint}")
    if text in tok.special_tokens:
        return tok.special_tokens[text]
    found = tok.token_to_id(text.encode("utf-8") if tok.scheme == "byte" else text)
    if _NUMBER.fullmatch(text):
        number = int(text)
        if not id_form:
            raise ConfigError(f"{spelled} {text!r} looks like a token id, but {spelled} takes token text")
        also = f" (the text {text!r} is the ordinary token {found}: {option(name + '_id', found)})" if found is not None else ""
        raise ConfigError(
            f"{spelled} {text!r} looks like a token id, but {spelled} takes token text; for id {number} "
            f"use {option(name + '_id', number)}{also}"
        )
    if found is None:
        specials = sorted(tok.special_tokens) or "none"
        by_id = f", or an id with {option(name + '_id', 'N')}" if id_form else ""
        raise ConfigError(
            f"{spelled} {text!r} is neither a special token of the model (it has: {specials}) nor a "
            f"single token of its vocabulary; give one of those{by_id}"
        )
    return found
