"""transformers' model-folder files beside a ``tokenizer.json`` (or GPT-2 ``vocab.json`` +
``merges.txt``): ``tokenizer_config.json`` and ``special_tokens_map.json``, and the options they
carry: the bos / eos / pad / unk tokens and ``model_max_length``.

With them ``transformers.AutoTokenizer.from_pretrained(folder)`` gives a tokenizer with its
special tokens set and ``padding=True`` working, and our ids. The options live in
``tok.metadata["transformers"]`` (plain JSON: saved in ``bpe_spark.json``, so a later export of
the model writes them again); :func:`set_transformers_config` sets them, an export may override
them (:func:`folder_options`).

A token option names a special token of the model (:func:`bpe_spark.bpe.token_options.resolve_token`
finds it, by the rule of encode's ``--eos``): transformers makes each of these tokens special,
matched in any text before pretokenization, so an ordinary token of the vocabulary named there
would change the ids of text that holds it, and is refused.

``model_max_length`` defaults to transformers' own "no limit" (``int(1e30)``, what it writes for
a tokenizer saved without one): a tokenizer trained here belongs to no model, and a made-up
limit would make ``truncation=True`` cut silently at a length no model asked for.

>>> from bpe_spark import TrainerConfig, train
>>> tok = train(["ab ab"], TrainerConfig(vocab_size=258, special_tokens=("<|eot|>",)))
>>> _ = set_transformers_config(tok, eos_token="<|eot|>", pad_token="<|eot|>", model_max_length=512)
>>> config = tokenizer_config(tok, folder_options(tok))
>>> config["eos_token"], config["pad_token"], config["bos_token"], config["model_max_length"]
('<|eot|>', '<|eot|>', None, 512)
>>> config["added_tokens_decoder"]["257"]["content"]
'<|eot|>'
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bpe_spark.errors import ConfigError, option_name
from bpe_spark.models.gpt2 import gpt2_class_differs
from bpe_spark.models.huggingface.tokenizer_json_write import added_tokens, write_tokenizer_json
from bpe_spark.bpe.token_options import resolve_token

ROLES = ("bos_token", "eos_token", "pad_token", "unk_token")
OPTIONS = (*ROLES, "model_max_length")
METADATA_KEY = "transformers"
NO_LIMIT = int(1e30)  # transformers' VERY_LARGE_INTEGER: a tokenizer with no length limit
CONFIG_FILE = "tokenizer_config.json"
SPECIAL_TOKENS_FILE = "special_tokens_map.json"
FOLDER_FILES = (CONFIG_FILE, SPECIAL_TOKENS_FILE)
FAST_CLASS = "PreTrainedTokenizerFast"  # loads tokenizer.json as it is (transformers 4 and 5)
GPT2_CLASS = "GPT2Tokenizer"  # builds GPT-2's pipeline from vocab.json + merges.txt


def check_role(tok, name: str, text) -> None:
    """``text`` (a token option's value) must name a special token of ``tok``."""
    option = option_name(name)
    token_id = resolve_token(tok, name, text=text, id_form=False)
    if token_id is not None and text not in tok.special_tokens:
        raise ConfigError(
            f"{option} {text!r} is an ordinary token of the vocabulary (id {token_id}), not a special "
            "token; transformers makes this token special, matched in any text before pretokenization, "
            f"which would change the ids of text holding {text!r}: name a special token (train with "
            f"{option_name('special_tokens')} {text!r})"
        )


def folder_options(tok, given: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The model-folder options of ``tok``: its own (``tok.metadata["transformers"]``), then the
    ``given`` ones (a None value: not given), checked; ``model_max_length`` :data:`NO_LIMIT`
    when none is set. A char-scheme model's ``unk_token`` (the token of characters unseen in
    training) is its unk token, and an other one is refused."""
    stored = tok.metadata.get(METADATA_KEY) or {}
    options = {name: None for name in OPTIONS}
    for source in (stored, given or {}):
        if not isinstance(source, Mapping):
            raise ConfigError(f"tok.metadata[{METADATA_KEY!r}] must be a dict of {list(OPTIONS)}, got {source!r}")
        unknown = sorted(set(source) - set(OPTIONS))
        if unknown:
            raise ConfigError(f"unknown model-folder options {unknown}; known: {list(OPTIONS)}")
        options.update({name: value for name, value in source.items() if value is not None})
    model_unk = tok.unk_token if tok.scheme == "char" else None
    if model_unk is not None:
        if options["unk_token"] is None:
            options["unk_token"] = model_unk
        elif options["unk_token"] != model_unk:
            raise ConfigError(
                f"{option_name('unk_token')} {options['unk_token']!r} differs from the model's "
                f"unk_token {model_unk!r}, the token it gives characters unseen in training"
            )
    for name in ROLES:
        check_role(tok, name, options[name])
    if options["model_max_length"] is None:
        options["model_max_length"] = NO_LIMIT
    check_max_length(options["model_max_length"])
    return options


def check_max_length(length) -> None:
    """``model_max_length`` is a positive integer."""
    if isinstance(length, bool) or not isinstance(length, int) or length < 1:
        raise ConfigError(
            f"{option_name('model_max_length')} takes a positive integer (tokens), got {length!r}"
        )


def set_transformers_config(tok, **options):
    """Set the model-folder options that ``tok.save`` and every export write (``bos_token``,
    ``eos_token``, ``pad_token``, ``unk_token``: special tokens' text; ``model_max_length``: an
    int), merged over those already set; returns ``tok``."""
    resolved = folder_options(tok, options)
    given = {**(tok.metadata.get(METADATA_KEY) or {}), **{k: v for k, v in options.items() if v is not None}}
    tok.metadata[METADATA_KEY] = {name: resolved[name] for name in OPTIONS if given.get(name) is not None}
    return tok


def added_tokens_decoder(tok) -> dict[str, dict[str, Any]]:
    """transformers' ``added_tokens_decoder``: the added tokens of tokenizer.json by id (as a string)."""
    return {
        str(entry["id"]): {key: entry[key] for key in ("content", "lstrip", "normalized", "rstrip", "single_word", "special")}
        for entry in added_tokens(tok)
    }


def tokenizer_config(tok, options: Mapping[str, Any], *, tokenizer_class: str = FAST_CLASS) -> dict[str, Any]:
    """The content of ``tokenizer_config.json`` (``options``: :func:`folder_options`). Decoding
    cleans up no spaces (our decode is exact); a GPT2Tokenizer adds no prefix space."""
    config: dict[str, Any] = {"added_tokens_decoder": added_tokens_decoder(tok)}
    if tokenizer_class == GPT2_CLASS:
        config.update(add_bos_token=False, add_prefix_space=False, errors="replace")
    config.update({name: options[name] for name in ROLES})  # None too: GPT2Tokenizer defaults them
    config.update(
        clean_up_tokenization_spaces=False,
        model_max_length=options["model_max_length"],
        tokenizer_class=tokenizer_class,
    )
    return dict(sorted(config.items()))


def special_tokens_map(tok, options: Mapping[str, Any]) -> dict[str, Any]:
    """The content of ``special_tokens_map.json``: each token option that is set, as an added token."""
    by_text = {entry["content"]: entry for entry in added_tokens_decoder(tok).values()}
    return {
        name: {key: value for key, value in by_text[options[name]].items() if key != "special"}
        for name in ROLES
        if options[name] is not None
    }


def _write_json(path: Path, content: Any) -> None:
    staged = path.with_name(f".{path.name}.writing")
    with open(staged, "w", encoding="utf-8") as fh:
        json.dump(content, fh, ensure_ascii=False, indent=2)
        fh.write("\n")
    os.replace(staged, path)


def write_folder_files(tok, directory, options: Mapping[str, Any], *, tokenizer_class: str = FAST_CLASS) -> list[Path]:
    """Write ``tokenizer_config.json`` and ``special_tokens_map.json`` into ``directory`` (each
    replaced whole); returns their paths."""
    directory = Path(directory)
    contents = (tokenizer_config(tok, options, tokenizer_class=tokenizer_class), special_tokens_map(tok, options))
    paths = [directory / name for name in FOLDER_FILES]
    for path, content in zip(paths, contents):
        _write_json(path, content)
    return paths


def write_gpt2_folder(tok, directory, options: Mapping[str, Any]) -> list[Path]:
    """The folder files of a GPT-2 export (vocab.json + merges.txt) in ``directory``: a
    ``GPT2Tokenizer`` when that gives our ids (:func:`~bpe_spark.models.gpt2.gpt2_class_differs`),
    else ``tokenizer.json`` too, which transformers then loads as it is; returns their paths."""
    directory = Path(directory)
    if gpt2_class_differs(tok) is None:
        return write_folder_files(tok, directory, options, tokenizer_class=GPT2_CLASS)
    write_tokenizer_json(tok, directory / "tokenizer.json")
    return [directory / "tokenizer.json", *write_folder_files(tok, directory, options)]
