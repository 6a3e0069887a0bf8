"""Model files: the model directory round trip, atomic writes, tokenizer.json / GPT-2 / tiktoken
export and import, Tokenizer.load of any format, the inspect/export commands, and clear errors for damaged files."""

from __future__ import annotations

import base64
import json
import pickle
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import tiktoken
from tests.conftest import PEERS, corpus_lines, corpus_text
from tiktoken.load import load_tiktoken_bpe
from tokenizers import Tokenizer as HfTokenizer

from bpe_spark import ConfigError, ModelFormatError, Tokenizer, TrainerConfig, train
from bpe_spark.cli import main as cli_main
from bpe_spark.errors import OutputExistsError
from bpe_spark.models.load import detect_format, export_model
from bpe_spark.models.huggingface.tokenizer_json_write import to_hf_dict
from bpe_spark.bpe.oniguruma import onig_pattern, python_pattern
from bpe_spark.bpe.patterns import PRESETS

SPECIALS = ("<|endoftext|>", "<|pad|>")
TEXT = (
    "The quick brown fox jumps over the lazy dog. It's 2024; the dog's 3 friends weren't amused!\n"
    "Über naïve café — ΑΒΓ δέλτα, русский текст, 中文字符 and emoji 🙂🙂 plus tabs\tand  spaces.\n"
) * 40


@pytest.fixture(scope="module")
def byte_tok() -> Tokenizer:
    cfg = TrainerConfig(vocab_size=360, special_tokens=SPECIALS, pattern="gpt2")
    tok = train(TEXT.splitlines(keepends=True), cfg)
    tok.metadata["rounds"] = [{"round": 1, "merges": len(tok.merges), "threshold": None}]
    tok.metadata["timings"] = {"count_seconds": 0.5, "merge_seconds": 1.25}
    return tok


@pytest.fixture(scope="module")
def ml_lines() -> list[str]:
    return corpus_lines("multilingual", 150_000)


def _same(a: Tokenizer, b: Tokenizer) -> None:
    assert b.to_dict() == a.to_dict()
    assert b.merges == a.merges and b.vocab == a.vocab and b.special_tokens == a.special_tokens


# --- model directory --------------------------------------------------------------------------
def test_byte_model_round_trip(tmp_path, byte_tok):
    out = tmp_path / "model"
    byte_tok.save(out)
    assert sorted(p.name for p in out.iterdir()) == [
        "_BPE_SPARK",
        "bpe_spark.json",
        "merges.parquet",
        "special_tokens_map.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "vocab.parquet",
    ]
    back = Tokenizer.load(out)
    _same(byte_tok, back)
    assert back.config == byte_tok.config and back.metadata["rounds"] == byte_tok.metadata["rounds"]
    sample = "The dog's café 🙂<|pad|> naïve"
    assert back.encode(sample, allowed_special="all") == byte_tok.encode(
        sample, allowed_special="all"
    )
    assert pickle.loads(pickle.dumps(back)).to_dict() == byte_tok.to_dict()


def test_model_files_hold_design_columns(tmp_path, byte_tok):
    out = tmp_path / "model"
    byte_tok.save(out)
    merges = pq.read_table(out / "merges.parquet")
    assert merges.schema.names == [
        "rank",
        "left",
        "right",
        "id",
        "left_bytes",
        "right_bytes",
        "token_bytes",
        "count",
    ]
    assert [f.type for f in merges.schema] == [pa.int32()] * 4 + [pa.binary()] * 3 + [pa.int64()]
    rows = merges.to_pylist()
    assert [r["rank"] for r in rows] == list(range(len(byte_tok.merges)))
    assert [(r["left_bytes"], r["right_bytes"]) for r in rows] == byte_tok.merges
    assert all(r["token_bytes"] == r["left_bytes"] + r["right_bytes"] for r in rows)
    assert [r["count"] for r in rows] == byte_tok.metadata["merge_counts"]
    assert rows[0]["id"] == 256 and rows[0]["count"] >= rows[-1]["count"] > 0

    vocab = pq.read_table(out / "vocab.parquet")
    assert [(f.name, f.type) for f in vocab.schema] == [
        ("id", pa.int32()),
        ("token_bytes", pa.binary()),
        ("kind", pa.string()),
    ]
    kinds = {r["id"]: (r["kind"], r["token_bytes"]) for r in vocab.to_pylist()}
    assert len(kinds) == byte_tok.vocab_size == 360
    assert kinds[65] == ("byte", b"A") and kinds[256][0] == "merge"
    assert kinds[358] == ("special", b"<|endoftext|>") and kinds[359] == ("special", b"<|pad|>")

    meta = json.loads((out / "bpe_spark.json").read_text())
    assert (
        meta["format_version"] == 1 and meta["scheme"] == "byte" and meta["merge_rule"] == "pairs"
    )
    assert meta["tie_break"] == "hf" and meta["config"] == byte_tok.config.to_dict()
    assert meta["pattern"] == {"name": "gpt2", "regex": PRESETS["gpt2"]}
    assert meta["special_tokens"] == [
        {"token": "<|endoftext|>", "id": 358},
        {"token": "<|pad|>", "id": 359},
    ]
    assert meta["stats"]["distinct_pretokens"] == byte_tok.metadata["stats"]["distinct_pretokens"]
    assert meta["timings"] == {"count_seconds": 0.5, "merge_seconds": 1.25}
    assert meta["metadata"]["rounds"] == byte_tok.metadata["rounds"]


