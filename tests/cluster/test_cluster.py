"""The jobs on a real standalone cluster (issue 13.9; ``make cluster-test``, never ``make test``).

A master and two 1-core workers (:mod:`standalone`) whose executors cannot see the checkout, the
driver's venv or its /tmp; inputs and outputs in the one shared directory (HDFS's stand-in).
``jobs/train_tokenizer.py`` (driver mode and forced rounds) and ``jobs/encode_dataset.py``
(Parquet and binary) are submitted there with the packed environment of ``make dist``, and their
outputs must equal local mode's byte for byte, also when a worker is lost mid-encode or mid-rounds;
the package installed on the nodes and on ``--py-files`` give the same bytes too. Each run's event
log must name the cluster's master and, for the undisturbed runs, tasks on both workers.
"""

from __future__ import annotations

import calendar
import gzip
import json
import shutil
import signal
import threading
import time
import urllib.request
from pathlib import Path

import pytest
import standalone
import submission
from tests.conftest import corpus_path, encode_output_bytes

TRAIN_JOB = submission.ROOT / "jobs" / "train_tokenizer.py"
ENCODE_JOB = submission.ROOT / "jobs" / "encode_dataset.py"
PROBE_JOB = Path(__file__).with_name("probe_job.py")
WORK = standalone.SHARED / "cluster-test"
VOCAB = 600
ROUNDS_BUDGET = "70%"  # of the distinct pretokens: 5 rounds on this corpus
MODEL_FILES = ("merges.parquet", "vocab.parquet", "tokenizer.json")
DRIVER_UI_PORT = 14040 + standalone.PORT_OFFSET
STALLED_SECONDS = 8.0  # a first attempt of partition 0 running this long is the injected stall


