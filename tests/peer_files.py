"""The peer fixtures kept in the repository (tests/fixtures/peers, README.md there: origins and
licenses) and tiktoken's cache directory built from them, for the tests (conftest) and the benchmark
(bench/inputs.py). Not a test module."""

from __future__ import annotations

from pathlib import Path

PEERS = Path(__file__).resolve().parent / "fixtures" / "peers"

# tiktoken's cache names a file by the SHA-1 of its URL; each is built from a file of PEERS, stored once
TIKTOKEN_CACHE_FILES = {
    # .../gpt-2/encodings/main/encoder.json
    "6c7ea1a7e38e3a7f062df639a5b80947f075ffe6": (b"", PEERS / "cs336" / "gpt2_vocab.json"),
    # .../gpt-2/encodings/main/vocab.bpe: CS336's gpt2_merges.txt is it without its first line
    "6d1cbeee0f20b3d9449abfede4726ed8212e3aee": (b"#version: 0.2\n", PEERS / "cs336" / "gpt2_merges.txt"),
    # .../encodings/cl100k_base.tiktoken
    "9b5ad71b2ce5302211f9c61530b329a4922fc6a4": (b"", PEERS / "tiktoken_cache" / "cl100k_base.tiktoken"),
}


def fill_tiktoken_cache(target: Path) -> Path:
    """Write tiktoken's cached GPT-2 and cl100k_base files into ``target`` (those missing), so that
    ``TIKTOKEN_CACHE_DIR=target`` lets ``tiktoken.get_encoding`` run offline."""
    target.mkdir(parents=True, exist_ok=True)
    for name, (header, source) in TIKTOKEN_CACHE_FILES.items():
        if not (target / name).exists():
            (target / name).write_bytes(header + source.read_bytes())
    return target
