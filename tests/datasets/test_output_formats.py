"""The output formats' table (bpe_spark.datasets.formats): every format encode_dataset and the
CLI offer is a row, and each row's writer writes what its shard files name."""

from __future__ import annotations

import numpy as np
import pytest

from bpe_spark import ConfigError
from bpe_spark.datasets import datatrove, megatron
from bpe_spark.datasets.formats import OUTPUT_FORMATS, TOKEN_STREAM_FORMATS, output_format


def test_the_table_holds_the_formats_in_their_order():
    assert list(OUTPUT_FORMATS) == ["parquet", "bin", "datatrove"]
    assert TOKEN_STREAM_FORMATS == ("bin", "datatrove")
    assert [OUTPUT_FORMATS[name].file_label for name in OUTPUT_FORMATS] == ["part", "shard", "shard"]
    assert [name for name, fmt in OUTPUT_FORMATS.items() if fmt.data_paths] == ["bin"]
    with pytest.raises(ConfigError, match=r"output_format must be one of \('parquet', 'bin', 'datatrove'\), got 'csv'"):
        output_format("csv")


@pytest.mark.parametrize("name", TOKEN_STREAM_FORMATS)
def test_each_writer_writes_the_files_its_row_names(tmp_path, name):
    fmt = output_format(name)
    prefix = tmp_path / "shard-00000"
    writer = fmt.writer(str(prefix), np.uint16, "models/x", lambda path: open(path, "wb"))  # noqa: SIM115
    writer.add_documents(np.array([5, 6, 7], dtype=np.int32), np.array([0, 2, 3]))
    writer.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(fmt.shard_files("shard-00000"))
    reader = megatron.ShardReader(prefix) if name == "bin" else datatrove.DatatroveReader(f"{prefix}.ds")
    assert [doc.tolist() for doc in reader] == [[5, 6], [7]]
