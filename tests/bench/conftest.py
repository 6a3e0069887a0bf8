"""The benchmark is run by `make bench` (python -m tests.bench.run), never by pytest."""

collect_ignore_glob = ["*.py"]
