"""The pyspark.ml API (issue 17): ``Pipeline([BPETokenizer(...)]).fit(df).transform(df)`` gives
the ids of ``bpe_spark.spark.encode`` and of the core Tokenizer, keeps every input column, saves
and loads back (the PipelineModel, the model alone, the Estimator) to the same output, has sane
Params, and leaves the user's session as it found it."""

from __future__ import annotations

import dataclasses
import json

import pytest
from tests.conftest import corpus_lines
from pyspark.ml import Pipeline, PipelineModel
from pyspark.sql import functions as F

from bpe_spark import ConfigError, Tokenizer, TrainerConfig
from bpe_spark import train as core_train
from bpe_spark.errors import ColumnError
from bpe_spark.spark import BPETokenizer, BPETokenizerModel, encode
from bpe_spark.spark import ml as spark_ml

pytestmark = pytest.mark.spark

EOT = "<|endoftext|>"
VOCAB = 400


@pytest.fixture(scope="module")
def texts():
    """Tiny Shakespeare lines, some holding the special token, an empty one and a null one."""
    lines = corpus_lines("tiny_shakespeare", 60_000)
    lines[5] = f"First{EOT}Citizen:\n"
    lines[9] = ""
    lines[11] = None
    return lines


@pytest.fixture(scope="module")
def docs(spark, texts):
    rows = [(i, f"doc-{i}", text) for i, text in enumerate(texts)]
    return spark.createDataFrame(rows, "id long, name string, text string").repartition(3)


def _estimator(**params):
    return BPETokenizer(vocabSize=VOCAB, specialTokens=[EOT], inputCol="text", outputCol="ids", **params)


@pytest.fixture(scope="module")
def fitted(spark, docs):
    """A fitted PipelineModel, with the session's conf before and after fitting."""
    before = dict(spark.sparkContext.getConf().getAll()), dict(spark.conf.getAll)
    model = Pipeline(stages=[_estimator(allowedSpecial="all", eos=EOT)]).fit(docs)
    after = dict(spark.sparkContext.getConf().getAll()), dict(spark.conf.getAll)
    return model, before, after


def _by_id(frame, column="ids", rows=None):
    rows = frame.collect() if rows is None else rows
    return {row["id"]: (None if row[column] is None else list(row[column])) for row in rows}


@pytest.fixture(scope="module")
def transformed(fitted, docs):
    """The rows of the fitted pipeline's output, collected once for the tests that read them."""
    return fitted[0].transform(docs).collect()


def test_the_pipeline_gives_the_ids_of_encode_and_of_the_core_tokenizer(fitted, docs, texts, transformed):
    model, _, _ = fitted
    out = model.transform(docs)
    assert out.columns == ["id", "name", "text", "ids"]
    assert out.schema["ids"].dataType.simpleString() == "array<int>"
    ids = _by_id(out, rows=transformed)
    tok = model.stages[-1].tokenizer
    # the merges are the core trainer's
    core = core_train([t for t in texts if t is not None], TrainerConfig(vocab_size=VOCAB, special_tokens=(EOT,)))
    assert tok.merges == core.merges
    eot = tok.special_tokens[EOT]
    for i, text in enumerate(texts):
        expected = None if text is None else tok.encode(text, allowed_special="all") + [eot]
        assert ids[i] == expected, i
    assert ids[5].count(eot) == 2  # the token in the text, and the EOS
    assert ids[9] == [eot]
    spark_ids = _by_id(encode(docs, tok, id_cols=["id"], allowed_special="all", eos=EOT), "input_ids")
    assert spark_ids == ids
    # the other columns ride along, unchanged
    assert {r["id"]: (r["name"], r["text"]) for r in transformed} == {i: (f"doc-{i}", t) for i, t in enumerate(texts)}


def test_the_encoding_params_are_encode_s_options(fitted, docs, texts):
    tok = fitted[0].stages[-1].tokenizer
    model = BPETokenizerModel(tokenizer=tok, inputCol="text", outputCol="ids", bosId=0)
    ids = _by_id(model.transform(docs))
    # the defaults: special-token text is ordinary text, as encode's defaults
    assert ids == _by_id(encode(docs, tok, id_cols=["id"], bos_id=0), "input_ids")
    assert ids[5][1:] == tok.encode(texts[5], disallowed_special=())
    strict = model.copy({model.disallowedSpecial: "all"}).transform(docs)
    with pytest.raises(Exception, match="DisallowedSpecialTokenError"):
        strict.collect()


def test_the_row_path_for_older_pyspark_gives_the_same_ids(fitted, docs, transformed, monkeypatch):
    model = fitted[0]
    expected = _by_id(None, rows=transformed)  # the Arrow path's
    monkeypatch.setattr(spark_ml, "_ARROW_UDF", None)  # pyspark 4.0: no arrow_udf
    out = model.transform(docs)
    assert out.columns == ["id", "name", "text", "ids"]
    assert _by_id(out) == expected


