"""The core never imports pyspark (DESIGN 2: the core runs without Spark)."""

import subprocess
import sys


def test_core_import_does_not_import_pyspark():
    code = (
        "import sys, bpe_spark, bpe_spark.trainer, bpe_spark.tokenizer, bpe_spark.formats, bpe_spark.cli\n"
        "from bpe_spark import TrainerConfig, train\n"
        "tok = train(['hello world'], TrainerConfig(vocab_size=260))\n"
        "tok.decode(tok.encode('hello'))\n"
        "bad = sorted(m for m in sys.modules if m == 'pyspark' or m.startswith('pyspark.'))\n"
        "assert not bad, bad\n"
        "print('clean')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "clean"
