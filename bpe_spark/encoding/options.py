"""The encode options, one contract for every way of encoding a dataset: the core's batch encoder,
``bpe_spark.spark.encode`` and ``encode_dataset``, ``bpe-spark encode`` and the pyspark.ml stages
all build one :class:`EncodeOptions` and pass only that down.

>>> from bpe_spark import TrainerConfig, train
>>> tok = train(["ab ab"], TrainerConfig(vocab_size=258, special_tokens=("<|eot|>",)))
>>> EncodeOptions(allowed_special="all", eos="<|eot|>").resolved(tok)
EncodeOptions(allowed_special=('<|eot|>',), disallowed_special=(), bos=None, eos=None, bos_id=None, eos_id=257)
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Literal

from bpe_spark.bpe.token_options import resolve_token
from bpe_spark.errors import ConfigError


@dataclass(frozen=True)
class EncodeOptions:
    """How a dataset's documents are encoded.

    - ``allowed_special``: the special tokens whose text in a document encodes as the special
      token (``"all"`` or a collection of names); by default none: bulk encoding of raw data
      reads special-token text as ordinary text.
    - ``disallowed_special``: special tokens whose text fails the encode
      (:class:`~bpe_spark.errors.DisallowedSpecialTokenError`); ``"all"`` means every one not
      allowed; by default none.
    - ``bos`` / ``eos``: a token prepended / appended to every non-null document, named by its
      text (a special token or one token of the vocabulary; numeric text is refused:
      :func:`~bpe_spark.bpe.token_options.resolve_token`); ``bos_id`` / ``eos_id``: the same by
      id. At most one of each pair.

    :meth:`resolved` checks them against a tokenizer once and gives plain, hashable data (sorted
    tuples, ids only), what Spark ships to its tasks and manifests record.
    """

    allowed_special: Literal["all"] | Collection[str] = frozenset()
    disallowed_special: Literal["all"] | Collection[str] = ()
    bos: str | None = None
    eos: str | None = None
    bos_id: int | None = None
    eos_id: int | None = None

    def resolved(self, tok) -> EncodeOptions:
        """These options checked against ``tok``: the special tokens as sorted tuples, ``bos`` and
        ``eos`` turned into ``bos_id`` and ``eos_id`` (resolving resolved options changes nothing)."""
        allowed, disallowed = tok.special_policy(self.allowed_special, self.disallowed_special)
        return EncodeOptions(
            allowed_special=tuple(sorted(allowed)),
            disallowed_special=tuple(sorted(disallowed)),
            bos_id=resolve_token(tok, "bos", text=self.bos, token_id=self.bos_id),
            eos_id=resolve_token(tok, "eos", text=self.eos, token_id=self.eos_id),
        )

    @property
    def added_ids(self) -> int:
        """How many ids every non-null document gets besides its own: BOS and EOS (0, 1 or 2)."""
        return (self.bos_id is not None) + (self.eos_id is not None)

    def record(self) -> dict[str, Any]:
        """The resolved options as an encode output's manifest records them."""
        return {
            "allowed_special": list(self.allowed_special),
            "disallowed_special": list(self.disallowed_special),
            "bos_id": self.bos_id,
            "eos_id": self.eos_id,
        }


def encode_options(options: EncodeOptions | None = None, **keywords) -> EncodeOptions:
    """The options of an entry point that takes them either whole (``options=``) or as the
    :class:`EncodeOptions` keyword arguments it also accepts (``eos=...``), never both.

    >>> encode_options(eos_id=7).eos_id, encode_options(EncodeOptions(bos_id=1)).bos_id
    (7, 1)
    """
    if options is None:
        return EncodeOptions(**keywords)
    fields = EncodeOptions.__dataclass_fields__
    given = sorted(name for name, value in keywords.items() if value != fields[name].default)
    if given:
        raise ConfigError(f"pass the encode options as options= or as keyword arguments ({', '.join(given)}), "
                          "not both")
    return options
