"""An OSError as one line naming the path and, for a full disk, the free space there (issue 43,
deliverable 9): bpe_spark.storage.os_errors."""

from __future__ import annotations

import errno

from bpe_spark.storage.os_errors import error_number, free_space, is_disk_full, os_error_line


def test_a_full_disk_names_the_path_and_its_free_space(tmp_path):
    line = os_error_line(OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "out" / "part-0")))
    assert line.startswith(f"{tmp_path / 'out' / 'part-0'}: No space left on device; ")
    assert " free of " in line and line.endswith("on its file system: free space there or write elsewhere")


def test_a_pathless_full_disk_names_the_path_being_written():
    # Python's write() and pyarrow name no file: the caller says what it was writing
    pyarrow_like = OSError("[Errno 28] Error writing bytes to file. Detail: [errno 28] No space left on device")
    assert error_number(pyarrow_like) == errno.ENOSPC and is_disk_full(pyarrow_like)
    line = os_error_line(pyarrow_like, "/", fallback_role="writing --out")
    assert line.startswith("No space left on device (writing --out /); ")
    assert " free of " in line
    assert os_error_line(pyarrow_like) == "No space left on device (Error writing bytes to file)"


def test_other_errors_keep_their_reason_and_a_quota_counts_as_full():
    assert os_error_line(PermissionError(13, "Permission denied", "/x")) == "/x: Permission denied"
    assert is_disk_full(OSError(errno.EDQUOT, "Disk quota exceeded"))
    assert not is_disk_full(OSError(errno.EACCES, "Permission denied"))
    assert os_error_line(ConnectionResetError(104, "Connection reset by peer")) == "Connection reset by peer"


def test_free_space_of_a_path_not_yet_made_is_its_parents_and_remote_is_unknown(tmp_path):
    assert free_space(str(tmp_path / "not" / "yet")) == free_space(str(tmp_path))
    assert free_space("s3a://bucket/out") is None
