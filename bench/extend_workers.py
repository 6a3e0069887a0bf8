"""The measured programs of case X1 (:mod:`bench.extend`), one per child process.

``python -m bench.extend_workers TASK JSON_ARGS`` runs one task and prints one ``BENCH_RESULT``
line, as :mod:`bench.workers` does.

- ``prepare``: cl100k_base's ``.tiktoken`` file under its own name and its ``tokenizer.json``
  export (what the peer loads), once, outside every timed run.
- ``ours_extend``: ``bpe_spark.train(lines, TrainerConfig(vocab_size=base + N), base=cl100k)``
  in process, then ``save`` (used when ``bpe-spark train`` has no ``--extend`` yet).
- ``peer_train_new``: transformers' ``PreTrainedTokenizerFast(tokenizer_file=cl100k.json)
  .train_new_from_iterator(lines, vocab_size=...)``, then ``save_pretrained``.
- ``check``: the extended model keeps every cl100k id, special token and merge, its size, and
  bytes per token on held-out text of cl100k, the extended model (our encoder, and tiktoken on
  its ranks: the ids must agree) and the peer's new model.
- ``profile``: our extension once, phase by phase (count, the base's encoding of the distinct
  pretokens, the merge engine, assembling the tokenizer, saving it).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from bench.workers import _lines, run_task


def prepare(args: dict) -> dict:
    import shutil

    from bpe_spark import Tokenizer
    from bpe_spark.models.load import export_model

    base_out, json_out = Path(args["base_out"]), Path(args["tokenizer_json_out"])
    if not base_out.exists():
        shutil.copyfile(args["tiktoken_file"], base_out)
    if not json_out.exists():  # .../NAME/tokenizer.json, with transformers' config files beside it
        staging = json_out.parent.with_name(json_out.parent.name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        export_model(Tokenizer.load(base_out), "tokenizer.json", staging / "tokenizer.json")
        staging.rename(json_out.parent)
    return {"base": str(base_out), "tokenizer_json": str(json_out)}


def ours_extend(args: dict) -> dict:
    """The in-process API, end to end: load the base, read the lines, extend, save."""
    from bpe_spark import Tokenizer, TrainerConfig, train
    from bpe_spark.training.engine import compiled_core_available

    started = time.perf_counter()
    base = Tokenizer.load(args["base"])
    load_seconds = time.perf_counter() - started
    lines = _lines(args["file"])
    started = time.perf_counter()
    tok = train(lines, TrainerConfig(vocab_size=base.vocab_size + args["add_merges"]), base=base)
    seconds = time.perf_counter() - started
    started = time.perf_counter()
    tok.save(args["out"], overwrite=True)
    save_seconds = time.perf_counter() - started
    return {"seconds": seconds, "load_seconds": load_seconds, "save_seconds": save_seconds,
            "stats": tok.metadata.get("stats", {}), "vocab_size": tok.vocab_size, "merges": len(tok.merges),
            "engine": "compiled" if compiled_core_available() else "python"}


def peer_train_new(args: dict) -> dict:
    """What users do today: transformers' train_new_from_iterator on the base's fast tokenizer
    (a NEW vocabulary of ``vocab_size`` with the base's pipeline, not an extension)."""
    from transformers import PreTrainedTokenizerFast

    started = time.perf_counter()
    tok = PreTrainedTokenizerFast(tokenizer_file=args["tokenizer_json"])
    load_seconds = time.perf_counter() - started
    lines = _lines(args["file"])
    started = time.perf_counter()
    new = tok.train_new_from_iterator(lines, vocab_size=args["vocab_size"])
    seconds = time.perf_counter() - started
    started = time.perf_counter()
    new.save_pretrained(args["out"])
    save_seconds = time.perf_counter() - started
    model = json.loads(new.backend_tokenizer.to_str())["model"]
    import transformers

    return {"seconds": seconds, "load_seconds": load_seconds, "save_seconds": save_seconds,
            "vocab_size": len(new), "merges": len(model.get("merges") or []), "version": transformers.__version__}


def _bytes_per_token(count_tokens, lines: list[str]) -> tuple[float, int]:
    size = sum(len(line.encode("utf-8")) for line in lines)
    tokens = count_tokens(lines)
    return size / tokens, tokens


def check(args: dict) -> dict:
    import tiktoken
    from tokenizers import Tokenizer as HFTokenizer

    from bpe_spark import Tokenizer

    base, ext = Tokenizer.load(args["base"]), Tokenizer.load(args["model"])
    inherited = len(base.merges)
    base_vocab = base.vocab
    ext_vocab = ext.vocab
    out = {
        "base_vocab_size": base.vocab_size,
        "vocab_size": ext.vocab_size,
        "new_tokens": ext.vocab_size - base.vocab_size,
        "base_merges": inherited,
        "new_merges": len(ext.merges) - inherited,
        "keeps_merges": list(ext.merges[:inherited]) == list(base.merges),
        "keeps_ids": all(ext_vocab.get(i) == v for i, v in base_vocab.items()),
        "keeps_specials": dict(ext.special_tokens) == dict(base.special_tokens),
        "stopped_early": (ext.metadata.get("stats") or {}).get("stopped_early"),
        "stats": ext.metadata.get("stats") or {},
    }
    if args.get("reference"):  # another run's model (the in-process profile's): the same merges
        out["same_merges_as_reference"] = list(Tokenizer.load(args["reference"]).merges) == list(ext.merges)
    from bpe_spark.bpe.patterns import PRESETS

    pattern = PRESETS.get(ext.pattern, ext.pattern)
    base_enc = tiktoken.Encoding("cl100k-base", pat_str=pattern,
                                 mergeable_ranks={v: i for i, v in base.ordinary_vocab.items()}, special_tokens={})
    ext_enc = tiktoken.Encoding("cl100k-extended", pat_str=pattern,
                                mergeable_ranks={v: i for i, v in ext.ordinary_vocab.items()}, special_tokens={})
    peer = HFTokenizer.from_file(str(Path(args["peer_model"]) / "tokenizer.json")) if args.get("peer_model") else None
    out["heldout"], same = {}, True
    for name, path in args["heldout"].items():
        lines = _lines(path)
        row = {"bytes": sum(len(line.encode("utf-8")) for line in lines), "lines": len(lines)}
        row["cl100k"], _ = _bytes_per_token(lambda ls: sum(len(base_enc.encode_ordinary(x)) for x in ls), lines)
        ours_ids = [ext.encode_ordinary(x) for x in lines]
        same = same and ours_ids == [ext_enc.encode_ordinary(x) for x in lines]
        row["extended"] = row["bytes"] / sum(map(len, ours_ids))
        if peer is not None:
            row["peer"], _ = _bytes_per_token(
                lambda ls: sum(len(e.ids) for e in peer.encode_batch(ls, add_special_tokens=False)), lines)
        out["heldout"][name] = row
    out["same_ids_as_tiktoken"] = same
    return out


def profile(args: dict) -> dict:
    """Our extension once, phase by phase, with the steps of ``extend_from_counts``."""
    from bpe_spark import Tokenizer, TrainerConfig
    from bpe_spark.training.checks import checked_counts
    from bpe_spark.training.engine import MergeEngine, compiled_core_available
    from bpe_spark.training.extend import BaseStart

    phases = {}
    started = time.perf_counter()
    base = Tokenizer.load(args["base"])
    phases["load base"] = time.perf_counter() - started
    started = time.perf_counter()
    lines = _lines(args["file"])
    phases["read lines"] = time.perf_counter() - started
    cfg = TrainerConfig(vocab_size=base.vocab_size + args["add_merges"])
    started = time.perf_counter()
    start = BaseStart(base, cfg.tie_break)
    counts = start.pretokenizer().count(lines)
    phases["count pretokens"] = time.perf_counter() - started
    started = time.perf_counter()
    items = checked_counts(counts)
    table = start.table(pretoken for pretoken, _ in items)
    words, word_counts = [], []
    for pretoken, count in items:
        for word in start.words(pretoken, table):
            words.append(word)
            word_counts.append(count)
    phases["base encoding of the distinct pretokens"] = time.perf_counter() - started
    started = time.perf_counter()
    engine = MergeEngine(table, words, word_counts)
    merges = engine.run(max_new_tokens=start.budget(cfg, table), max_merges=cfg.max_merges,
                        min_frequency=cfg.min_frequency)
    phases["merge engine"] = time.perf_counter() - started
    started = time.perf_counter()
    tok = start.tokenizer(table, merges, stats={})
    phases["assemble tokenizer"] = time.perf_counter() - started
    started = time.perf_counter()
    tok.save(args["out"], overwrite=True)
    phases["save"] = time.perf_counter() - started
    return {"phases": {k: round(v, 3) for k, v in phases.items()}, "distinct_pretokens": len(items),
            "pretokens": sum(c for _, c in items), "words": len(words), "merges": len(merges),
            "engine": "compiled" if compiled_core_available() else "python"}


TASKS = {"prepare": prepare, "ours_extend": ours_extend, "peer_train_new": peer_train_new, "check": check,
         "profile": profile}


def main(argv: list[str]) -> int:
    return run_task(TASKS, argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
