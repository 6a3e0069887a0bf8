"""The training report: one self-contained HTML file (the plots inline as base64 PNG, no script,
no other file) of what a model holds and how its training went, with plots made by matplotlib.

- the training count of each merge by rank (log scale), and where training stopped;
- bytes per token on a sample text as the vocabulary grows (the sample encoded with the first
  ``k`` merges, for about 16 values of ``k``: :func:`bpe_spark.inspect.vocab_stats.bytes_per_token_at`);
  the title says whether the sample is held out or comes from the training data; a superword
  model's two stages are two curves, each under its stage's pattern, with the transition marked
  (:mod:`bpe_spark.inspect.superword`);
- the token length histogram, and the share of the vocabulary by script or byte class;
- the time of each phase of the training and of each round (``tok.metadata["timings"]``,
  ``tok.metadata["rounds"]``); a table of the key figures (vocabulary, corpus, configuration).

``bpe-spark train`` writes it as ``report.html`` into the model directory; ``bpe-spark report``
writes it for any model. matplotlib is imported only when a report is made (and through its
object API: the process's pyplot backend is left alone).

>>> from bpe_spark import TrainerConfig, train
>>> tok = train(["low lower lowest " * 20], TrainerConfig(vocab_size=270))
>>> page = render_report(tok, sample=Sample("lower lowest", "a held-out text", from_training=False))
>>> list(figures_of(page))  # no timings plot: a training in Python keeps none
['Training count of each merge, by rank', 'Bytes per token as the vocabulary grows (sample held out: a held-out text)', 'Token length histogram', 'Share of the vocabulary by script or byte class']
"""

from __future__ import annotations

import base64
import html
import io
import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from bpe_spark.inspect.extension import extension_summary, sample_comparison
from bpe_spark.inspect.superword import superword_curves, superword_record, superword_rows
from bpe_spark.inspect import vocab_stats
from bpe_spark._version import __version__
from bpe_spark.errors import BpeSparkError, ConfigError
from bpe_spark.bpe.long_documents import safe_cut
from bpe_spark.storage.markers import REPORT_MARKER
from bpe_spark.models.token_kinds import merge_counts

REPORT_FILE = "report.html"
SAMPLE_LIMIT = 1 << 20  # bytes of a sample read: enough for a steady figure, encoded in well under a second
CURVE_POINTS = 16
# the phases of tok.metadata["timings"], in the order they run
PHASES = (("count", "count_seconds"), ("collect", "collect_seconds"), ("merge", "merge_seconds"),
          ("rounds on Spark", "rounds_spark_seconds"), ("checkpoint", "checkpoint_seconds"),
          ("save", "save_seconds"))
COLOUR = "#3b6ea8"
ACCENT = "#c8553d"


@dataclass(frozen=True)
class Sample:
    """The text bytes per token are measured on, where it came from (``label``, shown in the
    plot's title) and whether the model was trained on it."""

    text: str
    label: str
    from_training: bool


@dataclass(frozen=True)
class Plot:
    """One figure of the report: its title, the PNG (None when the model lacks what it shows)
    and the sentence said instead or below it."""

    title: str
    png: bytes | None
    note: str = ""


