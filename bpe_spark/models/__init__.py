"""Model files: our model directory and every format bpe-spark reads or writes (tokenizer.json,
GPT-2, tiktoken, tekken, SentencePiece, subword-nmt), and the export table.
"""
