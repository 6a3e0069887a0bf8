"""spark-submit entry point: compare tokenizers on a corpus (the options of ``bpe-spark evaluate``).

    spark-submit jobs/evaluate_tokenizers.py --model gpt2=gpt2/vocab.json --model mine=models/en32k \
        --input corpus/ --group-by script --out eval/
    spark-submit --master yarn --properties-file conf/spark-cluster.conf jobs/evaluate_tokenizers.py \
        --model models/a --model models/b --input hdfs:///corpora/web/ --input-format jsonl \
        --group-by language --out eval/

Output (on the driver's disk): eval/evaluation.json (every figure) and eval/report.html; the
definitions of the figures are in docs/guides/evaluate.md.
"""

import sys

from bpe_spark.cli import main

if __name__ == "__main__":
    sys.exit(main(["evaluate", *sys.argv[1:]]))
