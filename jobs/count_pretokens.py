"""spark-submit entry point: count the pretokens of a corpus into Parquet ``(pretoken, count)``
(the options of ``bpe-spark count``).

    spark-submit jobs/count_pretokens.py --input corpus/ --out counts.parquet
    spark-submit --master yarn --properties-file conf/spark-cluster.conf jobs/count_pretokens.py \
        --input hdfs:///corpora/web/ --input-format jsonl --special-token "<|endoftext|>" \
        --out hdfs:///counts/web

The output trains with ``spark-submit jobs/train_tokenizer.py --counts counts.parquet ...``.

Quiet logs: ``spark-submit --driver-java-options -Dlog4j2.configurationFile=conf/log4j2.properties``
(cluster mode: see conf/log4j2.properties).
"""

import sys

from bpe_spark.cli import main

if __name__ == "__main__":
    sys.exit(main(["count", *sys.argv[1:]]))
