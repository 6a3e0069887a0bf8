# bpe-spark: every target sets itself up (virtual environment, package, Java) on a fresh machine.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
PYTEST_ARGS ?=
# Executors must run the virtual environment's interpreter (the system one lacks pyarrow).
export PYSPARK_PYTHON := $(abspath $(PY))
export PYSPARK_DRIVER_PYTHON := $(abspath $(PY))

.PHONY: install java jvm-cache test train bench lint clean

install: java $(STAMP) jvm-cache

# A JVM class archive that shortens Spark start-up (bpe_spark/spark/jvm_cache_build.py);
# built once per Java + Spark installation, never fails the install.
jvm-cache: java $(STAMP)
	@$(PY) -m bpe_spark.spark.jvm_cache_build build --quiet-if-present

java:
	@if command -v java >/dev/null 2>&1 && java -version 2>&1 | grep -qE 'version "(1[7-9]|2[0-9])'; then \
	  :; \
	elif [ -f /etc/debian_version ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "Java 17+ not found: installing openjdk-17-jre-headless with apt-get"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq openjdk-17-jre-headless >/dev/null; \
	else \
	  echo "bpe-spark needs Java 17 or newer for Spark; install it (e.g. Temurin 17) and put 'java' on the PATH" >&2; exit 1; \
	fi

$(STAMP): pyproject.toml setup.py bpe_spark/_fastbpe.c bpe_spark/_fastenc.c bpe_spark/_bpe_common.h
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	@touch $(STAMP)

test: install
	$(PY) -m pytest -q $(PYTEST_ARGS)

train: install
	$(VENV)/bin/bpe-spark train --input data/sample/tiny_shakespeare.txt.gz --vocab-size 2000 \
	  --out out/sample-model --overwrite

bench: install
	$(PY) -m bench.run $(BENCH_ARGS)

lint: install
	$(VENV)/bin/ruff check bpe_spark jobs tests bench

clean:
	rm -rf $(VENV) out spark-warehouse .pytest_cache
