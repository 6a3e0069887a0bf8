"""The BPE algorithm's parts, with no I/O: the training config, symbols and words, the
pretokenization patterns (and the Oniguruma translation), the text rule and pretokenization.
"""
