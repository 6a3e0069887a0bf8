"""Model files: our model directory, and the tokenizer.json / GPT-2 / tiktoken / subword-nmt formats.

``load_any(path)`` recognises what ``path`` holds; ``export_model(tok, fmt, out)`` writes one of
the export formats. Every write is atomic: the output appears complete or not at all.

>>> from bpe_spark import TrainerConfig, train
>>> import tempfile, pathlib
>>> tok = train(["hello hello world"], TrainerConfig(vocab_size=262))
>>> out = pathlib.Path(tempfile.mkdtemp()) / "model"
>>> tok.save(out)
>>> load_any(out).merges == tok.merges
True
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

from bpe_spark.errors import ConfigError, ModelFormatError, OutputExistsError

EXPORT_FORMATS = ("tokenizer.json", "gpt2", "tiktoken", "subword-nmt")
MODEL_META_FILE = "bpe_spark.json"


# --- atomic outputs ---------------------------------------------------------------------------
def _sibling(target: Path, tag: str) -> Path:
    return target.with_name(f".{target.name}.{tag}-{os.getpid()}-{uuid.uuid4().hex[:8]}")


def _refuse_existing(target: Path, overwrite: bool) -> None:
    if not overwrite and (target.exists() or target.is_symlink()):
        raise OutputExistsError(
            f"{target} already exists; pass overwrite=True (--overwrite) to replace it"
        )


def _make_parents(directory: Path) -> list[Path]:
    """Create the missing parents of ``directory``; return those created, deepest first."""
    created = []
    for parent in [directory, *directory.parents]:
        if parent.exists():
            break
        created.append(parent)
    for parent in reversed(created):
        parent.mkdir(exist_ok=True)
    return created


def _remove_created(created: list[Path]) -> None:
    for parent in created:
        with contextlib.suppress(OSError):
            parent.rmdir()


def _replace(staged: Path, target: Path, overwrite: bool) -> None:
    """Move the finished ``staged`` output to ``target``; the old one goes only after that."""
    _refuse_existing(
        target, overwrite
    )  # subtle: checked again, something may have appeared meanwhile
    if not (target.exists() or target.is_symlink()):
        staged.rename(target)
        return
    if staged.is_file() and not target.is_dir():
        os.replace(staged, target)
        return
    retired = _sibling(target, "old")
    target.rename(retired)
    try:
        staged.rename(target)
    except BaseException:
        retired.rename(target)
        raise
    if retired.is_dir() and not retired.is_symlink():
        shutil.rmtree(retired, ignore_errors=True)
    else:
        retired.unlink()


@contextlib.contextmanager
def atomic_directory(target, *, overwrite: bool = False) -> Iterator[Path]:
    """Yield an empty staging directory beside ``target``; on success it becomes ``target``.

    An existing ``target`` is an error unless ``overwrite``; then it is replaced only once the new
    one is complete. On failure the staging directory (and any parent this created) is removed.
    """
    target = Path(target)
    _refuse_existing(target, overwrite)
    created = _make_parents(target.parent)
    staged = _sibling(target, "tmp")
    try:
        staged.mkdir()
        yield staged
        _replace(staged, target, overwrite)
    except BaseException:
        shutil.rmtree(staged, ignore_errors=True)
        _remove_created(created)
        raise


@contextlib.contextmanager
def atomic_file(target, *, overwrite: bool = False) -> Iterator[Path]:
    """Yield a staging path beside ``target`` to write; on success it is renamed to ``target``."""
    target = Path(target)
    _refuse_existing(target, overwrite)
    if target.is_dir():
        raise OutputExistsError(f"{target} is a directory; give a file path")
    created = _make_parents(target.parent)
    staged = _sibling(target, "tmp")
    try:
        yield staged
        if not staged.is_file():
            raise RuntimeError(f"nothing was written to {staged}")  # internal invariant
        _replace(staged, target, overwrite)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            staged.unlink()
        _remove_created(created)
        raise


# --- recognising and loading ------------------------------------------------------------------
def read_json_file(path: Path, *, missing: str = "no such file"):
    """Parse a JSON file; any failure is a ModelFormatError naming the file (and line, column)."""
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except FileNotFoundError:
        raise ModelFormatError(f"{path}: {missing}") from None
    except json.JSONDecodeError as exc:
        raise ModelFormatError(
            f"{path}: line {exc.lineno}, column {exc.colno}: invalid JSON ({exc.msg})"
        ) from None
    except UnicodeDecodeError as exc:
        raise ModelFormatError(f"{path}: not UTF-8 ({exc})") from None


def detect_format(path) -> str:
    """What ``path`` holds: ``"model_dir"``, ``"tokenizer.json"``, ``"gpt2"`` or ``"tiktoken"``."""
    path = Path(path)
    if path.is_dir():
        if (path / MODEL_META_FILE).is_file():
            return "model_dir"
        if (path / "tokenizer.json").is_file():
            return "tokenizer.json"
        if (path / "vocab.json").is_file() and (path / "merges.txt").is_file():
            return "gpt2"
        tiktoken_files = sorted(path.glob("*.tiktoken"))
        if len(tiktoken_files) == 1:
            return "tiktoken"
        raise ModelFormatError(
            f"{path}: no model here; expected {MODEL_META_FILE} (a bpe-spark model), tokenizer.json, "
            "vocab.json + merges.txt (GPT-2) or one .tiktoken file"
        )
    if not path.exists():
        raise ModelFormatError(f"{path}: no such file or directory")
    if path.name == MODEL_META_FILE:
        return "model_dir"
    if path.suffix == ".tiktoken":
        return "tiktoken"
    with open(path, "rb") as fh:
        head = fh.read(4096).lstrip()
    if head.startswith(b"{"):
        if path.name == "vocab.json":
            return "gpt2"
        # A tokenizer.json has a "model" object; a GPT-2 vocab.json maps tokens to ids.
        try:
            with open(path, encoding="utf-8") as fh:
                top = json.load(fh)
        except (ValueError, UnicodeDecodeError):
            return "tokenizer.json"  # its reader reports the line and column of the damage
        return (
            "tokenizer.json"
            if isinstance(top, dict) and isinstance(top.get("model"), dict)
            else "gpt2"
        )
    first_line = head.split(b"\n", 1)[0].split()
    if len(first_line) == 2 and first_line[1].isdigit():
        return "tiktoken"
    raise ModelFormatError(
        f"{path}: not a model file bpe-spark knows (a model directory, tokenizer.json, GPT-2 "
        "vocab.json, or a .tiktoken file)"
    )


def load_any(path, **kwargs):
    """Load a tokenizer from any supported file: our model directory (or its ``bpe_spark.json``),
    a ``tokenizer.json`` (or a directory holding one and no ``bpe_spark.json``), GPT-2 files (a
    directory with ``vocab.json`` + ``merges.txt``, or the ``vocab.json`` path), or a ``.tiktoken``
    file. ``kwargs`` go to the format's reader (e.g. ``pattern=``, ``special_tokens=``).
    """
    path = Path(path)
    kind = detect_format(path)
    if kind == "model_dir":
        from bpe_spark.formats.model_dir import load_model

        if kwargs:
            raise ConfigError(
                f"a bpe-spark model directory takes no load options, got {sorted(kwargs)}"
            )
        return load_model(path.parent if path.is_file() else path)
    if kind == "tokenizer.json":
        from bpe_spark.formats.hf_json import read_tokenizer_json

        return read_tokenizer_json(path / "tokenizer.json" if path.is_dir() else path, **kwargs)
    if kind == "gpt2":
        from bpe_spark.formats.gpt2 import read_gpt2

        if path.is_dir():
            return read_gpt2(path / "vocab.json", path / "merges.txt", **kwargs)
        return read_gpt2(path, kwargs.pop("merges_path", None), **kwargs)
    from bpe_spark.formats.tiktoken_file import read_tiktoken

    if path.is_dir():
        path = min(path.glob("*.tiktoken"))
    return read_tiktoken(path, **kwargs)


# --- exporting --------------------------------------------------------------------------------
def export_model(tok, fmt: str, out, *, overwrite: bool = False) -> list[Path]:
    """Write ``tok`` in an export format; returns the files written.

    - ``tokenizer.json``: ``out`` is the file (or a directory to put ``tokenizer.json`` in);
    - ``gpt2``: ``out`` is a directory that receives ``vocab.json`` and ``merges.txt``;
    - ``tiktoken``: ``out`` is the ``.tiktoken`` file (rank = token id);
    - ``subword-nmt``: ``out`` is the codes file.
    """
    out = Path(out)
    if fmt == "tokenizer.json":
        from bpe_spark.formats.hf_json import write_tokenizer_json

        if out.is_dir() or out.suffix != ".json":
            out = out / "tokenizer.json"
        with atomic_file(out, overwrite=overwrite) as staged:
            write_tokenizer_json(tok, staged)
        return [out]
    if fmt == "gpt2":
        from bpe_spark.formats.gpt2 import write_gpt2

        with atomic_directory(out, overwrite=overwrite) as staged:
            write_gpt2(tok, staged)
        return [out / "vocab.json", out / "merges.txt"]
    if fmt == "tiktoken":
        from bpe_spark.formats.tiktoken_file import write_tiktoken

        with atomic_file(out, overwrite=overwrite) as staged:
            write_tiktoken(tok, staged)
        return [out]
    if fmt == "subword-nmt":
        from bpe_spark.formats.subword_nmt import write_codes

        with atomic_file(out, overwrite=overwrite) as staged:
            write_codes(tok, staged)
        return [out]
    raise ConfigError(f"unknown export format {fmt!r}; choose one of {EXPORT_FORMATS}")


def describe(tok, *, first_merges: int = 10) -> dict:
    """A summary of ``tok`` for people (what ``bpe-spark inspect`` prints)."""
    from bpe_spark.patterns import PRESETS

    def show(value) -> str:
        if isinstance(value, bytes):
            return value.decode("utf-8", errors="backslashreplace")
        return value

    summary = {
        "scheme": tok.scheme,
        "vocab_size": tok.vocab_size,
        "merges": len(tok.merge_ids),
        "merge_rule": tok.merge_rule,
        "special_tokens": dict(tok.special_tokens),
        "pattern": tok.pattern if tok.pattern in PRESETS else "custom",
        "pattern_regex": PRESETS.get(tok.pattern, tok.pattern),
        "lowercase": tok.lowercase,
        "normalization": tok.normalization,
    }
    if tok.scheme == "char":
        summary["end_of_word"] = tok.end_of_word
        summary["unk_token"] = tok.unk_token
    if tok.config is not None:
        summary["tie_break"] = tok.config.tie_break
    counts = tok.metadata.get("merge_counts") or []
    summary["first_merges"] = [
        [show(left), show(right), counts[rank] if rank < len(counts) else None]
        for rank, (left, right) in enumerate(tok.merges[:first_merges])
    ]
    for key, value in tok.metadata.items():
        if key != "merge_counts":
            summary[key] = value
    return summary


def describe_text(tok, *, first_merges: int = 10) -> str:
    """:func:`describe` as aligned ``key: value`` lines."""
    lines = []
    for key, value in describe(tok, first_merges=first_merges).items():
        if key == "first_merges":
            lines.append(f"first merges ({len(value)}):")
            lines.extend(
                f"  {rank:>5}  {json.dumps(left, ensure_ascii=False)} + "
                f"{json.dumps(right, ensure_ascii=False)}" + (f"  (count {count})" if count else "")
                for rank, (left, right, count) in enumerate(value)
            )
        elif isinstance(value, dict) and value and key != "special_tokens":
            lines.append(f"{key}:")
            lines.extend(f"  {k}: {json.dumps(v, ensure_ascii=False)}" for k, v in value.items())
        else:
            lines.append(f"{key}: {json.dumps(value, ensure_ascii=False)}")
    return "\n".join(lines)
