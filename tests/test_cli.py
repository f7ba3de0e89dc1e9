"""The `hargo` command as a user runs it: a real subprocess of the installed console script."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from hargo_hpc import __version__

REPO = Path(__file__).resolve().parents[1]
HARGO = shutil.which("hargo") or str(Path(sys.executable).parent / "hargo")


def hargo(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run([HARGO, *args], capture_output=True, text=True, cwd=cwd, timeout=120)


def test_help_and_version() -> None:
    done = hargo("--help")
    assert done.returncode == 0
    assert "config" in done.stdout
    done = hargo("--version")
    assert done.returncode == 0 and __version__ in done.stdout


def test_config_show_applies_override() -> None:
    done = hargo("config", "show", "jobs/demo.toml", "training.lr=1e-6")
    assert done.returncode == 0, done.stderr
    training = done.stdout.split("[training]")[1]
    assert "lr = 1e-06" in training.splitlines()[1]
    assert 'name = "hargo"' in done.stdout


def test_config_validate_ok() -> None:
    done = hargo("config", "validate", "jobs/gemm_sqd.toml")
    assert done.returncode == 0
    assert done.stdout.startswith("ok: jobs/gemm_sqd.toml")


def test_bad_override_exits_2_with_one_line(tmp_path: Path) -> None:
    done = hargo("config", "show", "jobs/demo.toml", "training.lr=fast", cwd=REPO)
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("error: jobs/demo.toml: training.lr: bad value 'fast'")


def test_missing_file_exits_2(tmp_path: Path) -> None:
    done = hargo("config", "validate", str(tmp_path / "nope.toml"))
    assert done.returncode == 2
    assert "no such experiment file" in done.stderr
    assert list(tmp_path.iterdir()) == []


def test_validate_checks_the_algorithm_preset() -> None:
    done = hargo("config", "validate", "jobs/demo.toml", "algorithm.estimator=magic")
    assert done.returncode == 2
    assert done.stderr.startswith("error: jobs/demo.toml: algorithm.estimator: bad value 'magic'")
    assert len(done.stderr.strip().splitlines()) == 1
    # what only the preset can tell: HARGO's base estimator and the method's must agree
    done = hargo("config", "validate", "jobs/demo.toml", "algorithm.name=hargo",
                 "algorithm.estimator=rloo")
    assert done.returncode == 2
    assert done.stderr.startswith("error: jobs/demo.toml: algorithm.estimator 'rloo' and algo")
    assert len(done.stderr.strip().splitlines()) == 1


def test_validate_checks_the_batch_shape() -> None:
    # tiny.toml: 4 prompts x G 4 = 16 rows; 16 is not a multiple of 5
    done = hargo("config", "validate", "jobs/tiny.toml", "training.micro_batch_size=5")
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "error: jobs/tiny.toml: rollout.prompts_per_step x rollout.num_generations = 16 rows "
        "(16 per rank) is not divisible by training.micro_batch_size (5)")
    assert hargo("config", "validate", "jobs/tiny.toml", "training.micro_batch_size=4"
                 ).returncode == 0