@pytest.mark.parametrize("end_of_word", ["separate", "fused"])
def test_char_model_round_trip(tmp_path, end_of_word):
    cfg = TrainerConfig(
        vocab_size=120,
        scheme="char",
        end_of_word=end_of_word,
        pattern="words",
        lowercase=True,
        normalization="NFKC",
        special_tokens=("<unk>", "<s>"),
        unk_token="<unk>",
        tie_break="lexicographic",
    )
    tok = train(["Ünïcode wörds and more wörds, lower lowest newest widest"] * 3, cfg)
    out = tmp_path / "char"
    tok.save(out)
    # tokenizers fuses its end_of_word_suffix onto the last character: no tokenizer.json for "separate"
    assert (out / "tokenizer.json").exists() == (end_of_word == "fused")
    if end_of_word == "fused":
        hf = HfTokenizer.from_file(str(out / "tokenizer.json"))
        for text in ("Wörds lowest ☃", "ünïcode, more<s>newest"):
            assert hf.encode(text).ids == tok.encode(text, allowed_special="all")
    kinds = {r["id"]: r["kind"] for r in pq.read_table(out / "vocab.parquet").to_pylist()}
    assert kinds[0] == kinds[1] == "special" and kinds[2] == "char" and "merge" in kinds.values()
    back = Tokenizer.load(out)
    _same(tok, back)
    assert back.vocab[2] == tok.vocab[2] and isinstance(back.vocab[2], str)
    text = "Wörds lowest ☃"
    assert back.encode(text) == tok.encode(text) and back.decode(back.encode("wörds")) == "wörds"


def test_imported_models_round_trip(tmp_path, gpt2_tok, cl100k_tok):
    for name, tok in (("gpt2", gpt2_tok), ("cl100k", cl100k_tok)):
        tok.save(tmp_path / name)
        back = Tokenizer.load(tmp_path / name)
        _same(tok, back)
        assert back.merge_rule == tok.merge_rule
        meta = json.loads((tmp_path / name / "bpe_spark.json").read_text())
        assert meta["config"] is None and meta["merge_counts_in_parquet"] is False
        counts = pq.read_table(tmp_path / name / "merges.parquet").column("count")
        assert counts.null_count == len(counts)


def test_save_with_exports(tmp_path, byte_tok):
    out = tmp_path / "m"
    byte_tok.save(out, exports=("gpt2", "tiktoken"))
    names = sorted(p.name for p in out.iterdir())
    assert names == [
        "_BPE_SPARK",
        "bpe_spark.json",
        "merges.parquet",
        "merges.txt",
        "model.tiktoken",
        "model.tiktoken.json",
        "special_tokens_map.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "vocab.json",
        "vocab.parquet",
    ]
    gpt2 = Tokenizer.load(out / "vocab.json")
    assert gpt2.merges == byte_tok.merges and gpt2.special_tokens == byte_tok.special_tokens
    assert json.loads((out / "bpe_spark.json").read_text())["files"]["exports"] == {
        "gpt2": ["vocab.json", "merges.txt"],
        "tiktoken": ["model.tiktoken", "model.tiktoken.json"],
    }
    with pytest.raises(ConfigError, match="unknown export format 'bpe'"):
        byte_tok.save(tmp_path / "m2", exports=("bpe",))
    assert not (tmp_path / "m2").exists()


