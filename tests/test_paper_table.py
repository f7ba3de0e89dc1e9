"""`make paper-table`'s script: each text task on HPCGPT_DIR where its file is, the project's
sample where it is not, and its one-line refusals."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "paper_table.py"


@pytest.fixture
def paper_table(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.syspath_prepend(str(REPO / "scripts"))
    import paper_table

    return paper_table


def test_tasks_read_the_directory_only_where_their_file_is(paper_table, tmp_path: Path,
                                                           capsys) -> None:
    (tmp_path / "task2_c_c++.json").write_text("[]")
    override = paper_table.tasks_override(tmp_path)
    assert override == (
        'data.tasks=[{name="data_race_c",weight=0.25,max_items=600,eval_fraction=0.334,'
        f'path="{tmp_path}"}},{{name="gemm",weight=0.75,eval_fraction=0.25,eval_samples=8}}]')
    assert f"data_race_c: {tmp_path}" in capsys.readouterr().out


def test_a_directory_without_the_file_leaves_the_sample(paper_table, tmp_path: Path,
                                                        capsys) -> None:
    (tmp_path / "task1_plp.json").write_text("[]")
    assert "path=" not in paper_table.tasks_override(tmp_path)
    said = capsys.readouterr().out
    assert f"data_race_c: the project's sample (no task2_c_c++.json in {tmp_path})" in said


def test_without_a_directory_every_task_is_a_sample(paper_table) -> None:
    assert "path=" not in paper_table.tasks_override(None)


@pytest.mark.parametrize("args, message", [
    (["--data"], "error: --data needs a directory"),
    (["--data", "/nonexistent/hpc-gpt"], "error: --data /nonexistent/hpc-gpt: not a directory"),
    (["training.steps=zero"], "training.steps"),
])
def test_bad_input_is_one_line_and_exit_2(args: list[str], message: str, tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          cwd=tmp_path, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert message in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists()
