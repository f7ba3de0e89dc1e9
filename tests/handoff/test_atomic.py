"""The lock-free file primitives: atomic replace, exclusive create, clear OS errors."""

from __future__ import annotations

import errno
import json
import os
import threading
from pathlib import Path

import pytest

from hargo_hpc.files import last_record
from hargo_hpc.handoff import atomic
from hargo_hpc.handoff.errors import HandoffError, SchemaError


def test_write_atomic_leaves_no_temp_and_replaces(tmp_path: Path) -> None:
    target = tmp_path / "a.json"
    atomic.write_atomic(target, {"v": 1})
    atomic.write_atomic(target, {"v": 2})
    assert json.loads(target.read_text()) == {"v": 2}
    assert os.listdir(tmp_path) == ["a.json"]


def test_create_exclusive_has_exactly_one_winner_among_threads(tmp_path: Path) -> None:
    target = tmp_path / "result.json"
    wins: list[int] = []
    barrier = threading.Barrier(16)

    def race(i: int) -> None:
        barrier.wait()
        if atomic.create_exclusive(target, {"writer": i}, fsync=False):
            wins.append(i)

    threads = [threading.Thread(target=race, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(wins) == 1
    assert json.loads(target.read_text()) == {"writer": wins[0]}
    assert os.listdir(tmp_path) == ["result.json"], "temp files must be cleaned up"


@pytest.mark.parametrize("content", [b"", b'{"kind": "res', b"\x00\x00\x00", b"[1, 2]"])
def test_read_json_rejects_truncated_or_corrupt(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(SchemaError, match=r"bad\.json"):
        atomic.read_json(path)


@pytest.mark.parametrize(
    ("code", "words"),
    [(errno.ENOSPC, "no space left"), (errno.EROFS, "read-only"), (errno.EDQUOT, "quota")],
)
def test_write_failures_are_one_line_errors_and_leave_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int, words: str
) -> None:
    def failing_write(fd: int, data: object) -> int:
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(atomic.os, "write", failing_write)
    with pytest.raises(HandoffError, match=words) as info:
        atomic.write_atomic(tmp_path / "x.json", {"a": 1})
    assert "\n" not in str(info.value)
    with pytest.raises(HandoffError, match=words):
        atomic.create_exclusive(tmp_path / "y.json", {"a": 1})
    assert os.listdir(tmp_path) == []


def test_read_only_directory_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_open = os.open

    def read_only_open(path: object, flags: int, *args: object) -> int:
        if flags & os.O_CREAT:
            raise OSError(errno.EROFS, "Read-only file system")
        return real_open(path, flags, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(atomic.os, "open", read_only_open)
    with pytest.raises(HandoffError, match="read-only filesystem"):
        atomic.write_atomic(tmp_path / "x.json", {})


def test_missing_directory_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(HandoffError, match="does not exist"):
        atomic.write_atomic(tmp_path / "nope" / "x.json", {})


def test_touch_always_moves_the_mtime(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "claim"
    path.write_text("{}")
    os.utime(path, ns=(10**18, 10**18))
    real_utime = os.utime

    def coarse_utime(target: object, times: object = None, *, ns: object = None) -> None:
        if ns is not None:  # a filesystem whose clock tick hides a renewal: "now" changes nothing
            real_utime(target, ns=ns)  # type: ignore[arg-type]

    monkeypatch.setattr(atomic.os, "utime", coarse_utime)
    assert atomic.touch(path) == 10**18 + 10**9
    assert os.stat(path).st_mtime_ns == 10**18 + 10**9


def test_last_record_skips_a_torn_line_and_reads_only_the_tail(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    assert last_record(path) is None
    path.write_text('{"step": 1}\n{"step": 2, "pad": "' + "x" * 500 + '"}\n{"step": 3')
    assert last_record(path, chunk=64)["step"] == 2
    path.write_text('{"step": 1')
    assert last_record(path) is None
    path.write_text('{"step": 1}\nnot json\n[1, 2]\n')
    assert last_record(path, chunk=8) == {"step": 1}
