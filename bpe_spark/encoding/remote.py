"""The tokenizer at any URI pyarrow reaches, without Spark: a local path loads directly; a remote
model's files are fetched into a local temporary directory (:func:`bpe_spark.models.remote.fetch_model`)
and loaded there, and errors name the URI, never the copy.
"""

from __future__ import annotations

import tempfile

from bpe_spark.encoding.tokenizer import Tokenizer
from bpe_spark.errors import BpeSparkError, InputError
from bpe_spark.models.remote import fetch_model
from bpe_spark.storage import output_guard
from bpe_spark.storage.file_systems import scheme_of
from bpe_spark.storage.remote import Store, open_store, parent_uri, renamed


def load_model(uri, *, option: str = "--model", **options):
    """The tokenizer at ``uri`` (any format ``Tokenizer.load`` reads; ``options`` go to it): a
    local path directly; elsewhere through :func:`open_store` and :func:`load_from_store`."""
    if not scheme_of(uri):
        return Tokenizer.load(uri, **options)
    if output_guard.is_local(uri):  # a file: URI
        with renamed(output_guard.local_path(uri), str(uri).rstrip("/")):
            return Tokenizer.load(output_guard.local_path(uri), **options)
    return load_from_store(open_store(uri, option=option, error=InputError), **options)


def load_from_store(store: Store, **options):
    """The tokenizer at the remote ``store``: its files fetched into a local temporary directory
    (:func:`fetch_model`) and loaded there; errors, and the paths of an imported file in
    ``metadata["source"]``, name the URI, never the temporary copy."""
    with tempfile.TemporaryDirectory(prefix="bpe-spark-model-") as scratch:
        try:
            local = fetch_model(store, scratch)
        except BpeSparkError:  # OutputExistsError is an OSError too
            raise
        except OSError as exc:  # pyarrow's, or Hadoop's through HadoopFiles
            raise InputError(f"{store.uri}: cannot read it ({output_guard.reason_line(exc)})") from None
        with renamed(scratch, parent_uri(store.uri)):
            tok = Tokenizer.load(local, **options)
    source = tok.metadata.get("source")
    if isinstance(source, dict):  # an imported file's paths, as the remote names
        parent = parent_uri(store.uri)
        tok.metadata["source"] = {key: value.replace(scratch, parent) if isinstance(value, str) else value
                                  for key, value in source.items()}
    return tok