def test_metadata_json_cannot_hold_is_refused(tmp_path, byte_tok):
    tok = Tokenizer.from_dict({**byte_tok.to_dict(), "metadata": {"stats": {"seen": {1, 2}}}})
    with pytest.raises(ConfigError, match=r"tok.metadata\['stats'\]\['seen'\] is a set"):
        tok.save(tmp_path / "m")
    assert list(tmp_path.iterdir()) == []


# --- atomic writes ----------------------------------------------------------------------------
def test_existing_target_is_an_error_unless_overwrite(tmp_path, byte_tok):
    out = tmp_path / "model"
    byte_tok.save(out)
    before = (out / "merges.parquet").read_bytes()
    with pytest.raises(
        OutputExistsError, match=r"model already exists; pass overwrite=True to replace it"
    ):
        byte_tok.save(out)
    smaller = train(["abc abc abd"], TrainerConfig(vocab_size=258))
    smaller.save(out, overwrite=True)
    assert Tokenizer.load(out).merges == smaller.merges
    assert (out / "merges.parquet").read_bytes() != before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # no staging left behind


def test_failed_save_leaves_nothing_behind(tmp_path, byte_tok, monkeypatch):
    from bpe_spark.models.huggingface import tokenizer_json_write

    def broken(tok):  # tokenizer.json is open for writing when its content fails
        raise RuntimeError("disk full")

    monkeypatch.setattr(tokenizer_json_write, "to_hf_dict", broken)
    with pytest.raises(RuntimeError, match="disk full"):
        byte_tok.save(tmp_path / "new" / "deeper" / "model")
    assert list(tmp_path.iterdir()) == []  # not even the parents it created

    keep = tmp_path / "keep"
    monkeypatch.undo()
    byte_tok.save(keep)
    before = {p.name: p.read_bytes() for p in keep.iterdir()}
    monkeypatch.setattr(tokenizer_json_write, "to_hf_dict", broken)
    with pytest.raises(RuntimeError, match="disk full"):
        byte_tok.save(keep, overwrite=True)
    assert {p.name: p.read_bytes() for p in keep.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep"]


def test_export_file_is_atomic_and_refuses_existing(tmp_path, byte_tok):
    out = tmp_path / "x.tiktoken"
    export_model(byte_tok, "tiktoken", out)
    with pytest.raises(OutputExistsError, match="x.tiktoken already exists"):
        export_model(byte_tok, "tiktoken", out)
    export_model(byte_tok, "tiktoken", out, overwrite=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.tiktoken", "x.tiktoken.json"]
    with pytest.raises(ConfigError, match="unknown export format 'json'"):
        export_model(byte_tok, "json", tmp_path / "y")


# --- damaged model directories ----------------------------------------------------------------
@pytest.fixture()
def saved(tmp_path, byte_tok) -> Path:
    out = tmp_path / "model"
    byte_tok.save(out)
    return out


def _rewrite(path: Path, table: pa.Table) -> None:
    pq.write_table(table, path)


def test_missing_file_is_named(saved):
    (saved / "vocab.parquet").unlink()
    with pytest.raises(ModelFormatError, match=r"vocab\.parquet: missing"):
        Tokenizer.load(saved)


def test_truncated_parquet_is_named(saved):
    path = saved / "merges.parquet"
    path.write_bytes(path.read_bytes()[:300])
    with pytest.raises(ModelFormatError, match=r"merges\.parquet: not a readable Parquet file"):
        Tokenizer.load(saved)


def test_truncated_json_names_line(saved):
    path = saved / "bpe_spark.json"
    text = path.read_text()
    path.write_text(text[: len(text) // 2])
    with pytest.raises(
        ModelFormatError, match=r"bpe_spark\.json: line \d+, column \d+: invalid JSON"
    ):
        Tokenizer.load(saved)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda m: m.pop("scheme"), r"bpe_spark\.json: field 'scheme' is missing"),
        (lambda m: m.update(format_version=7), r"field 'format_version' is 7"),
        (lambda m: m.update(lowercase="yes"), r"field 'lowercase' is \"yes\"; expected a boolean"),
        (lambda m: m.update(pattern={"name": "gpt5"}), r"field 'pattern.name' is \"gpt5\""),
        (
            lambda m: m.update(normalization="NFD"),
            r"field 'normalization' is \"NFD\"; expected null, \"NFC\" or \"NFKC\"",
        ),
        (
            lambda m: m.update(special_tokens=[{"token": "<|endoftext|>"}]),
            r"field 'special_tokens\[0\]'",
        ),
        (
            lambda m: m.update(num_merges=3),
            r"merges\.parquet: 102 rows, but bpe_spark\.json field 'num_merges' says 3",
        ),
        (
            lambda m: m["config"].update(vocab_size="big"),
            r"field 'config' is invalid: vocab_size must be an integer",
        ),
    ],
)
def test_bad_json_fields_are_named(saved, edit, message):
    path = saved / "bpe_spark.json"
    meta = json.loads(path.read_text())
    edit(meta)
    path.write_text(json.dumps(meta))
    with pytest.raises(ModelFormatError, match=message):
        Tokenizer.load(saved)


def _edit_column(path: Path, name: str, edit) -> None:
    table = pq.read_table(path)
    values = table.column(name).to_pylist()
    edit(values)
    index = table.schema.get_field_index(name)
    table = table.set_column(
        index, table.schema.field(name), pa.array(values, type=table.schema.field(name).type)
    )
    _rewrite(path, table)


def test_bad_parquet_contents_name_row_and_field(saved):
    merges = saved / "merges.parquet"
    original = merges.read_bytes()

    def expect(name, edit, message, path=merges):
        saved_bytes = path.read_bytes()
        _edit_column(path, name, edit)
        with pytest.raises(ModelFormatError, match=message):
            Tokenizer.load(saved)
        path.write_bytes(saved_bytes)

    expect(
        "left",
        lambda v: v.__setitem__(5, 99999),
        r"merges\.parquet: row 5: field 'left' is 99999, which is not a vocab",
    )
    expect("id", lambda v: v.__setitem__(3, -1), r"merges\.parquet: row 3: field 'id' is -1")
    expect("rank", lambda v: v.__setitem__(2, 7), r"merges\.parquet: row 2: field 'rank' is 7")
    expect(
        "token_bytes",
        lambda v: v.__setitem__(4, b"zz"),
        r"row 4: field 'token_bytes' is not left_bytes \+ right_bytes",
    )
    expect("right_bytes", lambda v: v.__setitem__(1, b"?"), r"row 1: field 'right_bytes' differs")
    expect(
        "id",
        lambda v: v.__setitem__(6, 256),
        r"row 6: field 'id' is 256, but the vocabulary gives left\+right the id 262",
    )
    vocab = saved / "vocab.parquet"
    expect(
        "kind",
        lambda v: v.__setitem__(10, "word"),
        r"vocab\.parquet: row 10 \(id 10\): field 'kind' is 'word'",
        vocab,
    )
    expect(
        "id",
        lambda v: v.__setitem__(11, 10),
        r"vocab\.parquet: row 11 \(id 10\): field 'id' repeats",
        vocab,
    )
    expect(
        "token_bytes",
        lambda v: v.__setitem__(12, b"ab"),
        r"row 12 \(id 12\): field 'kind' is 'byte' but token_bytes has 2",
        vocab,
    )
    expect(
        "token_bytes",
        lambda v: v.__setitem__(359, b"\xff"),
        r"row 359 \(id 359\): field 'token_bytes' is not UTF-8",
        vocab,
    )
    expect(
        "token_bytes",
        lambda v: v.__setitem__(359, b"<other>"),
        r"rows of kind 'special' .* differ",
        vocab,
    )
    assert merges.read_bytes() == original


def test_wrong_column_type_is_named(saved):
    path = saved / "vocab.parquet"
    original = pq.read_table(path)
    table = original.set_column(
        0, pa.field("id", pa.int64()), original.column("id").cast(pa.int64())
    )
    _rewrite(path, table)
    with pytest.raises(
        ModelFormatError, match=r"vocab\.parquet: column 'id' has type int64, expected int32"
    ):
        Tokenizer.load(saved)
    _rewrite(path, original.drop_columns(["kind"]))
    with pytest.raises(ModelFormatError, match=r"vocab\.parquet: column 'kind' is missing"):
        Tokenizer.load(saved)


# --- tokenizer.json ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("pattern", "lowercase", "normalization"),
    [
        ("gpt2", False, None),
        ("cl100k", False, None),
        ("o200k", True, "NFKC"),
        ("words", True, None),
        (r"\S+|\s", False, "NFC"),
    ],
)
def test_tokenizer_json_export_matches_tokenizers(
    tmp_path, ml_lines, pattern, lowercase, normalization
):
    cfg = TrainerConfig(
        vocab_size=700,
        pattern=pattern,
        lowercase=lowercase,
        normalization=normalization,
        special_tokens=SPECIALS,
    )
    tok = train(ml_lines, cfg)
    path = export_model(tok, "tokenizer.json", tmp_path)[0]
    assert path == tmp_path / "tokenizer.json"
    hf = HfTokenizer.from_file(str(path))
    ours = tok.encode_batch(ml_lines)
    assert [e.ids for e in hf.encode_batch(ml_lines)] == ours
    assert hf.decode(ours[7]) == tok.decode(ours[7])
    text = "x<|endoftext|>Ünïcode 12345 <|pad|>"
    assert hf.encode(text).ids == tok.encode(text, allowed_special="all")
    back = Tokenizer.load(path)  # import keeps pattern, normalization, specials, merges and ids
    assert (back.pattern, back.lowercase, back.normalization) == (pattern, lowercase, normalization)
    assert (
        back.merge_ids == tok.merge_ids
        and back.vocab == tok.vocab
        and back.special_tokens == tok.special_tokens
    )
    assert back.encode_batch(ml_lines[:50]) == ours[:50]


