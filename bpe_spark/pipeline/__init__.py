"""The steps and runtime of an imported tokenizers pipeline."""
