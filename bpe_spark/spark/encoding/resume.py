"""Resumable encoding (``encode_dataset(..., resume=True)``, ``bpe-spark encode --resume``): the
pieces a killed run finished are kept, and a rerun encodes only the rest.

A resumable run keeps its pieces in ``.<out name>.resume/`` beside the output (a fixed name, with
no owner in it, so that the removal of dead runs' staging siblings leaves it alone):

- ``_LOCK``: the run holding the directory (JSON ``host``, ``pid``, ``start``), created
  exclusively (``O_EXCL`` locally; check-then-write, advisory, elsewhere); a live owner makes a
  second run refuse, a dead owner's lock is taken over;
- ``_progress.json``: what the pieces were made from (:func:`run_fingerprint`: the input's files,
  sizes and modification times, the model's fingerprint and every option that shapes the
  output) and the pieces finished, each with its segment key, totals and sha256; written
  atomically (a temporary file moved over it) at the start of a run and when its encoding job ends;
- ``_pieces/``: the pieces (``piece-<run>-<partition>-<seq>.arrow``) and, for each finished
  one, a record ``<piece>.json`` written atomically by the task that finished it (a killed
  run's records are folded into ``_progress.json`` by the next one).

A rerun with a different fingerprint is refused (:class:`~bpe_spark.errors.ConfigError` naming what
differs); a piece whose file is missing or whose sha256 differs is redone. With nothing to resume
the run starts afresh and says so. The directory goes when the run succeeds; a failed run leaves
it (lock released) for the next ``--resume``. A run without ``resume`` removes it unless a live
run holds it. The test hook :data:`FAULT_PROPERTY` (a Spark local property) makes the encoding
tasks fail for good once that many pieces are recorded.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import uuid
from typing import Any

import pyarrow.fs as pafs

from bpe_spark.encoding.options import EncodeOptions
from bpe_spark.errors import ConfigError
from bpe_spark.storage.owners import create_exclusive, held_by_gone_process, lock_record

PROGRESS_FILE = "_progress.json"
LOCK_FILE = "_LOCK"
FAULT_PROPERTY = "bpe_spark.resume_fault"  # test hook: fail the encoding job after N pieces
VERSION = 1
log = logging.getLogger("bpe_spark")


class ResumeFault(RuntimeError):
    """The failure the test hook injects."""


def resume_dir(output) -> str:
    """The resumable pieces' directory of :class:`~bpe_spark.spark.encoding.output.Output` ``output``."""
    return f"{output.parent.rstrip('/')}/.{output.name}.resume"


def run_fingerprint(df, tok, options: EncodeOptions, settings: dict[str, Any]) -> dict:
    """What a resumed run must share with the run it resumes: the input (files, sizes, mtimes:
    :func:`bpe_spark.spark.training.checkpoint.input_fingerprint`), the model and the (resolved)
    encode options."""
    from bpe_spark.spark.training.checkpoint import input_fingerprint

    return {
        "input": input_fingerprint(df)["files"],
        "model": tok.fingerprint,
        "options": json.loads(json.dumps({**options.record(), **settings}, default=str)),
    }


def _differences(then: dict, now: dict) -> str:
    parts = []
    if then.get("input") != now.get("input"):
        before = {f[0]: f[1:] for f in then.get("input") or []}
        after = {f[0]: f[1:] for f in now.get("input") or []}
        changed = sorted(u for u in set(before) | set(after) if before.get(u) != after.get(u))
        parts.append("input files " + ", ".join(changed[:3]) + (" ..." if len(changed) > 3 else "")
                     + " (new, gone, or changed size/modification time)")
    if then.get("model") != now.get("model"):
        parts.append(f"model fingerprint {then.get('model')} there, {now.get('model')} now")
    old, new = then.get("options") or {}, now.get("options") or {}
    for key in sorted(set(old) | set(new)):
        if old.get(key) != new.get(key):
            parts.append(f"{key}: {old.get(key)!r} there, {new.get(key)!r} now")
    return "; ".join(parts)


def sha256_of(fs, path: str) -> str:
    digest = hashlib.sha256()
    with fs.open_input_stream(path) as fh:
        while chunk := fh.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest()