def test_tokenizer_json_with_reused_token_id(tmp_path):
    # Two merges make "abc" (ids as tokenizers assigns them: the second reuses id 258).
    vocab = {b: bytes([b]) for b in range(256)} | {256: b"bc", 257: b"ab", 258: b"abc", 259: b"cab"}
    tok = Tokenizer(
        scheme="byte",
        vocab=vocab,
        merges=[(98, 99), (97, 98), (97, 256), (257, 99), (99, 257)],
        special_tokens={"<s>": 260},
    )
    assert [m[2] for m in tok.merge_ids] == [256, 257, 258, 258, 259]
    data = to_hf_dict(tok)
    assert data["model"]["merges"] == ["b c", "a b", "a bc", "ab c", "c ab"]
    path = export_model(tok, "tokenizer.json", tmp_path / "t.json")[0]
    hf = HfTokenizer.from_file(str(path))
    for text in ["abc", "bcabc", "cabc abcab", "xabcx<s>cab"]:
        assert hf.encode(text).ids == tok.encode(text, allowed_special="all")
    assert Tokenizer.load(path).merge_ids == tok.merge_ids


def test_onig_pattern_rewrites_possessive_intervals():
    assert onig_pattern(r"\p{N}{1,3}+|\s") == r"(?>\p{N}{1,3})|\s"
    assert onig_pattern(r"[a-z\]]{2}+x") == r"(?>[a-z\]]{2})x"
    assert onig_pattern(r"(ab|c){1,}+") == r"(?>(ab|c){1,})"
    assert onig_pattern(r"a\{1,3}+") == r"a\{1,3}+"  # an escaped brace is no interval
    assert python_pattern(r"\p{N}{1,3}+") == r"(?:\p{N}{1,3})+"
    assert onig_pattern(PRESETS["gpt2"]) == PRESETS["gpt2"]


