"""The scale of one document (issue 12, item 8): case R1 of ``make bench``.

- R1: ``bpe-spark train`` and ``bpe-spark encode`` (Parquet, and ``--output-format bin``) on one 100 MB document without a newline (20 MB
  with ``--quick``; :func:`bench.inputs.one_line_text`): the peak memory of the driver, the JVM
  and the largest Python worker (each process's ``VmHWM``, :mod:`bench.procmon`), as a multiple
  of the document's size. Target: at most 4x per process. The same commands on a 1 MB slice give
  each process's fixed cost (an idle JVM, an interpreter with pyarrow), shown in the notes.

The growth of encode time on pathological pretokens is case W1 (:mod:`bench.peers`).
"""

from __future__ import annotations

from bench import inputs
from bench.run import SPARK_CORES, Context, Row, Sample, run_cli

MAX_MULTIPLE = 4.0
PROCESSES = (("root", "driver (Python)"), ("jvm", "JVM"), ("worker_max", "largest Python worker"))


def _commands(ctx: Context, document) -> dict[str, list[str]]:
    name = document.stem
    model = ctx.scratch / f"R1-{name}-model"
    spark = ["--master", f"local[{SPARK_CORES}]", "--overwrite"]
    encode = ["encode", "--model", str(model), "--input", str(document), *spark]
    return {
        "train": ["train", "--input", str(document), "--vocab-size", "1000", "--out", str(model), *spark],
        "encode": [*encode, "--out", str(ctx.scratch / f"R1-{name}-ids")],
        "encode --output-format bin": [*encode, "--out", str(ctx.scratch / f"R1-{name}-bin"), "--output-format", "bin"],
    }


def case_r1(ctx: Context) -> None:
    megabytes = 20 if ctx.quick else 100
    document = inputs.one_line_text(megabytes)
    size = document.stat().st_size
    small = inputs.one_line_text(1)
    for command in _commands(ctx, small):  # train first: encode uses the model it wrote
        base = run_cli(_commands(ctx, small)[command])
        runs = [run_cli(_commands(ctx, document)[command]) for _ in range(max(1, ctx.repeat - 1))]
        sample = max(runs, key=lambda s: s.peak_mb["worker_max"])
        for key, label in PROCESSES:
            multiple = _multiple(sample, key, size)
            ctx.add(Row("R1", f"{command} one {megabytes} MB document: {label} peak / document", multiple, None,
                        "", "x", target=f"<= {MAX_MULTIPLE:g}", passed=multiple <= MAX_MULTIPLE,
                        note=f"{command} {label}: {sample.peak_mb[key]:,.0f} MiB on the {megabytes} MB document, "
                             f"{base.peak_mb[key]:,.0f} MiB on a 1 MB one (its fixed cost); "
                             f"{sample.wall_seconds:.0f} s wall" + _workers_note(key, sample),
                        samples={"peak_mib": [s.peak_mb[key] for s in runs], "fixed_mib": base.peak_mb[key]}))


def _workers_note(key: str, sample: Sample) -> str:
    if key != "worker_max":
        return ""
    peaks = ", ".join(f"{mb:,.0f}" for mb in sample.result.get("worker_peaks_mb", []))
    return f"; every Python worker's peak (MiB): {peaks}"


def _multiple(sample: Sample, key: str, size: int) -> float:
    return sample.peak_mb[key] * (1 << 20) / size
