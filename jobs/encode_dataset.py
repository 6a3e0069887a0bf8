"""spark-submit entry point: encode a dataset with a tokenizer (the options of ``bpe-spark encode``).

    spark-submit jobs/encode_dataset.py --model models/en32k --input corpus/ --out ids/ \
        --eos "<|endoftext|>"
    spark-submit --master yarn --properties-file conf/spark-cluster.conf jobs/encode_dataset.py \
        --model models/web50k --input hdfs:///corpora/web/ --input-format jsonl --id-column url \
        --out /shared/shards/web50k --output-format bin --eos "<|endoftext|>"
    spark-submit jobs/encode_dataset.py --model models/en32k --input corpus/ --out shards/ \
        --output-format bin --shuffle --seed 42 --split validation=0.01   # shards/train/, shards/validation/

Output: Parquet parts (id columns or doc_id, input_ids array<int32>, n_tokens), binary shards
(uint16/uint32 token streams with a Megatron-style .idx, and data_paths.txt for Megatron's
--data-args-path) or datatrove's files (--output-format datatrove: .ds, .ds.index, .ds.metadata),
in input order, with _manifest.json written last. Executors write the output files themselves: on a cluster, --out must be a path
every executor reaches (a shared filesystem) or a URI pyarrow writes (s3://, hdfs://).

Quiet logs: ``spark-submit --driver-java-options -Dlog4j2.configurationFile=conf/log4j2.properties``
(cluster mode: see conf/log4j2.properties).
"""

import sys

from bpe_spark.cli import main

if __name__ == "__main__":
    sys.exit(main(["encode", *sys.argv[1:]]))
