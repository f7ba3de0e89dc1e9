"""One seam for a sandbox defence: a `Defence` written outside the package is one class and
one registration line; the sandbox applies it in the child at its step and records it
(docs/bench.md, "Adding a defence")."""

from __future__ import annotations

import importlib
import os
import sys
import tempfile
from pathlib import Path
from types import ModuleType

import pytest

from hargo_hpc.bench import defences
from hargo_hpc.bench.defences import Limits, register_defence
from hargo_hpc.bench.sandbox import base_env, run_sandboxed

OWN = '''
"""A site's own defence, outside hargo_hpc: files the command creates are private."""
import os

from hargo_hpc.bench.defences import Defence


class PrivateFiles(Defence):
    name = "umask077"
    needs = "nothing"
    step = 4  # with the rlimits, before the uid drop

    def apply(self, job, prep):
        os.umask(0o077)
'''


@pytest.fixture
def own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "site_defences.py").write_text(OWN)
    monkeypatch.syspath_prepend(str(tmp_path / "pkg"))
    monkeypatch.setattr(defences, "DEFENCES", defences.DEFENCES)  # restored afterwards
    monkeypatch.delitem(sys.modules, "site_defences", raising=False)
    return importlib.import_module("site_defences")


def test_a_defence_of_your_own_applies_in_the_child_and_is_recorded(own: ModuleType,
                                                                     run_tmp: Path) -> None:
    register_defence(own.PrivateFiles())
    workdir = tempfile.mkdtemp(prefix="hargo-own-", dir=run_tmp)
    os.chmod(workdir, 0o755)
    out = run_sandboxed(["/bin/sh", "-c", "umask"], workdir,
                        Limits(wall_s=10, cpu_s=10, address_space_mb=512), base_env(workdir))
    assert out.returncode == 0 and out.output.strip() == "0077", out
    assert out.layers[-1] == "umask077" and "tempdir" in out.layers
    with pytest.raises(ValueError, match="a name of its own"):
        register_defence(own.PrivateFiles())
