"""A local S3 endpoint for the object-store tests: a moto server on a free port of 127.0.0.1
(:func:`moto_server`), and pyarrow's view of it with a bucket made (:func:`s3_file_system`). A test
module takes the fixtures :func:`endpoint` (the server's URL, one server per module) and
:func:`s3` (the file system, with the bucket ``bucket``) with ``pytest_plugins = ("tests.s3_mock",)``."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator

import pyarrow.fs as pafs
import pytest


@contextlib.contextmanager
def moto_server() -> Iterator[str]:
    """Run a moto S3 server (this process's child, stopped on exit); yields its ``http://`` URL."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(url, timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        else:
            pytest.fail("the moto server did not start")
        yield url
    finally:
        server.terminate()
        server.wait(timeout=30)


def s3_file_system(url: str, bucket: str = "bucket") -> pafs.S3FileSystem:
    """pyarrow's S3 file system on the server at ``url``, with ``bucket`` made."""
    fs = pafs.S3FileSystem(access_key="testing", secret_key="testing", endpoint_override=url.split("://", 1)[1],
                           scheme="http", region="us-east-1", allow_bucket_creation=True)
    if fs.get_file_info(bucket).type == pafs.FileType.NotFound:
        fs.create_dir(bucket)
    return fs


@pytest.fixture(scope="module")
def endpoint():
    """A moto S3 server on a free port of 127.0.0.1, for the test module."""
    with moto_server() as url:
        yield url


@pytest.fixture(scope="module")
def s3(endpoint):
    """pyarrow's view of the mock store, with the bucket ``bucket``."""
    return s3_file_system(endpoint)