def test_saved_and_loaded_back_gives_the_same_output(fitted, docs, transformed, tmp_path):
    model, _, _ = fitted
    expected = _by_id(None, rows=transformed)
    model.save(str(tmp_path / "pipeline"))
    loaded = PipelineModel.load(str(tmp_path / "pipeline"))
    assert isinstance(loaded.stages[0], BPETokenizerModel)
    assert _by_id(loaded.transform(docs)) == expected
    assert loaded.stages[0].getOrDefault("eos") == EOT and loaded.stages[0].uid == model.stages[0].uid

    stage = model.stages[0]
    stage.write().save(str(tmp_path / "alone"))
    stage.write().overwrite().save(str(tmp_path / "alone"))  # Spark ML's overwrite, then ours
    alone = BPETokenizerModel.load(str(tmp_path / "alone"))
    assert _by_id(alone.transform(docs)) == expected
    # the model directory inside is ours, readable without Spark
    core = Tokenizer.load(str(tmp_path / "alone" / "model"))
    assert core.merges == stage.tokenizer.merges and core.special_tokens == stage.tokenizer.special_tokens
    metadata = json.loads((next((tmp_path / "alone" / "metadata").glob("part-*"))).read_text())
    assert metadata["class"] == "bpe_spark.spark.ml.BPETokenizerModel"
    assert metadata["paramMap"]["allowedSpecial"] == "all"

    with pytest.raises(ConfigError, match="not a bpe_spark.spark.ml.BPETokenizerModel"):
        spark_ml.BPETokenizerModel.load(str(tmp_path / "pipeline"))  # a PipelineModel's metadata


def test_an_unfitted_pipeline_and_the_estimator_save_their_params(tmp_path):
    pipeline = Pipeline(stages=[_estimator(minFrequency=2, driverBudget=0.5, pattern="cl100k")])
    pipeline.save(str(tmp_path / "unfitted"))
    estimator = Pipeline.load(str(tmp_path / "unfitted")).getStages()[0]
    assert isinstance(estimator, BPETokenizer)
    assert estimator.trainer_config() == TrainerConfig(vocab_size=VOCAB, special_tokens=(EOT,), min_frequency=2,
                                                       pattern="cl100k")
    assert estimator.getOrDefault("driverBudget") == "0.5"
    assert estimator.getOutputCol() == "ids"


def test_params_defaults_copy_and_explain():
    estimator = BPETokenizer()
    assert estimator.trainer_config() == TrainerConfig()  # the defaults are TrainerConfig's
    assert set(spark_ml._TRAINER_FIELDS.values()) == {f.name for f in dataclasses.fields(TrainerConfig)}
    assert estimator.getInputCol() == "text" and estimator.getOutputCol() == "input_ids"
    assert estimator.getOrDefault("driverBudget") == "auto"
    assert estimator.getOrDefault("allowedSpecial") == [] and not estimator.isDefined("eos")
    copied = estimator.copy({estimator.vocabSize: 1000})
    assert copied.getVocabSize() == 1000 and estimator.getVocabSize() == 32000
    assert copied.uid == estimator.uid
    explained = estimator.explainParams()
    for name in ("vocabSize", "specialTokens", "driverBudget", "inputCol", "outputCol", "eos", "allowedSpecial"):
        assert f"{name}:" in explained
    assert "vocabSize: special tokens + initial alphabet + merges (default: 32000)" in explained
    model = BPETokenizerModel(outputCol="ids")
    assert model.getOutputCol() == "ids" and not model.hasParam("vocabSize")
    with pytest.raises(ConfigError, match="has no Param vocab_size"):
        BPETokenizer(vocab_size=1000)
    with pytest.raises(TypeError):
        BPETokenizer(allowedSpecial="<|endoftext|>")  # a token alone: a list, or 'all'


def test_bad_input_is_refused_before_any_work(spark, docs, fitted):
    with pytest.raises(ConfigError, match="scheme must be one of"):
        _estimator(scheme="bytes").fit(docs)
    with pytest.raises(ConfigError, match="engine must be one of"):
        _estimator(engine="fast").fit(docs)
    with pytest.raises(ColumnError, match="body"):
        _estimator().setInputCol("body").fit(docs)
    with pytest.raises(ColumnError, match="already exists"):
        _estimator().setOutputCol("name").fit(docs)
    stage = fitted[0].stages[0]
    with pytest.raises(ColumnError, match="already exists"):
        stage.transform(docs.withColumn("ids", F.lit(1)))
    with pytest.raises(ColumnError, match="string"):
        stage.copy({stage.inputCol: "id"}).transform(docs)
    with pytest.raises(ConfigError, match="has no tokenizer"):
        BPETokenizerModel().transform(docs)
    with pytest.raises(ConfigError, match="eos"):
        stage.copy({stage.eos: "not one token at all"}).transform(docs)


def test_the_user_s_session_is_left_as_it_was(spark, fitted, docs, tmp_path):
    model, before, after = fitted
    assert after == before
    model.save(str(tmp_path / "m"))
    PipelineModel.load(str(tmp_path / "m")).transform(docs).count()
    assert not spark.sparkContext._jsc.sc().isStopped()
    assert spark.getActiveSession() is spark
    assert spark.range(3).count() == 3


def test_superword_and_length_params_reach_the_config():
    estimator = BPETokenizer(vocabSize=1000, superwordTransition=500, superwordPattern="superbpe", maxTokenLength=12)
    assert estimator.trainer_config() == TrainerConfig(vocab_size=1000, superword_transition=500, max_token_length=12)
