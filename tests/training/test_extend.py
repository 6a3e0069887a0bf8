"""Continued training (issue 37, acceptance 1): extending GPT-2's files, cl100k's ``.tiktoken``, a
SentencePiece BPE model trained here and a ``tokenizer.json`` with chained Splits and non-special
added tokens keeps every base id and merge; the new merges equal an independent reference written
here from the definition (docs/design.md 1.6: the base's encoding of each pretoken, counted with
the reference library's own pretokenization, then the exact merge loop with ties to the smaller
pair of ids, new ids after the base's highest); and each export loads in its reference library
and gives our ids on 1,000 lines of each shared corpus and the edge cases.

The reference shares no code with ``bpe_spark.training``: pretokens come from tiktoken's pattern
or ``tokenizers``' own pre-tokenizer, base encodings from tiktoken or ``tokenizers``' model."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest
import regex
import tiktoken
import tokenizers
from tests.conftest import require_corpora
from tests.hf_cases import CORPUS_NAMES, EDGE_CASES, corpus_lines
from tests.models.test_sentencepiece import train_model
from tests.peers import test_peer_tiktoken
from tiktoken.load import load_tiktoken_bpe
from tokenizers import decoders, models, pre_tokenizers, trainers
from transformers import AutoTokenizer

from bpe_spark import Tokenizer, TrainerConfig, train, train_from_counts
from bpe_spark.errors import ConfigError
from bpe_spark.models.load import export_model
from bpe_spark.training.extend import count_with_base

NEW_MERGES = 48
TRAIN_LINES = 160  # of each corpus: the new text


def new_text() -> list[str]:
    return [line for name in ("zh_classics", "multilingual") for line in corpus_lines(name, TRAIN_LINES)]


def parity_texts() -> list[str]:
    return [*EDGE_CASES.values(), *(line for name in CORPUS_NAMES for line in corpus_lines(name, 1000))]


# --- the reference: continued BPE from its definition -------------------------------------------
def reference_extend(words: Counter, values: dict[int, bytes | str], first_new: int, new_tokens: int,
                     join=lambda a, b: a + b) -> list[tuple[int, int, int]]:
    """``words``: {tuple of base ids: count}; returns the new merges as (left, right, new id):
    merge the pair of highest count (overlapping occurrences count), ties to the smaller pair of
    ids; a merge whose token exists keeps its id. Pair counts are recounted for the words a
    merge rewrites only."""
    words = {w: c for w, c in words.items() if len(w) > 1}
    ids_of: dict = {}
    for token_id in sorted(values):
        ids_of.setdefault(values[token_id], token_id)
    values = dict(values)
    pairs: Counter = Counter()
    for word, count in words.items():
        for pair in zip(word, word[1:]):
            pairs[pair] += count
    merges, created, next_id = [], 0, first_new
    while created < new_tokens:
        if not pairs:
            break
        best = min(pairs, key=lambda pair: (-pairs[pair], pair))
        value = join(values[best[0]], values[best[1]])
        new_id = ids_of.get(value)
        if new_id is None:
            new_id, next_id, created = next_id, next_id + 1, created + 1
            values[new_id] = value
            ids_of[value] = new_id
        merges.append((*best, new_id))
        left, right = best
        for word in [w for w in words if left in w and right in w and best in zip(w, w[1:])]:
            count = words.pop(word)
            out, i = [], 0
            while i < len(word):
                if i + 1 < len(word) and (word[i], word[i + 1]) == best:
                    out.append(new_id)
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            for pair, n in Counter(zip(word, word[1:])).items():
                pairs[pair] -= count * n
                if not pairs[pair]:
                    del pairs[pair]  # no word holds it any more
            for pair, n in Counter(zip(out, out[1:])).items():
                pairs[pair] += count * n
            out = tuple(out)
            words[out] = words.get(out, 0) + count
    return merges


def cut(ids: list[int], blocked: set[int]) -> list[tuple[int, ...]]:
    pieces, piece = [], []
    for token_id in ids:
        if token_id in blocked:
            pieces.append(tuple(piece))
            piece = []
        else:
            piece.append(token_id)
    pieces.append(tuple(piece))
    return pieces


def hf_pretokens(hf: tokenizers.Tokenizer, text: str, added: list[str]) -> list[str]:
    """tokenizers' pretokens of ``text``: the added tokens (not normalized) cut out, each piece
    normalized and pre-tokenized."""
    pieces = re.split("|".join(map(re.escape, sorted(added, key=len, reverse=True))), text) if added else [text]
    out = []
    for piece in pieces:
        if piece:
            normalized = hf.normalizer.normalize_str(piece) if hf.normalizer is not None else piece
            if hf.pre_tokenizer is None:
                out.append(normalized)
            else:
                out.extend(p for p, _ in hf.pre_tokenizer.pre_tokenize_str(normalized))
    return out


def assert_extended(base: Tokenizer, ext: Tokenizer, expected: list[tuple[int, int, int]]) -> None:
    assert ext.merge_ids[: len(base.merge_ids)] == base.merge_ids
    assert ext.special_tokens == base.special_tokens
    base_vocab = base.vocab
    assert {i: t for i, t in ext.vocab.items() if i in base_vocab} == base_vocab
    assert ext.merge_ids[len(base.merge_ids):] == expected
    assert min(i for i in ext.vocab if i not in base_vocab) == base.max_token_id + 1
    assert all(i > base.max_token_id for _, _, i in expected if i not in base_vocab)
    assert ext.metadata["base"]["fingerprint"] == base.fingerprint
    assert ext.metadata["base"]["merges"] == len(base.merge_ids)


def tiktoken_words(enc: tiktoken.Encoding, texts: list[str]) -> Counter:
    """{the reference library's ids of a pretoken: count}: tiktoken's pattern, its encoding."""
    words: Counter = Counter()
    for text in texts:
        for piece in regex.findall(enc._pat_str, text):
            words[tuple(enc._encode_single_piece(piece.encode()))] += 1
    return words


# --- the bases ------------------------------------------------------------------------------------
gpt2 = test_peer_tiktoken.gpt2  # the fixtures of the tiktoken peer suite
cl100k = test_peer_tiktoken.cl100k


def test_extending_gpt2_files_equals_the_reference(gpt2, tmp_path):
    texts = new_text()
    ext = train(texts, TrainerConfig(vocab_size=gpt2.vocab_size + NEW_MERGES), base=gpt2)
    tt = tiktoken.get_encoding("gpt2")
    words = tiktoken_words(tt, texts)
    values = {i: tt.decode_single_token_bytes(i) for i in range(50256)}
    assert_extended(gpt2, ext, reference_extend(words, values, 50257, NEW_MERGES))
    assert ext.vocab_size == gpt2.vocab_size + NEW_MERGES
    # the exports: tokenizer.json in tokenizers, GPT-2 files in tokenizers' BPE with ByteLevel
    export_model(ext, "tokenizer.json", tmp_path / "tokenizer.json")
    export_model(ext, "gpt2", tmp_path / "gpt2")
    hf = tokenizers.Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    files = tokenizers.Tokenizer(models.BPE.from_file(str(tmp_path / "gpt2" / "vocab.json"), str(tmp_path / "gpt2" / "merges.txt")))
    files.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    files.decoder = decoders.ByteLevel()
    for text in parity_texts():
        ours = ext.encode(text, allowed_special="all")
        assert hf.encode(text, add_special_tokens=False).ids == ours, text
        assert files.encode(text, add_special_tokens=False).ids == ext.encode_ordinary(text), text
        assert hf.decode(ours, skip_special_tokens=False) == ext.decode(ours)


def test_extending_cl100k_equals_the_reference_and_tiktoken_reads_the_export(cl100k, tmp_path):
    texts = new_text()
    ext = train(texts, TrainerConfig(vocab_size=cl100k.vocab_size + NEW_MERGES), base=cl100k)
    tt = tiktoken.get_encoding("cl100k_base")
    words = tiktoken_words(tt, texts)
    values = {rank: token for token, rank in tt._mergeable_ranks.items()}
    assert_extended(cl100k, ext, reference_extend(words, values, 100277, NEW_MERGES))
    assert ext.merge_rule == "ranks"
    out = tmp_path / "ext.tiktoken"
    export_model(ext, "tiktoken", out)
    sidecar = json.loads(out.with_name(out.name + ".json").read_text())
    ranks = load_tiktoken_bpe(str(out))
    assert max(ranks.values()) == 100276 + NEW_MERGES
    enc = tiktoken.Encoding("ext", pat_str=tt._pat_str, mergeable_ranks=ranks,
                            special_tokens=sidecar["special_tokens"])
    for text in parity_texts():
        assert enc.encode(text, disallowed_special=()) == ext.encode_ordinary(text), text


def test_extending_a_sentencepiece_model_equals_the_reference(tmp_path):
    """English pieces extended on Chinese and multilingual text: the characters the base lacks
    (which it cuts to byte-fallback tokens) become new tokens, in code-point order, then merge."""
    base = Tokenizer.load(train_model(tmp_path, "sp", corpora=("en_books", "tiny_shakespeare"), lines=1000,
                                      vocab_size=2000))
    export_model(base, "tokenizer.json", tmp_path / "base" / "tokenizer.json")
    ref = tokenizers.Tokenizer.from_file(str(tmp_path / "base" / "tokenizer.json"))
    texts = new_text()
    added = [t.content for t in ref.get_added_tokens_decoder().values()]
    pretokens: Counter = Counter(p for text in texts for p in hf_pretokens(ref, text, added))
    known = ref.get_vocab(with_added_tokens=False)
    first_new = max(ref.get_vocab().values()) + 1
    alphabet = {char: first_new + i for i, char in enumerate(sorted({c for p in pretokens for c in p} - set(known)))}
    ext = train(texts, TrainerConfig(vocab_size=base.vocab_size + len(alphabet) + NEW_MERGES), base=base)
    words: Counter = Counter()
    for pretoken, count in pretokens.items():  # runs of known characters tokenized by the base
        word, run = [], ""
        for char in pretoken + "\0":
            if char in alphabet or char == "\0":
                word += [t.id for t in ref.model.tokenize(run)] if run else []
                word += [alphabet[char]] if char in alphabet else []
                run = ""
            else:
                run += char
        words[tuple(word)] += count
    values = {i: t for t, i in known.items()} | {i: c for c, i in alphabet.items()}
    expected = reference_extend(words, values, first_new + len(alphabet), NEW_MERGES)
    assert_extended(base, ext, expected)
    assert {ext.pipeline.model.id_to_token[i]: i for i in alphabet.values()} == alphabet
    export_model(ext, "tokenizer.json", tmp_path / "ext" / "tokenizer.json")
    hf = tokenizers.Tokenizer.from_file(str(tmp_path / "ext" / "tokenizer.json"))
    for text in parity_texts():
        assert hf.encode(text, add_special_tokens=False).ids == ext.encode(text, allowed_special="all"), text
    zh = corpus_lines("zh_classics", 1200)[1000:]
    assert sum(map(len, map(ext.encode_ordinary, zh))) < 0.6 * sum(map(len, map(base.encode_ordinary, zh)))


def chained_splits_tokenizer(path: Path, *, ignore_merges: bool = False) -> str:
    """A Llama-3-like layout: chained Splits, ByteLevel without its regex, and non-special added
    tokens that occur in the corpora (``ignore_merges``: a pretoken that is a token is that token,
    as in transformers' TikTokenConverter files)."""
    hf = tokenizers.Tokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(tokenizers.Regex(r"\p{N}{1,3}"), behavior="isolated"),
        pre_tokenizers.Split(tokenizers.Regex(r" ?\p{L}+| ?[^\s\p{L}\p{N}]+|\s+"), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    hf.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1500, special_tokens=["<|begin|>", "<|end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    hf.train_from_iterator([line for name in ("en_books", "tiny_shakespeare") for line in corpus_lines(name, 1000)], trainer)
    hf.add_tokens(["Holmes", "之"])  # non-special added tokens: boundaries of the pretokens
    hf.save(str(path))
    if ignore_merges:
        data = json.loads(path.read_text(encoding="utf-8"))
        data["model"]["ignore_merges"] = True
        path.write_text(json.dumps(data), encoding="utf-8")
    return str(path)


@pytest.mark.parametrize("ignore_merges", [False, True], ids=["merges", "ignore_merges"])
def test_extending_a_chained_splits_tokenizer_json_equals_the_reference(tmp_path, ignore_merges):
    require_corpora("en_books")
    path = chained_splits_tokenizer(tmp_path / "base.json", ignore_merges=ignore_merges)
    base = Tokenizer.load(path)
    ref = tokenizers.Tokenizer.from_file(path)
    texts = new_text() + list(corpus_lines("en_books", 300))
    ext = train(texts, TrainerConfig(vocab_size=base.vocab_size + NEW_MERGES), base=base)
    added = [t.content for t in ref.get_added_tokens_decoder().values()]
    words: Counter = Counter()
    for text in texts:
        for pretoken in hf_pretokens(ref, text, added):
            words[tuple(t.id for t in ref.model.tokenize(pretoken))] += 1
    values = {i: t for t, i in ref.get_vocab(with_added_tokens=False).items()}
    first_new = max(ref.get_vocab().values()) + 1
    assert_extended(base, ext, reference_extend(words, values, first_new, NEW_MERGES))
    assert ext.token_to_id("Holmes") == base.token_to_id("Holmes")
    export_model(ext, "tokenizer.json", tmp_path / "ext" / "tokenizer.json", bos_token="<|begin|>", eos_token="<|end|>")
    hf = tokenizers.Tokenizer.from_file(str(tmp_path / "ext" / "tokenizer.json"))
    auto = AutoTokenizer.from_pretrained(str(tmp_path / "ext"))  # the folder, with its special tokens
    assert (auto.bos_token_id, auto.eos_token_id) == (ext.special_tokens["<|begin|>"], ext.special_tokens["<|end|>"])
    text = "Holmes 之 x<|end|>"
    assert auto(text, add_special_tokens=False)["input_ids"] == ext.encode(text, allowed_special="all")
    for text in parity_texts():
        assert hf.encode(text, add_special_tokens=False).ids == ext.encode(text, allowed_special="all"), text
        ids = ext.encode_ordinary(text)
        assert hf.decode(ids, skip_special_tokens=False) == ext.decode(ids)


def test_extending_a_tekken_file_keeps_its_ranks_and_tiktoken_reads_the_export(tmp_path):
    """A rank model: the new tokens' ranks follow the base's, and tiktoken, given the exported
    ranks, encodes as we do."""
    from tests.models.test_tekken import small_tekken

    base = Tokenizer.load(small_tekken(tmp_path / "tekken.json"))
    texts = new_text()
    ext = train(texts, TrainerConfig(vocab_size=base.vocab_size + NEW_MERGES), base=base)
    ranks = {value: token_id for token_id, value in base.ordinary_vocab.items()}
    ref = tiktoken.Encoding("base", pat_str=base.pretokenizer.regex.pattern, mergeable_ranks=ranks, special_tokens={})
    words = tiktoken_words(ref, texts)
    assert_extended(base, ext, reference_extend(words, dict(base.ordinary_vocab), base.max_token_id + 1, NEW_MERGES))
    assert ext.merge_rule == "ranks"
    out = tmp_path / "ext.tiktoken"
    export_model(ext, "tiktoken", out)
    enc = tiktoken.Encoding("ext", pat_str=ref._pat_str, mergeable_ranks=load_tiktoken_bpe(str(out)), special_tokens={})
    for text in parity_texts():
        assert enc.encode_ordinary(text) == ext.encode_ordinary(text), text


def test_extending_a_clip_tokenizer_json_exports_what_tokenizers_runs(tmp_path):
    """CLIP's layout (empty prefix, ``</w>`` suffix): the end-of-word symbols the base lacks
    become new tokens, and tokenizers runs the export as we do."""
    from tests.training.test_like import _files

    base = Tokenizer.load(_files("clip", str(tmp_path)))
    ext = train(list(corpus_lines("multilingual", 500)), TrainerConfig(vocab_size=base.vocab_size + NEW_MERGES), base=base)
    assert ext.merge_ids[: len(base.merge_ids)] == base.merge_ids and ext.vocab_size == base.vocab_size + NEW_MERGES
    export_model(ext, "tokenizer.json", tmp_path / "ext" / "tokenizer.json")
    hf = tokenizers.Tokenizer.from_file(str(tmp_path / "ext" / "tokenizer.json"))
    for text in parity_texts():
        assert hf.encode(text, add_special_tokens=False).ids == ext.encode(text, allowed_special="all"), text


# --- the contract's edges ------------------------------------------------------------------------
def test_a_byte_bases_words_in_one_call_equal_them_one_by_one(gpt2, tmp_path):
    """BaseStart.packed_words (the compiled encoder's batch) gives each pretoken's word as
    BaseStart.words does: GPT-2 (ids from 0) and a tekken file (a rank model whose ordinary ids
    start at 16)."""
    from tests.models.test_tekken import small_tekken

    from bpe_spark.training.extend import BaseStart

    tekken = Tokenizer.load(small_tekken(tmp_path / "tekken.json"))
    texts = [*EDGE_CASES.values(), *corpus_lines("multilingual", 300)]
    for base in (gpt2, tekken):
        start = BaseStart(base)
        pretokens = list(count_with_base(texts, base))
        one_by_one = [(words[0] if words else []) for words in (start.words(p) for p in pretokens)]
        assert [word if len(word) > 1 else [] for word in start.packed_words(pretokens)] == one_by_one


def test_counts_and_texts_give_the_same_extension(gpt2):
    texts = corpus_lines("zh_classics", 200)
    cfg = TrainerConfig(vocab_size=gpt2.vocab_size + 30)
    assert train(texts, cfg, base=gpt2).merge_ids == train_from_counts(count_with_base(texts, gpt2), cfg, base=gpt2).merge_ids


def test_add_merges_caps_the_new_merges_and_early_stop_counts_new_merges(gpt2):
    texts = corpus_lines("zh_classics", 100)
    ext = train(texts, TrainerConfig(vocab_size=10**6, max_merges=7), base=gpt2)
    assert len(ext.merge_ids) == 50007 and "stopped_early" not in ext.metadata["stats"]


@pytest.mark.parametrize("settings, message", [
    ({"pattern": "words"}, r"pattern='words' does not apply when extending a model"),
    ({"special_tokens": ("<x>",)}, r"special_tokens=\('<x>',\) does not apply"),
    ({"vocab_size": 1000}, r"vocab_size=1000 is below the base model.s vocabulary \(50,257\)"),
])
def test_settings_the_base_decides_are_refused(gpt2, settings, message):
    with pytest.raises(ConfigError, match=message):
        train(["a b"], TrainerConfig(**{"vocab_size": 60000, **settings}), base=gpt2)