def _write_atomically(fs, path: str, data: bytes) -> None:
    tmp = f"{path}.tmp-{uuid.uuid4().hex[:8]}"
    with fs.open_output_stream(tmp) as fh:
        fh.write(data)
    fs.move(tmp, path)


def _read_json(fs, path: str) -> Any:
    try:
        with fs.open_input_stream(path) as fh:
            return json.loads(fh.read().decode("utf-8"))
    except (FileNotFoundError, OSError, ValueError):
        return None


class Resume:
    """One resumable run's state: its lock, its kept pieces and the segment keys to skip."""

    def __init__(self, output, fingerprint: dict):
        self.fs = output.fs
        self.directory = resume_dir(output)
        self.pieces_dir = f"{self.directory}/_pieces"
        self.fingerprint = fingerprint
        self.run = uuid.uuid4().hex[:8]
        self.kept: list[dict] = []
        self.fresh = True
        self._lock: dict | None = None
        self._local = isinstance(self.fs, pafs.LocalFileSystem)

    # --- lock -------------------------------------------------------------------------------
    def acquire(self) -> None:
        record = lock_record()
        self.fs.create_dir(self.directory, recursive=True)
        path = f"{self.directory}/{LOCK_FILE}"
        if not self._create(path, record):
            held = _read_json(self.fs, path)
            if not _dead(held):
                raise ConfigError(
                    f"encode output {self.directory} is being resumed by pid {(held or {}).get('pid')} on host "
                    f"{(held or {}).get('host')} (its {LOCK_FILE}); wait for that run, or remove {path} if it is gone"
                )
            log.warning("bpe-spark: taking over the stale resume lock %s (that process is gone)", path)
            self.fs.delete_file(path)
            if not self._create(path, record):
                raise ConfigError(f"encode output {self.directory} is being resumed by another run (its {LOCK_FILE})")
        self._lock = record

    def _create(self, path: str, record: dict) -> bool:
        data = json.dumps(record, sort_keys=True).encode("utf-8")
        if self._local:
            return create_exclusive(path, data)
        if self.fs.get_file_info(path).type != pafs.FileType.NotFound:
            return False
        with self.fs.open_output_stream(path) as fh:
            fh.write(data)
        return True

    def release(self) -> None:
        if self._lock is not None:
            path = f"{self.directory}/{LOCK_FILE}"
            with contextlib.suppress(OSError):
                if _read_json(self.fs, path) == self._lock:
                    self.fs.delete_file(path)
        self._lock = None

    # --- progress ---------------------------------------------------------------------------
    def load(self) -> None:
        """Read what an earlier run left: refuse a different fingerprint, keep the pieces whose
        sha256 matches (the rest are deleted and redone)."""
        progress = _read_json(self.fs, f"{self.directory}/{PROGRESS_FILE}")
        records = self._records()
        if progress is None and not records:
            self.fs.create_dir(self.pieces_dir, recursive=True)
            self._save([])
            log.info("bpe-spark: nothing to resume at %s: starting afresh", self.directory)
            return
        then = (progress or {}).get("fingerprint")
        if then != self.fingerprint:
            what = _differences(then or {}, self.fingerprint) if then else "its progress file is unreadable"
            raise ConfigError(f"cannot resume encode output: {what}; drop --resume (resume=False) to start afresh")
        self.fresh = False
        pieces = {p["piece"]: p for p in (progress.get("pieces") or [])}
        pieces.update(records)
        kept = []
        segments = set()  # one piece per segment: a zombie attempt of a killed run may have recorded a second
        for name, piece in sorted(pieces.items()):
            path = f"{self.pieces_dir}/{name}"
            try:
                ok = sha256_of(self.fs, path) == piece.get("sha256")
            except (FileNotFoundError, OSError):
                ok = False
            segment = (piece.get("file"), piece.get("block"), piece.get("part"))
            if ok and segment not in segments:
                segments.add(segment)
                kept.append(piece)
        names = {p["piece"] for p in kept} | {f"{p['piece']}.json" for p in kept}
        for info in self.fs.get_file_info(pafs.FileSelector(self.pieces_dir, allow_not_found=True)):
            if info.base_name not in names:  # partial, unrecorded or corrupt: redone
                self.fs.delete_file(info.path)
        self.kept = kept
        self._save(kept)

    def _records(self) -> dict[str, dict]:
        records = {}
        for info in self.fs.get_file_info(pafs.FileSelector(self.pieces_dir, allow_not_found=True)):
            if info.base_name.endswith(".arrow.json"):
                record = _read_json(self.fs, info.path)
                if isinstance(record, dict) and "piece" in record:
                    records[record["piece"]] = record
        return records

    def _save(self, pieces: list[dict]) -> None:
        body = {"version": VERSION, "fingerprint": self.fingerprint, "pieces": pieces}
        _write_atomically(self.fs, f"{self.directory}/{PROGRESS_FILE}",
                          (json.dumps(body, indent=1, sort_keys=True) + "\n").encode("utf-8"))

    def record_all(self, pieces: list[dict]) -> None:
        """After the encoding job: every piece (kept and new) in the progress file."""
        records = self._records()
        self._save([{**p, "sha256": records.get(p["piece"], p).get("sha256")} for p in pieces])

    def skip_keys(self) -> set[tuple]:
        return {(p["file"], p["block"], p["part"]) for p in self.kept}

    def kept_rows(self) -> list[dict]:
        """The kept pieces as the encoding job's rows (``PIECE_FIELDS``)."""
        return [{key: value for key, value in p.items() if key != "sha256"} for p in self.kept]

    def remove(self) -> None:
        with contextlib.suppress(OSError):
            self.fs.delete_dir(self.directory)


