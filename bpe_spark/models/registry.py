"""The export formats, in one table: each name's writer, the files it makes and what it needs.

:func:`bpe_spark.models.load.export_model` (one export to a path of its own) and the model directory's
``exports=`` (files inside the model directory) both write through this table. Also the name of
the model directory's own description file. Imports only the writers' modules.

The formats transformers loads as a folder (``tokenizer.json``, ``gpt2``) have a ``folder``
writer: ``tokenizer_config.json`` and ``special_tokens_map.json`` (:mod:`.huggingface.transformers_config`), written
inside a directory export, and beside a single file named ``files[0]`` (``tokenizer.json``).

>>> [name for name, spec in EXPORTS.items() if not spec.needs_byte]
['tokenizer.json', 'subword-nmt']
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Any

from bpe_spark.errors import ConfigError
from bpe_spark.models.gpt2 import write_gpt2
from bpe_spark.models.huggingface.transformers_config import write_folder_files, write_gpt2_folder
from bpe_spark.models.huggingface.tokenizer_json_write import write_tokenizer_json
from bpe_spark.models.subword_nmt import write_codes
from bpe_spark.models.tiktoken_file import sidecar_path, write_tiktoken

MODEL_META_FILE = "bpe_spark.json"


@dataclass(frozen=True)
class Export:
    """How one export format is written.

    ``write(tok, target)`` writes a file at ``target``, or, when ``directory``, the ``files`` into
    the directory ``target``. ``files``: the names it has inside a model directory. ``needs_byte``:
    only a byte-scheme tokenizer can be written. ``suffix``: an ``out`` of ``export_model`` that
    is a directory or lacks this suffix gets ``files[0]`` inside it. ``folder(tok, directory,
    options)``: writes transformers' folder files (``options``: ``hf_config.folder_options``),
    returns their paths; a model directory writes its own (beside its tokenizer.json).
    ``sidecar(file)``: the second file a single-file export writes beside ``file`` (``write(tok,
    target, sidecar=path)``; in a model directory, ``files[1]``).
    """

    write: Callable[[Any, Path], None]
    files: tuple[str, ...]
    needs_byte: bool
    directory: bool = False
    suffix: str | None = None
    folder: Callable[[Any, Path, Any], list[Path]] | None = None
    sidecar: Callable[[PurePath], PurePath] | None = None

    def file_at(self, out: PurePath, *, is_dir: bool) -> PurePath:
        """The file a single-file export to ``out`` writes: ``out`` itself, or ``files[0]`` inside
        it when ``out`` is a directory (``is_dir``) or lacks this format's ``suffix``.

        >>> EXPORTS["tokenizer.json"].file_at(PurePath("out"), is_dir=False).as_posix()
        'out/tokenizer.json'
        """
        return out / self.files[0] if self.suffix is not None and (is_dir or out.suffix != self.suffix) else out

    def write_into(self, tok, directory: Path) -> None:
        """Write this export inside the (staging) model directory ``directory``."""
        self.write(tok, directory if self.directory else directory / self.files[0])


EXPORTS: dict[str, Export] = {
    "tokenizer.json": Export(
        write_tokenizer_json, ("tokenizer.json",), needs_byte=False, suffix=".json", folder=write_folder_files
    ),
    "gpt2": Export(
        write_gpt2, ("vocab.json", "merges.txt"), needs_byte=True, directory=True, folder=write_gpt2_folder
    ),
    "tiktoken": Export(
        write_tiktoken, ("model.tiktoken", "model.tiktoken.json"), needs_byte=True, sidecar=sidecar_path
    ),
    "subword-nmt": Export(write_codes, ("codes.bpe",), needs_byte=False),
}
EXPORT_FORMATS = tuple(EXPORTS)


def export_spec(fmt: str) -> Export:
    """The table entry of ``fmt``; an unknown name is a :class:`ConfigError` listing the choices."""
    spec = EXPORTS.get(fmt)
    if spec is None:
        raise ConfigError(f"unknown export format {fmt!r}; choose one of {EXPORT_FORMATS}")
    return spec
