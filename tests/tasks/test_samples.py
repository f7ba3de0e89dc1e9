"""The shipped task samples (hargo_hpc/tasks/samples/*.json) and their generator,
scripts/make_task_samples.py: up to date, in the HPC-GPT record format, balanced, real code,
and not taken from HPC-GPT.

gfortran is not part of the toolchain (Makefile APT_PACKAGES), so the Fortran programs are
checked for structure here; the C programs are compiled with gcc -fopenmp -fsyntax-only.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "make_task_samples.py"
SAMPLES = REPO / "hargo_hpc" / "tasks" / "samples"

# HPC-GPT's wording (task2_c_c++.json and task2_fortran.json); our programs follow the prefix
# with a newline, as part of HPC-GPT's C records do.
C_PREFIX = "Given the code snippet: \n"
F_PREFIX = "Given a Fortran code snippet: \n"
TAIL = (" will cause a data race problem? Answer 'yes' if it causes a data race problem and "
        "'no' if it will not cause a data race problem.")
C_SUFFIX = ", help me detect if adding pragma" + TAIL
F_SUFFIX = ", help me detect if adding OpenMP directive" + TAIL

MIN_SIZE = {"data_race_c": 40, "data_race_fortran": 30, "mlperf_qa": 30, "plp_qa": 30}


def run_script(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=60, cwd=REPO)


def load(name: str) -> list[dict]:
    return json.loads((SAMPLES / f"{name}.json").read_text(encoding="utf-8"))


def programs(name: str) -> list[tuple[str, str]]:
    """(code, label) of each data race record: the text between the prefix and the suffix."""
    prefix, suffix = (C_PREFIX, C_SUFFIX) if name == "data_race_c" else (F_PREFIX, F_SUFFIX)
    out = []
    for index, record in enumerate(load(name)):
        text = record["instruction"]
        assert text.startswith(prefix) and text.endswith(suffix), (name, index)
        out.append((text[len(prefix):-len(suffix)], record["output"]))
    return out


def test_committed_samples_are_what_the_script_writes():
    done = run_script("--check")
    assert done.returncode == 0, done.stderr


def test_check_fails_on_a_stale_or_missing_file(tmp_path):
    assert run_script("--dir", str(tmp_path)).returncode == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        f"{n}.json" for n in [*MIN_SIZE, "gemm_problems"])
    assert run_script("--check", "--dir", str(tmp_path)).returncode == 0
    plp = tmp_path / "plp_qa.json"
    plp.write_text(plp.read_text().replace('"output": "', '"output": "X', 1))
    done = run_script("--check", "--dir", str(tmp_path))
    assert done.returncode == 1 and "plp_qa.json" in done.stderr
    assert "mlperf_qa.json" not in done.stderr
    (tmp_path / "mlperf_qa.json").unlink()
    done = run_script("--check", "--dir", str(tmp_path))
    assert done.returncode == 1 and "mlperf_qa.json" in done.stderr


def test_gemm_problems_are_distinct_valid_shapes_enough_to_hold_out_a_quarter():
    from hargo_hpc.tasks.gemm import parse_problem

    problems = [parse_problem(r, i) for i, r in enumerate(load("gemm_problems"))]
    # make demo holds out a quarter: 12 problems x 8 kernels each, an interval that can
    # separate a 0.2 from a 0.5 ok share
    assert len(problems) >= 48
    assert len({p["name"] for p in problems}) == len(problems)
    assert len({(p["M"], p["N"], p["K"]) for p in problems}) == len(problems)
    assert problems[0]["name"] == "dgemm-256" and problems[0]["M"] == 256  # the paper's
    for p in problems:
        assert p["name"].startswith("dgemm-") and p["description"], p


@pytest.mark.parametrize("name", sorted(MIN_SIZE))
def test_records_have_the_hpc_gpt_shape(name):
    text = (SAMPLES / f"{name}.json").read_text(encoding="utf-8")
    assert text.endswith("]\n")
    records = json.loads(text)
    assert isinstance(records, list) and len(records) >= MIN_SIZE[name]
    for index, record in enumerate(records):
        assert set(record) == {"instruction", "input", "output"}, (name, index)
        assert record["input"] == "", (name, index)
        assert isinstance(record["instruction"], str) and record["instruction"].strip()
        assert isinstance(record["output"], str) and record["output"].strip()
    assert len({r["instruction"] for r in records}) == len(records), "duplicate questions"


@pytest.mark.parametrize("name", ["data_race_c", "data_race_fortran"])
def test_data_race_answers_are_yes_or_no_and_balanced(name):
    labels = [label for _, label in programs(name)]
    assert set(labels) == {"yes", "no"}
    assert 0.4 <= labels.count("yes") / len(labels) <= 0.6


def test_real_hpc_gpt_c_records_use_the_same_wording(hpc_gpt):
    real = json.loads((hpc_gpt / "task2_c_c++.json").read_text(encoding="utf-8"))
    assert all(r["instruction"].startswith(C_PREFIX.rstrip("\n")) for r in real)
    assert all(r["instruction"].endswith(C_SUFFIX) for r in real)


def test_c_programs_compile(tmp_path):
    """All programs in one gcc call (about 0.7 s for 66); a broken copy must fail."""
    codes = [code for code, _ in programs("data_race_c")]
    files = []
    for index, code in enumerate(codes):
        assert code.count("#pragma omp parallel for") == 1, index
        files.append(tmp_path / f"p{index:03d}.c")
        files[-1].write_text(code)
    cmd = ["gcc", "-fopenmp", "-fsyntax-only", "-std=c99", "-pedantic-errors"]
    done = subprocess.run([*cmd, *map(str, files)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    broken = tmp_path / "broken.c"
    broken.write_text(codes[0].replace("return 0;", "return 0"))
    assert subprocess.run([*cmd, str(broken)], capture_output=True, timeout=60).returncode != 0


def test_fortran_programs_are_well_formed():
    """Structure only (no gfortran here): one program unit with balanced blocks and exactly one
    `!$omp parallel do` ... `!$omp end parallel do`."""
    for index, (code, _) in enumerate(programs("data_race_fortran")):
        lines = [line.strip().lower() for line in code.splitlines()]
        assert re.fullmatch(r"program [a-z][a-z0-9_]*", lines[0]), index
        assert lines[-1] == "end program" and code.endswith("\n"), index
        assert lines[1:3] == ["use omp_lib", "implicit none"], index
        assert lines.count("!$omp parallel do") + sum(
            line.startswith("!$omp parallel do ") for line in lines) == 1, index
        assert lines.count("!$omp end parallel do") == 1, index
        opens = sum(bool(re.match(r"do [a-z]+ = ", line)) for line in lines)
        assert opens == lines.count("end do") >= 2, index
        ifs = sum(line.startswith("if (") and line.endswith(") then") for line in lines)
        assert ifs == lines.count("end if"), index
        assert lines.count("!$omp critical") == lines.count("!$omp end critical"), index


@pytest.mark.parametrize("name", ["data_race_c", "data_race_fortran"])
def test_synchronized_or_privatized_loops_are_labelled_no(name):
    """The templates that race never use a reduction, private, lastprivate, atomic or
    critical, and the loop-carried `x[i + 1] =` writes only occur in racing templates."""
    guarded = re.compile(r"reduction\(|private\(|omp atomic|omp critical")
    carried = re.compile(r"^\s*\w+[\[(]\w+ \+ 1[\])] = ", re.MULTILINE)
    for index, (code, label) in enumerate(programs(name)):
        if guarded.search(code):
            assert label == "no", (name, index)
        if carried.search(code):
            assert label == "yes", (name, index)
    assert sum(bool(guarded.search(code)) for code, _ in programs(name)) >= 10
    assert sum(bool(carried.search(code)) for code, _ in programs(name)) >= 3


def test_qa_answer_lengths():
    mlperf = [r["output"] for r in load("mlperf_qa")]
    plp = [r["output"] for r in load("plp_qa")]
    assert sum(map(len, mlperf)) / len(mlperf) < 40
    assert sum(map(len, plp)) / len(plp) > 80
    assert all(answer.endswith(".") for answer in plp)


def test_mlperf_sample_is_fictional():
    """Every question names a hargo-* system or a Hargo accelerator, or asks which system."""
    for record in load("mlperf_qa"):
        question = record["instruction"]
        assert "hargo-" in question or "Hargo HX-" in question or question.startswith("Which")
        if question.startswith("Which system"):
            assert record["output"].startswith("hargo-")


def test_samples_are_not_taken_from_hpc_gpt(hpc_gpt):
    for ours, theirs in (("data_race_c", "task2_c_c++.json"), ("mlperf_qa", "task1_ml_perf.json"),
                         ("plp_qa", "task1_plp.json")):
        real = json.loads((hpc_gpt / theirs).read_text(encoding="utf-8"))
        real_questions = {r["instruction"].strip() for r in real}
        assert not real_questions & {r["instruction"].strip() for r in load(ours)}, ours
    real_answers = {r["output"].strip() for r in json.loads(
        (hpc_gpt / "task1_plp.json").read_text(encoding="utf-8"))}
    assert not real_answers & {r["output"].strip() for r in load("plp_qa")}
