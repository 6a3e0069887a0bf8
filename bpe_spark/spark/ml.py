"""The ``pyspark.ml`` API: :class:`BPETokenizer`, an Estimator whose ``fit`` trains
(:func:`bpe_spark.spark.training.run.train`), and :class:`BPETokenizerModel`, a Transformer that adds
the ids column (``array<int>``, the ids of :func:`bpe_spark.spark.encoding.dataframe.encode`), with their
Params, saving and loading.

Both are ``MLWritable`` / ``MLReadable``, so they go into a ``Pipeline`` and its
``PipelineModel.save`` / ``load``. A saved stage is ``<path>/metadata`` (Spark ML's
``DefaultParamsWriter`` JSON: class, uid, Params) and, for the model, ``<path>/model``: our model
directory (:func:`bpe_spark.spark.storage.uris.save_model`, any URI the session reaches), which
``Tokenizer.load`` reads as it is.

Both work in the session of the DataFrame they are given (saving and loading: the writer's and
reader's session, by default the active one); they never build, stop or reconfigure one.

>>> model = BPETokenizer(vocabSize=2000, inputCol="text", outputCol="ids").fit(df)   # doctest: +SKIP
>>> model.transform(df).select("ids").first()                                       # doctest: +SKIP
Row(ids=[72, 1011, 0])
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.ml import Estimator, Model
from pyspark.ml.param import Param, Params, TypeConverters
from pyspark.ml.param.shared import HasInputCol, HasOutputCol
from pyspark.ml.util import (
    DefaultParamsReadable,
    DefaultParamsReader,
    DefaultParamsWritable,
    DefaultParamsWriter,
    MLReadable,
    MLWritable,
)
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from bpe_spark.encoding.options import EncodeOptions
from bpe_spark.bpe.config import TrainerConfig
from bpe_spark.errors import ConfigError, current_interface, interface
from bpe_spark.spark.runtime.columns import STRING, check_columns, require_classic
from bpe_spark.spark.encoding.tasks import ModelBroadcast, encoded_slices
from bpe_spark.spark.options import DEFAULT_DRIVER_BUDGET, ENGINES
from bpe_spark.spark.storage.uris import load_model, save_model
from bpe_spark.spark.training.run import train
from bpe_spark.encoding.tokenizer import Tokenizer

__all__ = ["BPETokenizer", "BPETokenizerModel"]

MODEL_DIR = "model"  # the model directory inside a saved BPETokenizerModel
IDS_TYPE = T.ArrayType(T.IntegerType(), containsNull=False)
_ARROW_UDF = getattr(F, "arrow_udf", None)  # pyspark >= 4.1; before it, a mapInArrow over whole rows


def _special_policy(value: Any) -> str | list[str]:
    """A special-token policy Param: ``"all"`` or a list of special tokens."""
    if value == "all":
        return "all"
    if isinstance(value, str):
        raise TypeError(f"expected 'all' or a list of special tokens, got {value!r}")
    return TypeConverters.toListString(value)


def _budget(value: Any) -> str:
    """``driverBudget``: a count, a fraction or ``"auto"``, kept as text (JSON-safe)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise TypeError(f"expected a count, a fraction or 'auto', got {value!r}")
    return str(value)


def _param(name: str, doc: str, converter) -> Param:
    return Param(Params._dummy(), name, doc, typeConverter=converter)


