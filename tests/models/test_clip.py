"""CLIP's tokenizer files: a CLIP ``tokenizer.json`` (``continuing_subword_prefix: ""``), CLIP's
``vocab.json`` + ``merges.txt`` (the ``</w>`` layout) and OpenAI's ``bpe_simple_vocab_16e6.txt.gz``
load and give the ids (and decoded text) of their reference: tokenizers, transformers'
CLIPTokenizer, and SimpleTokenizer (re-implemented below from OpenAI CLIP's published
``simple_tokenizer.py``, as open_clip is not installed, without ftfy, which is not installed either).
Every loader error names the file, and a bad merge its line and tokens.

The files are built here: a CLIP-style vocabulary trained with ``tokenizers`` on the shared
corpora, laid out as CLIP's (the 256 byte characters, the same with ``</w>``, the merges, the two
specials), written as the three formats.
"""

from __future__ import annotations

import gzip
import html
import json
import math
import random
import unicodedata
from functools import cache

import pytest
import regex
from tests.conftest import require_corpora
from tests.hf_cases import CORPUS_NAMES, EDGE_CASES, corpus_lines
from tokenizers import Regex, decoders, models, normalizers, pre_tokenizers, trainers
from tokenizers import Tokenizer as HfTokenizer
from transformers import CLIPTokenizer

from bpe_spark import ConfigError, ModelFormatError, Tokenizer
from bpe_spark.models.load import detect_format, export_model
from bpe_spark.pipeline.model import BpeModel

SPECIALS = ("<|startoftext|>", "<|endoftext|>")
CLIP_SPLIT = r"""<\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+"""
GZ_HEADER = '"bpe_simple_vocab_16e6.txt#version: 0.2'


def _byte_chars() -> dict[int, str]:
    """GPT-2's / CLIP's byte -> printable character table, in CLIP's order (printable bytes first)."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table = {b: chr(b) for b in keep}
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + len(table) - len(keep))
    return table


class SimpleClip:
    """OpenAI CLIP's SimpleTokenizer as published, with NFC for ``ftfy.fix_text`` (not installed;
    NFC is the last of its fixes, and CLIPTokenizer's too)."""

    def __init__(self, gz_path):
        lines = gzip.open(gz_path).read().decode("utf-8").split("\n")[1 : 49152 - 256 - 2 + 1]
        merges = [tuple(line.split()) for line in lines]
        self.byte_char = _byte_chars()
        self.char_byte = {c: b for b, c in self.byte_char.items()}
        vocab = list(self.byte_char.values())
        vocab += [c + "</w>" for c in vocab] + ["".join(m) for m in merges] + list(SPECIALS)
        self.ids = dict(zip(vocab, range(len(vocab))))
        self.tokens = {i: t for t, i in self.ids.items()}
        self.rank = dict(zip(merges, range(len(merges))))
        self.pattern = regex.compile(CLIP_SPLIT, regex.IGNORECASE)

    @staticmethod
    def clean(text: str) -> str:
        text = unicodedata.normalize("NFC", text)  # of ftfy.fix_text, only its last step (NFC)
        text = html.unescape(html.unescape(text)).strip()
        return regex.sub(r"\s+", " ", text).strip().lower()

    @cache
    def bpe(self, piece: str) -> list[str]:
        if piece in SPECIALS:
            return [piece]
        word = [*piece[:-1], piece[-1] + "</w>"]
        while len(word) > 1:
            best = min(zip(word, word[1:]), key=lambda pair: self.rank.get(pair, math.inf))
            if best not in self.rank:
                break
            merged, i = [], 0
            while i < len(word):
                if i < len(word) - 1 and (word[i], word[i + 1]) == best:
                    merged.append(word[i] + word[i + 1])
                    i += 2
                else:
                    merged.append(word[i])
                    i += 1
            word = merged
        return word

    def encode(self, text: str) -> list[int]:
        ids = []
        for piece in self.pattern.findall(self.clean(text)):
            mapped = "".join(self.byte_char[b] for b in piece.encode("utf-8"))
            ids.extend(self.ids[token] for token in self.bpe(mapped))
        return ids

    def decode(self, ids: list[int]) -> str:
        text = "".join(self.tokens[i] for i in ids)
        return bytearray(self.char_byte[c] for c in text).decode("utf-8", errors="replace").replace("</w>", " ")


