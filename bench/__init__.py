"""The benchmark suite (`make bench`); not collected by pytest."""