def _write_json(path: Path, data) -> Path:
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda d: d["model"].update(type="WordPiece"),
            r"field 'model.type': 'WordPiece' is not supported",
        ),
        (lambda d: d["model"].update(dropout=0.1), r"field 'model.dropout'"),
        (
            lambda d: d["model"]["merges"].__setitem__(3, "Ġ nosuchtoken"),
            r"field 'model.merges\[3\]': token 'nosuchtoken' is not in model.vocab",
        ),
        (
            lambda d: d["model"]["merges"].__setitem__(2, "a b c"),
            r"field 'model.merges\[2\]': .* is not a pair",
        ),
        (
            lambda d: d.update(normalizer={"type": "BertNormalizer"}),
            r"field 'normalizer.type': 'BertNormalizer' is not supported",
        ),
        (
            lambda d: d.update(pre_tokenizer={"type": "ByteLevel", "what": True}),
            r"field 'pre_tokenizer.what'",
        ),
        (lambda d: d.update(truncation={"max_length": 5}), r"field 'truncation'"),
        (lambda d: d.update(post_processor={"type": "BertNormalizer"}), r"field 'post_processor.type'"),
    ],
)
def test_bad_tokenizer_json_names_the_field(tmp_path, byte_tok, edit, message):
    data = to_hf_dict(byte_tok)
    edit(data)
    path = _write_json(tmp_path / "tokenizer.json", data)
    with pytest.raises(ModelFormatError, match=message) as info:
        Tokenizer.load(path)
    assert str(path) in str(info.value)


