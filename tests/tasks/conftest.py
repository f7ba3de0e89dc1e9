"""Fixtures of the task tests: the real HPC-GPT data beside the checkout (../shared, also laid
beside CI's clone), read by path and never copied into the tree."""

from __future__ import annotations

from pathlib import Path

import pytest

HPC_GPT = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "hpc-gpt"


@pytest.fixture(scope="session")
def hpc_gpt() -> Path:
    """The directory of the three shared HPC-GPT splits; the suite fails (never skips) without
    it: CI lays shared/ beside its clone."""
    assert (HPC_GPT / "task2_c_c++.json").is_file(), f"shared HPC-GPT data missing: {HPC_GPT}"
    return HPC_GPT