class _EncodeParams(HasInputCol, HasOutputCol):
    """The encoding Params, shared by the Estimator (passed on to its model) and the model."""

    eos = _param("eos", "token text appended to every non-null document (a special token or one token "
                 "of the vocabulary)", TypeConverters.toString)
    bos = _param("bos", "token text prepended to every non-null document", TypeConverters.toString)
    eosId = _param("eosId", "token id appended to every non-null document (instead of eos)", TypeConverters.toInt)
    bosId = _param("bosId", "token id prepended to every non-null document (instead of bos)", TypeConverters.toInt)
    allowedSpecial = _param("allowedSpecial", "special tokens encoded as themselves: 'all' or a list; the "
                            "others are ordinary text", _special_policy)
    disallowedSpecial = _param("disallowedSpecial", "special tokens whose text in a document fails the task: "
                               "'all' or a list", _special_policy)

    def __init__(self) -> None:
        super().__init__()
        self._setDefault(inputCol="text", outputCol="input_ids", allowedSpecial=[], disallowedSpecial=[])

    def _value(self, param: Param) -> Any:
        """The Param's value, None when it has neither a value nor a default."""
        return self.getOrDefault(param) if self.isDefined(param) else None

    def encode_options(self) -> EncodeOptions:
        """The encode options (:func:`bpe_spark.spark.encode`'s) the Params set."""
        return EncodeOptions(
            eos=self._value(self.eos),
            bos=self._value(self.bos),
            eos_id=self._value(self.eosId),
            bos_id=self._value(self.bosId),
            allowed_special=self.getOrDefault(self.allowedSpecial),
            disallowed_special=self.getOrDefault(self.disallowedSpecial),
        )

    def setInputCol(self, value: str):
        return self._set(inputCol=value)

    def setOutputCol(self, value: str):
        return self._set(outputCol=value)

    def _check_schema(self, dataset: DataFrame) -> None:
        """Before any work: the input column is a string, the output column does not exist."""
        require_classic(dataset)
        check_columns(dataset, {self.getInputCol(): STRING}, hint="choose the text column with the inputCol Param",
                      added=[self.getOutputCol()])


# the TrainerConfig fields as Params: Param name -> field
_TRAINER_FIELDS = {
    "vocabSize": "vocab_size", "scheme": "scheme", "endOfWord": "end_of_word", "pattern": "pattern",
    "lowercase": "lowercase", "normalization": "normalization", "specialTokens": "special_tokens",
    "minFrequency": "min_frequency", "tieBreak": "tie_break", "unkToken": "unk_token", "maxMerges": "max_merges",
    "endOfWordMarker": "end_of_word_marker", "maxTokenLength": "max_token_length",
    "superwordTransition": "superword_transition", "superwordPattern": "superword_pattern",
}
_DEFAULTS = TrainerConfig()