def _clip_merges() -> list[str]:
    """Merges of a CLIP-style vocabulary trained with tokenizers (CLIP's normalizer and splits)."""
    model = models.BPE(continuing_subword_prefix="", end_of_word_suffix="</w>", unk_token=SPECIALS[1])
    hf = HfTokenizer(model)
    hf.normalizer = normalizers.Sequence([normalizers.NFC(), normalizers.Replace(Regex(r"\s+"), " "), normalizers.Lowercase()])
    hf.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(CLIP_SPLIT), behavior="removed", invert=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False),
    ])
    hf.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=2500, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=list(SPECIALS),
        end_of_word_suffix="</w>", continuing_subword_prefix="", show_progress=False,
    )
    hf.train_from_iterator([line for name in CORPUS_NAMES for line in corpus_lines(name, 600)], trainer)
    return [" ".join(pair) for pair in json.loads(hf.to_str())["model"]["merges"]]


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    """The three CLIP formats of one vocabulary, transformers' reference, and the texts."""
    require_corpora()
    root = tmp_path_factory.mktemp("clip")
    vocab = list(_byte_chars().values())
    vocab += [c + "</w>" for c in vocab]
    merges = []
    for merge in _clip_merges():
        if merge.replace(" ", "") not in vocab:  # one id per token, as CLIP's files have
            merges.append(merge)
            vocab.append(merge.replace(" ", ""))
    vocab += SPECIALS
    files = root / "files"
    files.mkdir()
    (files / "vocab.json").write_text(json.dumps(dict(zip(vocab, range(len(vocab)))), ensure_ascii=False))
    (files / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n", encoding="utf-8")
    gz = root / "bpe_simple_vocab_16e6.txt.gz"
    with gzip.open(gz, "wt", encoding="utf-8") as fh:
        fh.write(GZ_HEADER + "\n" + "\n".join(merges))  # no final newline: CLIP's slice ends inside its file
    reference = CLIPTokenizer.from_pretrained(str(files))
    hub = root / "hub"
    reference.save_pretrained(str(hub))  # tokenizer.json as transformers writes CLIP's
    texts = list(EDGE_CASES.values()) + [line for name in CORPUS_NAMES for line in corpus_lines(name, 300)]
    ids = reference(texts, add_special_tokens=False)["input_ids"]
    return {"files": files, "gz": gz, "hub": hub, "reference": reference, "texts": texts, "merges": merges,
            "ids": ids, "decoded": reference.batch_decode(ids)}


def _ours(tok: Tokenizer, text: str) -> list[int]:
    return tok.encode(text, allowed_special="all")


# --- 1. tokenizer.json with continuing_subword_prefix "" ------------------------------------------
def test_clip_tokenizer_json_gives_tokenizers_ids(clip):
    path = clip["hub"] / "tokenizer.json"
    assert json.loads(path.read_text())["model"]["continuing_subword_prefix"] == ""
    assert detect_format(path) == "tokenizer.json"
    ours, hf = Tokenizer.load(path), HfTokenizer.from_file(str(path))
    hf_ids = [e.ids for e in hf.encode_batch(clip["texts"], add_special_tokens=False)]
    assert hf_ids == clip["ids"]  # tokenizers and CLIPTokenizer agree
    hf_text = hf.decode_batch(hf_ids, skip_special_tokens=False)  # "</w>" kept: the file's ByteLevel decoder
    for text, ids, decoded in zip(clip["texts"], hf_ids, hf_text):
        assert _ours(ours, text) == ids, text
        assert ours.decode(ids) == decoded, text


@pytest.mark.parametrize("prefix, suffix", [("", None), ("", "</w>"), (None, ""), ("", "")])
def test_empty_prefix_or_suffix_is_none_as_in_tokenizers(prefix, suffix):
    end = suffix or ""
    vocab = {c: i for i, c in enumerate("abc")}
    vocab.update({c + end: 3 + i for i, c in enumerate("abc")} if end else {})
    merges = [["a", "b" + end], ["a", "b"], ["b", "c" + end], ["ab", "c" + end]]
    for merged in ("ab" + end, "ab", "bc" + end, "abc" + end):
        vocab.setdefault(merged, len(vocab))
    spec = {"type": "BPE", "vocab": vocab, "merges": merges, "continuing_subword_prefix": prefix,
            "end_of_word_suffix": suffix}
    hf = HfTokenizer.from_str(json.dumps({"version": "1.0", "model": spec, "added_tokens": []}))
    ours = BpeModel(spec)
    for word in ("a", "ab", "abc", "cab", "abcab", "bcbc", "cc"):
        assert ours.tokenize(word) == hf.encode(word, add_special_tokens=False).ids, word


# --- 2. vocab.json + merges.txt of CLIP's layout ---------------------------------------------------
def test_clip_vocab_merges_give_clip_tokenizer_ids_and_text(clip):
    assert detect_format(clip["files"]) == "gpt2"
    ours = Tokenizer.load(clip["files"])
    assert Tokenizer.load(clip["files"] / "vocab.json").to_dict() == ours.to_dict()
    assert ours.special_tokens == {SPECIALS[0]: 2 * 256 + len(clip["merges"]), SPECIALS[1]: 2 * 256 + len(clip["merges"]) + 1}
    for text, ids, decoded in zip(clip["texts"], clip["ids"], clip["decoded"]):
        assert _ours(ours, text) == ids, text
        assert ours.decode(ids) == decoded, text  # "</w>" a space, stripped
    rng = random.Random(0)  # any ids: whitespace tokens, specials, "</w>" anywhere
    for _ in range(500):
        ids = [rng.randrange(ours.vocab_size) for _ in range(rng.randrange(1, 6))]
        assert ours.decode(ids) == clip["reference"].decode(ids), ids


def test_clip_merge_errors_name_the_file_line_and_tokens(clip, tmp_path):
    vocab = json.loads((clip["files"] / "vocab.json").read_text())
    merges = (clip["files"] / "merges.txt").read_text().split("\n")
    line = next(i for i, m in enumerate(merges) if m.endswith("</w>") and i > 3)
    lost = merges[line].replace(" ", "")
    (tmp_path / "vocab.json").write_text(json.dumps({k: v for k, v in vocab.items() if k != lost}))
    (tmp_path / "merges.txt").write_text("\n".join(merges))
    with pytest.raises(ModelFormatError) as err:
        Tokenizer.load(tmp_path)
    assert str(err.value) == (
        f"{tmp_path / 'merges.txt'}: line {line + 1}: merge {merges[line]!r} makes {lost!r}, which vocab.json lacks"
    )
    (tmp_path / "merges.txt").write_text("\n".join(merges[: line] + ["zzzq y</w>"]))
    (tmp_path / "vocab.json").write_text(json.dumps(vocab))
    with pytest.raises(ModelFormatError, match=rf"merges\.txt: line {line + 1}: merge 'zzzq y</w>': token 'zzzq' is not in vocab\.json"):
        Tokenizer.load(tmp_path)


def test_gpt2_loader_errors_name_the_file_and_tokens(tmp_path):
    chars = list(_byte_chars().values())
    vocab = {c: i for i, c in enumerate(chars)} | {"ab": 256, "<|endoftext|>": 257, "Ġx": 258}
    (tmp_path / "vocab.json").write_text(json.dumps(vocab))
    (tmp_path / "merges.txt").write_text("#version: 0.2\na b\nĠ x\nab c\n")
    with pytest.raises(ModelFormatError, match=r"merges\.txt: line 4: merge 'ab c' makes 'abc', which vocab\.json lacks"):
        Tokenizer.load(tmp_path)
    (tmp_path / "merges.txt").write_text("#version: 0.2\na b\nĠx ab\n")
    with pytest.raises(ModelFormatError, match=r"merges\.txt: line 3: merge 'Ġx ab' makes 'Ġxab', which vocab\.json lacks"):
        Tokenizer.load(tmp_path)
    # a multi-byte token that a merge uses is ordinary, not a special token
    (tmp_path / "vocab.json").write_text(json.dumps(vocab | {"Ġxab": 259}))
    assert Tokenizer.load(tmp_path).special_tokens == {"<|endoftext|>": 257}
    with pytest.raises(ConfigError, match=r"vocab\.json: token 'Ġx' \(id 258\) is merged by merges\.txt line 3"):
        Tokenizer.load(tmp_path, special_tokens=["<|endoftext|>", " x"])
    with pytest.raises(ConfigError, match=r"vocab\.json: special token '<\|eot\|>' is not in it"):
        Tokenizer.load(tmp_path, special_tokens=["<|eot|>"])


# --- 3. bpe_simple_vocab_16e6.txt.gz ---------------------------------------------------------------
def test_clip_merges_gz_gives_clip_tokenizer_ids_and_simple_tokenizer_ids_but_for_its_text_cleanup(clip):
    assert detect_format(clip["gz"]) == "clip"
    ours, simple = Tokenizer.load(clip["gz"]), SimpleClip(clip["gz"])
    assert ours.to_dict()["pipeline"] == Tokenizer.load(clip["files"]).to_dict()["pipeline"]
    differing = []
    for text, reference_ids, decoded in zip(clip["texts"], clip["ids"], clip["decoded"]):
        ids = _ours(ours, text)
        assert ids == reference_ids, text  # CLIPTokenizer's ids, and its decode
        assert ours.decode(ids) == decoded, text
        cleaned = simple.clean(text)
        if cleaned != html.unescape(cleaned) or html.unescape(text) != text or "\u03a3" in text:
            differing.append(text)  # html.unescape, str.lower's final sigma: documented differences
            continue
        assert ids == simple.encode(text), text
        assert decoded == simple.decode(ids).strip(), text  # SimpleTokenizer keeps a final space
    assert len(differing) <= len(clip["texts"]) // 50, differing[:5]
    # the documented differences themselves
    assert ours.decode(_ours(ours, "fish &amp; chips")) == "fish & amp ; chips"
    assert simple.decode(simple.encode("fish &amp; chips")) == "fish & chips "
    assert ours.decode(_ours(ours, "ΟΔΟΣ")) == "οδοσ" and simple.decode(simple.encode("ΟΔΟΣ")) == "οδος "


def test_clip_merges_gz_trailing_line_takes_an_id_as_in_simple_tokenizer(clip, tmp_path):
    gz = tmp_path / "bpe_simple_vocab_16e6.txt.gz"
    with gzip.open(gz, "wt", encoding="utf-8") as fh:
        fh.write(GZ_HEADER + "\n" + "\n".join(clip["merges"]) + "\n")  # "" is one more vocab entry
    ours, simple = Tokenizer.load(gz), SimpleClip(gz)
    assert ours.special_tokens == {t: simple.ids[t] for t in SPECIALS}
    assert ours.special_tokens[SPECIALS[0]] == 2 * 256 + len(clip["merges"]) + 1
    text = "<|startoftext|>a photo of a cat<|endoftext|>"
    assert _ours(ours, text) == simple.encode(text)


def test_clip_merges_gz_found_by_content_and_in_a_folder(clip, tmp_path):
    renamed = tmp_path / "merges.gz"
    renamed.write_bytes(clip["gz"].read_bytes())
    assert detect_format(renamed) == "clip"
    folder = tmp_path / "open_clip"
    folder.mkdir()
    (folder / clip["gz"].name).write_bytes(clip["gz"].read_bytes())
    assert detect_format(folder) == "clip"
    assert Tokenizer.load(folder).encode("a photo of a cat") == Tokenizer.load(renamed).encode("a photo of a cat")


def test_clip_merges_gz_errors_name_the_file_and_line(tmp_path):
    gz = tmp_path / "bpe_simple_vocab_16e6.txt.gz"
    with gzip.open(gz, "wt", encoding="utf-8") as fh:
        fh.write(GZ_HEADER + "\ni n\nt h e\n")
    with pytest.raises(ModelFormatError, match=rf"{gz}: line 3: expected two tokens separated by a space, got 't h e'"):
        Tokenizer.load(gz)
    with gzip.open(gz, "wt", encoding="utf-8") as fh:
        fh.write(GZ_HEADER + "\ni n\nqq n</w>\n")
    with pytest.raises(ModelFormatError, match=rf"{gz}: line 3: merge 'qq n</w>': token 'qq' is not in its vocabulary"):
        Tokenizer.load(gz)
    gz.write_bytes(b"\x1f\x8b broken")
    with pytest.raises(ModelFormatError, match=rf"{gz}: not a readable gzip file"):
        Tokenizer.load(gz)


def test_clip_exports_load_in_tokenizers_and_transformers(clip, tmp_path):
    ours = Tokenizer.load(clip["gz"])
    out = tmp_path / "export"
    out.mkdir()
    export_model(ours, "tokenizer.json", out / "tokenizer.json")
    hf = HfTokenizer.from_file(str(out / "tokenizer.json"))
    reference = CLIPTokenizer.from_pretrained(str(out))
    ours.save(tmp_path / "model")
    again = Tokenizer.load(tmp_path / "model")
    for text in clip["texts"][:300]:
        ids = _ours(ours, text)
        assert hf.encode(text, add_special_tokens=False).ids == ids == _ours(again, text), text
        assert reference.encode(text, add_special_tokens=False) == ids, text
        assert hf.decode(ids, skip_special_tokens=False) == ours.decode(ids) == reference.decode(ids), text
    start, end = ours.special_tokens[SPECIALS[0]], ours.special_tokens[SPECIALS[1]]
    assert hf.encode("a cat").ids == [start, *_ours(ours, "a cat"), end]  # CLIP's post-processor kept
