# bpe-spark: every target sets itself up (virtual environment, package, Java) on a fresh machine.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
BENCH_STAMP := $(VENV)/.bench-stamp
PYTEST_ARGS ?=
# Executors must run the virtual environment's interpreter (the system one lacks pyarrow).
export PYSPARK_PYTHON := $(abspath $(PY))
export PYSPARK_DRIVER_PYTHON := $(abspath $(PY))

.PHONY: install java jvm-cache test train bench docs docs-serve lint clean dist cluster-up cluster-down cluster-test

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

$(STAMP): pyproject.toml setup.py bpe_spark/native/_fastbpe.c bpe_spark/native/_fastenc.c bpe_spark/native/_bpe_common.h bpe_spark/native/_pretokenizer.h bpe_spark/native/_bpe_merge.h bpe_spark/native/_pretoken_cache.h bpe_spark/native/_jsonl_scan.h
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	@touch $(STAMP)

test: install
	$(PY) -m pytest -q $(PYTEST_ARGS)

train: install
	$(VENV)/bin/bpe-spark train --input data/sample/tiny_shakespeare.txt.gz --vocab-size 2000 \
	  --out out/sample-model --overwrite

# The documentation site (mkdocs.yml): built with --strict into site/ (git-ignored); make test
# builds it too (tests/docs/test_docs_site.py).
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --site-dir site

docs-serve: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs serve

bench: install $(BENCH_STAMP)
	$(PY) -m bench.run $(BENCH_ARGS)

# The bench extra (the peers), each on its own: one that fails to install does not stop the others,
# and its rows in the benchmark say it is missing.
$(BENCH_STAMP): pyproject.toml | $(STAMP)
	@for peer in $$($(PY) -c "import tomllib; print(' '.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['optional-dependencies']['bench']))"); do \
	  $(PY) -m pip install -q "$$peer" || echo "bench: $$peer did not install; its rows will say so" >&2; \
	done
	@touch $(BENCH_STAMP)

# Executor packaging (docs/guides/cluster.md): the wheel (compiled extensions inside: a failed build is an
# error here), a packed environment of a fresh venv holding the wheel and its runtime dependencies
# except pyspark (executors use their Spark's own) and matplotlib (the driver's report), for
# `--archives dist/env.tar.gz#env` with `spark.pyspark.python=./env/bin/python`, and the package
# as a zip for `--py-files` (pure Python there: C extensions cannot load from a zip).
DIST := dist
# What executors never load, left out of the packed environment (a fifth of it: less to unpack);
# matplotlib (the driver's training report) is not even installed there
ENV_EXCLUDE := lib/python*/site-packages/*/tests/* lib/python*/site-packages/*/*/tests/* \
  lib/python*/site-packages/pyarrow/include/* lib/python*/site-packages/pyarrow/src/*
DIST_SOURCES := pyproject.toml setup.py $(shell find bpe_spark -name "*.py" -o -name "*.c" -o -name "*.h")
dist: install $(DIST)/env.tar.gz

$(DIST)/env.tar.gz: $(STAMP) $(DIST_SOURCES)
	rm -rf $(DIST) build
	BPE_SPARK_REQUIRE_EXTENSION=1 $(PY) -m pip wheel -q --no-deps -w $(DIST) .
	$(PY) -c "import glob, zipfile; wheel = zipfile.ZipFile(glob.glob('$(DIST)/*.whl')[0]); \
	  meta = next(n for n in wheel.namelist() if n.endswith('.dist-info/METADATA')); \
	  deps = [l.split(': ', 1)[1] for l in wheel.read(meta).decode().splitlines() if l.startswith('Requires-Dist: ')]; \
	  print('\n'.join(d for d in deps if 'extra ==' not in d and not d.startswith(('pyspark', 'matplotlib')))); \
	  out = zipfile.ZipFile('$(DIST)/bpe_spark.zip', 'w', zipfile.ZIP_DEFLATED); \
	  [out.writestr(n, wheel.read(n)) for n in wheel.namelist() if n.startswith('bpe_spark/') and n.endswith('.py')]" \
	  > $(DIST)/env-requirements.txt
	$(PY) -m venv --without-pip $(DIST)/env
	$(PY) -m pip --python $(DIST)/env/bin/python install -q -r $(DIST)/env-requirements.txt
	$(PY) -m pip --python $(DIST)/env/bin/python install -q --no-deps $(DIST)/bpe_spark-*.whl
	$(DIST)/env/bin/python -c "import bpe_spark.native.compiled as c; assert c._fastbpe and c._fastenc, 'no compiled extensions'"
	$(VENV)/bin/venv-pack -q -p $(DIST)/env -o $(DIST)/env.tar.gz $(foreach p,$(ENV_EXCLUDE),--exclude '$(p)')
	rm -rf $(DIST)/env build
	@ls -l $(DIST)

# A standalone master and two 1-core workers on 127.0.0.1 (tests/cluster/standalone.py), state,
# logs and the shared data directory in the git-ignored .cluster/; cluster-down stops exactly what
# cluster-up started.
cluster-up: install
	@$(PY) tests/cluster/standalone.py up

cluster-down:  # needs no package: the venv's Python if there is one
	@$(if $(wildcard $(PY)),$(PY),python3) tests/cluster/standalone.py down

# Jobs submitted to that cluster with the packed environment, compared with local mode byte for
# byte (tests/cluster); the cluster comes down even when a test fails.
# (A SIGTERM, as from a CI timeout, stops pytest, which tears the cluster down; the trap keeps this
# shell alive to make sure of it.)
cluster-test: install dist
	@trap 'status=143' TERM; status=0; \
	  $(PY) -m pytest -q tests/cluster -p no:cacheprovider $(PYTEST_ARGS) || status=$$?; \
	  $(PY) tests/cluster/standalone.py down; exit $$status

lint: install
	$(VENV)/bin/ruff check bpe_spark jobs tests bench

clean: cluster-down
	rm -rf $(VENV) out site spark-warehouse .pytest_cache $(DIST) .cluster
