"""X1, continued training (issue 37, acceptance 4): extend cl100k_base by 32,000 merges on
zh_classics and multilingual, against transformers' ``train_new_from_iterator`` on the same text.

``python -m bench.run --cases X1`` (``--quick``: 2,000 merges on about 2 MB).

- The new text: the first 90% of the lines of zh_classics and of multilingual (in quick mode,
  about the first 1 MB of each of those); the last 10% of each corpus's lines are held out.
- Ours: ``bpe-spark train --extend cl100k_base.tiktoken --add-merges N --input FILE --out DIR``
  (local[2]) when ``bpe-spark train --help`` lists ``--extend``, else the in-process API,
  ``bpe_spark.train(lines, TrainerConfig(vocab_size=100,261 + N), base=Tokenizer.load(...))`` and
  ``save`` (``BPE_SPARK_X1_MODE=cli|inprocess`` forces one); the row's note says which.
- The peer: ``PreTrainedTokenizerFast(tokenizer_file=<cl100k exported as tokenizer.json>)
  .train_new_from_iterator(lines, vocab_size=N + 256 + 5)`` and ``save_pretrained``: the byte
  alphabet, cl100k's 5 special tokens and N merges. It learns a NEW vocabulary with cl100k's
  pipeline (what users do today), it does not extend cl100k.
- Each side runs in a fresh process under :mod:`bench.procmon` (wall time end to end: imports,
  loading the base, reading, training, saving; peak memory of all its processes), alternating
  (ABBA), medians over ``--repeat``.
- Checks (untimed): the extended model keeps every cl100k id, special token and merge (its first
  100,000 merges equal cl100k's), has cl100k's 100,261 tokens + N (or says why fewer: ran out of
  pairs), its ids on the held-out text equal tiktoken's on its ranks, and its merges equal those
  of the in-process profile run (below). Then bytes per token
  on the held-out text: cl100k against the extended model, and the peer's new model for context.
- A profile of our side once (in process, phase by phase) goes in the notes.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

from bench import inputs
from bench.run import (
    SPARK_CORES,
    Context,
    Row,
    Sample,
    _child_env,
    alternate,
    bpe_spark_command,
    median,
    run_cli,
    run_worker,
)

CORPORA = ("zh_classics", "multilingual")
HELD_OUT = 0.10  # the last 10% of each corpus's lines
QUICK_BYTES = 1_000_000  # of each corpus's training part, in quick mode
CL100K_URL = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"
CL100K_SPECIALS = 5
WORKERS = "bench.extend_workers"


def new_merges(quick: bool) -> int:
    return 2_000 if quick else 32_000


def split_lines(data: bytes, held_out: float = HELD_OUT) -> tuple[bytes, bytes]:
    """``data``'s lines cut in two: the first ``1 - held_out`` of them, and the rest.

    >>> split_lines(b"a\\nb\\nc\\nd\\ne\\nf\\ng\\nh\\ni\\nj\\n")
    (b'a\\nb\\nc\\nd\\ne\\nf\\ng\\nh\\ni\\n', b'j\\n')
    """
    lines = data.splitlines(keepends=True)
    cut = len(lines) - max(1, round(len(lines) * held_out))
    return b"".join(lines[:cut]), b"".join(lines[cut:])


def head_lines(data: bytes, max_bytes: int) -> bytes:
    """The whole lines of ``data`` within its first ``max_bytes`` bytes (at least one line).

    >>> head_lines(b"ab\\ncd\\nef\\n", 5)
    b'ab\\n'
    """
    if len(data) <= max_bytes:
        return data
    end = data.rfind(b"\n", 0, max_bytes)
    return data[: end + 1] if end >= 0 else data[: data.find(b"\n") + 1 or len(data)]


def x1_inputs(quick: bool) -> tuple[Path, dict[str, Path]]:
    """The training file (both corpora's training parts, one after the other) and each corpus's
    held-out lines, built once under bench-results/cache/."""
    held = {name: inputs.CACHE / f"x1.heldout.{name}.txt" for name in CORPORA}
    train = inputs.CACHE / f"x1.train.{'2mb' if quick else 'full'}.txt"

    def build_held(name: str):
        return lambda path: path.write_bytes(split_lines(inputs._read_corpus(name))[1])

    def build_train(path: Path) -> None:
        with open(path, "wb") as fh:
            for name in CORPORA:
                part = split_lines(inputs._read_corpus(name))[0]
                fh.write(head_lines(part, QUICK_BYTES) if quick else part)

    for name in CORPORA:
        inputs._write_once(held[name], build_held(name))
    return inputs._write_once(train, build_train), held


def prepared_base() -> tuple[Path, Path]:
    """cl100k_base as a ``.tiktoken`` file and as ``tokenizer.json`` (the peer's), made once."""
    source = inputs.private_tiktoken_cache() / hashlib.sha1(CL100K_URL.encode()).hexdigest()
    base, hf_json = inputs.CACHE / "cl100k_base.tiktoken", inputs.CACHE / "cl100k_base.hf" / "tokenizer.json"
    if not base.exists() or not hf_json.exists():
        run_worker("prepare", {"tiktoken_file": str(source), "base_out": str(base),
                               "tokenizer_json_out": str(hf_json)}, module=WORKERS)
    return base, hf_json


def cli_extends() -> bool:
    """Whether ``bpe-spark train`` takes ``--extend`` (``BPE_SPARK_X1_MODE`` decides if set)."""
    mode = os.environ.get("BPE_SPARK_X1_MODE", "").lower()
    if mode in ("cli", "inprocess"):
        return mode == "cli"
    try:
        helped = subprocess.run(bpe_spark_command() + ["train", "--help"], check=False, env=_child_env(),
                                cwd=str(inputs.ROOT), capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return helped.returncode == 0 and "--extend" in helped.stdout and "--add-merges" in helped.stdout


def _cli_argv(base: Path, text: Path, merges: int, out: Path) -> list[str]:
    return ["train", "--extend", str(base), "--add-merges", str(merges), "--input", str(text), "--out", str(out),
            "--master", f"local[{SPARK_CORES}]", "--overwrite"]


def _ours(ctx: Context, base: Path, text: Path, merges: int, out: Path, cli: bool):
    if cli:
        return lambda: run_cli(_cli_argv(base, text, merges, out))
    return lambda: run_worker("ours_extend", {"base": str(base), "file": str(text), "add_merges": merges,
                                              "out": str(out)}, module=WORKERS)


def _peer(hf_json: Path, text: Path, vocab_size: int, out: Path):
    return lambda: run_worker("peer_train_new", {"tokenizer_json": str(hf_json), "file": str(text),
                                                 "vocab_size": vocab_size, "out": str(out)}, module=WORKERS)


def _middle(samples: list[Sample]) -> Sample:
    return sorted(samples, key=lambda s: s.wall_seconds)[len(samples) // 2]


def _peak(sample: Sample, cli: bool) -> float:
    return sample.peak_mb["total"] if cli else sample.peak_mb["root"]


def case_x1(ctx: Context) -> None:
    merges = new_merges(ctx.quick)
    text, held = x1_inputs(ctx.quick)
    base, hf_json = prepared_base()
    cli = cli_extends()
    out, peer_out = ctx.scratch / "X1-extended", ctx.scratch / "X1-peer"
    peer_vocab = merges + 256 + CL100K_SPECIALS
    mine, theirs = alternate(ctx.repeat, _ours(ctx, base, text, merges, out, cli),
                             _peer(hf_json, text, peer_vocab, peer_out))
    timeline = ""
    if cli:  # Spark's own timeline from one more run, not timed (writing the event log costs time)
        timeline = run_cli(_cli_argv(base, text, merges, out), event_dir=ctx.scratch / "X1-events").result["spark"]
    profiled = ctx.scratch / "X1-profiled"
    prof = run_worker("profile", {"base": str(base), "file": str(text), "add_merges": merges, "out": str(profiled)},
                      module=WORKERS).result
    checked = run_worker("check", {"base": str(base), "model": str(out), "peer_model": str(peer_out),
                                   "reference": str(profiled),
                                   "heldout": {name: str(path) for name, path in held.items()}},
                         module=WORKERS).result

    size = text.stat().st_size / 1e6
    reached = checked["new_tokens"] == merges or bool(checked["stopped_early"])
    correct = (checked["keeps_merges"] and checked["keeps_ids"] and checked["keeps_specials"] and reached
               and checked["same_ids_as_tiktoken"] and checked["same_merges_as_reference"])
    how = ("`bpe-spark train --extend cl100k_base.tiktoken --add-merges N` (CLI, Spark local[2])" if cli else
           "in-process API `bpe_spark.train(lines, TrainerConfig(vocab_size=100261+N), base=cl100k)` + save "
           "(bpe-spark train has no --extend here, or BPE_SPARK_X1_MODE=inprocess)")
    middle, peer_middle = _middle(mine), _middle(theirs)
    peer_merges = peer_middle.result.get("merges")
    checks = (f"extended model: {checked['vocab_size']:,} tokens = cl100k's {checked['base_vocab_size']:,} + "
              f"{checked['new_tokens']:,}, {checked['new_merges']:,} new merges; first {checked['base_merges']:,} "
              f"merges equal cl100k's: {checked['keeps_merges']}; every cl100k id and special token kept: "
              f"{checked['keeps_ids'] and checked['keeps_specials']}; held-out ids equal tiktoken's on its ranks: "
              f"{checked['same_ids_as_tiktoken']}; merges equal the in-process profile run's: "
              f"{checked['same_merges_as_reference']}"
              + (f"; stopped early: {checked['stopped_early']}" if checked["stopped_early"] else ""))
    if cli:
        ours_detail = (f"the median run's bpe-spark says {middle.result.get('phases') or '?'}; Spark event log "
                       f"(one more run): {timeline or '?'}")
    else:
        r = middle.result
        ours_detail = (f"train() call {r['seconds']:.1f} s (count {r['stats'].get('count_seconds', 0):.1f} s, "
                       f"base encoding + merges {r['stats'].get('merge_seconds', 0):.1f} s), load cl100k "
                       f"{r['load_seconds']:.1f} s, save {r['save_seconds']:.1f} s; engine {r['engine']}")
    peer_detail = (f"peer: train_new_from_iterator(vocab_size={peer_vocab:,}: {merges:,} merges + 256 bytes + "
                   f"{CL100K_SPECIALS} specials) learned {peer_merges if peer_merges is not None else '?'} merges "
                   f"of a NEW vocabulary ({peer_middle.result.get('vocab_size', '?'):,} tokens, cl100k's pipeline, "
                   f"not an extension), call {peer_middle.result['seconds']:.1f} s, load "
                   f"{peer_middle.result['load_seconds']:.1f} s, save {peer_middle.result['save_seconds']:.1f} s "
                   f"(RAYON_NUM_THREADS={SPARK_CORES}, transformers {peer_middle.result.get('version')})")
    ours_s, peer_s = median(s.wall_seconds for s in mine), median(s.wall_seconds for s in theirs)
    ctx.add(Row("X1", f"extend cl100k by {merges:,} merges on {size:.1f} MB (zh_classics + multilingual), end to end",
                ours_s, peer_s, "transformers train_new", "s", ours_s / peer_s, "", None, correct,
                note=f"ours: {how}: {ours_detail}; {peer_detail}; {checks}",
                samples={"ours": [s.wall_seconds for s in mine], "peer": [s.wall_seconds for s in theirs],
                         "ours_phases": [s.result.get("phases") or s.result.get("stats") for s in mine],
                         "peer_train_seconds": [s.result["seconds"] for s in theirs], "mode": "cli" if cli else "inprocess"}))
    ours_mb = median(_peak(s, cli) for s in mine)
    peer_mb = median(s.peak_mb["root"] for s in theirs)
    ctx.add(Row("X1", "peak memory, " + ("whole job (driver, JVM, workers)" if cli else "the process"), ours_mb, peer_mb,
                "transformers train_new", "MB", ours_mb / peer_mb, "", None,
                note=(f"ours (median run by wall time): driver Python {middle.peak_mb['root']:,.0f} MB, JVM "
                      f"{middle.peak_mb['jvm']:,.0f} MB, largest Python worker {middle.peak_mb['worker_max']:,.0f} MB, "
                      f"whole job {middle.peak_mb['total']:,.0f} MB; peer's process {peer_middle.peak_mb['root']:,.0f} MB"
                      if cli else ""),
                samples={"ours": [_peak(s, cli) for s in mine], "peer": [s.peak_mb["root"] for s in theirs]}))
    for name, row in checked["heldout"].items():
        ratio = row["extended"] / row["cl100k"]
        ctx.add(Row("X1", f"bytes/token, held-out {name} ({row['bytes'] / 1e6:.1f} MB): extended vs cl100k",
                    row["extended"], row["cl100k"], "cl100k_base", "B/tok", ratio, ">= 1.0" if name == "zh_classics" else "",
                    ratio >= 1.0 if name == "zh_classics" else None,
                    note=(f"held-out {name}: cl100k {row['cl100k']:.3f}, extended {row['extended']:.3f} "
                          f"(+{(ratio - 1) * 100:.1f}%), the peer's new {peer_vocab:,}-token vocabulary "
                          f"{row.get('peer', float('nan')):.3f} bytes/token")))
    phases = prof["phases"]
    total = sum(phases.values())
    ctx.add(Row("X1", "profile of ours, in process, once (s)", total, None, "", "s",
                note="where the time goes (in process, one run): " + ", ".join(
                    f"{name} {seconds:.1f} s ({seconds / total * 100:.0f}%)" for name, seconds in phases.items())
                + f"; {prof['distinct_pretokens']:,} distinct pretokens ({prof['pretokens']:,} in all), "
                  f"{prof['words']:,} words of 2+ base tokens, {prof['merges']:,} merges, engine {prof['engine']}",
                samples={"phases": phases}))
