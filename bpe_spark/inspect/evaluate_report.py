"""The output of ``bpe-spark evaluate``: a directory holding ``evaluation.json`` (every figure of
:func:`bpe_spark.inspect.evaluate_figures.evaluation_figures`) and ``report.html``, one
self-contained page made by the machinery of the training report (:mod:`bpe_spark.inspect.report`:
matplotlib plots inline as base64 PNG, no script): bytes per token of each group, the models'
bars side by side; the vocabulary-use curve; the share of each vocabulary never produced and
residue; a table of the figures (a column per model, every value as :func:`cell` shows it, the
same numbers as the JSON's) and each model's most frequent and longest tokens. Also the lines
the command prints (:func:`summary_lines`).
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping
from pathlib import Path

from bpe_spark._version import __version__
from bpe_spark.inspect.report import ACCENT, COLOUR, STYLE, Plot, new_figure, plot_html, png_bytes
from bpe_spark.inspect.token_display import readable

JSON_FILE = "evaluation.json"
REPORT_FILE = "report.html"
_PALETTE = (COLOUR, ACCENT, "#5a9e6f", "#8e6bb0", "#d4a03a", "#4fa3b8", "#777777")


def cell(value) -> str:
    """A figure as the report's table shows it: integers with separators, other numbers with
    four decimals, None as ``-``.

    >>> cell(1234567), cell(3.14159265), cell(None), cell("Latin")
    ('1,234,567', '3.1416', '-', 'Latin')
    """
    if value is None:
        return "-"
    if isinstance(value, bool) or isinstance(value, str):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:.4f}"


def figure_rows(figures: Mapping) -> list[tuple[str, list]]:
    """The table's rows: ``(figure, [the value of each model])``, in the JSON's units."""
    models = figures["models"]

    def each(get) -> list:
        return [get(m) for m in models]

    rows = [
        ("bytes per token", each(lambda m: m["bytes_per_token"])),
        ("characters per token", each(lambda m: m["characters_per_token"])),
        ("tokens", each(lambda m: m["tokens"])),
        ("tokens per document, mean", each(lambda m: m["tokens_per_document"]["mean"])),
        ("tokens per document, p50", each(lambda m: m["tokens_per_document"]["p50"])),
        ("tokens per document, p99", each(lambda m: m["tokens_per_document"]["p99"])),
        ("round-trip failures", each(lambda m: m["round_trip_failures"])),
        ("vocabulary size", each(lambda m: m["vocabulary"]["size"])),
        ("tokens never produced", each(lambda m: m["vocabulary"]["unused"])),
        ("share never produced", each(lambda m: m["vocabulary"]["unused_share"])),
        ("residue tokens", each(lambda m: m["vocabulary"]["residue"])),
        ("residue share", each(lambda m: m["vocabulary"]["residue_share"])),
        ("parity: Gini of tokens per byte", each(lambda m: (m["parity"] or {}).get("gini"))),
        ("parity: worst to best", each(lambda m: (m["parity"] or {}).get("worst_to_best"))),
        ("parity: worst group", each(lambda m: (m["parity"] or {}).get("worst_group"))),
    ]
    for group in figures["groups"]:
        rows.append((f"bytes per token: {group}", each(lambda m, g=group: m["groups"][g]["bytes_per_token"])))
    return rows


def corpus_rows(figures: Mapping) -> list[tuple[str, object]]:
    """The corpus table: documents, bytes, characters and their per-document figures, groups."""
    rows = [("documents", figures["documents"]), ("null documents (left out)", figures["null_documents"]),
            ("bytes", figures["bytes"]), ("characters", figures["characters"])]
    for key, what in (("bytes_per_document", "bytes"), ("characters_per_document", "characters")):
        for stat in ("mean", "p50", "p99"):
            rows.append((f"{what} per document, {stat}", figures[key][stat]))
    rows.append(("grouped by", figures["group_by"] or "nothing (one group: all)"))
    for group, g in figures["groups"].items():
        rows.append((f"group {group}", f"{g['documents']:,} documents, {g['bytes']:,} bytes"))
    return rows


# --- the plots --------------------------------------------------------------------------------
def group_plot(figures: Mapping) -> Plot:
    groups, models = list(figures["groups"]), figures["models"]
    title = "Bytes per token by group" + (f" ({figures['group_by']})" if figures["group_by"] else "")
    if not groups:
        return Plot(title, None, "No documents.")
    figure = new_figure(width=max(7.0, 0.5 * len(groups) * len(models) + 2), height=3.8)
    axes = figure.add_subplot()
    width = 0.8 / len(models)
    for i, model in enumerate(models):
        xs = [j - 0.4 + width * (i + 0.5) for j in range(len(groups))]
        ys = [model["groups"][g]["bytes_per_token"] or 0 for g in groups]
        axes.bar(xs, ys, width=width * 0.95, color=_PALETTE[i % len(_PALETTE)], label=model["name"])
    axes.set_xticks(range(len(groups)), groups, rotation=30 if len(groups) > 6 else 0, fontsize=8)
    axes.set_ylabel("UTF-8 bytes per token")
    axes.grid(True, axis="y", alpha=0.3)
    axes.legend(loc="upper right", fontsize=8)
    return Plot(title, png_bytes(figure), "Higher is better: more text per token. Parity across groups in the table.")


def vocabulary_plot(figures: Mapping) -> Plot:
    title = "Vocabulary use: share of the tokens produced by the most used share of the vocabulary"
    figure = new_figure()
    axes = figure.add_subplot()
    for i, model in enumerate(figures["models"]):
        curve = model["vocabulary"]["curve"]
        axes.plot([100 * x for _, x, _ in curve], [100 * y for _, _, y in curve], color=_PALETTE[i % len(_PALETTE)],
                  linewidth=1.5, label=f"{model['name']} ({model['vocabulary']['unused_share'] or 0:.1%} never produced)")
    axes.set_xscale("log")
    axes.xaxis.set_major_formatter(lambda value, _: f"{value:g}")
    axes.set_xlabel("share of the vocabulary, most used first (%, log)")
    axes.set_ylabel("share of the tokens produced (%)")
    axes.set_ylim(0, 101)
    axes.grid(True, alpha=0.3)
    axes.legend(loc="upper left", fontsize=8)
    return Plot(title, png_bytes(figure), "A curve that reaches 100% early: much of the vocabulary is never used here.")


def dead_plot(figures: Mapping) -> Plot:
    models = figures["models"]
    figure = new_figure(height=max(2.4, 0.5 * len(models) + 1.4), left=0.2)
    axes = figure.add_subplot()
    names = [m["name"] for m in models][::-1]
    unused = [100 * (m["vocabulary"]["unused_share"] or 0) for m in models][::-1]
    residue = [100 * (m["vocabulary"]["residue_share"] or 0) for m in models][::-1]
    ys = range(len(names))
    for offset, values, colour, label in ((0.2, unused, COLOUR, "never produced"), (-0.2, residue, ACCENT, "residue")):
        bars = axes.barh([y + offset for y in ys], values, height=0.4, color=colour, label=label)
        axes.bar_label(bars, fmt="%.1f%%", padding=3, fontsize=8)
    axes.set_yticks(list(ys), names)
    axes.set_xlabel("share of the vocabulary (%)")
    axes.set_xlim(0, max([*unused, *residue, 1]) * 1.45)  # room for the labels and the legend
    axes.legend(loc="upper right", fontsize=8)
    first = models[0]["vocabulary"] if models else {}
    return Plot("Vocabulary never produced and residue", png_bytes(figure),
                f"Residue: a merged token merged through at least {first.get('residue_min')} times and at least "
                f"{first.get('residue_ratio')} times as often as it is produced.")


# --- the page ---------------------------------------------------------------------------------
def _table(header: list[str], rows) -> list[str]:
    out = ['<table class="figures">', "<tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in header) + "</tr>"]
    for what, values in rows:
        out.append(f"<tr><td>{html.escape(what)}</td>" + "".join(f"<td>{html.escape(cell(v))}</td>" for v in values)
                   + "</tr>")
    out.append("</table>")
    return out


def render_evaluation(figures: Mapping, *, title: str | None = None) -> str:
    """The report's HTML page of ``figures``."""
    title = title or "bpe-spark evaluation: " + ", ".join(m["name"] for m in figures["models"])
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             f"<title>{html.escape(title)}</title><style>{STYLE} th {{ text-align: left; padding: .25rem .8rem; }}"
             "</style></head><body>", f"<h1>{html.escape(title)}</h1>", "<h2>Figures</h2>"]
    parts += _table(["figure", *[m["name"] for m in figures["models"]]], figure_rows(figures))
    parts.append("<h2>Corpus</h2>")
    parts += _table(["figure", "value"], [(what, [value]) for what, value in corpus_rows(figures)])
    for plot in (group_plot(figures), vocabulary_plot(figures), dead_plot(figures)):
        parts += plot_html(plot)
    for model in figures["models"]:
        parts.append(f"<h2>Tokens of {html.escape(model['name'])}</h2>")
        frequent, longest = model["most_frequent"][:10], model["longest"][:10]
        rows = [(str(i + 1), [f"{readable(a['token'])} ({a['count']:,})" if a else None,
                              f"{readable(b['token'])} ({b['bytes']} bytes, {b['count']:,})" if b else None])
                for i, (a, b) in enumerate(zip(frequent + [None] * 10, longest + [None] * 10)) if a or b]
        parts += _table(["rank", "most frequent (count)", "longest used (bytes, count)"], rows)
        if model["round_trip_failures"]:
            parts.append(f'<p class="note">{model["round_trip_failures"]:,} documents do not decode back to their '
                         f'text; the smallest: <code>{html.escape(repr(model["round_trip_example"]))}</code></p>')
    parts.append(f"<footer>bpe-spark {__version__}; definitions of every figure: docs/guides/evaluate.md</footer>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def write_evaluation(figures: Mapping, out, *, overwrite: bool = False) -> Path:
    """Write ``evaluation.json`` and ``report.html`` into the directory ``out``, atomically: it
    appears complete or not at all; an existing ``out`` is replaced only with ``overwrite`` and
    only when it is an earlier evaluation (its ``_BPE_SPARK`` marker). Returns ``out``."""
    from bpe_spark.models.files import atomic_directory

    out = Path(out)
    with atomic_directory(out, kind="evaluation", overwrite=overwrite) as staged:  # checks out first
        page = render_evaluation(figures)
        (staged / JSON_FILE).write_text(json.dumps(figures, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        (staged / REPORT_FILE).write_text(page, encoding="utf-8")
    return out


def summary_lines(figures: Mapping) -> list[str]:
    """What ``bpe-spark evaluate`` prints: the corpus, then one line per model."""
    lines = [f"evaluated {figures['documents']:,} documents ({figures['bytes']:,} bytes"
             + (f", {len(figures['groups'])} groups by {figures['group_by']}" if figures["group_by"] else "") + ")"]
    for m in figures["models"]:
        parity = m["parity"]
        said = f", parity Gini {parity['gini']:.3f}, worst/best {parity['worst_to_best']:.2f} ({parity['worst_group']})" \
            if parity and parity["worst_to_best"] is not None else ""
        bpt = m["bytes_per_token"]
        lines.append(f"  {m['name']}: {'-' if bpt is None else f'{bpt:.3f}'} bytes/token, "
                     f"{m['tokens']:,} tokens (p50 {cell(m['tokens_per_document']['p50'])} per document), "
                     f"{m['vocabulary']['unused_share'] or 0:.1%} of the vocabulary never produced, "
                     f"{m['vocabulary']['residue']:,} residue, {m['round_trip_failures']:,} round-trip failures{said}")
    return lines
