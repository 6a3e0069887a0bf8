"""Model files: our model directory and every format bpe-spark reads or writes, each in its module,
with the export formats in one table. No module here imports the Tokenizer: readers return its
keyword arguments, writers take any tokenizer object.

==================== =============================================================================
module               owns
==================== =============================================================================
load                 recognising what a path holds and loading it; exporting (``export_model``)
registry             the export table (writer, files, needs) and ``MODEL_META_FILE``
files                atomic files and directories, reading a JSON file
model_dir            our model directory (merges.parquet, vocab.parquet, bpe_spark.json)
fingerprint          the model's fingerprint, recorded in encode outputs' manifests
token_kinds          each id's kind and each merge's training count, as the model records them
gpt2                 vocab.json + merges.txt (and the printable byte form tokenizer.json shares)
tiktoken_file        .tiktoken files and the merges derived from their ranks
tekken               Mistral's tekken JSON (mistral-common)
sentencepiece        SentencePiece BPE .model files (through their tokenizer.json)
subword_nmt          subword-nmt codes files and its ``@@`` segmentation
remote               model files and exports at any URI pyarrow reaches
huggingface/         tokenizer.json read and written; transformers' configuration files; CLIP's
                     vocab.json + merges.txt (</w> layout) and bpe_simple_vocab_16e6.txt.gz (clip)
==================== =============================================================================
"""
