"""The fastest peers side by side (issue 15): cases P1 (training), P2 (encoding), W1 (growth).

Each measurement runs in a fresh child process (:mod:`bench.peer_workers`), one thread where the
peer lets us set it (``RAYON_NUM_THREADS=1``, ``num_threads=1``, ``parallel=False``), ours and
the peers in alternating order (the list, then the list reversed, ...), medians of ``--repeat``.

- P1: train en_books to 32,000 (8,000 with ``--quick``) in process, counting included: ours
  (``bpe_spark.train``), ``tokenizers``, ffbpe, rustbpe, bpeasy, SentencePiece. Each row says
  whether the peer's merges (its new tokens, in order) equal ours and, where not, whether the
  first difference is a tie broken another way: both pairs' counts at that point, from our
  engine replayed on the corpus's pretoken counts.
- P2: encode en_books with GPT-2, cl100k and o200k: ours per line (``encode_ordinary``) and flat
  (``encode_ordinary_flat``) against tiktoken per line and batch, gigatoken, kitoken, bpe-openai,
  ``tokenizers``; rates from each side's CPU time (all run one thread). A per-line loop uses and
  drops each line's ids, as one that writes them out does; a reference row keeps every line's list
  (ours and tiktoken), which adds the same page faults and collector walks to both sides. Every
  side's ids are digested per line (after the timing); a side whose ids are not tiktoken's fails
  its row (the note names the first line that differs).
- W1: CPU time of pathological pretokens (one character repeated, spaces, digits, random
  non-space text) from 10k to 1M characters, for every model (GPT-2, cl100k, o200k, one we
  trained), ours in process through the public API; at each length the best of at least three
  timed runs after an untimed one; the growth exponent is the slope of log(time) over log(length)
  (least squares); target <= 1.15. Peers beside, for reference.

A peer that is not installed, cannot load a model or crashes is a row that says so.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from bench import inputs
from bench.run import BenchError, Context, Row, Sample, median, run_worker

TRAIN_PEERS = ("tokenizers", "ffbpe", "rustbpe", "bpeasy", "sentencepiece")
TRAIN_TARGET = 0.3  # ours / the fastest peer with identical merges
LINE_TARGET = 3.0  # ours per line / tiktoken per line
FLAT_TARGET = 1.0  # ours flat / gigatoken batch
GROWTH_TARGET = 1.15
KINDS = ("one_char", "spaces", "digits", "random", "letters")
KIND_LABELS = {"one_char": "one character", "spaces": "spaces", "digits": "digits", "random": "random non-space",
               "letters": "random letters"}
ENCODE_MODELS = ("gpt2", "cl100k", "o200k")
GROWTH_MODELS = ("gpt2", "cl100k", "o200k", "trained")
# (peer, mode): mode "line" calls the encoder per line, "batch"/"flat" hands it every line at once
LINE_SIDES = (("tiktoken", "line"), ("kitoken", "line"), ("bpe-openai", "line"), ("gigatoken", "line"))
BATCH_SIDES = (("gigatoken", "batch"), ("tiktoken", "batch"), ("tokenizers", "batch"))
# per line with every line's list of ids kept until the end (a reference row): both sides then
# also pay the page faults of the lists and the cyclic collector walking them
KEPT_SIDES = (("ours", "line-kept"), ("tiktoken", "line-kept"))
MODE_NAMES = {"line": "per line", "line-kept": "per line, every list kept"}
GROWTH_PEERS = (("tiktoken", "line"), ("gigatoken", "line"), ("bpe-openai", "backend"))


def _run(task: str, args: dict) -> dict:
    """One peer task in a fresh process, one thread; ``{"failed": ...}`` when the process fails."""
    try:
        sample: Sample = run_worker(task, args, threads=1, env={"OMP_NUM_THREADS": "1"}, module="bench.peer_workers")
    except BenchError as exc:
        return {"failed": str(exc).splitlines()[0][:200] + " " + " ".join(str(exc).splitlines()[-1:])[:200]}
    return sample.result


def _alternating(repeat: int, sides: list, measure) -> dict:
    """``measure(side)`` for every side, ``repeat`` times: the list, then reversed, and so on."""
    results: dict = {side: [] for side in sides}
    for i in range(repeat):
        for side in sides if i % 2 == 0 else list(reversed(sides)):
            results[side].append(measure(side))
    return results


def _problem(results: list[dict]) -> str | None:
    for result in results:
        if "missing" in result:
            return f"not available: {result['missing']}"
        if "failed" in result:
            return f"failed: {result['failed']}"
    return None


# --- P1: training ---------------------------------------------------------------------------------


def _tie_note(diff: dict) -> tuple[bool | None, str]:
    """(same_output, note) of a peer whose new tokens part from ours at ``diff['index']``."""
    index = diff["index"]
    if diff.get("kind") == "length":
        return False, f"merges equal for the first {index:,}, then one list ends ({diff['peer_tokens']:,} new tokens)"

    def shown(side) -> str:
        parts = side if isinstance(side, list) else [side]
        return " + ".join(repr(bytes.fromhex(part))[1:] for part in parts)

    counts = f"ours {shown(diff['ours'])} (count {diff['ours_count']:,}), peer {shown(diff['peer'])} (count {diff['peer_count']:,})"
    if diff["kind"] == "tie":
        return None, f"merges equal up to index {index:,}, then a tie broken another way: {counts}"
    return False, f"merges part at index {index:,}, NOT a tie: {counts}"


def case_p1(ctx: Context) -> None:
    text = inputs.en_books_text(ctx.quick)
    vocab = 8000 if ctx.quick else 32000
    counts = inputs.pretoken_counts(text)
    folder = ctx.scratch / "P1"
    folder.mkdir(parents=True, exist_ok=True)
    sides = ["ours", *TRAIN_PEERS]

    def measure(peer: str) -> dict:
        return _run("train", {"peer": peer, "file": str(text), "vocab_size": vocab, "scratch": str(folder),
                              "tokens_out": str(folder / f"{peer}.tokens.json")})

    runs = _alternating(ctx.repeat, sides, measure)
    problem = _problem(runs["ours"])
    if problem:
        raise BenchError(f"ours: {problem}")
    ours_s = median(r["seconds"] for r in runs["ours"])
    ours_tokens = json.loads((folder / "ours.tokens.json").read_text(encoding="utf-8"))
    differing = {}
    for peer in TRAIN_PEERS:
        if _problem(runs[peer]) is None and "tokens" in runs[peer][0]:
            tokens = json.loads((folder / f"{peer}.tokens.json").read_text(encoding="utf-8"))
            if tokens != ours_tokens:
                differing[peer] = str(folder / f"{peer}.tokens.json")
    diffs = {}
    if differing:
        found = _run("first_differences", {"ours": str(folder / "ours.tokens.json"), "peers": differing,
                                           "counts": str(counts), "vocab_size": vocab})
        diffs = found.get("differences", {})
    fastest_same = None
    rows = []
    for peer in TRAIN_PEERS:
        problem = _problem(runs[peer])
        if problem:
            rows.append(Row("P1", f"train {text.name} to {vocab}, in process, 1 thread", ours_s, None, peer, "s",
                            note=f"{peer}: {problem}"))
            continue
        peer_s = median(r["seconds"] for r in runs[peer])
        first = runs[peer][0]
        if "tokens" not in first:
            same, verdict = None, "merges not comparable"
        elif peer not in differing:
            same, verdict = True, f"merges identical ({first['tokens']:,} new tokens)"
            fastest_same = peer_s if fastest_same is None else min(fastest_same, peer_s)
        elif peer in diffs:
            same, verdict = _tie_note(diffs[peer])
        else:
            same, verdict = False, "merges differ (first difference not classified: " + str(found.get("failed")) + ")"
        ratio = ours_s / peer_s
        rows.append(Row("P1", f"train {text.name} to {vocab}, in process, 1 thread", ours_s, peer_s,
                        f"{peer} {first.get('version') or ''}".strip(), "s", ratio,
                        f"<= {TRAIN_TARGET:g}" if same else "", (ratio <= TRAIN_TARGET) if same else None, same,
                        note=f"{peer}: {verdict}; setup: {first['setup']}",
                        samples={"ours": [r["seconds"] for r in runs["ours"]],
                                 "peer": [r["seconds"] for r in runs[peer]]}))
    for row in rows:
        ctx.add(row)
    if fastest_same is not None:
        ratio = ours_s / fastest_same
        ctx.add(Row("P1", "train in process: ours / the fastest peer with identical merges", ours_s, fastest_same,
                    "fastest identical", "s", ratio, f"<= {TRAIN_TARGET:g}", ratio <= TRAIN_TARGET, True,
                    note=f"ours: {runs['ours'][0]['setup']}; time of the train call, the lines already in memory"))


# --- models for P2 and W1 --------------------------------------------------------------------------


def _models(ctx: Context) -> tuple[dict, dict]:
    trained, _ = inputs.trained_model(inputs.en_books_text(ctx.quick), 8000 if ctx.quick else 32000)
    folder = ctx.scratch / ("peer-models-quick" if ctx.quick else "peer-models")  # the trained model differs
    result = _run("prepare_models", {"folder": str(folder), "trained": str(trained),
                                     "gpt2_vocab": str(inputs.PEERS / "cs336" / "gpt2_vocab.json")})
    if "models" not in result:
        raise BenchError(f"could not prepare the models: {result}")
    return result["models"], result["notes"]


# --- P2: encoding -----------------------------------------------------------------------------------


def first_differing_line(path_a: Path, path_b: Path) -> int | None:
    import numpy as np

    a, b = np.fromfile(path_a, dtype="<u8"), np.fromfile(path_b, dtype="<u8")
    if len(a) != len(b):
        return min(len(a), len(b))
    where = np.flatnonzero(a != b)
    return int(where[0]) if len(where) else None


def case_p2(ctx: Context) -> None:
    text = inputs.en_books_text(ctx.quick)
    models, notes = _models(ctx)
    folder = ctx.scratch / "P2"
    folder.mkdir(parents=True, exist_ok=True)
    for model in ENCODE_MODELS:
        if model not in models:
            ctx.add(Row("P2", f"encode {text.name}, {model}", None, None, "", "MB/s",
                        note=f"{model}: no ranks offline ({notes.get(model, '?')})"))
            continue
        spec = models[model]
        sides = [("ours", "line"), ("ours", "flat"), *LINE_SIDES, *BATCH_SIDES, *KEPT_SIDES]

        def measure(side, model=model, spec=spec) -> dict:
            peer, mode = side
            return _run("encode", {"peer": peer, "mode": mode, "model": model, "spec": spec, "file": str(text),
                                   "lines_out": str(folder / f"{model}.{peer}.{mode}.lines")})

        runs = _alternating(ctx.repeat, sides, measure)
        _encode_rows(ctx, text, model, runs, folder, notes.get(model, "") if model == "o200k" else "")


def _rate(results: list[dict], key: str = "seconds") -> float:
    return results[0]["bytes"] / 1e6 / median(r.get(key, r["seconds"]) for r in results)


def _encode_rows(ctx: Context, text: Path, model: str, runs: dict, folder: Path, model_note: str) -> None:
    reference = runs[("tiktoken", "line")]
    if _problem(reference):
        raise BenchError(f"tiktoken {model}: {_problem(reference)}")
    digest = reference[0]["digest"]

    def check(side) -> tuple[bool, str]:
        digests = {r["digest"] for r in runs[side]}
        if digests == {digest}:
            return True, "ids equal tiktoken's on every line"
        line = first_differing_line(folder / f"{model}.{side[0]}.{side[1]}.lines", folder / f"{model}.tiktoken.line.lines")
        return False, f"ids differ from tiktoken's, first at line {line}"

    for ours_mode, peers, target_peer, target in (("line", LINE_SIDES, ("tiktoken", "line"), LINE_TARGET),
                                                  ("flat", BATCH_SIDES, ("gigatoken", "batch"), FLAT_TARGET),
                                                  ("line-kept", KEPT_SIDES[1:], None, None)):
        ours = runs[("ours", ours_mode)]
        problem = _problem(ours)
        if problem:
            ctx.add(Row("P2", f"encode {model}: ours {ours_mode}", None, None, "", "MB/s", note=problem))
            continue
        ours_rate = _rate(ours)
        ours_same, ours_note = check(("ours", ours_mode))
        api = "Tokenizer.encode_ordinary_flat" if ours_mode == "flat" else f"Tokenizer.encode_ordinary {MODE_NAMES[ours_mode]}"
        for side in peers:
            peer, mode = side
            name = f"{peer} {MODE_NAMES.get(mode, mode)}"
            problem = _problem(runs[side])
            if problem:
                ctx.add(Row("P2", f"encode {text.name} {model}: ours {api}", ours_rate, None, name, "MB/s",
                            same_output=ours_same, note=f"{model}, {name}: {problem}"))
                continue
            peer_rate = _rate(runs[side])
            peer_same, peer_note = check(side)
            ratio = ours_rate / peer_rate
            on_target = side == target_peer
            ctx.add(Row("P2", f"encode {text.name} {model}: ours {api}", ours_rate, peer_rate,
                        f"{name} {runs[side][0].get('version') or ''}".strip(), "MB/s", ratio,
                        f">= {target:g}" if on_target else "", (ratio >= target) if on_target else None,
                        ours_same and peer_same,
                        note=f"{model}, ours {ours_mode} vs {name} (MB/s of CPU time; wall: ours "
                             f"{_rate(ours, 'wall_seconds'):.1f}, {peer} {_rate(runs[side], 'wall_seconds'):.1f}): "
                             f"ours: {ours_note}; {peer}: {peer_note}"
                             + (f"; {model_note}" if model_note else ""),
                        samples={"ours": [r["seconds"] for r in ours], "peer": [r["seconds"] for r in runs[side]]}))


# --- W1: worst-case growth -------------------------------------------------------------------------


def growth_exponent(lengths: list[int], seconds: list[float]) -> float | None:
    """The least-squares slope of log(seconds) over log(length); None with fewer than 2 points."""
    points = [(math.log(n), math.log(t)) for n, t in zip(lengths, seconds) if t and t > 0]
    if len(points) < 2:
        return None
    mean_x = sum(x for x, _ in points) / len(points)
    mean_y = sum(y for _, y in points) / len(points)
    num = sum((x - mean_x) * (y - mean_y) for x, y in points)
    den = sum((x - mean_x) ** 2 for x, _ in points)
    return num / den


def _lengths(quick: bool) -> list[int]:
    if quick:
        return [10_000, 31_623, 100_000]
    return [10_000, 31_623, 100_000, 316_228, 1_000_000]


def _best_times(results: list[dict], kind: str) -> dict[int, float]:
    """The best time per length over the repeats (CPU time; the least disturbed run)."""
    best: dict[int, float] = {}
    for result in results:
        for length, seconds in result["seconds"].get(kind, {}).items():
            if seconds is not None:
                best[int(length)] = min(seconds, best.get(int(length), seconds))
    return dict(sorted(best.items()))


def _times_note(times: dict[int, float]) -> str:
    return ", ".join(f"{n // 1000}k {t * 1000:.1f} ms" for n, t in times.items())


def case_w1(ctx: Context) -> None:
    models, _ = _models(ctx)
    lengths = _lengths(ctx.quick)
    for model in GROWTH_MODELS:
        if model not in models:
            continue
        spec = models[model]
        sides = [("ours", "line"), *GROWTH_PEERS]

        def measure(side, model=model, spec=spec) -> dict:
            peer, mode = side
            return _run("growth", {"peer": peer, "mode": mode, "model": model, "spec": spec,
                                   "kinds": list(KINDS), "lengths": lengths})

        runs = _alternating(ctx.repeat, sides, measure)
        problem = _problem(runs[("ours", "line")])
        if problem:
            ctx.add(Row("W1", f"growth exponent, {model}", None, None, "", "", note=problem))
            continue
        for kind in KINDS:
            times = _best_times(runs[("ours", "line")], kind)
            exponent = growth_exponent(list(times), list(times.values()))
            peer_parts, tiktoken_exponent = [], None
            for side in GROWTH_PEERS:
                if _problem(runs[side]):
                    peer_parts.append(f"{side[0]}: {_problem(runs[side])[:80]}")
                    continue
                peer_times = _best_times(runs[side], kind)
                peer_exponent = growth_exponent(list(peer_times), list(peer_times.values()))
                if side[0] == "tiktoken":
                    tiktoken_exponent = peer_exponent
                shown = "-" if peer_exponent is None else f"{peer_exponent:.2f}"
                failure = next((r["errors"][kind] for r in runs[side] if kind in r.get("errors", {})), "")
                peer_parts.append(f"{side[0]} exponent {shown} ({_times_note(peer_times)})"
                                  + (f" {failure}" if failure else ""))
            stopped = "" if len(times) == len(lengths) else f" (stopped after {max(times):,} characters: too slow)"
            ctx.add(Row("W1", f"growth exponent, {model}, {KIND_LABELS[kind]}, 10k-{lengths[-1] // 1000}k chars",
                        exponent, tiktoken_exponent, "tiktoken (reference)", "", None, f"<= {GROWTH_TARGET:g}",
                        exponent is not None and exponent <= GROWTH_TARGET,
                        note=f"{model}, {KIND_LABELS[kind]}: ours {_times_note(times)}{stopped}; "
                             + "; ".join(peer_parts),
                        samples={"ours": times}))