# --- the sample -------------------------------------------------------------------------------
def read_sample(path, *, limit: int = SAMPLE_LIMIT, input_format: str = "text",
                text_column: str = "text") -> str:
    """At most the first ``limit`` bytes of text of a local file, cut at a line or record end (or
    inside a line or text longer than what is left; a JSON Lines record is never cut):
    text (``.gz`` / ``.bz2`` read), JSON Lines or Parquet (the ``text_column`` of each record).
    Invalid UTF-8 is replaced (U+FFFD)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"sample {path}: no such file")
    if input_format == "parquet":
        import pyarrow.parquet as pq

        texts, size = [], 0
        for batch in pq.ParquetFile(path).iter_batches(columns=[text_column], batch_size=1024):
            for text in batch.column(0).to_pylist():
                if isinstance(text, str) and size < limit:
                    data = text[: limit - size].encode("utf-8", errors="replace")[: limit - size]
                    texts.append(data[: safe_cut(data)].decode("utf-8", errors="replace"))
                    size += len(data)
            if size >= limit:
                break
        return "\n".join(texts)
    import bz2
    import gzip

    opener = {".gz": gzip.open, ".bz2": bz2.open}.get(path.suffix, open)
    lines, size = [], 0
    with opener(path, "rb") as fh:
        while size < limit:
            # never more than the limit, even of one line: a corpus may be one 100 MB line
            raw = fh.readline(limit - size)
            if not raw:
                break
            size += len(raw)
            whole = raw.endswith(b"\n")
            if input_format == "jsonl":
                if not whole:
                    break  # a record longer than what is left of the limit: the sample ends here
                try:
                    record = json.loads(raw.decode("utf-8", errors="replace"))
                except ValueError:
                    continue
                text = record.get(text_column) if isinstance(record, dict) else None
                if isinstance(text, str):
                    lines.append(text + "\n")
            else:
                lines.append((raw if whole else raw[: safe_cut(raw)]).decode("utf-8", errors="replace"))
    return "".join(lines)


def merge_steps(total: int, points: int = CURVE_POINTS) -> list[int]:
    """About ``points`` merge counts from 0 to ``total``, spaced evenly on a log scale (the first
    merges change bytes per token most).

    >>> merge_steps(1000, 6)
    [0, 1, 6, 32, 178, 1000]
    """
    if total <= 0:
        return [0]
    last = max(1, points - 2)
    return sorted({0, total} | {round(total ** (i / last)) for i in range(last)})


def bytes_per_token_curve(tok, text: str, points: int = CURVE_POINTS) -> list[tuple[int, int, float]]:
    """``(merges, vocabulary size, bytes per token)`` of ``text`` at each of :func:`merge_steps`."""
    total = len(tok.merge_ids)
    base = tok.vocab_size - total
    steps = merge_steps(total, points)
    return [(k, base + k, figure) for k, figure in zip(steps, vocab_stats.bytes_per_token_at(tok, text, steps))]


# --- the plots --------------------------------------------------------------------------------
def new_figure(width: float = 7.0, height: float = 3.6, left: float = 0.11):
    try:
        logging.getLogger("matplotlib.font_manager").setLevel(logging.ERROR)  # "building the font cache"
        from matplotlib.figure import Figure
    except ImportError:
        raise ConfigError("the report needs matplotlib: pip install matplotlib") from None
    # fixed margins: a layout engine would double the time of each plot
    figure = Figure(figsize=(width, height), dpi=100)
    figure.subplots_adjust(left=left, right=0.97, bottom=0.14 * 3.6 / height, top=1 - 0.08 * 3.6 / height)
    return figure


def png_bytes(figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", metadata={"Software": None})  # no version: the same bytes each run
    return buffer.getvalue()


def merge_count_plot(tok) -> Plot:
    counts = merge_counts(tok)
    title = "Training count of each merge, by rank"
    if not counts:
        return Plot(title, None, "The model holds no merge counts (an imported file, or no merges).")
    figure = new_figure()
    axes = figure.add_subplot()
    axes.plot(range(len(counts)), counts, color=COLOUR, linewidth=1.2)
    axes.set_yscale("log")
    axes.set_xlabel("merge rank")
    axes.set_ylabel("count of the pair merged (log)")
    axes.axhline(counts[-1], color=ACCENT, linestyle="--", linewidth=1, label=f"stopped at count {counts[-1]:,}")
    axes.legend(loc="upper right")
    axes.grid(True, which="major", alpha=0.3)
    return Plot(title, png_bytes(figure), f"First merge counted {counts[0]:,} times, the last {counts[-1]:,}.")


def bytes_per_token_plot(tok, sample: Sample | None) -> Plot:
    if sample is None:
        return Plot("Bytes per token as the vocabulary grows", None,
                    "No sample text: give one (bpe-spark report MODEL --sample FILE, or train --report-sample FILE).")
    where = "from the training data" if sample.from_training else "held out"
    title = f"Bytes per token as the vocabulary grows (sample {where}: {sample.label})"
    if getattr(tok, "pipeline", None) is not None:
        return Plot(title, None, "An imported tokenizers pipeline: its first merges alone are not a tokenizer.")
    stages = superword_record(tok)
    if stages is not None:
        first, second = superword_curves(tok, sample.text, merge_steps(stages["stage1_merges"]))
        curve = first + second[1:]
    else:
        curve = bytes_per_token_curve(tok, sample.text)
    figure = new_figure()
    axes = figure.add_subplot()
    if stages is None:
        axes.plot([v for _, v, _ in curve], [b for _, _, b in curve], marker="o", color=COLOUR)
    else:
        axes.plot([v for _, v, _ in first], [b for _, _, b in first], marker="o", color=COLOUR,
                  label=f"stage 1 (pattern {stages['stage1_pattern']})")
        axes.plot([v for _, v, _ in second], [b for _, _, b in second], marker="s", color=ACCENT,
                  label=f"stage 2 (pattern {stages['stage2_pattern'][:24]})")
        axes.axvline(first[-1][1], color="#777", linestyle="--", linewidth=1,
                     label=f"transition: {stages['stage1_merges']:,} merges")
        axes.legend(loc="upper left")
    axes.set_xscale("log")
    axes.xaxis.set_major_formatter(lambda value, _: f"{value:,.0f}")
    axes.xaxis.set_minor_formatter(lambda value, _: f"{value:,.0f}" if str(round(value))[0] in "25" else "")
    axes.set_xlabel("vocabulary size (log)")
    axes.set_ylabel("UTF-8 bytes per token")
    axes.grid(True, which="both", alpha=0.3)
    final = curve[-1][2]
    axes.annotate(f"{final:.2f}", (curve[-1][1], final), xytext=(-4, -14), textcoords="offset points", ha="right")
    size = len(sample.text.encode("utf-8", errors="replace"))
    said = "" if stages is None else f" {first[-1][2]:.2f} at the transition (stage 1's model);"
    return Plot(title, png_bytes(figure),
                f"{size:,} bytes of sample; {final:.2f} bytes per token with all {len(tok.merge_ids):,} merges,"
                f"{said} {curve[0][2]:.2f} with none.")


def length_plot(tok) -> Plot:
    histogram = vocab_stats.length_histogram(tok)
    figure = new_figure()
    axes = figure.add_subplot()
    axes.bar(list(histogram), list(histogram.values()), color=COLOUR, width=0.8)
    axes.set_xlabel("token length (bytes)")
    axes.set_ylabel("tokens")
    axes.grid(True, axis="y", alpha=0.3)
    longest = vocab_stats.longest_tokens(tok, 1)
    note = ""
    if longest:
        token_id, token = longest[0]
        note = f"Longest token: id {token_id}, {token.decode('utf-8', errors='backslashreplace')!r}."
    return Plot("Token length histogram", png_bytes(figure), note)


def script_plot(tok) -> Plot:
    shares = vocab_stats.script_shares(tok)
    total = sum(shares.values()) or 1
    figure = new_figure(height=max(2.4, 0.32 * len(shares) + 1), left=0.17)
    axes = figure.add_subplot()
    names = list(shares)[::-1]
    values = [100 * shares[name] / total for name in names]
    axes.barh(names, values, color=COLOUR)
    for y, (name, value) in enumerate(zip(names, values)):
        axes.annotate(f"{shares[name]:,}", (value, y), xytext=(3, 0), textcoords="offset points", va="center",
                      fontsize=8)
    axes.set_xlabel("share of the vocabulary (%)")
    axes.set_xlim(0, max(values) * 1.15 if values else 1)
    return Plot("Share of the vocabulary by script or byte class", png_bytes(figure),
                "Specials left out; a token's letters decide its script, leading spaces and punctuation do not.")


def timing_plot(tok) -> Plot:
    timings = tok.metadata.get("timings") or {}
    rounds = tok.metadata.get("rounds") or []
    phases = [(name, float(timings[key])) for name, key in PHASES if timings.get(key)]
    title = "Time of each phase and round"
    if not phases:
        return Plot(title, None, "The model holds no timings (not trained by bpe-spark).")
    figure = new_figure(height=3.6 if len(rounds) > 1 else 2.8, left=0.2)
    grid = figure.add_gridspec(1, 2 if len(rounds) > 1 else 1, wspace=0.35)
    axes = figure.add_subplot(grid[0, 0])
    bars = axes.barh([name for name, _ in phases][::-1], [s for _, s in phases][::-1], color=COLOUR)
    axes.bar_label(bars, fmt="%.2f s", padding=3, fontsize=8)
    axes.set_xlim(0, max(s for _, s in phases) * 1.2)
    axes.set_xlabel("seconds")
    axes.set_title("phases", fontsize=10)
    if len(rounds) > 1:
        per_round = figure.add_subplot(grid[0, 1])
        per_round.bar([r["round"] for r in rounds], [r["seconds"] for r in rounds], color=ACCENT)
        per_round.set_xticks([r["round"] for r in rounds] if len(rounds) <= 12 else per_round.get_xticks())
        per_round.set_xlabel("round")
        per_round.set_ylabel("seconds")
        per_round.set_title("rounds", fontsize=10)
    total = timings.get("total_seconds", 0) + timings.get("save_seconds", 0)
    merges = ", ".join(f"{r['merges']:,}" for r in rounds[:12]) + (", ..." if len(rounds) > 12 else "")
    return Plot(title, png_bytes(figure), f"Total {total:.2f} s; {len(rounds)} round(s), merges per round: {merges or '-'}.")


def plots(tok, sample: Sample | None = None) -> list[Plot]:
    """Every plot of the report, in its order."""
    return [merge_count_plot(tok), bytes_per_token_plot(tok, sample), length_plot(tok), script_plot(tok),
            timing_plot(tok)]


# --- the page ---------------------------------------------------------------------------------
def key_figures(tok, sample: Sample | None = None) -> list[tuple[str, str]]:
    """The report's table: ``(what, value)`` rows of the vocabulary, the corpus and the config."""
    metadata = tok.metadata
    stats, rounds = metadata.get("stats") or {}, metadata.get("rounds") or []
    kinds = vocab_stats.kind_counts(tok)
    rows = [
        ("vocabulary", f"{tok.vocab_size:,} = " + " + ".join(f"{n:,} {kind}" for kind, n in kinds.items())),
        ("merges", f"{len(tok.merge_ids):,}"),
        ("scheme", tok.scheme),
        ("pattern", str(tok.pattern if getattr(tok, "pipeline", None) is None else "tokenizers pipeline")),
        ("special tokens", ", ".join(tok.special_tokens) or "none"),
    ]
    counts = merge_counts(tok)
    if counts:
        rows.append(("merge counts", f"first {counts[0]:,}, last {counts[-1]:,} (where training stopped)"))
    for key, what in (("documents", "documents"), ("bytes", "corpus bytes"), ("pretokens", "pretokens"),
                      ("distinct_pretokens", "distinct pretokens")):
        if isinstance(stats.get(key), int):
            rows.append((what, f"{stats[key]:,}"))
    if rounds:
        budget = stats.get("driver_budget", 0)
        rows.append(("rounds", f"{len(rounds)} ({stats.get('mode', '?')}, driver budget {budget:,} pretokens)"))
    timings = metadata.get("timings") or {}
    if timings.get("total_seconds") is not None:
        rows.append(("training time", f"{timings['total_seconds'] + timings.get('save_seconds', 0):.2f} s"))
    source = metadata.get("source") or {}
    inputs = source.get("input") or source.get("counts")
    if inputs:
        rows.append(("input", ", ".join(map(str, inputs)) + f" ({source.get('input_format') or 'counts'})"))
    rows += superword_rows(tok)
    extension = extension_summary(tok)
    if extension is not None:
        base = extension["base"]
        rows.append(("extended from", f"{base['file'] or 'a model'} ({base['format'] or '?'}, {base['fingerprint']}): "
                     f"{extension['inherited_merges']:,} merges inherited, {extension['new_tokens']:,} new tokens"))
        rows.append(("new tokens", ", ".join(f"{token!r}" + ("" if count is None else f" {count:,}")
                                             for _, token, count in extension["first_new_tokens"])))
    if sample is not None:
        where = "training data" if sample.from_training else "held out"
        rows.append(("sample", f"{sample.label} ({where})"))
        compared = sample_comparison(tok, sample.text) if extension is not None else None
        if compared is not None:
            rows.append(("bytes per token", f"{compared['extended']:.3f} extended, {compared['base']:.3f} the base"))
    if tok.config is not None:
        rows.append(("config", json.dumps(tok.config.to_dict(), ensure_ascii=False)))
    return rows


