"""spark-submit entry point: train a BPE tokenizer (the options of ``bpe-spark train``).

    spark-submit jobs/train_tokenizer.py --input corpus/ --vocab-size 32000 --out models/en32k
    spark-submit --master yarn --properties-file conf/spark-cluster.conf jobs/train_tokenizer.py \
        --input hdfs:///corpora/web/ --vocab-size 50000 --driver-budget 30% \
        --checkpoint-dir hdfs:///tmp/bpe-ckpt --out models/web50k
    spark-submit jobs/train_tokenizer.py --counts counts.parquet --vocab-size 32000 --out models/c32k

Quiet logs: ``spark-submit --driver-java-options -Dlog4j2.configurationFile=conf/log4j2.properties``
(cluster mode: see conf/log4j2.properties).
"""

import sys

from bpe_spark.cli import main

if __name__ == "__main__":
    sys.exit(main(["train", *sys.argv[1:]]))
