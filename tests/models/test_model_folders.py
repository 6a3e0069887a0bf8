"""Model folders their stack loads as they are (issue 14.3): a model directory or a tokenizer.json
export is a folder ``transformers.AutoTokenizer.from_pretrained`` loads with its eos/bos/pad/unk,
``padding=True`` and ``model_max_length``; the GPT-2 export folder too; char-scheme models (``</w>``
fused) export to a tokenizer.json that ``tokenizers`` runs. Each gives our ids, line for line, on
2,000 lines of every shared corpus and the edge cases."""

from __future__ import annotations

import json
import warnings

import pytest
from tests.conftest import PEERS
from tests.hf_cases import CORPUS_NAMES, EDGE_CASES, corpus_lines

from bpe_spark import Tokenizer, TrainerConfig, train
from bpe_spark.cli import main as cli_main
from bpe_spark.cli.arguments import FOLDER_OPTIONS
from bpe_spark.errors import ConfigError, UnknownCharacterError
from bpe_spark.models.load import export_model
from bpe_spark.models.huggingface.transformers_config import NO_LIMIT, OPTIONS, set_transformers_config

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

SPECIALS = ("<|endoftext|>", "<|pad|>", "<s>", "<unk>")
ROLES = {"bos_token": "<s>", "eos_token": "<|endoftext|>", "pad_token": "<|pad|>", "unk_token": "<unk>"}


@pytest.fixture(scope="module")
def lines() -> list[str]:
    return [line for name in CORPUS_NAMES for line in corpus_lines(name, 2000)]


@pytest.fixture(scope="module")
def byte_tok(lines) -> Tokenizer:
    return train(lines, TrainerConfig(vocab_size=1200, special_tokens=SPECIALS))


@pytest.fixture(scope="module")
def cl100k_tok(lines) -> Tokenizer:
    return train(lines[::4], TrainerConfig(vocab_size=800, pattern="cl100k", special_tokens=SPECIALS))


def auto_tokenizer(folder):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return transformers.AutoTokenizer.from_pretrained(str(folder))


def texts_of(lines) -> list[str]:
    return list(EDGE_CASES.values()) + list(lines)


def assert_same_ids(auto, tok, texts) -> None:
    """transformers' ids of each text (its specials matched, none added) are ours."""
    theirs = auto(texts, add_special_tokens=False)["input_ids"]
    ours = [tok.encode(text, allowed_special="all") for text in texts]
    for text, a, b in zip(texts, theirs, ours):
        assert a == b, text[:80]
    assert [auto.decode(ids) for ids in ours[:300]] == [tok.decode(ids) for ids in ours[:300]]


