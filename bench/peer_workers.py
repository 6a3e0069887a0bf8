"""The peers' measured programs (cases P1, P2, W1 of bench/peers.py), one per child process.

``python -m bench.peer_workers TASK JSON_ARGS`` runs one task and prints one ``BENCH_RESULT``
line, as :mod:`bench.workers` does. A peer that is not installed (or fails to import) makes the
task print ``{"missing": "..."}`` instead of failing, so the case turns it into a row that says so.

- ``train``: one trainer (ours in process, ``tokenizers``, ffbpe, rustbpe, bpeasy, SentencePiece) on
  the lines of a text file; writes the new tokens in the order learned (hex) for the comparison.
- ``first_difference``: where two token lists part, and each side's pair count at that point,
  from our merge engine replayed on the corpus's pretoken counts (a tie, or not).
- ``prepare_models``: the model files every encoder loads (``.tiktoken`` ranks, ``tokenizer.json``).
- ``encode``: one encoder in one mode on the lines of a file: CPU time (one thread: the work,
  whatever else runs on the machine) and wall time, a run digest of the ids and a
  file of per-line hashes (to name the first line that differs from tiktoken's). Per line, the
  timed loop drops each line's ids (mode ``line``) or keeps them all (``line-kept``).
- ``growth``: CPU time of pathological pretokens (one character, spaces, digits, random
  non-space text) at several lengths, for one encoder.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import itertools
import json
import os
import random
import shutil
import sys
import time
from collections import Counter
from pathlib import Path

from bench.workers import IdDigest, _emit, _lines

O200K_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"
O200K_URL = "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"
OPENAI_FILES = {"gpt2": "r50k_base", "cl100k": "cl100k_base", "o200k": "o200k_base"}


class Missing(Exception):
    """A peer that is not installed or cannot do what the row asks (said in the row)."""


def _import(module: str):
    try:
        return __import__(module)
    except Exception as exc:  # any import failure is a row, not a crash
        raise Missing(f"{module} not importable: {type(exc).__name__}: {str(exc)[:160]}") from exc


def _version(distribution: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        return None


# --- training ------------------------------------------------------------------------------------


def _gpt2_pattern() -> str:
    from bpe_spark.bpe.patterns import PRESETS

    return PRESETS["gpt2"]


def _tokens_of_ranks(ranks) -> list[bytes]:
    """The learned tokens of a ``{bytes: rank}`` vocabulary, in rank order (single bytes left out)."""
    items = ranks.items() if hasattr(ranks, "items") else ranks
    return [token for token, _ in sorted(items, key=lambda item: item[1]) if len(token) > 1]


def _tokens_of_pairs(pairs) -> list[bytes]:
    """The new tokens of a merge list in order (a merge that remakes a token adds nothing)."""
    seen, out = set(), []
    for left, right in pairs:
        token = left + right
        if token not in seen:
            seen.add(token)
            out.append(token)
    return out


def _train_ours(lines, vocab_size):
    from bpe_spark import TrainerConfig, train

    cfg = TrainerConfig(vocab_size=vocab_size, pattern="gpt2", tie_break="hf")
    started = time.perf_counter()
    tok = train(lines, cfg)
    seconds = time.perf_counter() - started
    return seconds, _tokens_of_pairs(tok.merges), "bpe_spark.train, GPT-2 pattern, byte-level, tie-break hf"


def _train_tokenizers(lines, vocab_size):
    tokenizers = _import("tokenizers")
    from tokenizers import models, pre_tokenizers, trainers

    from bpe_spark.bpe.symbols import display_to_bytes

    tok = tokenizers.Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    started = time.perf_counter()
    tok.train_from_iterator(lines, trainer)
    seconds = time.perf_counter() - started
    merges = json.loads(tok.to_str())["model"]["merges"]
    pairs = [m if isinstance(m, list) else m.split(" ", 1) for m in merges]
    tokens = _tokens_of_pairs((display_to_bytes(a), display_to_bytes(b)) for a, b in pairs)
    return seconds, tokens, "BpeTrainer, ByteLevel pre-tokenizer (GPT-2 regex), RAYON_NUM_THREADS=1"


def _train_ffbpe(lines, vocab_size):
    ffbpe = _import("ffbpe")
    started = time.perf_counter()
    counter = ffbpe.PreTokenizer([], pat_str=_gpt2_pattern()).word_counter()
    counter.add_source(lines)
    trainer = ffbpe.BpeTrainer([], unit="byte")
    trainer.add_word_counter(counter)
    trainer.train(vocab_size)
    model = trainer.validate_model()
    seconds = time.perf_counter() - started
    return seconds, _tokens_of_ranks(model.vocab), "PreTokenizer(pat_str=GPT-2) word counter + BpeTrainer(unit=byte)"


def _train_rustbpe(lines, vocab_size):
    rustbpe = _import("rustbpe")
    tok = rustbpe.Tokenizer()
    started = time.perf_counter()
    tok.train_from_iterator(iter(lines), vocab_size, pattern=_gpt2_pattern())
    seconds = time.perf_counter() - started
    return seconds, _tokens_of_ranks(tok.get_mergeable_ranks()), "train_from_iterator(pattern=GPT-2), byte-level, RAYON_NUM_THREADS=1"


def _train_bpeasy(lines, vocab_size):
    bpeasy = _import("bpeasy")
    started = time.perf_counter()
    vocab = bpeasy.train_bpe(iter(lines), _gpt2_pattern(), 1 << 16, vocab_size)
    seconds = time.perf_counter() - started
    return seconds, _tokens_of_ranks(vocab), "train_bpe(GPT-2 regex, max_token_length 65536), byte-level"


def _train_sentencepiece(lines, vocab_size, scratch):
    spm = _import("sentencepiece")
    prefix = str(Path(scratch) / "spm-p1")
    started = time.perf_counter()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_prefix=prefix, model_type="bpe", vocab_size=vocab_size,
        num_threads=1, character_coverage=1.0, byte_fallback=True, max_sentence_length=1 << 16,
        minloglevel=2,
    )
    seconds = time.perf_counter() - started
    return seconds, None, ("model_type=bpe, byte_fallback, its own whitespace pretokenization (no GPT-2 "
                           "regex, code points not bytes): merges not comparable")


TRAINERS = {"ours": _train_ours, "tokenizers": _train_tokenizers, "ffbpe": _train_ffbpe,
            "rustbpe": _train_rustbpe, "bpeasy": _train_bpeasy, "sentencepiece": _train_sentencepiece}
DISTRIBUTIONS = {"tokenizers": "tokenizers", "ffbpe": "ffbpe", "rustbpe": "rustbpe", "bpeasy": "bpeasy",
                 "sentencepiece": "sentencepiece", "tiktoken": "tiktoken", "gigatoken": "gigatoken",
                 "kitoken": "kitoken", "bpe-openai": "bpe-openai", "ours": "bpe-spark"}


def train(args: dict) -> dict:
    lines = _lines(args["file"])
    peer = args["peer"]
    extra = (args["scratch"],) if peer == "sentencepiece" else ()
    seconds, tokens, setup = TRAINERS[peer](lines, args["vocab_size"], *extra)
    result = {"seconds": seconds, "setup": setup, "version": _version(DISTRIBUTIONS[peer])}
    if tokens is not None:
        Path(args["tokens_out"]).write_text(json.dumps([t.hex() for t in tokens]), encoding="utf-8")
        result["tokens"] = len(tokens)
        result["digest"] = hashlib.sha256(b"\n".join(tokens)).hexdigest()
    return result


# --- where two token lists part, and whether it is a tie ----------------------------------------


def first_difference(ours: list[bytes], peer: list[bytes]) -> int | None:
    """The first index where the two lists differ (the shorter one's end counts), None if equal."""
    for index, (a, b) in enumerate(zip(ours, peer)):
        if a != b:
            return index
    return None if len(ours) == len(peer) else min(len(ours), len(peer))


def pair_counts(words, counts) -> Counter:
    """Every adjacent pair of symbols, weighted by its word's count."""
    totals: Counter = Counter()
    for word, count in zip(words, counts):
        for pair in itertools.pairwise(word):
            totals[pair] += count
    return totals


def best_split(token: bytes, totals: Counter, value_of) -> tuple[tuple, int]:
    """The pair of current symbols that makes ``token`` with the highest count (0 if none occurs)."""
    best, best_count = None, -1
    for pair, count in totals.items():
        if count > best_count and value_of(pair[0]) + value_of(pair[1]) == token:
            best, best_count = pair, count
    return best, max(best_count, 0)


def classify(ours_count: int, peer_count: int) -> str:
    if peer_count == ours_count:
        return "tie"
    return "not a tie"


def first_differences(args: dict) -> dict:
    """For each peer's token list: the first index it parts from ours, the two tokens there, and
    the count of the pair making each at that point (our engine replayed up to it)."""
    from bpe_spark import TrainerConfig
    from bpe_spark.training.trainer import build_engine

    ours = [bytes.fromhex(t) for t in json.loads(Path(args["ours"]).read_text(encoding="utf-8"))]
    found = {}
    for name, path in args["peers"].items():
        peer = [bytes.fromhex(t) for t in json.loads(Path(path).read_text(encoding="utf-8"))]
        found[name] = (first_difference(ours, peer), peer)
    with open(args["counts"], encoding="utf-8") as fh:
        counts = json.load(fh)
    engine = build_engine(counts, TrainerConfig(vocab_size=args["vocab_size"], pattern="gpt2", tie_break="hf"))
    made = 0
    out = {}
    for name, (index, peer) in sorted(found.items(), key=lambda item: (item[1][0] is None, item[1][0] or 0)):
        if index is None:
            out[name] = {"index": None, "peer_tokens": len(peer)}
            continue
        if index >= min(len(ours), len(peer)):
            out[name] = {"index": index, "peer_tokens": len(peer), "kind": "length"}
            continue
        if index > made:
            engine.run(max_new_tokens=index - made)
            made = index
        totals = pair_counts(engine.core.current_words(), engine.counts)
        value_of = engine.table.value
        ours_pair, ours_count = best_split(ours[index], totals, value_of)
        peer_pair, peer_count = best_split(peer[index], totals, value_of)
        top = engine.best()
        out[name] = {
            "index": index, "peer_tokens": len(peer),
            "ours": [value_of(i).hex() for i in ours_pair] if ours_pair else ours[index].hex(),
            "peer": [value_of(i).hex() for i in peer_pair] if peer_pair else peer[index].hex(),
            "ours_count": ours_count, "peer_count": peer_count,
            "engine_count": top[1] if top else None,
            "kind": classify(ours_count, peer_count),
        }
    return {"differences": out}


# --- models for the encoders --------------------------------------------------------------------


def _write_ranks(path: Path, ranks: dict[bytes, int]) -> None:
    with open(path, "wb") as fh:
        fh.writelines(base64.b64encode(token) + b" " + str(rank).encode() + b"\n"
                      for token, rank in sorted(ranks.items(), key=lambda item: item[1]))


def prepare_models(args: dict) -> dict:
    """The files of GPT-2, cl100k, o200k and our trained model in ``args["folder"]``:
    ``NAME.tiktoken`` (OpenAI's names: gigatoken and kitoken pick the pattern by them),
    ``NAME.tokenizer.json`` (our export), and o200k into the private tiktoken cache when
    bpe-openai's bundled copy is OpenAI's file (sha256 as tiktoken expects)."""
    import tiktoken

    from bpe_spark import Tokenizer
    from bpe_spark.models.load import export_model

    folder = Path(args["folder"])
    folder.mkdir(parents=True, exist_ok=True)
    cache = Path(os.environ["TIKTOKEN_CACHE_DIR"])
    notes = {}
    gpt2 = folder / "r50k_base.tiktoken"
    if not gpt2.exists():
        _write_ranks(gpt2, tiktoken.get_encoding("gpt2")._mergeable_ranks)
    cl100k = folder / "cl100k_base.tiktoken"
    if not cl100k.exists():
        _write_ranks(cl100k, tiktoken.get_encoding("cl100k_base")._mergeable_ranks)
    o200k = folder / "o200k_base.tiktoken"
    if not o200k.exists():
        try:
            bundled = Path(_import("bpe_openai").__file__).parent / "data" / "o200k_base.tiktoken.gz"
            data = gzip.decompress(bundled.read_bytes())
            if hashlib.sha256(data).hexdigest() == O200K_SHA256:
                o200k.write_bytes(data)
        except (Missing, OSError) as exc:
            notes["o200k"] = str(exc)
    if o200k.exists():
        cached = cache / hashlib.sha1(O200K_URL.encode()).hexdigest()
        if not cached.exists():
            shutil.copyfile(o200k, cached)
        notes["o200k"] = "o200k_base ranks from bpe-openai's bundled copy (sha256 = tiktoken's expected hash)"
    models = {
        "gpt2": {"ours": args["gpt2_vocab"], "tiktoken_file": str(gpt2), "pattern": "gpt2"},
        "cl100k": {"ours": str(cl100k), "tiktoken_file": str(cl100k), "pattern": "cl100k"},
        "trained": {"ours": args["trained"], "tiktoken_file": str(folder / "trained.tiktoken"), "pattern": "gpt2"},
    }
    if o200k.exists():
        models["o200k"] = {"ours": str(o200k), "tiktoken_file": str(o200k), "pattern": "o200k"}
    trained = Tokenizer.load(args["trained"])
    if not Path(models["trained"]["tiktoken_file"]).exists():
        _write_ranks(Path(models["trained"]["tiktoken_file"]), {v: k for k, v in trained.ordinary_vocab.items()})
    for name, spec in models.items():
        target = folder / f"{name}.tokenizer.json"
        if not target.exists():
            tok = trained if name == "trained" else Tokenizer.load(spec["ours"])
            export_model(tok, "tokenizer.json", target)
        spec["tokenizer_json"] = str(target)
    return {"models": models, "notes": notes}


# --- the encoders ------------------------------------------------------------------------------


def _tiktoken_encoding(model: str, spec: dict):
    tiktoken = _import("tiktoken")
    if model in OPENAI_FILES:
        return tiktoken.get_encoding("gpt2" if model == "gpt2" else OPENAI_FILES[model])
    from tiktoken.load import load_tiktoken_bpe

    # tiktoken's own spelling of the pattern (r50k's possessive rewrite of GPT-2's: the same pretokens,
    # without the backtracking that makes its regex engine panic on a long run of spaces)
    pattern = tiktoken.get_encoding({"gpt2": "gpt2", "cl100k": "cl100k_base"}[spec["pattern"]])._pat_str
    return tiktoken.Encoding(model, pat_str=pattern,
                             mergeable_ranks=load_tiktoken_bpe(spec["tiktoken_file"]), special_tokens={})


def encoder(peer: str, mode: str, model: str, spec: dict):
    """``(fn, kind)``: ``fn(lines) -> rows of ids`` (kind "batch"), ``fn(lines) -> (ids, lengths)``
    (flat arrays, "flat") or ``fn(text) -> ids`` ("line")."""
    if peer == "ours":
        from bpe_spark import Tokenizer

        tok = Tokenizer.load(spec["ours"])
        if mode == "flat":
            return tok.encode_ordinary_flat, "flat"
        return tok.encode_ordinary, "line"
    if peer == "tiktoken":
        enc = _tiktoken_encoding(model, spec)
        if mode == "batch":
            return (lambda lines: enc.encode_ordinary_batch(lines, num_threads=1)), "batch"
        return enc.encode_ordinary, "line"
    if peer == "gigatoken":
        gigatoken = _import("gigatoken")
        pretokenizer = None if model in OPENAI_FILES else "gpt2"
        tok = gigatoken.Tokenizer.from_tiktoken(spec["tiktoken_file"], pretokenizer=pretokenizer, special_tokens={})
        if mode == "batch":  # its native batch result, an awkward array: flat ids and row lengths
            def batch(lines):
                import awkward

                rows = tok.encode_batch(lines, parallel=False)
                return awkward.to_numpy(awkward.flatten(rows)), awkward.to_numpy(awkward.num(rows))
            return batch, "flat"
        return tok.encode, "line"
    if peer == "kitoken":
        kitoken = _import("kitoken")
        if model in OPENAI_FILES:
            tok = kitoken.Kitoken.from_tiktoken_file(spec["tiktoken_file"])
        else:
            tok = kitoken.Kitoken.from_tokenizers_file(spec["tokenizer_json"])
        return tok.encode, "line"
    if peer == "bpe-openai":
        bpe_openai = _import("bpe_openai")
        if model not in ("cl100k", "o200k"):
            raise Missing(f"bpe-openai has no {model} (it bundles cl100k_base, o200k_base, voyage3_base)")
        enc = bpe_openai.get_encoding(OPENAI_FILES[model])
        if mode == "backend":  # the Rust object: the wrapper refuses texts of >= 1,000,000 characters
            return enc._backend.encode, "line"
        return enc.encode_ordinary, "line"
    if peer == "tokenizers":
        tokenizers = _import("tokenizers")
        tok = tokenizers.Tokenizer.from_file(spec["tokenizer_json"])
        if mode == "batch":
            return (lambda lines: [e.ids for e in tok.encode_batch(lines, add_special_tokens=False)]), "batch"
        return (lambda text: tok.encode(text, add_special_tokens=False).ids), "line"
    raise Missing(f"unknown peer {peer}")


def _run(fn, kind, lines):
    return fn(lines) if kind in ("batch", "flat") else [fn(line) for line in lines]


def _stream(fn, lines) -> int:
    """Each line's ids used (counted) and dropped, as a loop that writes them out would: the
    encoder's cost, without 785,000 kept lists' page faults and cyclic-collector walks."""
    tokens = 0
    for line in lines:
        tokens += len(fn(line))
    return tokens


def _rows(result, kind):
    """Each line's ids (a flat result is cut by its lengths, after the timing)."""
    if kind != "flat":
        return result
    import numpy as np

    ids, lengths = result
    return np.split(np.asarray(ids), np.cumsum(lengths)[:-1]) if len(lengths) else []


def encode(args: dict) -> dict:
    import numpy as np

    # mode "line" times a per-line loop that drops each line's ids, "line-kept" one that keeps
    # them all in a list (what the collector and the page faults cost then is part of its time)
    mode = args["mode"]
    fn, kind = encoder(args["peer"], "line" if mode == "line-kept" else mode, args["model"], args["spec"])
    lines = _lines(args["file"])
    _run(fn, kind, lines[:2000])  # first calls (tables, caches, thread pools) are not timed
    started, cpu_started = time.perf_counter(), time.process_time()
    rows = _stream(fn, lines) if mode == "line" else _run(fn, kind, lines)
    # CPU time of this (one-thread) process: what the encoder costs, whatever else the shared
    # machine runs; wall time beside it
    seconds, wall = time.process_time() - cpu_started, time.perf_counter() - started
    rows = _run(fn, kind, lines) if mode == "line" else _rows(rows, kind)  # the ids checked: not timed
    digest = IdDigest()
    per_line = np.empty(len(rows), dtype="<u8")
    for index, row in enumerate(rows):
        arr = np.asarray(row, dtype="<i4")
        digest.add(arr)
        per_line[index] = int.from_bytes(hashlib.blake2b(arr.tobytes(), digest_size=8).digest(), "little")
    if args.get("lines_out"):
        per_line.tofile(args["lines_out"])
    return {"seconds": seconds, "wall_seconds": wall, "digest": digest.hexdigest(), "tokens": digest.tokens, "documents": digest.documents,
            "bytes": sum(len(line.encode("utf-8")) for line in lines), "version": _version(DISTRIBUTIONS[args["peer"]])}


# --- worst-case growth -------------------------------------------------------------------------

PRINTABLE = [chr(c) for c in range(33, 127)]
MIN_RUNS = 3  # timed runs at every length of W1, the best taken
LETTERS = [chr(c) for c in range(ord("a"), ord("z") + 1)]


def pathological(kind: str, length: int, variant: int) -> str:
    """A text of ``length`` characters of ``kind``; each ``variant`` a different pretoken (so no
    cache of a previous run helps): one character and spaces one character shorter per variant."""
    rng = random.Random(variant * 7919 + length)
    if kind == "one_char":
        return "a" * (length - variant)
    if kind == "spaces":
        return " " * (length - variant)
    if kind == "digits":
        return "".join(rng.choices("0123456789", k=length))
    if kind == "random":
        return "".join(rng.choices(PRINTABLE, k=length))
    if kind == "letters":  # one pretoken of random letters: its pairs scattered over the whole text
        return "".join(rng.choices(LETTERS, k=length))
    raise ValueError(kind)


def growth(args: dict) -> dict:
    """CPU seconds per kind and length: the best of several runs, at least ``MIN_RUNS`` at every
    length (more for short texts), after one untimed run at that length; a kind stops growing
    once one run passes ``max_seconds`` (the longer lengths are then not run).

    subtle: a single sample at the long lengths and the best of nine at the short ones made the
    exponent a measurement of noise: the first call at a new length also pays for growing the
    encoder's buffers (page faults, counted as CPU time), and one disturbed run on a shared
    machine weighs a whole point, while the short lengths took the best of many."""
    fn, _ = encoder(args["peer"], args.get("mode", "line"), args["model"], args["spec"])
    fn("warm up")
    seconds: dict[str, dict[str, float]] = {}
    errors: dict[str, str] = {}
    for kind in args["kinds"]:
        seconds[kind] = {}
        for length in args["lengths"]:
            runs = max(MIN_RUNS, int(args.get("budget", 0.3) * 1_000_000 / length))
            runs = min(runs, 9)
            best = None
            try:
                warm = pathological(kind, length, runs)
                started = time.process_time()
                fn(warm)  # not a sample: the buffers grown to this length (but a slow one stops the kind)
                if time.process_time() - started > args.get("max_seconds", 20):
                    runs = 0
                    best = time.process_time() - started
                for variant in range(runs):
                    text = pathological(kind, length, variant)
                    started = time.process_time()  # CPU time: the other processes' load does not count
                    fn(text)
                    elapsed = time.process_time() - started
                    best = elapsed if best is None else min(best, elapsed)
                    if elapsed > args.get("max_seconds", 20):
                        break
            except BaseException as exc:  # a peer's Rust panic (pyo3 PanicException) included
                if isinstance(exc, KeyboardInterrupt):
                    raise
                errors[kind] = f"fails at {length:,} characters: {type(exc).__name__}: {str(exc)[:100]}"
                break
            seconds[kind][str(length)] = best
            if best > args.get("max_seconds", 20):
                break
    return {"seconds": seconds, "errors": errors, "version": _version(DISTRIBUTIONS[args["peer"]])}


TASKS = {"train": train, "first_differences": first_differences, "prepare_models": prepare_models,
         "encode": encode, "growth": growth}


def main(argv: list[str]) -> int:
    task, raw = argv[0], argv[1] if len(argv) > 1 else "{}"
    try:
        result = TASKS[task](json.loads(raw))
    except Missing as exc:
        result = {"missing": str(exc)}
    result["pid"] = os.getpid()
    _emit(result)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