def test_truncated_tokenizer_json_names_line(tmp_path, byte_tok):
    path = export_model(byte_tok, "tokenizer.json", tmp_path / "tokenizer.json")[0]
    text = path.read_text()
    path.write_text(text[: len(text) * 2 // 3])
    with pytest.raises(
        ModelFormatError, match=r"tokenizer\.json: line \d+, column \d+: invalid JSON"
    ):
        Tokenizer.load(path)


def test_tokenizers_gpt2_style_file_imports(tmp_path, ml_lines):
    """A file written by tokenizers itself (its own trainer, ids in its alphabet order) loads with
    its ids and encodes as tokenizers does."""
    from tokenizers import decoders, models, pre_tokenizers, trainers

    hf = HfTokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600,
        special_tokens=["<|endoftext|>"],
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    hf.train_from_iterator(ml_lines, trainer)
    path = tmp_path / "hf.json"
    hf.save(str(path))
    tok = Tokenizer.load(path)
    assert tok.special_tokens == {"<|endoftext|>": 0} and tok.vocab_size == 600
    for line in ml_lines[:200]:
        assert tok.encode(line) == hf.encode(line).ids
    assert tok.encode("a<|endoftext|>b", allowed_special="all") == hf.encode("a<|endoftext|>b").ids


# --- GPT-2 files ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def gpt2_tok() -> Tokenizer:
    return Tokenizer.load(PEERS / "cs336" / "gpt2_vocab.json")


@pytest.fixture(scope="module")
def cl100k_tok() -> Tokenizer:
    from tests.peers.test_peer_tiktoken import tiktoken_cache_file

    return Tokenizer.load(tiktoken_cache_file("cl100k_base"))


def test_gpt2_files_import_and_export_exactly(tmp_path, gpt2_tok):
    assert gpt2_tok.special_tokens == {"<|endoftext|>": 50256} and len(gpt2_tok.merges) == 50000
    assert gpt2_tok.merges[0] == (b" ", b"t") and gpt2_tok.vocab[0] == b"!"
    out = export_model(gpt2_tok, "gpt2", tmp_path / "gpt2")
    assert json.loads(out[0].read_text()) == json.loads(
        (PEERS / "cs336" / "gpt2_vocab.json").read_text()
    )
    original = (PEERS / "cs336" / "gpt2_merges.txt").read_text().splitlines()
    assert out[1].read_text().splitlines() == [
        "#version: 0.2",
        *original,
    ]  # CS336's copy has no header
    assert detect_format(tmp_path / "gpt2") == "gpt2"
    assert Tokenizer.load(tmp_path / "gpt2").to_dict()["merges"] == gpt2_tok.to_dict()["merges"]


def test_gpt2_round_trip_of_trained_tokenizer(tmp_path, byte_tok):
    export_model(byte_tok, "gpt2", tmp_path / "g")
    back = Tokenizer.load(tmp_path / "g")
    assert back.vocab == byte_tok.vocab and back.merge_ids == byte_tok.merge_ids
    assert back.special_tokens == byte_tok.special_tokens  # found as tokens no merge makes
    assert back.encode(TEXT[:500]) == byte_tok.encode(TEXT[:500])
    explicit = Tokenizer.load(tmp_path / "g" / "vocab.json", special_tokens=["<|pad|>"])
    assert explicit.special_tokens == {"<|pad|>": 359}


def test_bad_gpt2_files_name_file_and_line(tmp_path, byte_tok):
    directory = tmp_path / "g"
    export_model(byte_tok, "gpt2", directory)
    merges = directory / "merges.txt"
    lines = merges.read_text().splitlines()
    merges.write_text("\n".join(lines[:4] + ["Ġt he extra"] + lines[5:]) + "\n")
    with pytest.raises(ModelFormatError, match=r"merges\.txt: line 5: expected two tokens"):
        Tokenizer.load(directory)
    merges.write_text("\n".join(lines[:2] + ["Ġ zzzzzz"] + lines[3:]) + "\n")
    with pytest.raises(
        ModelFormatError, match=r"merges\.txt: line 3: merge 'Ġ zzzzzz': token 'zzzzzz' is not in vocab\.json"
    ):
        Tokenizer.load(directory)
    merges.write_text("\n".join(lines) + "\n")
    vocab = directory / "vocab.json"
    vocab.write_text(vocab.read_text()[:-200])
    with pytest.raises(ModelFormatError, match=r"vocab\.json: line 1, column \d+: invalid JSON"):
        Tokenizer.load(directory)
    (directory / "vocab.json").write_text(json.dumps({"a": 0, "b": "one"}))
    with pytest.raises(ModelFormatError, match=r"vocab\.json: field 'b': id 'one'"):
        Tokenizer.load(directory)


# --- tiktoken files ---------------------------------------------------------------------------
def test_tiktoken_export_is_read_by_tiktoken(tmp_path, byte_tok, ml_lines):
    path = export_model(byte_tok, "tiktoken", tmp_path / "ours.tiktoken")[0]
    ranks = load_tiktoken_bpe(str(path))
    assert len(ranks) == 358 and ranks[b"A"] == 65
    enc = tiktoken.Encoding(
        "ours",
        pat_str=PRESETS["gpt2"],
        mergeable_ranks=ranks,
        special_tokens={"<|endoftext|>": 358, "<|pad|>": 359},
    )
    back = Tokenizer.load(
        path, pattern="gpt2", special_tokens={"<|endoftext|>": 358, "<|pad|>": 359}
    )
    assert back.merge_rule == "ranks" and back.merges == byte_tok.merges  # derived from ranks
    text = "".join(ml_lines[:300])
    assert back.encode(text) == enc.encode(text, disallowed_special=())
    assert back.encode("a<|pad|>", allowed_special="all") == enc.encode(
        "a<|pad|>", allowed_special="all"
    )
    assert Tokenizer.load(path).encode(text) == back.encode(text)  # the sidecar's pattern
    path.with_name("ours.tiktoken.json").unlink()
    with pytest.raises(ModelFormatError, match="pass pattern="):
        Tokenizer.load(path)


def test_bad_tiktoken_files_name_the_line(tmp_path):
    good = [f"{base64.b64encode(bytes([b])).decode()} {b}" for b in range(256)]
    cases = {
        "not base64": (good[:9] + ["@@@ 9"] + good[10:], r"line 10: b'@@@' is not base64"),
        "bad rank": (good[:3] + ["Aw== three"] + good[4:], r"line 4: rank b'three'"),
        "one field": (good[:5] + ["BQ=="] + good[6:], r"line 6: expected 'base64-token rank'"),
        "same rank": (good + ["YWI= 255"], r"line 257: rank 255 is given twice"),
        "missing byte": (good[:200] + good[201:], r"lacks single bytes \[200\]"),
    }
    for name, (lines, message) in cases.items():
        path = tmp_path / f"{name}.tiktoken"
        path.write_text("\n".join(lines) + "\n")
        with pytest.raises(ModelFormatError, match=message):
            Tokenizer.load(path, pattern="gpt2")


# --- Tokenizer.load of any format, and the commands ----------------------------------------------------------------
def test_load_recognises_each_format(tmp_path, byte_tok):
    byte_tok.save(tmp_path / "model", exports=("gpt2", "tiktoken"))
    assert detect_format(tmp_path / "model") == "model_dir"
    assert detect_format(tmp_path / "model" / "bpe_spark.json") == "model_dir"
    assert detect_format(tmp_path / "model" / "tokenizer.json") == "tokenizer.json"
    assert detect_format(tmp_path / "model" / "vocab.json") == "gpt2"
    assert detect_format(tmp_path / "model" / "model.tiktoken") == "tiktoken"
    (tmp_path / "hf").mkdir()
    (tmp_path / "model" / "tokenizer.json").rename(tmp_path / "hf" / "tokenizer.json")
    assert detect_format(tmp_path / "hf") == "tokenizer.json"
    assert Tokenizer.load(tmp_path / "hf").merge_ids == byte_tok.merge_ids
    with pytest.raises(ModelFormatError, match="no such file or directory"):
        Tokenizer.load(tmp_path / "absent")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelFormatError, match="no model here"):
        Tokenizer.load(tmp_path / "empty")


def test_cli_inspect_and_export(tmp_path, byte_tok, capsys):
    byte_tok.save(tmp_path / "model")
    assert cli_main(["inspect", str(tmp_path / "model"), "--merges", "3"]) == 0
    shown = capsys.readouterr().out
    for expected in (
        'scheme: "byte"',
        "vocab_size: 360",
        f"merges: {len(byte_tok.merges)}",
        '"<|endoftext|>": 358',
        'pattern: "gpt2"',
        f"first merges (3 of {len(byte_tok.merges):,}):",
        "distinct_pretokens:",
    ):
        assert expected in shown
    assert cli_main(["inspect", str(tmp_path / "model"), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["vocab_size"] == 360 and summary["stats"]["distinct_pretokens"] > 0
    for fmt, out in (("gpt2", "g"), ("tiktoken", "t.tiktoken"), ("tokenizer.json", "t.json")):
        assert (
            cli_main(
                [
                    "export",
                    "--model",
                    str(tmp_path / "model"),
                    "--format",
                    fmt,
                    "--out",
                    str(tmp_path / out),
                ]
            )
            == 0
        )
    assert capsys.readouterr().out.split() == [
        str(tmp_path / "g" / "vocab.json"),
        str(tmp_path / "g" / "merges.txt"),
        str(tmp_path / "g" / "tokenizer_config.json"),
        str(tmp_path / "g" / "special_tokens_map.json"),
        str(tmp_path / "t.tiktoken"),
        str(tmp_path / "t.tiktoken.json"),
        str(tmp_path / "t.json"),
    ]
    assert Tokenizer.load(tmp_path / "t.json").merge_ids == byte_tok.merge_ids
    assert (
        cli_main(
            [
                "export",
                "--model",
                str(tmp_path / "model"),
                "--format",
                "gpt2",
                "--out",
                str(tmp_path / "g"),
            ]
        )
        == 2
    )
    assert "g already exists; pass --overwrite to replace it" in capsys.readouterr().err
    assert (
        cli_main(
            [
                "export",
                "--model",
                str(tmp_path / "model"),
                "--format",
                "gpt2",
                "--out",
                str(tmp_path / "g"),
                "--overwrite",
            ]
        )
        == 0
    )


def test_cli_export_subword_nmt(tmp_path, capsys):
    cfg = TrainerConfig(
        vocab_size=60,
        scheme="char",
        end_of_word="fused",
        pattern="whitespace",
        tie_break="lexicographic",
    )
    tok = train(["low lower newest widest low newest"], cfg)
    tok.save(tmp_path / "char")
    assert (
        cli_main(
            [
                "export",
                "--model",
                str(tmp_path / "char"),
                "--format",
                "subword-nmt",
                "--out",
                str(tmp_path / "codes.bpe"),
            ]
        )
        == 0
    )
    lines = (tmp_path / "codes.bpe").read_text().splitlines()
    assert lines[0].startswith("#version") and len(lines) == 1 + len(tok.merges)
    assert (
        cli_main(
            [
                "export",
                "--model",
                str(tmp_path / "char"),
                "--format",
                "gpt2",
                "--out",
                str(tmp_path / "g"),
            ]
        )
        == 2
    )
    assert "char scheme" in capsys.readouterr().err and not (tmp_path / "g").exists()


def test_tokenizer_json_of_corpus_text_decodes(tmp_path):
    text = corpus_text("tiny_shakespeare", 50_000)
    tok = train([text], TrainerConfig(vocab_size=400))
    hf = HfTokenizer.from_file(str(export_model(tok, "tokenizer.json", tmp_path)[0]))
    ids = hf.encode(text).ids
    assert ids == tok.encode(text) and hf.decode(ids) == text


def test_transformers_loads_the_export(tmp_path, byte_tok):
    """Runs where transformers is installed (it is not a dependency of bpe-spark)."""
    transformers = pytest.importorskip("transformers")
    path = export_model(byte_tok, "tokenizer.json", tmp_path / "tokenizer.json")[0]
    fast = transformers.PreTrainedTokenizerFast(tokenizer_file=str(path), eos_token="<|endoftext|>")
    assert fast.eos_token_id == 358
    for line in TEXT.splitlines(keepends=True)[:2]:
        assert fast(line)["input_ids"] == byte_tok.encode(line)
    text = "a<|endoftext|>b"
    assert fast(text)["input_ids"] == byte_tok.encode(text, allowed_special="all")
