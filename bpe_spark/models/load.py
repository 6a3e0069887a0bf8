"""Loading any model file and exporting to any format: ``load_any(path, build=...)`` recognises
what ``path`` holds and builds the tokenizer from it (``Tokenizer.load(path)`` is the call to use:
it passes its class); ``export_model(tok, fmt, out)`` writes one of the export formats of
:mod:`bpe_spark.models.registry`. Every write is atomic: the output appears complete or not at all.

No module of :mod:`bpe_spark.models` imports the Tokenizer (:mod:`bpe_spark.encoding`, a layer
above): the readers return its keyword arguments, the writers take any tokenizer object.

>>> from bpe_spark import Tokenizer, TrainerConfig, train
>>> import tempfile, pathlib
>>> tok = train(["hello hello world"], TrainerConfig(vocab_size=262))
>>> out = pathlib.Path(tempfile.mkdtemp()) / "model"
>>> tok.save(out)
>>> load_any(out, build=Tokenizer).merges == tok.merges
True
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bpe_spark.errors import ConfigError, ModelFormatError, option_name
from bpe_spark.bpe.fields import check_file_size
from bpe_spark.models.huggingface.clip import SIMPLE_NAME, looks_like_clip_merges, read_clip_merges
from bpe_spark.models.files import atomic_directory, atomic_file
from bpe_spark.models.gpt2 import read_gpt2
from bpe_spark.models.huggingface.tokenizer_json_read import read_tokenizer_json
from bpe_spark.models.registry import EXPORT_FORMATS, MODEL_META_FILE, export_spec
from bpe_spark.models.sentencepiece import looks_like_sentencepiece, read_sentencepiece
from bpe_spark.models.tekken import looks_like_tekken, read_tekken
from bpe_spark.models.tiktoken_file import read_tiktoken
from bpe_spark.storage import markers

__all__ = [
    "EXPORT_FORMATS",
    "MODEL_META_FILE",
    "detect_format",
    "export_model",
    "load_any",
    "read_any",
]


# --- recognising and loading ------------------------------------------------------------------
def detect_format(path) -> str:
    """What ``path`` holds: ``"model_dir"``, ``"tokenizer.json"``, ``"gpt2"`` (CLIP's vocab.json
    too), ``"tiktoken"``, ``"tekken"``, ``"sentencepiece"`` or ``"clip"`` (CLIP's
    ``bpe_simple_vocab_16e6.txt.gz``)."""
    path = Path(path)
    if path.is_dir():
        if (path / MODEL_META_FILE).is_file():
            return "model_dir"
        if markers.kind_of(str(path)) == "model":  # ours by its marker (or an earlier version's files)
            raise ModelFormatError(
                f"{path}: a bpe-spark model directory (its {markers.MARKER_FILE} marker) without {MODEL_META_FILE}, "
                f"which holds the model: it is damaged or incomplete; save the model again, or give "
                f"{path / 'tokenizer.json'} to load its tokenizer.json export"
            )
        if (path / "tokenizer.json").is_file():
            return "tokenizer.json"
        if (path / "vocab.json").is_file() and (path / "merges.txt").is_file():
            return "gpt2"
        if (path / "tekken.json").is_file():
            return "tekken"
        if (path / "tokenizer.model").is_file():
            return "sentencepiece"
        tiktoken_files = sorted(path.glob("*.tiktoken"))
        if len(tiktoken_files) == 1:
            return "tiktoken"
        if len(list(path.glob(SIMPLE_NAME + "*"))) == 1:
            return "clip"
        raise ModelFormatError(
            f"{path}: no model here; expected {MODEL_META_FILE} (a bpe-spark model), tokenizer.json, "
            "vocab.json + merges.txt (GPT-2, CLIP), tekken.json, tokenizer.model (SentencePiece), one "
            f".tiktoken file or CLIP's {SIMPLE_NAME}_16e6.txt.gz"
        )
    if not path.exists():
        raise ModelFormatError(f"{path}: no such file or directory")
    if path.name == MODEL_META_FILE:
        return "model_dir"
    if path.suffix == ".tiktoken":
        return "tiktoken"
    with open(path, "rb") as fh:
        head = fh.read(4096)
    if looks_like_sentencepiece(head):
        return "sentencepiece"
    if looks_like_clip_merges(path, head):
        return "clip"
    head = head.lstrip()
    if head.startswith(b"{"):
        if path.name == "vocab.json":
            return "gpt2"
        check_file_size(path)
        # A tokenizer.json has a "model" object; a GPT-2 vocab.json maps tokens to ids.
        try:
            with open(path, encoding="utf-8") as fh:
                top = json.load(fh)
        except (ValueError, UnicodeDecodeError, RecursionError):
            return "tokenizer.json"  # its reader reports the line and column of the damage
        if looks_like_tekken(top):
            return "tekken"
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
        f"vocab.json, a .tiktoken file, a tekken JSON, a SentencePiece .model or CLIP's {SIMPLE_NAME}_16e6.txt.gz)"
    )


def read_any(path, kind: str | None = None, **options) -> dict[str, Any]:
    """The Tokenizer keyword arguments of any supported file: our model directory (or its
    ``bpe_spark.json``), a ``tokenizer.json`` (or a directory holding one and no
    ``bpe_spark.json``), GPT-2 files (a directory with ``vocab.json`` + ``merges.txt``, or the
    ``vocab.json`` path), a ``.tiktoken`` file, a tekken JSON (or a directory holding
    ``tekken.json``), or a SentencePiece BPE ``.model`` (or a directory holding
    ``tokenizer.model``), or CLIP's ``bpe_simple_vocab_16e6.txt.gz`` (or a directory holding it;
    CLIP's vocab.json + merges.txt are GPT-2 files of its layout). ``kind`` is :func:`detect_format`'s answer
    (found here when None); ``options`` go to the format's reader (e.g. ``pattern=``,
    ``special_tokens=``).
    """
    path = Path(path)
    kind = kind or detect_format(path)
    if kind == "model_dir":
        # here, not at the top: pyarrow is imported only to read a model directory
        from bpe_spark.models.model_dir import read_model

        if options:
            raise ConfigError(
                f"a bpe-spark model directory takes no load options, got {sorted(options)}"
            )
        return read_model(path.parent if path.is_file() else path)
    if kind == "tokenizer.json":
        return read_tokenizer_json(path / "tokenizer.json" if path.is_dir() else path, **options)
    if kind == "tekken":
        return read_tekken(path / "tekken.json" if path.is_dir() else path, **options)
    if kind == "sentencepiece":
        return read_sentencepiece(path / "tokenizer.model" if path.is_dir() else path, **options)
    if kind == "clip":
        return read_clip_merges(min(path.glob(SIMPLE_NAME + "*")) if path.is_dir() else path, **options)
    if kind == "gpt2":
        if path.is_dir():
            return read_gpt2(path / "vocab.json", path / "merges.txt", **options)
        return read_gpt2(path, options.pop("merges_path", None), **options)
    if path.is_dir():
        path = min(path.glob("*.tiktoken"))
    return read_tiktoken(path, **options)


def load_any(path, *, build: Callable[..., Any], **options):
    """``build(**read_any(path, **options))``: the tokenizer of any supported file.

    ``build`` is the Tokenizer class (``Tokenizer.load`` passes it; this package never imports
    it). A model directory holds no user options, so what ``build`` refuses in it is the
    directory's fault and is reported as a :class:`ModelFormatError` naming it.
    """
    path = Path(path)
    kind = detect_format(path)
    data = read_any(path, kind, **options)
    try:
        return build(**data)
    except ConfigError as exc:
        if kind in ("gpt2", "clip") and not str(exc).startswith(str(path)):
            raise type(exc)(f"{path}: {exc}") from None  # the files' error names them too
        if kind != "model_dir":
            raise
        directory = path.parent if path.is_file() else path
        raise ModelFormatError(
            f"{directory}: the files do not make a valid tokenizer: {exc}"
        ) from None


# --- exporting --------------------------------------------------------------------------------
def export_model(
    tok,
    fmt: str,
    out,
    *,
    overwrite: bool = False,
    bos_token: str | None = None,
    eos_token: str | None = None,
    pad_token: str | None = None,
    unk_token: str | None = None,
    model_max_length: int | None = None,
) -> list[Path]:
    """Write ``tok`` in an export format; returns the files written.

    - ``tokenizer.json``: ``out`` is the file (or a directory to put ``tokenizer.json`` in); a
      file named ``tokenizer.json`` gets transformers' ``tokenizer_config.json`` and
      ``special_tokens_map.json`` beside it (a folder ``AutoTokenizer`` loads);
    - ``gpt2``: ``out`` is a directory that receives ``vocab.json`` and ``merges.txt``, the same
      two config files, and ``tokenizer.json`` when transformers' GPT2Tokenizer would not give
      our ids (:func:`bpe_spark.models.gpt2.gpt2_class_differs`);
    - ``tiktoken``: ``out`` is the ``.tiktoken`` file (rank = token id), with its sidecar
      ``<out>.json`` (pattern and special tokens: :mod:`bpe_spark.models.tiktoken_file`);
    - ``subword-nmt``: ``out`` is the codes file.

    ``bos_token``, ``eos_token``, ``pad_token``, ``unk_token`` (special tokens' text) and
    ``model_max_length`` go into the config files, over the model's own
    (:mod:`bpe_spark.models.huggingface.transformers_config`).
    ``overwrite`` replaces an earlier export only: a directory with the ``_BPE_SPARK`` marker of
    kind ``export``, or a file that reads as ``fmt`` (:mod:`bpe_spark.storage.output_guard`), with the
    config files beside it.
    """
    from bpe_spark.models.huggingface.transformers_config import FOLDER_FILES, OPTIONS, folder_options

    out = Path(out)
    spec = export_spec(fmt)
    given = dict(zip(OPTIONS, (bos_token, eos_token, pad_token, unk_token, model_max_length)))
    if spec.folder is None:
        named = [option_name(name) for name, value in given.items() if value is not None]
        if named:
            raise ConfigError(f"{', '.join(named)} apply to the tokenizer.json and gpt2 exports, not {fmt}")
    options = folder_options(tok, given) if spec.folder is not None else None
    if spec.directory:
        with atomic_directory(out, kind="export", overwrite=overwrite, format=fmt) as staged:
            spec.write(tok, staged)
            beside = spec.folder(tok, staged, options) if spec.folder is not None else []
        return [out / name for name in spec.files] + [out / path.name for path in beside]
    out = spec.file_at(out, is_dir=out.is_dir())
    folder = spec.folder is not None and out.name == spec.files[0]
    if folder:
        for name in FOLDER_FILES:  # before anything is written
            check_beside(out.with_name(name), overwrite=overwrite, file_format="transformers.json")
    sidecar = Path(spec.sidecar(out)) if spec.sidecar is not None else None
    with atomic_file(out, file_format=fmt, overwrite=overwrite) as staged:
        if sidecar is None:
            spec.write(tok, staged)
        else:
            check_beside(sidecar, overwrite=overwrite, file_format=f"{fmt}.json")  # after the file's own check
            spec.write(tok, staged, sidecar=sidecar)
        beside = spec.folder(tok, out.parent, options) if folder else []
    return [out, *beside, *([sidecar] if sidecar is not None else [])]


def check_beside(path: Path, *, overwrite: bool, file_format: str) -> None:
    """A file to be written beside an export file: new, or (``overwrite``) one that reads as
    ``file_format`` (:func:`bpe_spark.storage.markers.looks_like`)."""
    from bpe_spark.storage import output_guard

    output_guard.check_replaceable(str(path), "export", overwrite=overwrite, file_format=file_format)

