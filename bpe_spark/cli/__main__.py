"""``python -m bpe_spark.cli``: the ``bpe-spark`` command."""

import sys

from bpe_spark.cli import main

sys.exit(main())
