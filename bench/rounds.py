"""E5: exact training rounds against the run on the driver (``python -m bench.run --cases E5``).

``bpe-spark train`` on en_books to 32,000, local[2], end to end, in a fresh process each run:
on the driver (the default budget), then at 10% and 3% driver budgets (rounds), in alternating
order, ``--repeat`` times. Each row gives the rounds, the median wall time and its ratio to the
driver run's median in the same sitting, and whether the merges equal the driver run's (and so
``tokenizers``', which T1 checks). Targets (issue 15): 10% <= 4x, 3% <= 8x.
"""

from __future__ import annotations

import json
from pathlib import Path

from bench import inputs
from bench.run import SPARK_CORES, Context, Row, Sample, median, run_cli, run_worker

BUDGETS = (("driver", None, None), ("10%", "10%", 4.0), ("3%", "3%", 8.0))


def _train(ctx: Context, text: Path, vocab: int, budget: str | None) -> Sample:
    name = "driver" if budget is None else budget.rstrip("%")
    out = ctx.scratch / f"E5-model-{name}"
    argv = ["train", "--input", str(text), "--vocab-size", str(vocab), "--out", str(out),
            "--master", f"local[{SPARK_CORES}]", "--overwrite", "--no-report"]
    if budget is not None:
        argv += ["--driver-budget", budget]
    sample = run_cli(argv)
    sample.result.update(run_worker("model_merges", {"model": str(out)}).result)
    stats = json.loads((out / "bpe_spark.json").read_text(encoding="utf-8")).get("stats", {})
    sample.result["rounds"] = stats.get("rounds")
    return sample


def case_e5(ctx: Context) -> None:
    text = inputs.en_books_text(ctx.quick)
    vocab = 8000 if ctx.quick else 32000
    runs: dict[str, list[Sample]] = {name: [] for name, _, _ in BUDGETS}
    for i in range(ctx.repeat):
        order = BUDGETS if i % 2 == 0 else tuple(reversed(BUDGETS))
        for name, budget, _ in order:
            runs[name].append(_train(ctx, text, vocab, budget))
    driver = median(s.wall_seconds for s in runs["driver"])
    reference = {s.result["digest"] for s in runs["driver"]}
    for name, budget, target in BUDGETS:
        samples = runs[name]
        seconds = median(s.wall_seconds for s in samples)
        same = {s.result["digest"] for s in samples} == reference and len(reference) == 1
        rounds = sorted({s.result["rounds"] for s in samples})
        metric = (f"train {text.name} to {vocab}, local[2], end to end, "
                  + ("on the driver" if budget is None else f"{budget} driver budget (rounds)"))
        ratio = seconds / driver
        ctx.add(Row("E5", metric, seconds, driver, "ours on the driver", "s", ratio,
                    "" if target is None else f"<= {target:g}", None if target is None else ratio <= target and same,
                    same, note=f"rounds {rounds}; bpe-spark says {samples[len(samples) // 2].result.get('phases') or '?'}",
                    samples={"ours": [s.wall_seconds for s in samples], "rounds": [s.result["rounds"] for s in samples]}))
