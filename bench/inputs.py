"""Benchmark inputs, built once from ../shared/corpora and cached under bench-results/cache/."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from tests import peer_files

ROOT = Path(__file__).resolve().parents[1]
CORPORA = ROOT.parent / "shared" / "corpora"
PEERS = peer_files.PEERS  # the small reference files of other projects (tests/fixtures/peers)
CACHE = ROOT / "bench-results" / "cache"


def private_tiktoken_cache() -> Path:
    """tiktoken's cache directory, built from the repository's GPT-2 and cl100k_base files
    (tests/fixtures/peers): tiktoken writes into it, so it is the benchmark's own."""
    return peer_files.fill_tiktoken_cache(CACHE / "tiktoken")


ALL_CORPORA = ("en_books", "zh_classics", "multilingual", "tiny_shakespeare")
QUICK_BYTES = 4_000_000


def _read_corpus(name: str, max_bytes: int | None = None) -> bytes:
    path = CORPORA / f"{name}.txt.gz"
    if not path.exists():
        raise SystemExit(f"benchmark input {path} is missing: the shared corpora must sit in ../shared/corpora")
    with gzip.open(path, "rb") as fh:
        raw = fh.read() if max_bytes is None else fh.read(max_bytes)
    if max_bytes is not None and len(raw) == max_bytes:
        raw = raw[: raw.rfind(b"\n") + 1]  # whole lines only
    return raw


def _write_once(path: Path, build) -> Path:
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        staging = path.with_name(path.name + ".partial")
        build(staging)
        staging.rename(path)
    return path


def en_books_text(quick: bool) -> Path:
    """en_books as plain text (the first 4 MB in quick mode): one document per line."""
    name = "en_books.4mb.txt" if quick else "en_books.txt"
    return _write_once(
        CACHE / name, lambda p: p.write_bytes(_read_corpus("en_books", QUICK_BYTES if quick else None))
    )


def scaled_text(text: Path, times: int) -> Path:
    """``text`` repeated ``times`` times, one file: the same documents and distinct pretokens,
    ``times`` the bytes (where a Spark job's fixed costs no longer dominate)."""

    def build(path: Path) -> None:
        data = text.read_bytes()
        with open(path, "wb") as fh:
            fh.writelines(data for _ in range(times))
    return _write_once(text.with_name(f"{text.stem}.x{times}{text.suffix}"), build)


def floor_text() -> Path:
    """One short line: what a Spark job costs with no data (the floors of T1 and E4)."""
    return _write_once(CACHE / "one_short_line.txt", lambda p: p.write_text("hello world\n", encoding="utf-8"))


def warmup_text() -> Path:
    """A 1 MB slice of en_books: encoded once before T5's timed run, in the same session."""
    return _write_once(CACHE / "en_books.1mb.txt", lambda p: p.write_bytes(_read_corpus("en_books", 1_000_000)))


def big_corpus_text(quick: bool, once: bool = False) -> Path:
    """T2's corpus: every shared corpus, concatenated and repeated to about 400 MB (40 MB quick);
    ``once``: the same text not repeated (the same distinct pretokens, a sixth of the bytes)."""
    target = 1 if once else (40_000_000 if quick else 400_000_000)
    name = f"all_corpora.{'4x2.5mb' if quick else 'full'}.once.txt" if once else (
        "all_corpora.40mb.txt" if quick else "all_corpora.400mb.txt")

    def build(path: Path) -> None:
        parts = [_read_corpus(name) for name in ALL_CORPORA]
        if quick:
            parts = [_read_corpus(name, 2_500_000) for name in ALL_CORPORA]
        written = 0
        with open(path, "wb") as fh:
            while written < target:
                for part in parts:
                    fh.write(part)
                    written += len(part)
    return _write_once(CACHE / name, build)


def pretoken_counts(text_path: Path) -> Path:
    """``{pretoken: count}`` of a text file (gpt2 pattern, each line a document with its \\n)."""

    def build(path: Path) -> None:
        from bpe_spark import TrainerConfig
        from bpe_spark.training.trainer import count_pretokens

        with open(text_path, encoding="utf-8", newline="") as fh:
            lines = fh.read().splitlines(keepends=True)
        counts = count_pretokens(lines, TrainerConfig(vocab_size=257, pattern="gpt2"))
        path.write_text(json.dumps(counts, ensure_ascii=False), encoding="utf-8")

    return _write_once(text_path.with_suffix(".counts.json"), build)


def trained_model(text_path: Path, vocab_size: int) -> tuple[Path, Path]:
    """Our model of ``text_path`` at ``vocab_size`` (directory) and its tokenizer.json export."""
    model = CACHE / f"{text_path.stem}.{vocab_size}.model"
    hf_json = CACHE / f"{text_path.stem}.{vocab_size}.tokenizer.json"
    if not model.exists() or not hf_json.exists():
        from bpe_spark import TrainerConfig, train_from_counts
        from bpe_spark.models.load import export_model

        counts = json.loads(pretoken_counts(text_path).read_text(encoding="utf-8"))
        tok = train_from_counts(counts, TrainerConfig(vocab_size=vocab_size, pattern="gpt2"))
        tok.save(model, overwrite=True)
        export_model(tok, "tokenizer.json", hf_json)
    return model, hf_json


def one_line_text(megabytes: int = 100) -> Path:
    """One document of ``megabytes`` MB without a newline: every shared corpus with its newlines
    (and carriage returns) replaced by spaces, repeated to size and cut at a character boundary."""
    target = megabytes * 1_000_000

    def build(path: Path) -> None:
        text = b"".join(_read_corpus(name) for name in ALL_CORPORA).replace(b"\r", b" ").replace(b"\n", b" ")
        written = 0
        with open(path, "wb") as fh:
            while written < target:
                part = text[: target - written]
                while part and (part[-1] & 0xC0) == 0x80 or part and part[-1] >= 0xC0:
                    part = part[:-1]  # never end inside a UTF-8 sequence
                fh.write(part)
                written += len(part)
                if len(part) < len(text):
                    break

    return _write_once(CACHE / f"one_line.{megabytes}mb.txt", build)
