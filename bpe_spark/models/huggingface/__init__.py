"""Hugging Face files: ``tokenizer.json`` read and written, and the transformers configuration files
beside it.
"""
