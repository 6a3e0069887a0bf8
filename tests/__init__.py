"""The test suite: it mirrors the package (tests/<package>/ tests bpe_spark/<package>/)."""
