"""Leasing sandbox uids: one per request, never a uid some live process runs as."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from hargo_hpc.bench.sandbox import InfraError
from hargo_hpc.bench.uids import leased_uid, parse_range

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="leasing a uid needs root")


def test_parse_range() -> None:
    assert parse_range("61000-61002") == range(61000, 61003)
    assert parse_range("7") == range(7, 8)
    with pytest.raises(ValueError, match="not a range"):
        parse_range("a-b")


@needs_root
def test_a_uid_a_live_process_runs_as_is_not_leased(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Another lease directory (a test suite beside a node's workers) does not know the
    other's leases: the uid a process already runs as is skipped all the same."""
    monkeypatch.setenv("HARGO_UID_LEASE_DIR", str(tmp_path / "leases"))
    busy = subprocess.Popen(["sleep", "60"],
                            user=61990, group=61990)
    try:
        for _ in range(10):  # the range's start is random: whichever, 61990 is never taken
            with leased_uid("61990-61991") as uid:
                assert uid == 61991
            assert not any((tmp_path / "leases").iterdir())  # released
        with (leased_uid("61991"), pytest.raises(InfraError, match="every sandbox uid"),
              leased_uid("61990-61991")):
            pass
    finally:
        busy.kill()
        busy.wait()
