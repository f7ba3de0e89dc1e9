"""Fixtures of the task tests: the real HPC-GPT data beside the checkout (../shared, also laid
beside CI's clone), read by path and never copied into the tree.

A user's clone has no ../shared: the tests that read it skip, each naming the path it looked
for (`pytest -rs` lists them). `.ci/run` sets HARGO_REQUIRE_SHARED=1, which turns the absence
into a failure: CI never skips them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

HPC_GPT = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "hpc-gpt"
REQUIRE_SHARED = "HARGO_REQUIRE_SHARED"


@pytest.fixture(scope="session")
def hpc_gpt() -> Path:
    """The directory of the three shared HPC-GPT splits; skips when it is absent, fails
    instead under HARGO_REQUIRE_SHARED=1 (module docstring)."""
    if not (HPC_GPT / "task2_c_c++.json").is_file():
        message = f"shared HPC-GPT data not found at {HPC_GPT}"
        if os.environ.get(REQUIRE_SHARED) == "1":
            pytest.fail(f"{message} ({REQUIRE_SHARED}=1: CI lays shared/ beside its clone)")
        pytest.skip(message)
    return HPC_GPT


@pytest.fixture(scope="session")
def embedding_model() -> Any:
    """The packaged embedding model, loaded once per process (load_model caches it)."""
    from hargo_hpc.tasks.similarity import load_model, model_path

    return load_model(str(model_path()))