class BPETokenizer(Estimator, _EncodeParams, DefaultParamsReadable, DefaultParamsWritable):
    """Trains a BPE tokenizer on ``df[inputCol]`` (:func:`bpe_spark.spark.train`); ``fit`` gives a
    :class:`BPETokenizerModel` with this Estimator's encoding Params.

    Training Params are :class:`~bpe_spark.bpe.config.TrainerConfig`'s fields in camelCase
    (``vocabSize``, ``scheme``, ``pattern``, ``specialTokens``, ``minFrequency``...), with its
    defaults, and ``train``'s options: ``driverBudget``, ``engine``, ``checkpointDir``, ``resume``.
    Encoding Params: ``inputCol`` (default ``text``), ``outputCol`` (default ``input_ids``),
    ``eos``, ``bos``, ``eosId``, ``bosId``, ``allowedSpecial``, ``disallowedSpecial``.

    >>> BPETokenizer(vocabSize=8000, specialTokens=["<|endoftext|>"], eos="<|endoftext|>").getVocabSize()  # doctest: +SKIP
    8000
    """

    vocabSize = _param("vocabSize", "special tokens + initial alphabet + merges", TypeConverters.toInt)
    scheme = _param("scheme", "'byte' (byte-level BPE) or 'char'", TypeConverters.toString)
    endOfWord = _param("endOfWord", "char scheme: 'separate' or 'fused' end-of-word marker", TypeConverters.toString)
    pattern = _param("pattern", "the pretokenizer: a preset (gpt2, cl100k, o200k...) or a regex",
                     TypeConverters.toString)
    lowercase = _param("lowercase", "lowercase the text before pretokenizing", TypeConverters.toBoolean)
    normalization = _param("normalization", "Unicode normalization: unset, 'NFC' or 'NFKC'", TypeConverters.toString)
    specialTokens = _param("specialTokens", "special tokens (the first ids)", TypeConverters.toListString)
    minFrequency = _param("minFrequency", "stop when the best pair is rarer than this", TypeConverters.toInt)
    tieBreak = _param("tieBreak", "equal pair counts: 'hf' or 'lexicographic'", TypeConverters.toString)
    unkToken = _param("unkToken", "char scheme: the unknown token (one of specialTokens)", TypeConverters.toString)
    maxMerges = _param("maxMerges", "at most this many merges (unset: no cap)", TypeConverters.toInt)
    endOfWordMarker = _param("endOfWordMarker", "char scheme: the end-of-word marker", TypeConverters.toString)
    maxTokenLength = _param("maxTokenLength", "no token longer than this many bytes (byte scheme) or characters "
                            "(char scheme, the marker not counted); unset: no limit", TypeConverters.toInt)
    superwordTransition = _param("superwordTransition", "SuperBPE: merges of stage 1 (within words) before "
                                 "stage 2's superwords (unset: plain BPE)", TypeConverters.toInt)
    superwordPattern = _param("superwordPattern", "SuperBPE: stage 2's pretokenizer (superbpe, or a regex)",
                              TypeConverters.toString)
    driverBudget = _param("driverBudget", "distinct pretokens the driver may hold: a count, a fraction "
                          "(0.3, '30%') or 'auto' (from the driver's memory); above it training runs in rounds", _budget)
    engine = _param("engine", f"who pretokenizes while counting: one of {ENGINES}", TypeConverters.toString)
    checkpointDir = _param("checkpointDir", "where the counts and each round's merges are kept (unset: none)",
                           TypeConverters.toString)
    resume = _param("resume", "continue a run interrupted in checkpointDir", TypeConverters.toBoolean)

    def __init__(self, **params: Any) -> None:
        super().__init__()
        defaults = {name: getattr(_DEFAULTS, field) for name, field in _TRAINER_FIELDS.items()}
        defaults["specialTokens"] = list(_DEFAULTS.special_tokens)
        self._setDefault(**{k: v for k, v in defaults.items() if v is not None})
        self._setDefault(driverBudget=DEFAULT_DRIVER_BUDGET, engine=ENGINES[0], resume=False)
        self.setParams(**params)

    def setParams(self, **params: Any) -> BPETokenizer:
        """Set Params by name (``vocabSize=8000, inputCol="body"``)."""
        return _set_params(self, params)

    def setVocabSize(self, value: int) -> BPETokenizer:
        return self._set(vocabSize=value)

    def getVocabSize(self) -> int:
        return self.getOrDefault(self.vocabSize)

    def trainer_config(self) -> TrainerConfig:
        """The :class:`~bpe_spark.bpe.config.TrainerConfig` of the Params (checked: ConfigError)."""
        fields = {field: self._value(getattr(self, name)) for name, field in _TRAINER_FIELDS.items()}
        fields["special_tokens"] = tuple(fields["special_tokens"] or ())
        return TrainerConfig(**fields)

    def _fit(self, dataset: DataFrame) -> BPETokenizerModel:
        self._check_schema(dataset)
        engine = self.getOrDefault(self.engine)
        if engine not in ENGINES:
            raise ConfigError(f"engine must be one of {ENGINES}, got {engine!r}")
        cfg = self.trainer_config()
        tok = train(dataset, cfg, text_col=self.getInputCol(), driver_budget=self.getOrDefault(self.driverBudget),
                    checkpoint_dir=self._value(self.checkpointDir), resume=self.getOrDefault(self.resume),
                    engine=engine)
        model = BPETokenizerModel(tokenizer=tok)
        return self._copyValues(model)