# --- the model directory and the tokenizer.json export ---------------------------------------------
def test_model_directory_loads_in_auto_tokenizer(tmp_path, byte_tok, lines):
    tok = Tokenizer.from_dict(byte_tok.to_dict())
    set_transformers_config(tok, model_max_length=2048, **ROLES)
    tok.save(tmp_path / "model")
    auto = auto_tokenizer(tmp_path / "model")
    assert type(auto).__name__ in ("PreTrainedTokenizerFast", "TokenizersBackend")
    assert_same_ids(auto, tok, texts_of(lines))
    for role, token in ROLES.items():
        assert getattr(auto, role) == token and getattr(auto, role + "_id") == tok.special_tokens[token]
    assert auto.model_max_length == 2048
    batch = auto(["a", "longer text"], padding=True)
    ids = [tok.encode("a"), tok.encode("longer text")]
    width = max(map(len, ids))
    pad = tok.special_tokens["<|pad|>"]
    assert batch["input_ids"] == [row + [pad] * (width - len(row)) for row in ids]
    assert batch["attention_mask"] == [[1] * len(row) + [0] * (width - len(row)) for row in ids]
    # the options travel with the model: bpe_spark.json keeps them, a later export writes them again
    back = Tokenizer.load(tmp_path / "model")
    assert back.metadata["transformers"] == {**ROLES, "model_max_length": 2048}
    config = json.loads((tmp_path / "model" / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "PreTrainedTokenizerFast" and config["clean_up_tokenization_spaces"] is False
    assert config["added_tokens_decoder"][str(pad)] == {
        "content": "<|pad|>", "lstrip": False, "normalized": False, "rstrip": False, "single_word": False,
        "special": True,
    }
    special_map = json.loads((tmp_path / "model" / "special_tokens_map.json").read_text())
    assert {role: entry["content"] for role, entry in special_map.items()} == ROLES


def test_cli_export_writes_a_folder(tmp_path, byte_tok, capsys):
    byte_tok.save(tmp_path / "model")  # no folder options set: none in the files
    plain = auto_tokenizer(tmp_path / "model")
    assert (plain.eos_token, plain.pad_token, plain.model_max_length) == (None, None, NO_LIMIT)
    out = tmp_path / "hf"
    assert cli_main(["export", "--model", str(tmp_path / "model"), "--format", "tokenizer.json", "--out", str(out),
                     "--eos-token", "<|endoftext|>", "--pad-token", "<|endoftext|>"]) == 0
    assert capsys.readouterr().out.split() == [
        str(out / name) for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
    ]
    auto = auto_tokenizer(out)
    assert (auto.eos_token, auto.pad_token, auto.bos_token, auto.unk_token) == ("<|endoftext|>",) * 2 + (None,) * 2
    assert auto.model_max_length == NO_LIMIT
    assert auto(["a", "longer text"], padding=True)["input_ids"][0][-1] == byte_tok.special_tokens["<|endoftext|>"]
    # a file named otherwise is the tokenizer.json alone; the config files beside are an export's too
    assert [p.name for p in export_model(byte_tok, "tokenizer.json", tmp_path / "t.json")] == ["t.json"]
    assert cli_main(["export", "--model", str(tmp_path / "model"), "--format", "tokenizer.json",
                     "--out", str(out / "tokenizer.json")]) == 2
    assert "already exists" in capsys.readouterr().err
    assert cli_main(["export", "--model", str(tmp_path / "model"), "--format", "tokenizer.json", "--out", str(out),
                     "--overwrite", "--model-max-length", "77"]) == 0
    assert auto_tokenizer(out).model_max_length == 77 and auto_tokenizer(out).eos_token is None


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--eos-token", "<nope>"], "--eos-token '<nope>' is neither a special token of the model"),
        (["--pad-token", "e"], "--pad-token 'e' is an ordinary token of the vocabulary (id 101)"),
        (["--bos-token", "12"], "--bos-token '12' looks like a token id, but --bos-token takes token text"),
        (["--model-max-length", "0"], "--model-max-length takes a positive integer (tokens), got 0"),
        (["--eos-token", "<s>", "--format", "tiktoken"], "--eos-token apply to --format tokenizer.json and gpt2"),
    ],
)
def test_bad_folder_options_are_one_line(tmp_path, byte_tok, capsys, argv, message):
    byte_tok.save(tmp_path / "model")
    fmt = [] if "--format" in argv else ["--format", "tokenizer.json"]
    assert cli_main(["export", "--model", str(tmp_path / "model"), "--out", str(tmp_path / "out"), *fmt, *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err
    assert not (tmp_path / "out").exists()


def test_python_options_name_the_keyword(byte_tok):
    tok = Tokenizer.from_dict(byte_tok.to_dict())
    with pytest.raises(ConfigError, match=r"^eos_token '<nope>' is neither a special token"):
        set_transformers_config(tok, eos_token="<nope>")
    with pytest.raises(ConfigError, match="unknown model-folder options"):
        set_transformers_config(tok, eos="<s>")
    assert FOLDER_OPTIONS == OPTIONS  # the command line's names are the Python keywords


def test_train_refuses_a_token_option_before_spark(tmp_path, capsys):
    (tmp_path / "c.txt").write_text("a b c\n")
    argv = ["train", "--input", str(tmp_path / "c.txt"), "--vocab-size", "300", "--out", str(tmp_path / "m"),
            "--special-token", "<s>", "--eos-token", "</s>"]
    assert cli_main(argv) == 2
    err = capsys.readouterr().err
    assert "--eos-token '</s>' is not one of the --special-token tokens ['<s>']" in err
    assert not (tmp_path / "m").exists()


# --- the GPT-2 export folder -----------------------------------------------------------------------
def test_gpt2_folder_is_a_gpt2_tokenizer(tmp_path, byte_tok, lines):
    tok = set_transformers_config(Tokenizer.from_dict(byte_tok.to_dict()), eos_token="<|endoftext|>")
    written = export_model(tok, "gpt2", tmp_path / "g", pad_token="<|pad|>")
    assert [p.name for p in written] == ["vocab.json", "merges.txt", "tokenizer_config.json", "special_tokens_map.json"]
    config = json.loads((tmp_path / "g" / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "GPT2Tokenizer" and config["add_prefix_space"] is False
    auto = auto_tokenizer(tmp_path / "g")
    # GPT2Tokenizer would default bos and unk to <|endoftext|>: the config says none
    assert (auto.eos_token, auto.pad_token, auto.bos_token, auto.unk_token) == ("<|endoftext|>", "<|pad|>", None, None)
    assert len(auto) == tok.vocab_size
    assert_same_ids(auto, tok, texts_of(lines))
    assert Tokenizer.load(tmp_path / "g").merge_ids == tok.merge_ids


def test_gpt2_folder_of_another_pattern_holds_tokenizer_json(tmp_path, cl100k_tok, lines):
    export_model(cl100k_tok, "gpt2", tmp_path / "g")
    assert json.loads((tmp_path / "g" / "tokenizer_config.json").read_text())["tokenizer_class"] == (
        "PreTrainedTokenizerFast"
    )
    assert_same_ids(auto_tokenizer(tmp_path / "g"), cl100k_tok, texts_of(lines))
    back = Tokenizer.load(tmp_path / "g")  # tokenizer.json first: its pattern is kept
    assert back.pattern == "cl100k" and back.merge_ids == cl100k_tok.merge_ids


def test_real_gpt2_files_export_to_a_folder(tmp_path, lines):
    gpt2 = Tokenizer.load(PEERS / "cs336" / "gpt2_vocab.json")
    export_model(gpt2, "gpt2", tmp_path / "g", eos_token="<|endoftext|>", model_max_length=1024)
    auto = auto_tokenizer(tmp_path / "g")
    assert (auto.eos_token_id, auto.model_max_length) == (50256, 1024)
    assert_same_ids(auto, gpt2, texts_of(lines[::4]))


# --- char scheme -----------------------------------------------------------------------------------
def char_model(end_of_word: str, *, unk: bool = True) -> Tokenizer:
    """A char-scheme model of English text: CJK and much else is outside its alphabet."""
    text = corpus_lines("en_books", 2000) + corpus_lines("tiny_shakespeare", 2000)
    specials = ("<unk>", "<|endoftext|>") if unk else ("<|endoftext|>",)
    cfg = TrainerConfig(vocab_size=1200, scheme="char", end_of_word=end_of_word, pattern="gpt2",
                        special_tokens=specials, unk_token="<unk>" if unk else None)
    return train(text, cfg)


def test_char_model_exports_to_tokenizer_json(tmp_path, lines):
    tok = char_model("fused")
    path = export_model(tok, "tokenizer.json", tmp_path)[0]
    hf = tokenizers.Tokenizer.from_file(str(path))
    data = json.loads(path.read_text())
    assert data["model"]["end_of_word_suffix"] == "</w>" and data["decoder"] == {"type": "BPEDecoder", "suffix": "</w>"}
    unknown = 0
    for text in texts_of(lines):  # characters outside the training alphabet (CJK...): <unk> in both
        ours = tok.encode(text, allowed_special="all")
        assert hf.encode(text, add_special_tokens=False).ids == ours, text[:80]
        assert hf.decode(ours, skip_special_tokens=False) == tok.decode(ours)
        unknown += ours.count(tok.special_tokens["<unk>"])
    assert unknown > 1000
    auto = auto_tokenizer(tmp_path)
    assert auto.unk_token == "<unk>" and auto("newest lowest")["input_ids"] == tok.encode("newest lowest")


def test_char_model_without_unk_differs_only_by_raising(tmp_path):
    tok = char_model("fused", unk=False)
    hf = tokenizers.Tokenizer.from_file(str(export_model(tok, "tokenizer.json", tmp_path)[0]))
    text = "the 我 end"  # pretokens "the", " 我", " end"
    with pytest.raises(UnknownCharacterError, match="was not in the training alphabet"):
        tok.encode(text)
    # tokenizers leaves an unknown character out, without an error: the known difference
    assert hf.encode(text).ids == tok.encode("the") + [tok.token_to_id(" ")] + tok.encode(" end")


def test_separate_end_of_word_is_refused(tmp_path, capsys):
    tok = char_model("separate")
    with pytest.raises(ConfigError, match=r"^tokenizer.json cannot hold a char-scheme model with "
                                          r"end_of_word='separate' \(</w> a symbol of its own\).*"
                                          r"train with end_of_word='fused'"):
        export_model(tok, "tokenizer.json", tmp_path / "t")
    tok.save(tmp_path / "m")  # the model directory has no tokenizer.json then
    assert not (tmp_path / "m" / "tokenizer.json").exists() and not (tmp_path / "t").exists()
    assert cli_main(["export", "--model", str(tmp_path / "m"), "--format", "tokenizer.json",
                     "--out", str(tmp_path / "t")]) == 2
    err = capsys.readouterr().err  # the same error in the command line's words
    assert "char-scheme model with --end-of-word separate (</w>" in err and "train with --end-of-word fused" in err


def test_export_help_shows_every_format(capsys):
    with pytest.raises(SystemExit):
        cli_main(["export", "--help"])
    shown = capsys.readouterr().out
    for fmt in ("tokenizer.json", "gpt2", "tiktoken", "subword-nmt"):
        assert f"--format {fmt} " in shown
    from bpe_spark.models.tiktoken_file import encoding_line

    assert all(line in shown for line in encoding_line("en32k.tiktoken").splitlines())
    assert "AutoTokenizer.from_pretrained(" in shown and "padding=True" in shown


# --- an imported pipeline (a tokenizer.json that runs as tokenizers runs it) -------------------------
def test_imported_pipeline_model_folder(tmp_path, lines):
    from tokenizers import decoders, models, pre_tokenizers, trainers

    hf = tokenizers.Tokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=True)]
    )
    hf.decoder = decoders.ByteLevel()
    hf.train_from_iterator(lines[::8], trainers.BpeTrainer(
        vocab_size=900, special_tokens=["<s>", "</s>", "<pad>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    hf.add_tokens(["<tool>"])  # not special: transformers keeps it so
    hf.save(str(tmp_path / "tokenizer.json"))
    tok = Tokenizer.load(tmp_path / "tokenizer.json")
    assert tok.pipeline is not None
    set_transformers_config(tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>")
    tok.save(tmp_path / "model")
    auto = auto_tokenizer(tmp_path / "model")
    assert (auto.bos_token_id, auto.eos_token_id, auto.pad_token_id) == (0, 1, 2)
    texts = texts_of(lines[::32]) + ["call <tool> now</s>"]
    assert_same_ids(auto, tok, texts)
    config = json.loads((tmp_path / "model" / "tokenizer_config.json").read_text())
    assert config["added_tokens_decoder"][str(hf.token_to_id("<tool>"))]["special"] is False
    exported = tokenizers.Tokenizer.from_file(str(export_model(tok, "tokenizer.json", tmp_path / "e")[0]))
    assert [exported.encode(t, add_special_tokens=False).ids for t in texts] == [
        hf.encode(t, add_special_tokens=False).ids for t in texts
    ]


@pytest.mark.spark
def test_train_command_writes_the_folder_options(spark, tmp_path):
    text = corpus_lines("tiny_shakespeare", 1000)
    (tmp_path / "c.txt").write_text("".join(text), encoding="utf-8")
    out = tmp_path / "model"
    assert cli_main(["train", "--input", str(tmp_path / "c.txt"), "--vocab-size", "300", "--out", str(out),
                     "--special-token", "<|endoftext|>", "--special-token", "<pad>", "--eos-token", "<|endoftext|>",
                     "--pad-token", "<pad>", "--unk-token", "<|endoftext|>", "--model-max-length", "512"]) == 0
    tok = Tokenizer.load(out)
    auto = auto_tokenizer(out)
    assert (auto.eos_token, auto.pad_token, auto.unk_token, auto.bos_token) == ("<|endoftext|>", "<pad>", "<|endoftext|>", None)
    assert auto.model_max_length == 512 and tok.unk_token is None  # a byte model's unk is transformers' label
    assert_same_ids(auto, tok, texts_of(text))


def test_a_model_directory_without_its_bpe_spark_json_is_refused_not_read_as_its_tokenizer_json(tmp_path, byte_tok,
                                                                                                   capsys):
    """Issue 43: a bpe-spark model folder that lost ``bpe_spark.json`` loaded its exported
    ``tokenizer.json`` without a word; a folder of Hugging Face files (no marker) still loads."""
    from bpe_spark.errors import ModelFormatError

    byte_tok.save(tmp_path / "model")
    (tmp_path / "model" / "bpe_spark.json").unlink()
    message = (f"{tmp_path / 'model'}: a bpe-spark model directory (its _BPE_SPARK marker) without bpe_spark.json, "
               "which holds the model: it is damaged or incomplete; save the model again, or give "
               f"{tmp_path / 'model' / 'tokenizer.json'} to load its tokenizer.json export")
    with pytest.raises(ModelFormatError) as refused:
        Tokenizer.load(tmp_path / "model")
    assert str(refused.value) == message
    assert cli_main(["inspect", str(tmp_path / "model")]) == 2
    assert capsys.readouterr().err == f"bpe-spark inspect: error: {message}\n"
    assert Tokenizer.load(tmp_path / "model" / "tokenizer.json").encode("hello world") == byte_tok.encode("hello world")
    (tmp_path / "model" / "_BPE_SPARK").unlink()  # as a Hugging Face folder: its tokenizer.json (and config files)
    for name in ("merges.parquet", "vocab.parquet"):
        (tmp_path / "model" / name).unlink()
    assert Tokenizer.load(tmp_path / "model").encode("hello world") == byte_tok.encode("hello world")
