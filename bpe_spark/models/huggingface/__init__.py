"""Hugging Face files: ``tokenizer.json`` read and written, the transformers configuration files
beside it, and CLIP's files (``clip``) as the ``tokenizer.json`` transformers' CLIPTokenizer builds.
"""
