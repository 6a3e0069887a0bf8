"""Exceptions raised by bpe-spark. Every message says what was wrong, where, and what to do."""


class BpeSparkError(Exception):
    """Base class of every error bpe-spark raises on purpose."""


class ConfigError(BpeSparkError, ValueError):
    """A training or encoding setting is invalid."""


class EmptyCorpusError(BpeSparkError, ValueError):
    """The corpus holds no pretoken to train on."""


class ModelFormatError(BpeSparkError, ValueError):
    """A model file is malformed; the message names the file and the line or field."""


class UnknownCharacterError(BpeSparkError, ValueError):
    """A char-scheme tokenizer without ``unk_token`` met a character it was not trained on."""


class DisallowedSpecialTokenError(BpeSparkError, ValueError):
    """Text contains a special token that the ``encode`` call did not allow."""


class OutputExistsError(BpeSparkError, FileExistsError):
    """An output path already exists and ``overwrite`` (``--overwrite``) was not given."""


class InputError(BpeSparkError, ValueError):
    """An input cannot be read as asked."""


class ColumnError(InputError, KeyError):
    """A column the work needs is missing or of the wrong type, or an output column exists."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class BadInputError(InputError):
    """A corrupt input file or a malformed record; the message names the file and the line or row."""


class PatternTimeoutError(BpeSparkError, TimeoutError):
    """A custom pretokenization pattern took longer than its time limit on a text."""


class OutputRefusedError(BpeSparkError, ValueError):
    """An output path bpe-spark will not write: it is, holds or lies inside an input, the model
    or the checkpoint; it cannot be written; or ``overwrite`` would replace something that is not
    an earlier bpe-spark output of the same kind."""


class CheckpointError(ConfigError):
    """A checkpoint directory cannot be used as asked: ``resume`` names no checkpoint, or one
    made from another input or config; the message says what differs."""


class CheckpointLockedError(CheckpointError):
    """Another run holds the lock of the checkpoint directory; the message names it."""


class MasterUnreachableError(BpeSparkError, ConnectionError):
    """The Spark master does not answer (checked before Spark starts); the message names it."""