def _interrupted(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")  # pytest still tears its fixtures down


@pytest.fixture(scope="session")
def cluster():
    """The cluster, up for the session; brought down at the end (also when a test failed, or the
    run was stopped with SIGTERM, as a CI timeout does) if this session started it."""
    started = not standalone.running("master")
    previous = signal.signal(signal.SIGTERM, _interrupted)
    try:
        standalone.up()
        yield
    finally:
        if started:
            standalone.down()
        signal.signal(signal.SIGTERM, previous)


@pytest.fixture(scope="session")
def corpora() -> dict[str, Path]:
    """The corpora the jobs read, from ../shared/corpora: without them the tests that need them
    skip (one line naming the missing file) before a cluster starts for them."""
    return {name: corpus_path(name) for name in ("en_books", "multilingual")}


@pytest.fixture(scope="session")
def inputs(corpora, cluster):
    """A few MB of the shared corpora, copied into the shared directory (executors see only that)."""
    submission.require_dist()
    shutil.rmtree(WORK, ignore_errors=True)
    train_dir, encode_dir = WORK / "input" / "train", WORK / "input" / "encode"
    train_dir.mkdir(parents=True)
    encode_dir.mkdir(parents=True)
    # two files: two input splits, so that the first stage runs on both workers
    head = _head(corpora["en_books"], 2_000_000)
    middle = head.index(b"\n", len(head) // 2) + 1
    (train_dir / "en_books_1.txt").write_bytes(head[:middle])
    (train_dir / "en_books_2.txt").write_bytes(head[middle:])
    _copy_head(corpora["multilingual"], encode_dir / "a_multilingual.txt", 1_500_000)
    _copy_head(corpora["en_books"], encode_dir / "b_en_books.txt.gz", 1_500_000, compress=True)
    return {"train": train_dir, "encode": encode_dir}


def _head(source: Path, size: int) -> bytes:
    """The first ``size`` bytes of a gzipped corpus, cut back to whole lines."""
    with gzip.open(source, "rb") as handle:
        head = handle.read(size)
    return head[: head.rfind(b"\n") + 1]


def _copy_head(source: Path, target: Path, size: int, *, compress: bool = False) -> None:
    head = _head(source, size)
    target.write_bytes(gzip.compress(head, mtime=0) if compress else head)


def train_args(inputs, out: Path, *extra: str) -> list[str]:
    return ["--input", str(inputs["train"]), "--vocab-size", str(VOCAB), "--special-token", "<|endoftext|>",
            "--out", str(out), *extra]


def encode_args(inputs, model: Path, out: Path, output_format: str, *extra: str) -> list[str]:
    return ["--model", str(model), "--input", str(inputs["encode"]), "--out", str(out), "--output-format",
            output_format, "--eos", "<|endoftext|>", "--shard-tokens", "200000", *extra]


def model_bytes(directory: Path) -> dict[str, bytes]:
    return {name: (directory / name).read_bytes() for name in MODEL_FILES}


def rounds_of(directory: Path) -> int:
    return json.loads((directory / "bpe_spark.json").read_text(encoding="utf-8"))["stats"]["rounds"]


def on_cluster(run: submission.Run, *, both_workers: bool = True) -> submission.EventSummary:
    """The run reached the cluster (not local mode) and, unless disturbed, ran tasks on both."""
    summary = submission.event_summary(run.events)
    assert summary.master == standalone.MASTER_URL, f"{run.name} ran on {summary.master!r}, not the cluster"
    assert "driver" not in summary.tasks_by_worker, summary
    if both_workers:
        assert set(summary.tasks_by_worker) == set(standalone.WORKERS), summary
    return summary


@pytest.fixture(scope="session")
def local(inputs, tmp_path_factory):
    """The reference outputs, made in local mode (local[2]) by the same jobs, memoized by name."""
    made: dict[str, Path] = {}
    cwd = tmp_path_factory.mktemp("local-driver")

    def make(name: str) -> Path:
        if name not in made:
            out = WORK / "local" / name
            if name == "model":
                args = train_args(inputs, out)
                job = TRAIN_JOB
            else:
                args = encode_args(inputs, make("model"), out, name)
                job = ENCODE_JOB
            submission.submit(job, args, name=f"local-{name}", cwd=cwd, master="local[2]").check()
            made[name] = out
        return made[name]

    return make


@pytest.fixture
def driver_cwd(tmp_path):
    """The driver's working directory: its own, as a user's would be (executors cannot see it)."""
    return tmp_path


@pytest.mark.parametrize("environment", ["archive", "node"])
def test_executors_share_nothing_with_the_driver(cluster, driver_cwd, environment):
    """Our worker daemon asked for: with the packed environment (no pyspark in it) it runs Spark's
    zipped pyspark, with bpe-spark installed on the nodes (pyspark too) the installed one."""
    run = submission.submit(PROBE_JOB, [str(submission.ROOT), str(submission.DRIVER_PYTHON)],
                            name=f"probe-{environment}", cwd=driver_cwd, environment=environment,
                            conf={"spark.python.daemon.module": "bpe_spark.spark.runtime.daemon"}).check()
    probe = json.loads(next(line for line in run.stdout.splitlines() if line.startswith("PROBE "))[6:])
    assert probe["master"] == standalone.MASTER_URL
    workers = set()
    for task in probe["tasks"]:
        assert task["checkout_listing"] in ([], [".cluster"]), task  # the checkout is an empty mount
        assert not task["checkout_readme"] and not task["driver_python"], task
        own = Path(task["cwd"])
        workers.add(own.relative_to(standalone.STATE).parts[0])
        env = own / "env" if environment == "archive" else submission.NODE_ENV
        assert task["executable"] == str(env / "bin" / "python"), task
        assert task["bpe_spark"].startswith(str(env)), task
        if environment == "archive":
            assert task["pyspark"].startswith(str(standalone.SPARK_HOME / "python" / "lib" / "pyspark.zip")), task
        else:
            assert task["pyspark"].startswith(str(env / "lib")), task  # the zips dropped
        assert task["compiled"], task  # the wheel's extensions load
    assert workers == set(standalone.WORKERS)
    on_cluster(run)


def test_train_in_driver_mode_equals_local_mode(local, inputs, driver_cwd):
    out = WORK / "cluster" / "model"
    run = submission.submit(TRAIN_JOB, train_args(inputs, out), name="train-driver", cwd=driver_cwd).check()
    on_cluster(run)
    assert rounds_of(out) == 1
    assert model_bytes(out) == model_bytes(local("model"))


def test_train_in_rounds_equals_local_mode(local, inputs, driver_cwd):
    out = WORK / "cluster" / "model-rounds"
    run = submission.submit(TRAIN_JOB, train_args(inputs, out, "--driver-budget", ROUNDS_BUDGET), name="train-rounds",
                      cwd=driver_cwd).check()
    on_cluster(run)
    assert rounds_of(out) > 3
    assert model_bytes(out) == model_bytes(local("model"))  # rounds are exact: driver mode's merges


@pytest.mark.parametrize("output_format", ["parquet", "bin"])
def test_encode_equals_local_mode(local, inputs, driver_cwd, output_format):
    out = WORK / "cluster" / f"encoded-{output_format}"
    extra = ("--shared-input",) if output_format == "bin" else ()  # tasks read the shared files
    run = submission.submit(ENCODE_JOB, encode_args(inputs, local("model"), out, output_format, *extra),
                      name=f"encode-{output_format}", cwd=driver_cwd).check()
    on_cluster(run)
    assert encode_output_bytes(out) == encode_output_bytes(local(output_format))
    # executors whose tasks read the text themselves start light (C1 only), as a local JVM does
    options = submission.event_summary(run.events).properties.get("spark.executor.extraJavaOptions", "")
    assert ("-XX:TieredStopAtLevel=1" in options) == bool(extra), options


def test_encode_with_the_package_installed_on_the_nodes(local, inputs, driver_cwd):
    """No --archives: the nodes' own environment, with our worker daemon (the installed pyspark)."""
    out = WORK / "cluster" / "encoded-node-env"
    run = submission.submit(ENCODE_JOB, encode_args(inputs, local("model"), out, "bin"), name="encode-node-env",
                      cwd=driver_cwd, environment="node",
                      conf={"spark.python.daemon.module": "bpe_spark.spark.runtime.daemon"}).check()
    on_cluster(run)
    assert encode_output_bytes(out) == encode_output_bytes(local("bin"))


def test_encode_with_the_package_on_py_files(local, inputs, driver_cwd):
    """The zip holds no loadable C extension: pure Python, the same bytes, and one warning line
    per Python worker in the executors' logs."""
    out = WORK / "cluster" / "encoded-py-files"
    run = submission.submit(ENCODE_JOB, encode_args(inputs, local("model"), out, "parquet"), name="encode-py-files",
                      cwd=driver_cwd, environment="py-files").check()
    on_cluster(run)
    assert encode_output_bytes(out) == encode_output_bytes(local("parquet"))
    warned = [line for log in _executor_logs(_app_id(run)) for line in log.splitlines()
              if "cannot be loaded from a zip (--py-files)" in line]
    assert warned, "no executor said that the compiled extensions are missing"
    assert all("encoding about 15x" in line for line in warned), warned


def _app_id(run: submission.Run) -> str:
    return next(p.name for p in run.events.rglob("*") if p.name.startswith("events_")).split("_", 2)[2]


def _executor_logs(app_id: str) -> list[str]:
    return [path.read_text(encoding="utf-8", errors="replace")
            for name in standalone.WORKERS for path in (standalone.STATE / name / "work" / app_id).glob("*/stderr")]


@pytest.fixture
def restore_workers(cluster):
    """Whatever a test killed runs again afterwards."""
    yield
    for name in standalone.WORKERS:
        standalone.restart_worker(name)


def _driver_api(path: str):
    with urllib.request.urlopen(f"http://{standalone.HOST}:{DRIVER_UI_PORT}/api/v1/{path}", timeout=5) as reply:
        return json.loads(reply.read())


def _worker_of_stalled_task() -> str | None:
    """The worker whose executor runs the injected stall (attempt 0 of partition 0, long), or None."""
    try:
        app = _driver_api("applications")[0]["id"]
        stages = _driver_api(f"applications/{app}/stages?status=active&details=true")
        executors = {e["id"]: e for e in _driver_api(f"applications/{app}/executors")}
    except (OSError, ValueError, IndexError, KeyError):
        return None
    now = time.time()
    for stage in stages:
        for task in (stage.get("tasks") or {}).values():
            if task["index"] != 0 or task["attempt"] != 0 or task["status"] != "RUNNING":
                continue
            launched = calendar.timegm(time.strptime(task["launchTime"][:19], "%Y-%m-%dT%H:%M:%S"))  # GMT
            if now - launched >= STALLED_SECONDS:
                return standalone.worker_of_url(executors[task["executorId"]]["executorLogs"]["stdout"])
    return None


def test_encode_survives_a_lost_worker(local, inputs, driver_cwd, restore_workers):
    """Partition 0's first attempt stalls (the faults hook); its worker is killed as a machine is
    lost; the task runs again on the other worker, and the output is the same."""
    out = WORK / "cluster" / "encoded-lost-worker"
    process, log, events = submission.start(
        ENCODE_JOB, encode_args(inputs, local("model"), out, "parquet"), name="encode-lost-worker",
        cwd=driver_cwd, conf={"spark.executorEnv.BPE_SPARK_FAULT": "encode:stall", "spark.ui.enabled": "true",
                              "spark.ui.port": str(DRIVER_UI_PORT), "spark.port.maxRetries": "0"})
    try:
        killed = None
        deadline = time.monotonic() + 600
        while killed is None and process.poll() is None and time.monotonic() < deadline:
            killed = _worker_of_stalled_task()
            time.sleep(1.0)
        assert killed, f"no stalled encode task seen; see {log}"
        standalone.kill_worker(killed)
        run = submission.finish("encode-lost-worker", process, log, events).check()
    finally:
        if process.poll() is None:
            process.kill()
    summary = on_cluster(run, both_workers=False)
    assert summary.failed_tasks >= 1, summary  # the lost task, run again elsewhere
    assert encode_output_bytes(out) == encode_output_bytes(local("parquet"))


def test_rounds_survive_a_lost_worker(local, inputs, driver_cwd, restore_workers):
    """A worker is killed after round 3 and started again; the rounds go on to the same merges."""
    out = WORK / "cluster" / "model-lost-worker"
    process, log, events = submission.start(
        TRAIN_JOB, train_args(inputs, out, "--driver-budget", ROUNDS_BUDGET, "--verbose"),
        name="train-lost-worker", cwd=driver_cwd)
    streams: dict[str, list[str]] = {"stdout": [], "stderr": []}
    seen_round = threading.Event()

    def read(name: str) -> None:
        # subtle: under spark-submit the Python driver's stderr reaches the stdout of spark-submit
        for line in getattr(process, name):
            streams[name].append(line)
            if line.startswith("round 3:"):
                seen_round.set()

    readers = [threading.Thread(target=read, args=(name,), daemon=True) for name in streams]
    for reader in readers:
        reader.start()
    try:
        deadline = time.monotonic() + 600
        while not seen_round.wait(1.0):
            assert process.poll() is None and time.monotonic() < deadline, f"no round 3 seen; see {log}"
        standalone.kill_worker("worker-2")
        standalone.restart_worker("worker-2")
        process.wait(900)
        for reader in readers:
            reader.join(60)
    finally:
        if process.poll() is None:
            process.kill()
        with open(log, "a", encoding="utf-8") as handle:
            handle.writelines([*streams["stderr"], "--- stdout ---\n", *streams["stdout"]])
    stdout = "".join(streams["stdout"])
    run = submission.Run("train-lost-worker", process.returncode, stdout, log, events).check()
    on_cluster(run, both_workers=False)
    assert rounds_of(out) > 3
    assert model_bytes(out) == model_bytes(local("model"))