def piece_recorder(fs, fault: int | None):
    """The tasks' callback when a piece is complete: its record (key, totals, sha256) beside it,
    written atomically; then the test hook."""

    def recorded() -> int:
        directory = final_dir[0]
        return sum(1 for info in fs.get_file_info(pafs.FileSelector(directory)) if info.base_name.endswith(".arrow.json"))

    final_dir = [""]

    def on_piece(final: str, row: dict) -> None:
        final_dir[0] = final.rpartition("/")[0]
        if fault is not None and recorded() >= fault:  # the job is failing: record no more
            raise ResumeFault(f"injected failure after {fault} pieces ({FAULT_PROPERTY})")
        record = {**row, "sha256": sha256_of(fs, final)}
        _write_atomically(fs, f"{final}.json", json.dumps(record, sort_keys=True).encode("utf-8"))
        if fault is not None and recorded() >= fault:
            raise ResumeFault(f"injected failure after {fault} pieces ({FAULT_PROPERTY})")

    return on_piece


def fault_from(spark) -> int | None:
    value = spark.sparkContext.getLocalProperty(FAULT_PROPERTY)
    return int(value) if value else None


def remove_unused(output) -> None:
    """A run without ``resume``: the resume directory of a dead (or no) owner goes."""
    directory = resume_dir(output)
    fs = output.fs
    if fs.get_file_info(directory).type == pafs.FileType.NotFound:
        return
    held = _read_json(fs, f"{directory}/{LOCK_FILE}")
    if held is None or _dead(held):
        with contextlib.suppress(OSError):
            fs.delete_dir(directory)


def _dead(held: dict | None) -> bool:
    """True when the lock record ``held`` is missing or unreadable, or its owner is a gone process
    of this host (a resume lock names no one else's work: an unreadable one is taken over)."""
    if not held:
        return True
    gone = held_by_gone_process(held)
    return True if gone is None else gone


def resume_summary(manifest: dict) -> str:
    """The line ``encode --resume`` prints.

    >>> resume_summary({"resumed": {"kept_pieces": 3, "encoded_pieces": 2, "fresh": False}})
    'resumed: 3 pieces kept, 2 encoded'
    >>> resume_summary({"resumed": {"kept_pieces": 0, "encoded_pieces": 5, "fresh": True}})
    'resume: nothing to resume, started afresh (5 pieces encoded)'
    """
    got = manifest["resumed"]
    if got["fresh"]:
        return f"resume: nothing to resume, started afresh ({got['encoded_pieces']:,} pieces encoded)"
    return f"resumed: {got['kept_pieces']:,} pieces kept, {got['encoded_pieces']:,} encoded"
