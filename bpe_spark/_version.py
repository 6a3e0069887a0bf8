"""The package version: one copy, read by the package, its build (pyproject) and the writers
that stamp it into model files, without importing the package itself."""

__version__ = "0.1.0"