STYLE = """
body { font-family: system-ui, sans-serif; max-width: 60rem; margin: 2rem auto; padding: 0 1rem; color: #222; }
h1 { font-size: 1.5rem; } h2 { font-size: 1.1rem; margin-top: 2rem; }
table { border-collapse: collapse; } td { padding: .25rem .8rem; border-bottom: 1px solid #ddd; vertical-align: top; }
td:first-child { color: #555; white-space: nowrap; } td code { word-break: break-all; }
img { max-width: 100%; } .note { color: #555; font-size: .9rem; } footer { margin-top: 2rem; color: #888; font-size: .8rem; }
"""


def plot_html(plot: Plot) -> list[str]:
    """A plot's part of a page: its heading, its PNG inline (base64), its note."""
    parts = [f"<h2>{html.escape(plot.title)}</h2>"]
    if plot.png is not None:
        data = base64.b64encode(plot.png).decode("ascii")
        parts.append(f'<img alt="{html.escape(plot.title)}" src="data:image/png;base64,{data}">')
    if plot.note:
        parts.append(f'<p class="note">{html.escape(plot.note)}</p>')
    return parts


def render_report(tok, *, sample: Sample | None = None, name: str | None = None) -> str:
    """The report's HTML (``name``: the model's path or title, shown at the top)."""
    started = time.perf_counter()
    figures = plots(tok, sample)
    title = f"bpe-spark training report: {name}" if name else "bpe-spark training report"
    parts = [
        "<!DOCTYPE html>", REPORT_MARKER.decode(), '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title><style>{STYLE}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>", "<table>",
    ]
    for what, value in key_figures(tok, sample):
        parts.append(f"<tr><td>{html.escape(what)}</td><td><code>{html.escape(value)}</code></td></tr>")
    parts.append("</table>")
    for plot in figures:
        parts += plot_html(plot)
    parts.append(f"<footer>bpe-spark {__version__}; made in {time.perf_counter() - started:.1f} s</footer>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def write_report(tok, out, *, sample: Sample | None = None, name: str | None = None,
                 overwrite: bool = False) -> Path:
    """Write :func:`render_report` to the file ``out`` atomically; an existing file is replaced
    only with ``overwrite`` and only when it is a report. Returns ``out``."""
    from bpe_spark.models.files import atomic_file

    out = Path(out)
    page = render_report(tok, sample=sample, name=name)
    with atomic_file(out, file_format=REPORT_FILE, overwrite=overwrite) as staged:
        staged.write_text(page, encoding="utf-8")
    return out


def report_failure(exc: BaseException) -> str:
    """The one warning line of a report that could not be made (a training still succeeds)."""
    reason = str(exc) if isinstance(exc, BpeSparkError) else f"{type(exc).__name__}: {exc}"
    return f"no {REPORT_FILE} written: {reason}"


def figures_of(page: str) -> Mapping[str, bytes]:
    """The PNG images of a report page by their title (what tests and tools read back)."""
    import re

    return {html.unescape(alt): base64.b64decode(data)
            for alt, data in re.findall(r'<img alt="([^"]*)" src="data:image/png;base64,([^"]+)">', page)}