class BPETokenizerModel(Model, _EncodeParams, MLReadable, MLWritable):
    """Adds ``outputCol``: the ids of ``inputCol`` (``array<int>``), equal to
    :func:`bpe_spark.spark.encode`'s ``input_ids`` with the same options, row for row; every
    input column is kept. Null text gives a null array, empty text ``[]`` (plus BOS/EOS when asked).

    ``BPETokenizerModel(tokenizer=tok, inputCol=..., ...)`` wraps any loaded
    :class:`~bpe_spark.encoding.tokenizer.Tokenizer` (GPT-2 files, ``tokenizer.json``...); :attr:`tokenizer`
    is the core tokenizer.

    >>> ids = BPETokenizerModel(tokenizer=tok, outputCol="ids", eos="<|endoftext|>").transform(df)  # doctest: +SKIP
    """

    def __init__(self, tokenizer: Tokenizer | None = None, **params: Any) -> None:
        super().__init__()
        self._tokenizer = tokenizer
        self.setParams(**params)

    def setParams(self, **params: Any) -> BPETokenizerModel:
        """Set Params by name (``outputCol="ids", eos="<|endoftext|>"``)."""
        return _set_params(self, params)

    @property
    def tokenizer(self) -> Tokenizer:
        if self._tokenizer is None:
            raise ConfigError("this BPETokenizerModel has no tokenizer: fit a BPETokenizer, load a saved model, or "
                              "pass tokenizer= (a bpe_spark Tokenizer)")
        return self._tokenizer

    def _transform(self, dataset: DataFrame) -> DataFrame:
        tok = self.tokenizer
        self._check_schema(dataset)
        model = ModelBroadcast(dataset.sparkSession, tok, self.encode_options().resolved(tok))
        text, out = self.getInputCol(), self.getOutputCol()
        if _ARROW_UDF is not None:
            return dataset.withColumn(out, _ARROW_UDF(_text_ids(model), IDS_TYPE)(F.col(f"`{text}`")))
        return _transform_rows(dataset, model, text, out)

    def write(self) -> _ModelWriter:
        return _ModelWriter(self)

    @classmethod
    def read(cls) -> _ModelReader:
        return _ModelReader(cls)


def _set_params(instance: Params, params: dict[str, Any]):
    unknown = sorted(name for name in params if not instance.hasParam(name))
    if unknown:
        known = sorted(p.name for p in instance.params)
        raise ConfigError(f"{type(instance).__name__} has no Param {', '.join(unknown)}; its Params: {', '.join(known)}")
    return instance._set(**params)


# --- the encoding tasks ---------------------------------------------------------------------------
def _ids(encoder, texts: pa.Array) -> pa.Array:
    """The ids column (list<int32>) of one Arrow array of texts."""
    parts = [ids for _, _, ids, _, _ in encoded_slices(encoder, pa.RecordBatch.from_arrays([texts], ["text"]), 0)]
    return parts[0] if len(parts) == 1 else pa.concat_arrays(parts)


def _text_ids(model: ModelBroadcast):
    """The Arrow UDF's body: the ids of each batch of texts, messages in the driver's words."""
    speaking = current_interface()

    def text_ids(batches: Iterator[pa.Array]) -> Iterator[pa.Array]:
        with interface(speaking):
            encoder = model.encoder()
            for texts in batches:
                yield _ids(encoder, texts)

    return text_ids


def _transform_rows(dataset: DataFrame, model: ModelBroadcast, text: str, out: str) -> DataFrame:
    """Before pyspark 4.1 (no Arrow UDF): the whole rows through ``mapInArrow``, the ids appended."""
    index = dataset.columns.index(text)
    speaking = current_interface()

    def run(batches):
        with interface(speaking):
            encoder = model.encoder()
            for batch in batches:
                yield pa.RecordBatch.from_arrays([*batch.columns, _ids(encoder, batch.column(index))],
                                                 [*batch.schema.names, out])

    return dataset.mapInArrow(run, T.StructType([*dataset.schema.fields, T.StructField(out, IDS_TYPE, True)]))


# --- saving and loading ---------------------------------------------------------------------------
def _model_path(path: str) -> str:
    return f"{str(path).rstrip('/')}/{MODEL_DIR}"


class _ModelWriter(DefaultParamsWriter):
    """The Params as Spark ML's metadata, then the model directory beside it."""

    def saveImpl(self, path: str) -> None:
        tok = self.instance.tokenizer  # no tokenizer: refused before anything is written
        super().saveImpl(path)
        save_model(self.sparkSession, tok, _model_path(path), option="path")


class _ModelReader(DefaultParamsReader):
    """The Params from the metadata, the tokenizer from the model directory."""

    def load(self, path: str) -> BPETokenizerModel:
        metadata = DefaultParamsReader.loadMetadata(path, self.sparkSession)
        expected = f"{self.cls.__module__}.{self.cls.__name__}"
        if metadata.get("class") != expected:
            raise ConfigError(f"{path} holds a saved {metadata.get('class')}, not a {expected}")
        instance = self.cls()
        instance._resetUid(metadata["uid"])
        DefaultParamsReader.getAndSetParams(instance, metadata)
        instance._tokenizer = load_model(self.sparkSession, _model_path(path))
        return instance
